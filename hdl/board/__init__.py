"""The stimulus top on an FPGA board: one run, its report on a UART (section 13.5)."""
