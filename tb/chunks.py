"""How a testbench with no Python per cycle waits for its run: in chunks of simulated time,
each sized to take about :data:`CHUNK_SECONDS` of wall time, on one ``Timer`` each
(cocotb 2.1's ``ClockCycles`` awaits every edge in Python, so it would cost as much as a
per-cycle testbench), or until the top's ``done`` rises. Between chunks it looks at the
run and writes a progress line; the runner follows the file
(``tb/runner.py:run_cocotb_following``)."""

import json
import time

from cocotb.triggers import First, ReadOnly, RisingEdge, Timer

__all__ = ["FIRST_CHUNK", "CHUNK_SECONDS", "MAX_CHUNK", "next_chunk", "wait_in_chunks"]

#: The first chunk, in cycles; later ones are sized to take about CHUNK_SECONDS.
FIRST_CHUNK = 1024
CHUNK_SECONDS = 1.0
MAX_CHUNK = 1 << 22


def next_chunk(chunk: int, wall: float) -> int:
    """The cycles of the next chunk after one of ``chunk`` cycles took ``wall`` seconds."""
    return int(min(MAX_CHUNK, max(FIRST_CHUNK, chunk * CHUNK_SECONDS / max(wall, 1e-3))))


async def wait_in_chunks(dut, period_ns: int, progress_path, look):
    """Run ``dut`` chunk by chunk until ``look()`` ends it; returns what it ended with.

    After each chunk, in the read-only phase, ``look()`` returns ``(line, outcome)``:
    ``line`` (a dict) goes to ``progress_path`` (if given) as a JSON line with the wall
    ``seconds`` so far, and an ``outcome`` other than None ends the wait.
    """
    chunk = FIRST_CHUNK
    t0 = time.perf_counter()
    log = open(progress_path, "a") if progress_path else None
    try:
        while True:
            t_chunk = time.perf_counter()
            await First(Timer(chunk * period_ns, unit="ns"), RisingEdge(dut.done))
            await ReadOnly()
            line, outcome = look()
            if log is not None:
                log.write(json.dumps({**line, "seconds": time.perf_counter() - t0}) + "\n")
                log.flush()
            if outcome is not None:
                return outcome
            chunk = next_chunk(chunk, time.perf_counter() - t_chunk)
    finally:
        if log is not None:
            log.close()
