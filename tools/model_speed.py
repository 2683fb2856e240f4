"""Cycles per second of the golden model on a list of cases, for the benchmark.

Run as a script, ``python model_speed.py CASES`` (CASES a JSON list), it
prints one JSON object per case. It uses only the model's stable entry
points (``FabricConfig.load``, ``generate``, ``FabricModel.run`` or, before
it, ``SwitchModel.run``, ``generate_rdma``, ``RdmaFabricModel.run``), so ``make bench`` can run this
same file against the package of an earlier commit, side by side with the
current one. Compilation of the kernels, where there are any, is done before
the clock starts (the model's ``warm``, or before it the one warm-up of all).
A case with ``"end_to_end": true`` is instead one run the way ``superfabric run
--sim model`` makes it (:func:`measure_run`, on the current package only).
"""

import json
import sys
import time

__all__ = ["measure", "measure_run"]


def _warm(model) -> None:
    """Compile the kernels ``model`` (about to run a case) calls, before the clock starts."""
    if hasattr(model, "warm"):
        model.warm()
        return
    try:                       # a model from before each model warmed its own kernels
        from superfabric.sim.warmup import compile_kernels
    except ImportError:
        try:                   # a model from before the warm-up had its own module
            from superfabric.sim.fabric.top import compile_kernels
        except ImportError:    # a model from before the compiled kernels
            return
    compile_kernels()


def _model_class():
    try:
        from superfabric.sim.fabric.top import FabricModel
        return FabricModel
    except ImportError:        # a model from before the fabric
        from superfabric.sim.switch import SwitchModel
        return SwitchModel


def _threads(case: dict) -> dict:
    """The keyword a case's ``"threads"`` becomes, none where a case does not ask for them:
    an earlier commit's model has no threads."""
    return {"threads": case["threads"]} if "threads" in case else {}


def measure(case: dict, repeats: int = 3) -> dict:
    """The best wall-clock speed of ``repeats`` runs of one case.

    A case is ``{"overrides": [...], "traffic": P, "load": X, "cycles": N,
    "lengths": SPEC}``; ``traffic`` ``rdma-allreduce`` runs the RDMA fabric.
    """
    from superfabric.config import FabricConfig
    cfg = FabricConfig.load(overrides=case["overrides"])
    if case["traffic"].startswith("rdma-"):
        from superfabric.sim.rdma.fabric import RdmaFabricModel
        from superfabric.sim.rdma.traffic import generate_rdma
        work = generate_rdma(cfg, case["traffic"], load=case["load"], cycles=case["cycles"],
                             seed=1)
        _warm(RdmaFabricModel(cfg))
        run = lambda: RdmaFabricModel(cfg).run(work)            # noqa: E731
    else:
        from superfabric.sim.traffic import generate
        model = _model_class()
        work = generate(cfg, case["traffic"], load=case["load"], cycles=case["cycles"], seed=1,
                        packet_lengths=case["lengths"])
        threads = _threads(case)
        _warm(model(cfg, **threads))
        run = lambda: model(cfg, **threads).run(work)           # noqa: E731
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        rec = run()
        seconds = time.perf_counter() - t0
        best = seconds if best is None else min(best, seconds)
    return {**case, "simulated": rec.cycles, "seconds": best, "cycles_per_second": rec.cycles / best}


def measure_run(case: dict) -> dict:
    """One run of ``case`` (as for :func:`measure`, not RDMA; ``"threads": T`` steps the
    routers on ``T`` threads) through
    :func:`superfabric.tools.run.run_point` with ``sim="model"``, into a temporary folder:
    traffic generation, the kernels' warm-up, the model, its records and ``results.json``.

    Returns the case with the run's ``simulated`` cycles, its ``cycles_per_second`` and
    ``compile_seconds`` as ``results.json`` states them, ``kernel_seconds`` (the model's
    run, which its ``cycles_per_second`` divides) and ``wall_seconds``, the whole run's
    seconds from loading its configuration (which proves the routing deadlock-free) to
    ``results.json``, less ``compile_seconds`` (what an architect's sweep pays once the
    kernels are compiled or cached).
    """
    import tempfile
    from superfabric.config import FabricConfig
    from superfabric.tools.run import run_point
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        cfg = FabricConfig.load(overrides=case["overrides"])
        res = run_point(cfg, traffic=case["traffic"], load=case["load"], cycles=case["cycles"],
                        seed=1, sim="model", out_dir=out, packet_lengths=case["lengths"],
                        **_threads(case))
        seconds = time.perf_counter() - t0
    return {**case, "simulated": res["cycles"], "cycles_per_second": res["cycles_per_second"],
            "compile_seconds": res["compile_seconds"], "kernel_seconds": res["wall_seconds"],
            "wall_seconds": seconds - res["compile_seconds"]}


def main(argv: list[str]) -> int:
    cases = json.loads(argv[1])
    for case in cases:
        res = measure_run(case) if case.get("end_to_end") else measure(case)
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
