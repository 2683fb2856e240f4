"""Cycles per second of the golden model on a list of cases, for the benchmark.

Run as a script, ``python model_speed.py CASES`` (CASES a JSON list), it
prints one JSON object per case. It uses only the model's stable entry
points (``FabricConfig.load``, ``generate``, ``FabricModel.run`` or, before
it, ``SwitchModel.run``, ``generate_rdma``, ``RdmaFabricModel.run``), so ``make bench`` can run this
same file against the package of an earlier commit, side by side with the
current one. Compilation of the kernels, where there are any, is done before
the clock starts (the model's ``warm``, or before it the one warm-up of all).
"""

import json
import sys
import time

__all__ = ["measure"]


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
        _warm(model(cfg))
        run = lambda: model(cfg).run(work)                      # noqa: E731
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        rec = run()
        seconds = time.perf_counter() - t0
        best = seconds if best is None else min(best, seconds)
    return {**case, "simulated": rec.cycles, "seconds": best, "cycles_per_second": rec.cycles / best}


def main(argv: list[str]) -> int:
    cases = json.loads(argv[1])
    for case in cases:
        print(json.dumps(measure(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
