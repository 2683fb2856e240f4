"""Tests of the compiled RDMA kernels."""
