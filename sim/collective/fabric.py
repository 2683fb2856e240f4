"""A collective run on the RDMA model of a fabric (section 15.8): the schedule, the data, the
engines, and what the run measured against numpy and the alpha-beta model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import ConfigError, FabricConfig
from .alpha_beta import AlphaBeta, algbw as algbw_gbps, busbw as busbw_gbps, busbw_factor
from .host_memory import Layout
from .library import ALGORITHMS, plan, segment_of
from .peers import Peers
from .reference import expected, inputs
from .schedule import ELEMENT_BYTES, REDUCING, Schedule

__all__ = ["CollectivePlan", "prepare_collective", "run_collective", "data_ok",
           "collective_summary", "collective_section"]

@dataclass(frozen=True)
class CollectivePlan:
    """Everything a collective run loads before cycle 0.

    Attributes
    ----------
    schedule : Schedule
        The algorithm's schedule (``algo = "auto"`` resolved).
    dtype : str
        The element type (``reference.DTYPES``).
    nbytes : int
        The message: bytes per accelerator.
    data : list of numpy.ndarray
        Every accelerator's buffer at the start.
    layout : Layout
        The host memory layout.
    workload : RdmaWorkload
        Tables and memories, no WR of its own.
    predicted : int
        The alpha-beta prediction of the collective's cycles.
    segment : int
        Elements of a segment (0: whole chunks, section 15.2).
    records : str
        What the model's run records (:data:`~.pattern.RECORDS`).
    """

    schedule: Schedule
    dtype: str
    nbytes: int
    data: list
    layout: Layout
    workload: object
    predicted: int
    segment: int
    records: str = "full"


def prepare_collective(cfg: FabricConfig, *, op: str, algo: str, nbytes: int, dtype: str,
                       seed: int, segment_packets: int = 0,
                       pattern: str = "collective", records: str = "full") -> CollectivePlan:
    """The plan of one collective on ``cfg``'s fabric, its chunks cut in segments of
    ``segment_packets`` full packets' payload (0: whole chunks), its run recording
    ``records``.

    Raises
    ------
    ValueError
        The algorithm cannot run the operation here, or the size is not a positive
        multiple of 4 bytes; one line.
    ConfigError
        The host memory or the page table is too small for it, or the accelerators have
        several ports; one line.
    """
    ports = cfg.fabric.ports_per_accelerator
    if ports > 1:
        raise ConfigError(f"fabric.ports_per_accelerator = {ports}: must be 1 for collective "
                          f"traffic (the collective engine posts on one RDMA engine; the "
                          f"rdma-* patterns use several ports)")
    peers = Peers.of(cfg)
    model = AlphaBeta.of(cfg)
    segment = model.segment_elements(segment_packets)
    schedule = plan(peers, op, algo, nbytes, model, segment)
    data = inputs(schedule, dtype, np.random.default_rng(seed))
    layout = Layout.of(cfg, schedule)
    return CollectivePlan(schedule, dtype, nbytes, data, layout,
                          layout.workload(cfg, schedule, data, seed=seed, pattern=pattern),
                          model.predict(peers, op, schedule.algorithm, nbytes,
                                        segment=segment),
                          segment_of(schedule.algorithm, segment), records)


def run_collective(cfg: FabricConfig, prepared: CollectivePlan, *, stall_limit=None,
                   capture_link: int = -1, threads: int = 1):
    """Run the plan on the RDMA fabric model; returns ``(records, engines, buffers)``:
    the RDMA records, every collective engine after the run (read as
    :func:`~.kernels.engine.engines_of` gives them) and every accelerator's buffer at its
    end. ``capture_link`` and ``threads`` as for the RDMA model's run."""
    from ..rdma.kernels.run import run
    from .kernels.engine import engines_of

    records, state = run(cfg, prepared.workload, stall_limit=stall_limit,
                         collective=(prepared.schedule, prepared.layout, prepared.dtype),
                         capture_link=capture_link,
                         summary=prepared.records == "summary", threads=threads)
    buffers = prepared.layout.buffers(records.memory, prepared.schedule, prepared.dtype)
    return records, engines_of(state), buffers


def data_ok(cfg: FabricConfig, prepared: CollectivePlan, buffers) -> bool:
    """Every accelerator's result region equals numpy's, bit for bit (section 15.5)."""
    schedule = prepared.schedule
    order = None
    if schedule.op in REDUCING:
        peers = Peers.of(cfg)
        order = ALGORITHMS[schedule.algorithm].order(peers, schedule.op, schedule.elements)
    return all(np.array_equal(buffers[a][lo:hi].view(np.uint32), values.view(np.uint32))
               for a, lo, hi, values in expected(schedule, prepared.data, order))


def collective_summary(cfg: FabricConfig, prepared: CollectivePlan, records, engines,
                       buffers) -> dict:
    """The ``collective`` section of ``results.json`` (section 15.8.4)."""
    finished = not records.stalled and all(e.done() for e in engines.engines)
    return collective_section(
        cfg, prepared, cycles=engines.completion_cycle if finished else None,
        data_ok=finished and data_ok(cfg, prepared, buffers),
        errors=sum(e.errors for e in engines.engines), run_cycles=records.cycles,
        stalled=bool(records.stalled), stuck=records.stuck or None,
        slots_applied=sum(e.applied for e in engines.engines),
        work_requests=len(records.taken))


def collective_section(cfg: FabricConfig, prepared: CollectivePlan, *, cycles, data_ok: bool,
                       errors: int, run_cycles: int, stalled: bool, stuck, slots_applied,
                       work_requests) -> dict:
    """The ``collective`` section from what a run measured: its time (``cycles``, None when
    it did not finish), whether the data are right, and its counts."""
    s = prepared.schedule
    n = s.accelerators
    algbw = prepared.nbytes / cycles if cycles else None
    time_us = cycles / cfg.fabric.clock_mhz if cycles else None
    return {
        "op": s.op, "algo": s.algorithm, "dtype": prepared.dtype, "bytes": prepared.nbytes,
        "accelerators": n, "steps": s.step_count,
        "segment_bytes": prepared.segment * ELEMENT_BYTES, "cycles": cycles,
        "algbw": algbw, "busbw": algbw * busbw_factor(s.op, n) if algbw else None,
        "busbw_factor": busbw_factor(s.op, n),
        "time_us": time_us,
        "algbw_gbps": algbw_gbps(prepared.nbytes, time_us / 1e6) if cycles else None,
        "busbw_gbps": busbw_gbps(s.op, n, prepared.nbytes, time_us / 1e6) if cycles else None,
        "link_gbps": cfg.link_gbps,
        "alpha_beta_cycles": prepared.predicted,
        "alpha_beta_ratio": cycles / prepared.predicted if cycles else None,
        "data_ok": data_ok, "errors": errors, "run_cycles": run_cycles, "stalled": stalled,
        "stuck": stuck, "slots_applied": slots_applied, "work_requests": work_requests,
    }
