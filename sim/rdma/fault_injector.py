"""Golden model of :class:`superfabric.hdl.rdma.fault_injector.FaultInjector` (section 10.7).

One injector sits on each endpoint's uplink, between the engine's
transmitter and the switch input. A 16-bit LFSR draw per packet, taken in
the cycle the engine offers the packet's head while the injector is idle,
drops, duplicates, reorders (holds back) or corrupts the packet, or passes
it. The injector stores at most one packet: the copy of a duplicated
packet, or the packet held back.

Each cycle is two calls: :meth:`FaultInjector.prepare` with the engine's
offered flit gives the flit offered to the switch (from the state at the
start of the cycle), then :meth:`FaultInjector.commit` with whether the
switch took it gives whether the engine's flit was taken and clocks the
edge.
"""

from ...config import FaultsConfig
from ...formats.lfsr import lfsr_step

__all__ = ["FaultInjector", "IDLE", "PASS", "DROP", "DUP", "HOLD", "REPLAY"]

#: States; a corrupted packet is PASS with a bit to flip.
IDLE, PASS, DROP, DUP, HOLD, REPLAY = range(6)


class FaultInjector:
    """The fault injector of one uplink.

    Flits are ``(k, word, dst, length)``: flit index, 64-bit data, and the
    header sideband (destination port, packet length), never corrupted.

    Parameters
    ----------
    faults : the ``[faults]`` section.
    port : the endpoint (switch input) whose uplink this is; seeds the LFSR.
    """

    def __init__(self, faults: FaultsConfig, port: int):
        self._drop, self._dup, self._hold, self._corrupt = faults.thresholds()
        self._release_after = faults.reorder_cycles
        self.lfsr = faults.link_seed(port)
        self.state = IDLE
        self.held = False            # the store holds a reordered packet
        self.hold_count = 0          # idle cycles, with no head offered, since it was held
        self.corrupt = False
        self.flip = 0                # bit to flip: flit flip >> 6, bit flip & 63
        self.store = []              # stored flits' words
        self.store_dst = 0
        self.replay = 0              # next stored flit to replay
        # This cycle, between prepare() and commit().
        self._act = IDLE
        self._decided = None         # (state, stepped LFSR, corrupt, flip) of a decision
        self._out = None

    def quiet(self) -> bool:
        """Nothing under way and nothing held: idle cycles change nothing."""
        return self.state == IDLE and not self.held

    def prepare(self, offered):
        """The flit offered to the switch this cycle, or ``None``.

        ``offered`` is the engine's flit this cycle, or ``None``.
        """
        act = self.state
        self._decided = None
        if act == IDLE and offered is not None and not (
                self.held and self.hold_count == self._release_after):
            # An idle injector sees only heads: the engine starts packets at flit 0.
            r = self.lfsr
            stepped = lfsr_step(r)
            if r < self._drop:
                act = DROP
            elif r < self._dup and not self.held:
                act = DUP
            elif r < self._hold and not self.held:
                act = HOLD
            else:
                act = PASS
            corrupt = self._hold <= r < self._corrupt
            flip = stepped & (0x3F if offered[3] == 1 else 0x7F)
            self._decided = (act, stepped, corrupt, flip)
        self._act = act
        out = None
        if act == PASS or act == DUP:
            if offered is not None:
                k, word, dst, length = offered
                corrupt, flip = (self._decided[2:] if self._decided else (self.corrupt, self.flip))
                if corrupt and k == flip >> 6:
                    word ^= 1 << (flip & 63)
                out = (k, word, dst, length)
        elif act == REPLAY:
            k = self.replay
            out = (k, self.store[k], self.store_dst, len(self.store))
        self._out = out
        return out

    def commit(self, sent: bool, offered) -> bool:
        """Clock the edge: ``sent`` when the switch took the offered flit.

        Returns whether the engine's offered flit was taken.
        """
        act = self._act
        if self._decided is not None:
            self.state, self.lfsr, self.corrupt, self.flip = self._decided
        if act == PASS or act == DUP:
            taken = sent
        elif act == DROP or act == HOLD:
            taken = offered is not None
        else:
            taken = False
            if act == REPLAY:
                if sent:
                    self.replay += 1
                    if self.replay == len(self.store):
                        self.state, self.held, self.replay, self.store = IDLE, False, 0, []
            elif self.held and self.hold_count == self._release_after:
                self.state = REPLAY
            elif self.held and offered is None:
                self.hold_count += 1
        if taken:
            k, word, dst, length = offered
            if act == DUP or act == HOLD:
                self.store.append(word)
                self.store_dst = dst
            if k == length - 1:
                if act == PASS:
                    self.state = REPLAY if self.held else IDLE
                elif act == DROP:
                    self.state = IDLE
                elif act == DUP:
                    self.state = REPLAY
                else:
                    self.state, self.held, self.hold_count = IDLE, True, 0
        return taken
