"""cocotb testbench of the board top's run: the UART's report decoded in simulation."""
