"""Compiled (numba) kernels of the RDMA model's blocks."""
