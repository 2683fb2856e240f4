"""The all-reduce swept over sizes and algorithms on a supernode's torus, on the model, the
way nccl-tests reports it (docs/spec/collective.md section 15.7): per size and algorithm
the time, busbw and its share of an accelerator's injection bandwidth after headers, and
the measured time over the alpha-beta prediction; per size the best algorithm and the
one ``auto`` picks, which is one of the swept algorithms (its run is that algorithm's).

``make bench TABLES=collective-sweep`` (64 accelerators, 8 bytes to 16 MiB, about 75
minutes on 2 cores) and ``TABLES=collective-sweep-384`` (384, 1 KiB to 4 MiB, about five
hours: its 4 MiB points take about 19 GB each and run alone, :func:`measure_points`).
A sweep resumes: each point it measured is kept in ``build/bench-collective/<table>/`` with
what made it (the configuration, the plan's segment and a digest of the model's sources
other than the alpha-beta model's), and a point whose record matches is not run again.
The prediction is made again for the page, without planning the point again, so a change
of the alpha-beta model alone keeps the measured points and prices them anew in minutes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..config import ConfigError, FabricConfig
from .results_page import Column, ResultsPage, meminfo

#: The sweeps: table name, fabric, its overrides, the sizes (bytes per accelerator).
SWEEPS = {
    "collective-sweep": ("4x4x4 torus", ["fabric.topology=torus", "fabric.dims=[4, 4, 4]"],
                         (8,) + tuple(1 << k for k in range(6, 25, 2))),
    "collective-sweep-384": ("8x8x6 torus", ["fabric.topology=torus", "fabric.dims=[8, 8, 6]"],
                             tuple(1 << k for k in range(10, 23, 2))),
}
#: A VC buffer that covers a link's credit loop (section 11.8): at the default 32 flits one
#: flow gets 32 of every 39 cycles of a link, and a large all-reduce is held to that.
SWEEP_BUFFER_FLITS = 40
#: The largest host memory a point may take, in words (``rdma.memory_words``' limit).
MAX_MEMORY_WORDS = 1 << 24
#: Processes that run the points side by side.
SWEEP_WORKERS = 2
#: Bytes a point takes at its peak per word of host memory on each accelerator: the memory
#: and what the run keeps beside it (its inputs, the memory read back at the end), measured:
#: 4.49 GB for the 8x8x6's ring of 1 MiB in 384 x 2**19 words, 22.3 bytes a word.
POINT_BYTES_PER_WORD = 24
#: Where the measured points are kept, a folder per table.
POINTS = Path("build/bench-collective")
#: The model's sources that price a run without changing it: the prediction is made again
#: for the page (and the segment a point ran with is part of its record).
PRICING = ("sim/collective/alpha_beta.py",)


def sweep_config(overrides: list[str], memory_words: int) -> FabricConfig:
    """The sweep's fabric: an RDMA engine at every accelerator with one QP per peer, 40-flit
    VC buffers and ``memory_words`` of host memory mapped by the page table."""
    base = FabricConfig.load(overrides=overrides)     # its accelerators, before the QPs
    return FabricConfig.load(overrides=[
        "rdma.enabled=true", f"rdma.qps={base.endpoints}",
        f"fabric.vc_buffer_flits={SWEEP_BUFFER_FLITS}", f"rdma.memory_words={memory_words}",
        f"rdma.pages={memory_words // base.rdma.page_words}", *overrides])


def sweep_point(overrides: list[str], algo: str, nbytes: int, keep: Path | None = None) -> dict:
    """One all-reduce of ``nbytes`` by ``algo`` on the model (binary32, seed 1, the
    pattern's default segments, ``records=summary``), in the least host memory of a power of
    two that holds it: the ``collective`` section of its results. With ``keep``, a folder,
    the point is read from there when it was measured with the same configuration, segment
    and model (and priced again, without planning it), and written there when it runs."""
    from ..sim.collective.fabric import collective_summary, prepare_collective, run_collective
    from ..sim.collective.pattern import SEGMENT_PACKETS
    kept = keep / f"{algo}-{nbytes}.json" if keep else None
    c = _kept(kept, overrides, algo, nbytes)
    if c is not None:
        return c
    words = _least_memory(nbytes)
    while True:
        cfg = sweep_config(overrides, words)
        try:
            prepared = prepare_collective(cfg, op="allreduce", algo=algo, nbytes=nbytes,
                                          dtype="fp32", seed=1, segment_packets=SEGMENT_PACKETS,
                                          records="summary")
            break
        except ConfigError:
            if words >= MAX_MEMORY_WORDS:
                raise
            words *= 2
    records, engines, buffers = run_collective(cfg, prepared)
    c = collective_summary(cfg, prepared, records, engines, buffers)
    if kept:
        # Written whole, then renamed: a sweep stopped mid-write leaves no half record.
        kept.parent.mkdir(parents=True, exist_ok=True)
        part = kept.with_suffix(".part")
        part.write_text(json.dumps({"made_of": _made_of(cfg, algo, nbytes), "collective": c},
                                   indent=1) + "\n")
        part.replace(kept)
    return c


def _least_memory(nbytes: int) -> int:
    """The least host memory, in words, a point of ``nbytes`` is tried in: four buffers'
    worth, a power of two (doubled while the plan does not fit)."""
    return max(1 << 14, 1 << (nbytes // 2 - 1).bit_length())


def _segment(cfg, algo: str) -> int:
    """The elements of a segment of the point's chunks: the pattern's default packets, as
    the plan cuts them (``CollectivePlan.segment``)."""
    from ..sim.collective.alpha_beta import AlphaBeta
    from ..sim.collective.library import segment_of
    from ..sim.collective.pattern import SEGMENT_PACKETS
    return segment_of(algo, AlphaBeta.of(cfg).segment_elements(SEGMENT_PACKETS))


def _made_of(cfg, algo: str, nbytes: int) -> dict:
    """What a point's measurement depends on: the configuration, the algorithm, the size,
    the segment and the model's sources but the alpha-beta model's."""
    return {"config": hashlib.sha256(cfg.to_json().encode()).hexdigest(), "algo": algo,
            "bytes": nbytes, "segment": _segment(cfg, algo), "model": _model_digest()}


@functools.lru_cache(maxsize=1)
def _model_digest() -> str:
    from ..sim.kernel import sources_digest
    return sources_digest(leave_out=PRICING)


def _kept(path: Path | None, overrides: list[str], algo: str, nbytes: int) -> dict | None:
    """The ``collective`` section kept at ``path``, priced by the alpha-beta model as it is
    now, if it was made of what the point would be made of now (in one of the host memories
    the point may take: the one its plan fits, since the model's sources are the same);
    None when there is none, it was made otherwise, or it cannot be read (it runs again)."""
    from ..sim.collective.alpha_beta import AlphaBeta
    from ..sim.collective.peers import Peers
    if path is None or not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        made_of, c = record["made_of"], record["collective"]
    except (ValueError, KeyError, TypeError):
        return None
    words = _least_memory(nbytes)
    while words <= MAX_MEMORY_WORDS:
        cfg = sweep_config(overrides, words)
        if made_of == _made_of(cfg, algo, nbytes):
            predicted = AlphaBeta.of(cfg).predict(Peers.of(cfg), "allreduce", algo, nbytes,
                                                  segment=made_of["segment"])
            return {**c, "alpha_beta_cycles": predicted,
                    "alpha_beta_ratio": c["cycles"] / predicted if c["cycles"] else None}
        words *= 2
    return None


def point_memory(cfg, nbytes: int) -> int:
    """The bytes a point of ``nbytes`` on ``cfg``'s fabric takes at its peak, estimated from
    the host memory it is tried in (:func:`_least_memory` on every accelerator)."""
    return cfg.endpoints * _least_memory(nbytes) * POINT_BYTES_PER_WORD


def available_memory() -> int:
    """The memory the machine has available now, in bytes (``MemAvailable``; 0 when unknown,
    so that every point runs alone)."""
    return meminfo("MemAvailable") or 0


def measure_points(name: str, overrides: list[str], points: list[tuple[str, int]], cfg, peers,
                   model) -> dict:
    """Every ``(algorithm, bytes)`` point of sweep ``name`` measured (:func:`sweep_point`,
    kept under :data:`POINTS`): its ``collective`` section, or the exception that failed it.

    A point that would take more than half the memory available (:func:`point_memory`: on
    384 accelerators each 4 MiB point takes about 19 GB) runs alone, one after the other;
    then the rest, :data:`SWEEP_WORKERS` at a time; each group longest first
    (:func:`longest_first`). A worker that dies (the kernel's out-of-memory killer ends
    the largest process when the estimate was short) breaks its pool: the points it left
    unrun run again one at a time, and a point whose worker dies alone is recorded as
    failed, so no point is lost or failed for another's death."""
    avail = available_memory()
    alone = [p for p in points if 2 * point_memory(cfg, p[1]) > avail]
    rest = [p for p in points if p not in alone]
    results = {}
    for group, workers in ((alone, 1), (rest, SWEEP_WORKERS)):
        pending = longest_first(group, cfg, peers, model)
        while pending:
            with ProcessPoolExecutor(workers) as pool:
                futures = [(p, pool.submit(sweep_point, overrides, *p, POINTS / name))
                           for p in pending]
                for point, future in futures:
                    try:
                        results[point] = future.result()
                    except BrokenProcessPool:
                        continue                # run again below
                    except Exception as e:      # its row says why
                        results[point] = e
            unrun = [p for p in pending if p not in results]
            if unrun and workers == 1:
                # One worker runs its points in order: the first unrun is the one it died in.
                results[unrun[0]] = RuntimeError("its worker process died running it alone "
                                                 "(out of memory?)")
                unrun = unrun[1:]
            pending, workers = unrun, 1
    return results


def longest_first(points: list[tuple[str, int]], cfg, peers, model) -> list[tuple[str, int]]:
    """The sweep's ``(algorithm, bytes)`` points on ``cfg``'s fabric (its ``peers``, its
    alpha-beta ``model``) in the order they go to the workers: the longest first by the
    prediction, so that the pool does not end on one long point alone (on 384
    accelerators the tree's 4 MiB is about 40 % of the sweep's predicted cycles, and in
    size order it would start last)."""
    return sorted(points, key=lambda p: -model.predict(peers, "allreduce", *p,
                                                       segment=_segment(cfg, p[0])))


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes >> 20} MiB"
    return f"{nbytes >> 10} KiB" if nbytes >= 1 << 10 else f"{nbytes} B"


def sweep_table(name: str) -> ResultsPage:
    """The sweep ``name`` of :data:`SWEEPS`: every algorithm that can run the all-reduce on
    its fabric at every size, then per size the best and ``auto``'s pick."""
    from ..formats.rdma_wire import payload_words
    from ..sim.collective.alpha_beta import AlphaBeta, busbw_factor
    from ..sim.collective.library import ALGORITHMS, auto, supports
    from ..sim.collective.pattern import SEGMENT_PACKETS
    from ..sim.collective.peers import Peers
    fabric, overrides, sizes = SWEEPS[name]
    cfg = sweep_config(overrides, 1 << 14)
    peers, model = Peers.of(cfg), AlphaBeta.of(cfg)
    link = model.payload_bytes / model.packet_flits     # bytes a cycle after the headers
    algos = [a for a in ALGORITHMS if supports(a, "allreduce", peers)]
    page = ResultsPage(
        name, f"The all-reduce from {_size(sizes[0])} to {_size(sizes[-1])} on the "
        f"{fabric} ({cfg.endpoints} accelerators)", f"make bench TABLES={name}",
        f"`superfabric run --sim model ... --traffic collective:op=allreduce,algo=A,bytes=B,"
        f"dtype=float32,records=summary` on the {fabric} with `--set rdma.enabled=true --set "
        f"rdma.qps={cfg.endpoints} --set fabric.vc_buffer_flits={SWEEP_BUFFER_FLITS}` and the "
        f"least host memory of a power of two that holds the run, seed 1, segments of "
        f"{SEGMENT_PACKETS} packets (the pattern's default), every accelerator's result "
        f"checked against numpy. {SWEEP_BUFFER_FLITS}-flit VC buffers cover a link's credit "
        f"loop (specification section 11.8), which the default 32 do not: there one flow "
        f"gets 32 of every 39 cycles of a link. busbw is nccl-tests' (bytes a cycle); "
        f"of link: busbw over an accelerator's injection bandwidth after the RDMA header, "
        f"{link:g} bytes a cycle ({cfg.switch.data_width // 8}-byte flits, "
        f"{payload_words(cfg.switch.max_packet_flits)}"
        f" payload words in a {cfg.switch.max_packet_flits}-flit packet). Ratio: the "
        f"measured time over the alpha-beta prediction (section 15.6).")
    page.table(*(Column(h, w, right=k > 1) for k, (h, w) in enumerate(zip(
        ("size", "algorithm", "cycles", "time", "busbw", "of link", "alpha-beta", "ratio",
         "data"), (7, 16, 10, 11, 6, 7, 10, 5, 5)))))
    points = [(algo, nbytes) for nbytes in sizes for algo in algos]
    measured = {}
    results = measure_points(name, overrides, points, cfg, peers, model)
    for algo, nbytes in points:
        c = results[algo, nbytes]
        if isinstance(c, Exception):    # a failed point is a row that says why
            page.row(_size(nbytes), algo, *["-"] * 6, "failed")
            page.note(f"{algo}, {_size(nbytes)}: {type(c).__name__}: {c}")
            continue
        cycles = c["cycles"]
        if cycles and c["data_ok"]:
            measured[algo, nbytes] = cycles
        page.row(_size(nbytes), algo, f"{cycles:,}" if cycles else "-",
                 f"{c['time_us']:,.2f} us" if cycles else "-",
                 f"{c['busbw']:.2f}" if cycles else "-",
                 f"{c['busbw'] / link:.0%}" if cycles else "-",
                 f"{c['alpha_beta_cycles']:,}",
                 f"{c['alpha_beta_ratio']:.3f}" if cycles else "-",
                 "exact" if c["data_ok"] else ("WRONG" if cycles else "stalled"))
    page.table(Column("size", 7, right=False), Column("best", 16, right=False),
               Column("busbw of link", 13), Column("auto picks", 16, right=False),
               Column("auto over best", 14), caption="Per size: the fastest algorithm and auto")
    segment = model.segment_elements(SEGMENT_PACKETS)
    for nbytes in sizes:
        ran = {a: measured[a, nbytes] for a in algos if (a, nbytes) in measured}
        pick = auto(model, peers, "allreduce", nbytes, segment)
        if not ran:
            page.row(_size(nbytes), "-", "-", pick, "-")
            continue
        best = min(ran, key=ran.get)
        busbw = nbytes / ran[best] * busbw_factor("allreduce", peers.n)
        page.row(_size(nbytes), best, f"{busbw / link:.0%}", pick,
                 f"{ran[pick] / ran[best]:.3f}" if pick in ran else "-")
    return page
