"""cocotb testbench and runner of a collective on the RDMA fabric."""
