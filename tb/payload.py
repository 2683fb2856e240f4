"""The data pattern the testbench writes into every flit, so corruption is caught."""

__all__ = ["flit_data"]

_A = 0x9E3779B97F4A7C15
_B = 0xC2B2AE3D27D4EB4F


def flit_data(tag: int, flit: int, mask: int) -> int:
    """A data word unique to (packet tag, flit index), truncated to the flit width."""
    x = (tag * _A) ^ ((flit + 1) * _B)
    x ^= x >> 29
    # Widen to any flit width by repeating the 64-bit word.
    width = mask.bit_length()
    word = x & 0xFFFFFFFFFFFFFFFF
    value = word
    while width > 64:
        value = (value << 64) | word
        width -= 64
    return value & mask
