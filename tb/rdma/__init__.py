"""cocotb testbench, runner and scoreboard of the RDMA fabric.
"""
