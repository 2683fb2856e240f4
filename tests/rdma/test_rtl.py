"""RDMA fabric RTL against the golden model, on both simulators.

One build per simulator serves the lossless and faulty cases here: the fault
rates and seed are run-time inputs of the RTL (``[faults]`` is left out of the
build key), and the cases differ only in workload and faults; congestion
control (PFC, ECN and DCQCN) is a second build, PFC alone a third (Verilator). Every run is also checked
on its own by the scoreboard (each request completed once with the status it
was generated for, per-QP order, memories, receive completions). The last
section drives every channel of every engine, on each of those builds and the
PSN-wrap build, for the arms that the patterns alone leave idle (``make coverage``).
"""

import numpy as np
import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.traffic import WR_COLUMNS, RdmaWorkload, generate_rdma
from superfabric.tb.rdma.runner import run_rdma_rtl

from conftest import BUILD_ROOT, CONGESTED, RDMA_SMALL, require_simulator

# A short retransmission timeout keeps the faulty runs short.
BASE = RDMA_SMALL + ["rdma.retransmit_timeout=256"]
FAULTS = ["faults.drop_rate=0.05", "faults.duplicate_rate=0.03", "faults.reorder_rate=0.03",
          "faults.corrupt_rate=0.03"]


def _run(sim, tmp_path, overrides, *, pattern="rdma-uniform", load=0.3, cycles=800, seed=1,
         bad_fraction=0.0):
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + overrides)
    workload = generate_rdma(cfg, pattern, load=load, cycles=cycles, seed=seed,
                             bad_fraction=bad_fraction)
    model = RdmaFabricModel(cfg).run(workload)
    rtl, match = run_rdma_rtl(cfg, workload, sim=sim, out_dir=tmp_path, model=model,
                              build_root=BUILD_ROOT)
    return workload, model, rtl, match


@pytest.mark.parametrize("pattern", ["rdma-uniform", "rdma-allreduce"])
def test_lossless_exact(sim, pattern, tmp_path):
    """Lossless: RTL equals the model cycle for cycle, and every request completes once."""
    workload, model, rtl, match = _run(sim, tmp_path, [], pattern=pattern)
    assert match["exact"], match["problems"]
    assert match["problems"] == [], match["problems"]
    assert (rtl.status == wire.STATUS_OK).all()
    assert sum(rtl.counters["retransmissions"]) == 0


def test_bad_keys_write_nothing(sim, tmp_path):
    """Requests with bad keys, ranges, peers or fields fail with their status and write nothing."""
    workload, model, rtl, match = _run(sim, tmp_path, [], bad_fraction=0.3, seed=2)
    assert match["exact"], match["problems"]
    assert match["problems"] == [], match["problems"]
    statuses = set(rtl.status.tolist())
    assert {wire.STATUS_LOCAL, wire.STATUS_REMOTE, wire.STATUS_BAD} <= statuses


def test_faults_recover(sim, tmp_path):
    """Seeded drops, duplicates, reordering and corruption, with bad requests among the
    good: every request completes once with its status, equal to the model cycle for cycle."""
    workload, model, rtl, match = _run(sim, tmp_path, FAULTS, bad_fraction=0.3)
    assert match["exact"], match["problems"]
    assert match["problems"] == [], match["problems"]
    c = rtl.counters
    for name in ("retransmissions", "timeouts", "naks", "corrupt", "duplicates"):
        assert sum(c[name]) > 0, name


def test_dead_link_stalls_naming_the_channel(tmp_path):
    """A link that drops everything: the run stops as stalled and names the stuck channel."""
    require_simulator("verilator")
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + ["faults.drop_rate=1.0"])
    workload = generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=800, seed=4)
    model = RdmaFabricModel(cfg).run(workload, stall_limit=700)
    rtl, match = run_rdma_rtl(cfg, workload, sim="verilator", out_dir=tmp_path, model=model,
                              stall_limit=700, expect_stall=True, build_root=BUILD_ROOT)
    assert match["exact"], match["problems"]
    assert rtl.stalled and model.stalled and match["passed"]
    assert rtl.cycles == model.cycles
    assert match["problems"][0].startswith(f"stalled at cycle {rtl.cycles}: endpoint ")
    assert " channel " in match["problems"][0]


#: Channels start just short of 2**24 (a build of its own: the PSN is a register's reset value).
WRAP = [f"rdma.start_psn={(1 << 24) - 8}"]


def test_psn_wrap_exact(sim, tmp_path):
    """Channels start just short of 2**24: the run crosses the PSN wrap, with drops."""
    workload, model, rtl, match = _run(sim, tmp_path, WRAP + ["faults.drop_rate=0.05"])
    assert match["exact"], match["problems"]
    assert match["problems"] == [], match["problems"]
    assert sum(rtl.counters["tx_data"]) > 8 * 8 and sum(rtl.counters["retransmissions"]) > 0


# -- congestion control: PFC, ECN marks and DCQCN ------------------------------------


def _congested(run):
    workload, model, rtl, match = run
    assert match["exact"], match["problems"]
    assert match["problems"] == [], match["problems"]
    return workload, model, rtl


def test_congestion_control_exact(sim, tmp_path):
    """A 3-to-1 incast with PFC and DCQCN: every pause frame, CNP, rate change, queue depth
    and request equal to the model cycle for cycle."""
    workload, model, rtl = _congested(_run(sim, tmp_path, CONGESTED, pattern="rdma-incast",
                                           load=0.6, cycles=400))
    assert len(rtl.cnps) and len(rtl.rates) and len(rtl.pfc_frames)
    assert rtl.queue_depth.max() > 0 and sum(rtl.counters["cnp_handled"]) == len(rtl.cnps)


def test_congestion_control_with_faults_exact(sim, tmp_path):
    """The victim pattern over faulty links: CNPs and acknowledgements lost, duplicated and
    corrupted among the data, and still RTL equal to the model."""
    workload, model, rtl = _congested(_run(sim, tmp_path, CONGESTED + FAULTS,
                                           pattern="rdma-victim", load=0.4, cycles=400, seed=2))
    c = rtl.counters
    assert len(rtl.cnps) and sum(c["retransmissions"]) > 0 and sum(c["corrupt"]) > 0


def test_pfc_alone_exact(tmp_path):
    """PFC without ECN: the engines obey the switch's pause frames, exactly as the model."""
    require_simulator("verilator")
    workload, model, rtl = _congested(_run("verilator", tmp_path, ["pfc.enabled=true"],
                                           pattern="rdma-incast", load=0.6, cycles=400))
    assert len(rtl.pfc_frames) and not len(rtl.cnps) and not len(rtl.rates)


# -- RDMA on a fabric of routers (section 10.15) ----------------------------------------

#: A 2x2x2 torus of 8 accelerators. One Verilator build with PFC, ECN and DCQCN serves
#: the all-reduce over lossy links and the congested incast (faults are run-time inputs).
TORUS = ["fabric.topology=torus", "fabric.dims=[2, 2, 2]", "rdma.memory_words=4096"]


def test_torus_allreduce_with_drops_exact(tmp_path):
    """The all-reduce over 1 % link drops on the 2x2x2 torus: RTL equal to the model
    packet by packet, with retransmissions, and link by link in the flits each carried."""
    require_simulator("verilator")
    workload, model, rtl = _congested(_run("verilator", tmp_path,
                                           TORUS + CONGESTED + ["faults.drop_rate=0.01"],
                                           pattern="rdma-allreduce", load=0.5, cycles=2000))
    assert sum(rtl.counters["retransmissions"]) > 0
    assert len(rtl.link_flits) == 48 and rtl.link_flits.tolist() == model.link_flits.tolist()
    assert rtl.link_flits.sum() > 0


def test_torus_incast_congestion_exact(tmp_path):
    """A 7-to-1 incast with PFC and DCQCN on the 2x2x2 torus: CE marks from several
    routers, CNPs back over up to three hops, every pause frame, rate change and queue
    depth equal to the model."""
    require_simulator("verilator")
    workload, model, rtl = _congested(_run("verilator", tmp_path, TORUS + CONGESTED,
                                           pattern="rdma-incast", load=0.6, cycles=400))
    assert len(rtl.cnps) and len(rtl.rates) and len(rtl.pfc_frames)


#: A 2x2 torus of 4 accelerators with two ports each, both on the accelerator's router
#: (section 11.2): a build of its own with PFC, ECN and DCQCN, for the all-reduce over drops
#: and the incast, every port's engine talking to the same port of its peers.
TWO_PORTS = ["fabric.topology=torus", "fabric.dims=[2, 2]", "fabric.endpoints_per_router=2",
             "fabric.ports_per_accelerator=2", "rdma.memory_words=4096"]


@pytest.mark.parametrize("pattern", ["rdma-allreduce", "rdma-incast"])
def test_two_ports_per_accelerator_exact(pattern, tmp_path):
    """Accelerators of two ports: the all-reduce over 1 % drops and a 3-to-1 incast (over
    each of the target's ports) on the 2x2 torus, RTL equal to the model."""
    require_simulator("verilator")
    drops, load, cycles = (["faults.drop_rate=0.01"], 0.5, 2000) if pattern == "rdma-allreduce" \
        else ([], 0.6, 400)
    workload, model, rtl = _congested(_run("verilator", tmp_path, TWO_PORTS + CONGESTED + drops,
                                           pattern=pattern, load=load, cycles=cycles))
    src, dst = workload.wr["src"].astype(int), workload.wr["dst"].astype(int)
    assert workload.accelerators == 4 and (src % 2 == dst % 2).all()     # port k to port k
    assert (src // 2 != dst // 2).all()                                   # other accelerators
    assert len(rtl.cnps) and len(rtl.pfc_frames)
    if pattern == "rdma-allreduce":
        assert sum(rtl.counters["retransmissions"]) > 0
    else:
        assert set(dst.tolist()) == {0, 1}


#: A leaf-spine of 4 leaves of 2 accelerators under 2 spines: a build of its own, so in
#: ``make bench``; the torus cases above keep the behaviour in ``make test``.
LEAF_SPINE = ["fabric.topology=fat_tree", "fabric.leaves=4", "fabric.spines=2",
              "fabric.hosts_per_leaf=2", "fabric.routing=ecmp", "rdma.memory_words=4096"]


@pytest.mark.bench
@pytest.mark.parametrize("ports", [1, 2])
@pytest.mark.parametrize("pattern", ["rdma-allreduce", "rdma-incast"])
def test_leaf_spine_exact(pattern, ports, tmp_path):
    """The all-reduce over 1 % drops and the congested incast on the 4-leaf leaf-spine with
    PFC, ECN and DCQCN: RTL equal to the model; with two ports per accelerator (rail-style,
    the same build), four accelerators each on a leaf of both rails."""
    require_simulator("verilator")
    drops, load, cycles = (["faults.drop_rate=0.01"], 0.5, 2000) if pattern == "rdma-allreduce" \
        else ([], 0.6, 400)
    rails = [f"fabric.ports_per_accelerator={ports}"]
    workload, model, rtl = _congested(_run("verilator", tmp_path,
                                           LEAF_SPINE + CONGESTED + drops + rails,
                                           pattern=pattern, load=load, cycles=cycles))
    assert workload.accelerators == 8 // ports
    if pattern == "rdma-allreduce":
        assert sum(rtl.counters["retransmissions"]) > 0
    else:
        assert len(rtl.cnps) and len(rtl.rates)


def test_small_torus_exact_icarus(tmp_path):
    """Icarus on a 2x2 torus of 4 accelerators: the all-reduce over 1 % drops, exact."""
    require_simulator("icarus")
    workload, model, rtl = _congested(_run("icarus", tmp_path, [
        "fabric.topology=torus", "fabric.dims=[2, 2]", "faults.drop_rate=0.01"],
        pattern="rdma-allreduce", load=0.5, cycles=2000))
    assert (rtl.status == wire.STATUS_OK).all() and sum(rtl.counters["retransmissions"]) > 0


# -- every channel of every engine ----------------------------------------------------

#: Faults heavy enough that the channels lose data and acknowledgements often: go-back-N
#: timer expiries, sequence NAKs, duplicates and corrupt headers on many of them.
HEAVY = ["faults.drop_rate=0.1", "faults.duplicate_rate=0.05", "faults.reorder_rate=0.03",
         "faults.corrupt_rate=0.15"]


def _incast_rounds(cfg, *, load, cycles, seed, bad_fraction):
    """An incast on each endpoint in turn, and the model's records of the whole run.

    A pattern gives each QP one peer, so with two QPs an endpoint uses two of its
    channels in a run; an incast on every endpoint in turn uses every channel of every
    engine (toward each peer, both QPs) and every receive context. Each round is
    posted in the cycle after the model completed the rounds before it, so that a
    QP's WRs, which change peer from round to round, still complete in posting order.
    One seed gives every round the same tables and memory; each round writes only
    its target's receive area.
    """
    model = RdmaFabricModel(cfg)
    wr, start, first = None, 0, None
    for target in range(cfg.switch.ports):
        part = generate_rdma(cfg, f"rdma-incast:target={target}", load=load, cycles=cycles,
                             seed=seed, bad_fraction=bad_fraction)
        first = first or part
        assert np.array_equal(part.keys, first.keys) and np.array_equal(part.memory, first.memory)
        rows = dict(part.wr, post=part.wr["post"] + start)
        wr = rows if wr is None else {c: np.concatenate((wr[c], rows[c])) for c in WR_COLUMNS}
        order = np.lexsort((np.arange(len(wr["post"])), wr["post"], wr["src"]))
        wr = {c: column[order] for c, column in wr.items()}
        wr["tag"] = np.arange(len(order), dtype=np.int64)     # a completion names its row
        workload = RdmaWorkload(pattern="rdma-incast", load=load, seed=seed,
                                cycles=start + cycles, wr={c: v.copy() for c, v in wr.items()},
                                keys=first.keys, page_table=first.page_table, memory=first.memory)
        records = model.run(workload)
        start = records.cycles
    return workload, records


#: name -> (overrides on BASE, load, cycles of posting per round, bad share), each on a
#: build above; a bad share of 0.6 puts requests refused by the target (access NAKs) on
#: most channels.
ROUNDS = {
    "faults": (HEAVY, 0.6, 500, 0.6),
    "congestion-control": (CONGESTED + HEAVY, 0.6, 500, 0.6),
    "pfc": (["pfc.enabled=true"] + HEAVY, 0.6, 500, 0.6),
    "psn-wrap": (WRAP + HEAVY, 0.6, 500, 0.6),
}


@pytest.mark.parametrize("name", sorted(ROUNDS))
def test_every_channel_exact(name, tmp_path):
    """Incasts on every endpoint in turn, over heavy faults with bad requests among the
    good: every channel of every engine carries requests, and every channel's timer,
    acknowledgement and receive verdict arms can fire; RTL equal to the model."""
    require_simulator("verilator")
    overrides, load, cycles, bad = ROUNDS[name]
    cfg = FabricConfig.load(preset="tiny", overrides=BASE + overrides)
    workload, model = _incast_rounds(cfg, load=load, cycles=cycles, seed=2, bad_fraction=bad)
    rtl, match = run_rdma_rtl(cfg, workload, sim="verilator", out_dir=tmp_path, model=model,
                              build_root=BUILD_ROOT)
    assert match["exact"], match["problems"]
    assert match["problems"] == [], match["problems"]
    wr, C, E = workload.wr, cfg.rdma.channels_per_peer, cfg.switch.ports
    good = wr["expect"] == wire.STATUS_OK
    used = set(zip(wr["src"][good].tolist(), (wr["dst"][good] * C + wr["qp"][good] % C).tolist()))
    assert used == {(e, p * C + k) for e in range(E) for p in range(E) if p != e
                    for k in range(C)}
    c = rtl.counters
    # Every engine timed out, went back N, sent NAKs, saw duplicates and corrupt packets.
    for counter in ("timeouts", "retransmissions", "naks", "duplicates", "corrupt", "errors"):
        assert min(c[counter]) > 0, (counter, c[counter])
    if cfg.dcqcn.enabled:
        assert len(rtl.cnps) and len(rtl.rates)
    if cfg.pfc.enabled:
        assert len(rtl.pfc_frames)
