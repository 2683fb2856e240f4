"""Tests of the compiled collective kernels."""
