"""Golden model of :class:`superfabric.hdl.rdma.fault_injector.FaultInjector` (section
10.7): the link fault injectors, compiled.

One injector sits on each endpoint's uplink, between the engine's transmitter and the
switch input. A 16-bit LFSR draw per packet, taken in the cycle the engine offers the
packet's head while the injector is idle, drops, duplicates, reorders (holds back) or
corrupts the packet, or passes it. The injector stores at most one packet: the copy of a
duplicated packet, or the packet held back.

Every endpoint's injector lives in one :class:`InjectorState` of arrays indexed by
endpoint, so that the compiled run loop steps them without Python objects. Each cycle is
two calls: :func:`injector_prepare` gives the flit offered to the switch from the state at
the start of the cycle, :func:`injector_commit` clocks the edge, and the decision taken in
between waits in the ``d_*`` arrays. A flit is ``has, k, word, dst, length`` (flit index,
64-bit data, and the header sideband, destination port and packet length, never
corrupted): ``has`` False stands for no flit (the other fields then 0).
"""

from collections import namedtuple

import numpy as np

from ....config import FabricConfig
from ...ecn import lfsr_step
from ...kernel import kernel

__all__ = ["IDLE", "PASS", "DROP", "DUP", "HOLD", "REPLAY", "InjectorParams", "InjectorState",
           "injector_params", "injector_state", "injector_quiet", "injector_prepare",
           "injector_commit"]

#: The injector's states (the RTL's ``FaultState``, numbered alike); a corrupted packet is
#: PASS with a bit to flip.
IDLE, PASS, DROP, DUP, HOLD, REPLAY = range(6)

#: The ``[faults]`` section as the kernels read it: the cumulative draw thresholds
#: (``FaultsConfig.thresholds``) and the longest hold of a reordered packet.
InjectorParams = namedtuple("InjectorParams", ["drop", "dup", "hold", "corrupt",
                                               "release_after"])

#: Per endpoint (index ``[e]``): the LFSR; the state; ``held``, the store holds a reordered
#: packet, and ``hold_count``, the idle cycles with no head offered since it was held;
#: ``corrupt`` and ``flip``, the bit to flip (flit ``flip >> 6``, bit ``flip & 63``);
#: ``store`` ``[E, max_packet_flits]`` the stored packet's words, ``store_len`` how many,
#: ``store_dst`` its destination, ``replay`` the next stored flit to replay; ``act`` this
#: cycle's action and, when ``decided``, the decision ``d_state, d_lfsr, d_corrupt,
#: d_flip`` that commit installs.
InjectorState = namedtuple("InjectorState", [
    "lfsr", "state", "held", "hold_count", "corrupt", "flip", "store", "store_len",
    "store_dst", "replay", "act", "decided", "d_state", "d_lfsr", "d_corrupt", "d_flip"])


def injector_params(cfg: FabricConfig) -> InjectorParams:
    """The kernels' view of ``cfg.faults``."""
    drop, dup, hold, corrupt = cfg.faults.thresholds()
    return InjectorParams(drop=drop, dup=dup, hold=hold, corrupt=corrupt,
                          release_after=cfg.faults.reorder_cycles)


def injector_state(cfg: FabricConfig) -> InjectorState:
    """Every endpoint's injector as constructed: idle, its LFSR at its port's seed."""
    E = cfg.endpoints

    def ints():
        return np.zeros(E, np.int64)

    return InjectorState(
        lfsr=np.array([cfg.faults.link_seed(e) for e in range(E)], np.int64),
        state=np.full(E, IDLE, np.int64), held=ints(), hold_count=ints(), corrupt=ints(),
        flip=ints(), store=np.zeros((E, cfg.switch.max_packet_flits), np.uint64),
        store_len=ints(), store_dst=ints(), replay=ints(), act=np.full(E, IDLE, np.int64),
        decided=ints(), d_state=ints(), d_lfsr=ints(), d_corrupt=ints(), d_flip=ints())


@kernel(inline=True)
def injector_quiet(st, e):
    """Nothing under way and nothing held at ``e``'s injector: idle cycles change nothing."""
    return st.state[e] == IDLE and st.held[e] == 0


@kernel(inline=True)
def injector_prepare(st, prm, e, has, k, word, dst, length):
    """The flit ``e``'s injector offers to the switch this cycle, ``(has, k, word, dst,
    length)``, given the engine's offered flit."""
    act = st.state[e]
    st.decided[e] = 0
    if act == IDLE and has and not (st.held[e] != 0
                                    and st.hold_count[e] == prm.release_after):
        # An idle injector sees only heads: the engine starts packets at flit 0.
        r = st.lfsr[e]
        stepped = lfsr_step(r)
        held = st.held[e] != 0
        if r < prm.drop:
            act = DROP
        elif r < prm.dup and not held:
            act = DUP
        elif r < prm.hold and not held:
            act = HOLD
        else:
            act = PASS
        st.decided[e] = 1
        st.d_state[e] = act
        st.d_lfsr[e] = stepped
        st.d_corrupt[e] = 1 if prm.hold <= r < prm.corrupt else 0
        st.d_flip[e] = stepped & (0x3F if length == 1 else 0x7F)
    st.act[e] = act
    if act == PASS or act == DUP:
        if has:
            if st.decided[e] != 0:
                corrupt, flip = st.d_corrupt[e], st.d_flip[e]
            else:
                corrupt, flip = st.corrupt[e], st.flip[e]
            if corrupt != 0 and k == flip >> 6:
                word = word ^ (np.uint64(1) << np.uint64(flip & 63))
            return True, k, word, dst, length
    elif act == REPLAY:
        r = st.replay[e]
        return True, r, st.store[e, r], st.store_dst[e], st.store_len[e]
    return False, 0, np.uint64(0), 0, 0


@kernel(inline=True)
def injector_commit(st, prm, e, sent, has, k, word, dst, length):
    """Clock ``e``'s injector: ``sent`` when the switch took its flit, ``has, k, word, dst,
    length`` the engine's offered flit as given to :func:`injector_prepare`. Returns
    whether the engine's flit was taken."""
    act = st.act[e]
    if st.decided[e] != 0:
        st.state[e], st.lfsr[e] = st.d_state[e], st.d_lfsr[e]
        st.corrupt[e], st.flip[e] = st.d_corrupt[e], st.d_flip[e]
    if act == PASS or act == DUP:
        taken = sent
    elif act == DROP or act == HOLD:
        taken = has
    else:
        taken = False
        if act == REPLAY:
            if sent:
                st.replay[e] += 1
                if st.replay[e] == st.store_len[e]:
                    st.state[e], st.held[e], st.replay[e], st.store_len[e] = IDLE, 0, 0, 0
        elif st.held[e] != 0 and st.hold_count[e] == prm.release_after:
            st.state[e] = REPLAY
        elif st.held[e] != 0 and not has:
            st.hold_count[e] += 1
    if taken:
        if act == DUP or act == HOLD:
            st.store[e, st.store_len[e]] = word
            st.store_len[e] += 1
            st.store_dst[e] = dst
        if k == length - 1:
            if act == PASS:
                st.state[e] = REPLAY if st.held[e] != 0 else IDLE
            elif act == DROP:
                st.state[e] = IDLE
            elif act == DUP:
                st.state[e] = REPLAY
            else:
                st.state[e], st.held[e], st.hold_count[e] = IDLE, 1, 0
    return taken
