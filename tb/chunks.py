"""How a testbench with no Python per cycle waits for its run: in chunks of simulated time,
each sized to take about :data:`CHUNK_SECONDS` of wall time, on one ``Timer`` each
(cocotb 2.1's ``ClockCycles`` awaits every edge in Python, so it would cost as much as a
per-cycle testbench). Between chunks it reads its progress; the runner follows the file it
writes (``tb/runner.py:run_cocotb_following``)."""

__all__ = ["FIRST_CHUNK", "CHUNK_SECONDS", "MAX_CHUNK", "next_chunk"]

#: The first chunk, in cycles; later ones are sized to take about CHUNK_SECONDS.
FIRST_CHUNK = 1024
CHUNK_SECONDS = 1.0
MAX_CHUNK = 1 << 22


def next_chunk(chunk: int, wall: float) -> int:
    """The cycles of the next chunk after one of ``chunk`` cycles took ``wall`` seconds."""
    return int(min(MAX_CHUNK, max(FIRST_CHUNK, chunk * CHUNK_SECONDS / max(wall, 1e-3))))
