"""Compiled (numba) kernels of the collective engine model."""
