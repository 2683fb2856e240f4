"""The all-reduce sweep table (tools/collective_sweep.py, docs/spec/collective.md section 15.7)."""

import json
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest

from superfabric.sim.collective.alpha_beta import AlphaBeta
from superfabric.sim.collective.library import ALGORITHMS, auto, supports
from superfabric.sim.collective.pattern import SEGMENT_PACKETS
from superfabric.sim.collective.peers import Peers
from superfabric.tools import collective_sweep

TORUS = ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"]


def _tables(markdown: str) -> list[list[list[str]]]:
    """The page's tables, each a list of its rows' cells (the header and rule left out)."""
    tables, rows = [], None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            rows = None
        elif rows is None:              # a header: a table starts
            rows = []
            tables.append(rows)
        elif set(line) - set("|-: "):   # not the rule under the header
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return tables


def test_the_sweep_runs_every_algorithm_at_every_size_and_finds_the_best(monkeypatch, tmp_path):
    # 64 KiB needs 32,768 words of host memory: the point grows the memory to fit.
    monkeypatch.setitem(collective_sweep.SWEEPS, "test", ("2x2x2 torus", TORUS, (8, 65536)))
    monkeypatch.setattr(collective_sweep, "SWEEP_WORKERS", 1)
    monkeypatch.setattr(collective_sweep, "POINTS", tmp_path)
    runs, summary = _tables(collective_sweep.sweep_table("test").markdown("test"))
    cfg = collective_sweep.sweep_config(TORUS, 1 << 14)
    assert cfg.fabric.vc_buffer_flits == 40 and cfg.rdma.qps == 8
    peers, model = Peers.of(cfg), AlphaBeta.of(cfg)
    algos = [a for a in ALGORITHMS if supports(a, "allreduce", peers)]
    assert [(r[0], r[1]) for r in runs] == [(s, a) for s in ("8 B", "64 KiB") for a in algos]
    assert all(r[-1] == "exact" for r in runs)
    for size, nbytes in (("8 B", 8), ("64 KiB", 65536)):
        cycles = {r[1]: int(r[2].replace(",", "")) for r in runs if r[0] == size}
        best = min(cycles, key=cycles.get)
        pick = auto(model, peers, "allreduce", nbytes, model.segment_elements(SEGMENT_PACKETS))
        row = next(r for r in summary if r[0] == size)
        assert row[1] == best and row[3] == pick
        assert row[4] == f"{cycles[pick] / cycles[best]:.3f}"


def test_a_sweep_reads_the_points_it_kept_and_runs_again_the_ones_made_otherwise(monkeypatch,
                                                                                 tmp_path):
    monkeypatch.setitem(collective_sweep.SWEEPS, "test", ("2x2x2 torus", TORUS, (1024,)))
    monkeypatch.setattr(collective_sweep, "SWEEP_WORKERS", 1)
    monkeypatch.setattr(collective_sweep, "POINTS", tmp_path)
    runs = _tables(collective_sweep.sweep_table("test").markdown("test"))[0]
    kept = {p.stem: p for p in (tmp_path / "test").glob("*.json")}
    assert sorted(kept) == sorted(f"{r[1]}-1024" for r in runs)
    cycles = {r[1]: int(r[2].replace(",", "")) for r in runs}
    # One record read back as it is (its cycles altered to show it was read, not run), one
    # made by other model sources, which runs again and is written anew.
    # And one cut short, as a sweep killed while writing would have left it before records
    # were written whole: it runs again too.
    read, stale, cut = "ring", "tree", "dimwise"
    for algo, change in ((read, lambda r: r["collective"].update(cycles=cycles[read] + 1)),
                         (stale, lambda r: r["made_of"].update(model="0" * 16))):
        record = json.loads(kept[f"{algo}-1024"].read_text())
        change(record)
        kept[f"{algo}-1024"].write_text(json.dumps(record))
    kept[f"{cut}-1024"].write_text(kept[f"{cut}-1024"].read_text()[:40])
    again = _tables(collective_sweep.sweep_table("test").markdown("test"))[0]
    assert {r[1]: int(r[2].replace(",", "")) for r in again} == {**cycles, read: cycles[read] + 1}
    assert json.loads(kept[f"{stale}-1024"].read_text())["made_of"]["model"] != "0" * 16
    assert json.loads(kept[f"{cut}-1024"].read_text())["collective"]["cycles"] == cycles[cut]


def test_a_kept_point_is_priced_again_without_planning_it(monkeypatch, tmp_path):
    # A 16 MiB point's plan takes minutes; a kept point needs only its prediction, which
    # the alpha-beta model makes again from the kept segment, as the run would.
    from superfabric.sim.collective import alpha_beta, fabric
    monkeypatch.setitem(collective_sweep.SWEEPS, "test", ("2x2x2 torus", TORUS, (1024,)))
    monkeypatch.setattr(collective_sweep, "SWEEP_WORKERS", 1)
    monkeypatch.setattr(collective_sweep, "POINTS", tmp_path)
    first = _tables(collective_sweep.sweep_table("test").markdown("test"))[0]

    def not_again(*args, **kwargs):
        raise AssertionError("a kept point was planned again")
    monkeypatch.setattr(fabric, "prepare_collective", not_again)
    assert _tables(collective_sweep.sweep_table("test").markdown("test"))[0] == first
    # Priced anew: another model's prediction beside the same cycles.
    monkeypatch.setattr(alpha_beta.AlphaBeta, "predict", lambda self, *a, **k: 12345)
    again = _tables(collective_sweep.sweep_table("test").markdown("test"))[0]
    assert [r[2] for r in again] == [r[2] for r in first]
    assert {r[6] for r in again} == {"12,345"} != {r[6] for r in first}


def test_the_workers_get_the_longest_points_first_and_the_page_keeps_size_order(monkeypatch):
    monkeypatch.setitem(collective_sweep.SWEEPS, "test", ("2x2x2 torus", TORUS, (8, 65536)))
    submitted = []

    class Recording:
        """A pool that records what it is given, each point failing as it would if its
        worker died (so the page must still list it, in its place)."""

        def __init__(self, workers):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, overrides, algo, nbytes, keep):
            submitted.append((algo, nbytes))
            future = Future()
            future.set_exception(RuntimeError("worker died"))
            return future

    monkeypatch.setattr(collective_sweep, "ProcessPoolExecutor", Recording)
    runs = _tables(collective_sweep.sweep_table("test").markdown("test"))[0]
    cfg = collective_sweep.sweep_config(TORUS, 1 << 14)
    peers, model = Peers.of(cfg), AlphaBeta.of(cfg)
    algos = [a for a in ALGORITHMS if supports(a, "allreduce", peers)]
    points = [(a, s) for s in (8, 65536) for a in algos]
    assert sorted(submitted) == sorted(points)
    predicted = [model.predict(peers, "allreduce", a, s,
                               segment=collective_sweep._segment(cfg, a)) for a, s in submitted]
    assert predicted == sorted(predicted, reverse=True) and predicted[0] > predicted[-1]
    assert [(r[1], r[-1]) for r in runs] == [(a, "failed") for a, _ in points]


class _Scripted:
    """A pool whose points succeed, except ``killer``: its worker dies (the out-of-memory
    killer), which breaks the pool, so every point of the pool not done by then fails with
    ``BrokenProcessPool``; ``alone_too``: it dies even alone. ``pools`` records each pool's
    workers and points."""

    pools = []
    killer, alone_too = None, False

    def __init__(self, workers):
        self.workers, self.points = workers, []
        _Scripted.pools.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, overrides, algo, nbytes, keep):
        self.points.append((algo, nbytes))
        future = Future()
        dies = (algo, nbytes) == self.killer and (self.workers > 1 or self.alone_too)
        # One worker runs in order: the points before the killer were done.
        broken = dies or (self.killer in self.points and (self.workers > 1 or self.alone_too))
        if broken or (self.workers > 1 and self.killer is not None):
            future.set_exception(BrokenProcessPool("a worker died"))
        else:
            future.set_result({"cycles": nbytes})
        return future


@pytest.mark.parametrize("alone_too", [False, True])
def test_a_dead_worker_costs_only_its_own_point(monkeypatch, alone_too):
    monkeypatch.setattr(collective_sweep, "ProcessPoolExecutor", _Scripted)
    monkeypatch.setattr(_Scripted, "pools", [])
    monkeypatch.setattr(_Scripted, "killer", ("ring", 65536))
    monkeypatch.setattr(_Scripted, "alone_too", alone_too)
    monkeypatch.setattr(collective_sweep, "available_memory", lambda: 1 << 40)
    cfg = collective_sweep.sweep_config(TORUS, 1 << 14)
    peers, model = Peers.of(cfg), AlphaBeta.of(cfg)
    points = [(a, s) for s in (8, 65536) for a in ("ring", "tree")]
    results = collective_sweep.measure_points("test", TORUS, points, cfg, peers, model)
    # The pool of two broke; every point ran again alone, one at a time.
    assert [p.workers for p in _Scripted.pools][:2] == [2, 1]
    assert sorted(_Scripted.pools[0].points) == sorted(points)
    assert set(results) == set(points)
    for point in points:
        if point == ("ring", 65536) and alone_too:
            assert isinstance(results[point], RuntimeError)
            assert "died running it alone" in str(results[point])
        else:
            assert results[point] == {"cycles": point[1]}


def test_points_too_large_to_share_the_memory_run_alone_first(monkeypatch):
    monkeypatch.setattr(collective_sweep, "ProcessPoolExecutor", _Scripted)
    monkeypatch.setattr(_Scripted, "pools", [])
    cfg = collective_sweep.sweep_config(TORUS, 1 << 14)
    peers, model = Peers.of(cfg), AlphaBeta.of(cfg)
    big = collective_sweep.point_memory(cfg, 1 << 20)
    assert big == 8 * (1 << 19) * collective_sweep.POINT_BYTES_PER_WORD
    # Room for one 1 MiB point, not two; the small ones share the machine.
    monkeypatch.setattr(collective_sweep, "available_memory", lambda: big + 1)
    points = [(a, s) for s in (8, 1 << 20) for a in ("ring", "tree")]
    results = collective_sweep.measure_points("test", TORUS, points, cfg, peers, model)
    assert [(p.workers, sorted(p.points)) for p in _Scripted.pools] == [
        (1, [("ring", 1 << 20), ("tree", 1 << 20)]), (2, [("ring", 8), ("tree", 8)])]
    assert all(results[p] == {"cycles": p[1]} for p in points)


def test_every_sweep_has_a_configuration_with_a_qp_per_peer():
    # The 384-accelerator table once failed here: the default 1,024 QPs do not divide by 384.
    for name, (_, overrides, _) in collective_sweep.SWEEPS.items():
        cfg = collective_sweep.sweep_config(overrides, 1 << 14)
        assert cfg.rdma.enabled and cfg.rdma.qps == cfg.endpoints, name
