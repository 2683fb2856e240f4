"""cocotb testbench and runner of the hardware-stimulus top.
"""
