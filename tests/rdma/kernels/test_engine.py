"""The compiled RDMA engine (``sim/rdma/kernels/engine.py``) on corners that whole runs
reach too seldom or not at all: one engine driven flit by flit, and words with their top
bit set through a lossy run."""

import dataclasses

import numpy as np

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.formats.packet import NOT_ECT
from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.kernels.engine import (OUT_FIELDS, WR_COLUMNS, engine_offer,
                                                 engine_params, engine_state, engine_step)
from superfabric.sim.rdma.traffic import generate_rdma
from superfabric.tb.rdma.scoreboard import verify

from conftest import RDMA_SMALL

#: Small windows and timers, PSNs about to wrap, and DCQCN's timers short, so that every
#: rule of the engine acts often in a few thousand cycles.
FUZZ = RDMA_SMALL + ["rdma.window=4", "rdma.ack_every=4", "rdma.ack_timeout=9",
                     "rdma.retransmit_timeout=40", "rdma.start_psn=16777210",
                     "dcqcn.cnp_interval=3", "dcqcn.alpha_timer=5", "dcqcn.increase_timer=6",
                     "dcqcn.byte_counter=6", "dcqcn.fast_recovery=2", "dcqcn.min_rate=0.05"]


def test_acknowledgement_timer_restarts_when_picked_and_fed_together():
    """An ACK picked (after its timer fired under a control pause) in the cycle a new
    packet is accepted on its context: the context's timer restarts from that cycle, and
    later fires the next ACK."""
    cfg = FabricConfig.load(preset="tiny", overrides=FUZZ)
    workload = generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=2000, seed=1)
    e, src = 1, 0
    prm, st = engine_params(cfg), engine_state(cfg, workload)
    memory = np.array(workload.memory, np.uint64)
    no_wr, out = np.zeros((1, len(WR_COLUMNS)), np.int64), np.zeros(OUT_FIELDS, np.int64)
    x = 0                        # the receive context of channel 0 from endpoint 0
    table = workload.keys[e]
    remote = table[np.flatnonzero(table[:, 5] & wire.ACCESS_REMOTE_WRITE)[0]]

    def packet(first):
        psn = (cfg.rdma.start_psn + first) % wire.PSN_MOD
        bth = wire.pack(wire.BTH_FIELDS, opcode=wire.OPCODES[(wire.OP_WRITE, True, True)],
                        psn=psn)
        reth = wire.pack(wire.RETH_FIELDS, rkey=int(remote[1]), raddr=int(remote[2]), mlen=1)
        bth |= wire.hcs(bth, reth) << 16
        return [bth, reth, (1 << 64) - 1 - first]

    flits = {c: (k, w) for k, (c, w) in enumerate(zip((0, 1, 2), packet(0)))}
    flits.update({c: (k, w) for k, (c, w) in enumerate(zip((18, 19, 20), packet(1)))})
    acks = []
    for cycle in range(60):
        offered = engine_offer(st, prm, e)[0]
        if offered:
            acks.append(cycle)
        k, word = flits.get(cycle, (0, 0))
        # Control paused until the second packet ends.
        engine_step(st, prm, e, cycle, no_wr, -1, offered, cycle in flits, src, k, k == 2,
                    np.uint64(word), NOT_ECT, False, 3 <= cycle < 20, memory, out)
    # The ACK picked in cycle 20 is offered from 21; the timer restarted at 21 fires in
    # cycle 29 and its ACK, picked in 30, is offered from 31.
    assert st.unacked[e, x] == 0 and acks == [21, 22 + cfg.rdma.ack_timeout]
    assert st.epsn[e, x] == (cfg.rdma.start_psn + 2) % wire.PSN_MOD


def test_words_with_the_top_bit_set():
    """PSNs near the wrap put the BTH's top bit up; the payload words have theirs set; over
    lossy links they still land whole where the scoreboard expects them."""
    cfg = FabricConfig.load(preset="tiny", overrides=RDMA_SMALL + [
        "switch.ports=8", "rdma.retransmit_timeout=256", "rdma.memory_words=4096",
        "rdma.start_psn=16777200", "faults.drop_rate=0.02"])
    workload = generate_rdma(cfg, "rdma-uniform", load=0.3, cycles=300, seed=3)
    memory = np.array(workload.memory, np.uint64)
    memory[:, :memory.shape[1] // 2] |= np.uint64(1 << 63)
    workload = dataclasses.replace(workload, memory=memory)
    rec = RdmaFabricModel(cfg).run(workload)
    assert verify(cfg, workload, rec) == []
    assert (rec.delivered_words >> np.uint64(63)).any()
    assert (rec.memory[:, memory.shape[1] // 2:] >> np.uint64(63)).any()
