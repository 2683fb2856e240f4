"""iSLIP: the request-grant-accept matching of an input-queued crossbar."""

from amaranth.hdl import Signal, Module, Mux, Cat, Const, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arbiter import one_hot_index, round_robin_grant
from .checks import check_count

__all__ = ["ISLIP"]


class ISLIP(wiring.Component):
    """Prioritised, packet-mode iSLIP over ``ports`` inputs and outputs.

    All of it is combinational except the pointers, so a match found in a
    cycle starts its transfer in the same cycle. Requests are one bit per
    (output, priority) per input (bit ``dst * priorities + prio``); the
    switch has already masked out busy inputs, busy or credit-less outputs
    and paused (output, priority) pairs. Each iteration, among the inputs
    and outputs still unmatched:

    1. Request: input ``i`` requests output ``o`` at its highest requested
       class ``L[i][o]``.
    2. Grant: output ``o`` takes the highest class among its requests and,
       within it, the first requesting input at or after its grant pointer
       ``g[o][class]``.
    3. Accept: input ``i`` takes the highest class among its grants and,
       within it, the first granting output at or after its accept pointer
       ``a[i][class]``.

    Pointers move only for matches made in the first iteration, one past
    the partner: ``g[o][p] = i + 1``, ``a[i][p] = o + 1`` (mod ``ports``).
    Classes have separate pointers, so strict priority does not disturb the
    round-robin order within a class.

    Ports
    -----
    req : per input, its requests, bit ``dst * priorities + prio``.
    match : per input, a stream of :meth:`match_layout`, always ready (the
        crossbar takes every match): the input is matched this cycle to
        ``output`` at class ``prio``.
    """

    def __init__(self, *, ports: int, priorities: int, iterations: int):
        check_count("ports", ports, least=2)
        check_count("priorities", priorities)
        check_count("iterations", iterations)
        if iterations > ports:
            raise ValueError(f"iterations must be in 1..{ports}, not {iterations}")
        self._n = ports
        self._p = priorities
        self._iterations = iterations
        super().__init__({
            "req": In(unsigned(ports * priorities)).array(ports),
            "match": Out(stream.Signature(self.match_layout(ports, priorities),
                                          always_ready=True)).array(ports),
        })

    @staticmethod
    def match_layout(ports: int, priorities: int) -> data.StructLayout:
        """The payload of a match: the output and the class."""
        return data.StructLayout({"output": range(ports), "prio": range(max(priorities, 2))})

    def _highest(self, m, masks, ptrs, name):
        """The highest class with a non-empty mask: (class, its mask, its pointer)."""
        n = self._n
        prio = Signal(range(max(self._p, 2)), name=f"{name}_prio")
        mask = Signal(n, name=f"{name}_mask")
        ptr = Signal(range(n), name=f"{name}_ptr")
        for p in range(self._p):
            sig = Signal(n, name=f"{name}_mask{p}")
            m.d.comb += sig.eq(masks[p])
            masks[p] = sig
        m.d.comb += [prio.eq(0), mask.eq(masks[0]), ptr.eq(ptrs[0])]
        for p in range(1, self._p):
            with m.If(masks[p].any()):
                m.d.comb += [prio.eq(p), mask.eq(masks[p]), ptr.eq(ptrs[p])]
        return prio, mask, ptr

    def elaborate(self, platform):
        m = Module()
        n, np_ = self._n, self._p
        g_ptr = [[Signal(range(n), name=f"g_ptr_{o}_{p}") for p in range(np_)] for o in range(n)]
        a_ptr = [[Signal(range(n), name=f"a_ptr_{i}_{p}") for p in range(np_)] for i in range(n)]

        # req_at[i][o][p]: input i requests o, and p is its highest class toward o.
        req_at = [[[Signal(name=f"req_{i}_{o}_{p}") for p in range(np_)] for o in range(n)]
                  for i in range(n)]
        for i in range(n):
            for o in range(n):
                higher = Const(0, 1)
                for p in reversed(range(np_)):
                    bit = self.req[i][o * np_ + p]
                    m.d.comb += req_at[i][o][p].eq(bit & ~higher)
                    higher = higher | bit

        in_matched = Const(0, n)
        out_matched = Const(0, n)
        match_out = [Const(0, range(n)) for _ in range(n)]
        match_prio = [Const(0, range(max(np_, 2))) for _ in range(n)]
        for it in range(self._iterations):
            # Grant phase: each unmatched output picks a class, then an input.
            grant = []        # grant[o]: one-hot over inputs
            grant_prio = []   # grant_prio[o]: the class it granted at
            for o in range(n):
                masks = [Cat(req_at[i][o][p] & ~in_matched[i] for i in range(n))
                         for p in range(np_)]
                prio, mask, ptr = self._highest(m, masks, g_ptr[o], f"g{it}_{o}")
                _, first = round_robin_grant(m, mask, ptr, n, f"g{it}_{o}")
                onehot = Signal(n, name=f"grant{it}_{o}")
                m.d.comb += onehot.eq(Mux(out_matched[o], 0, first))
                grant.append(onehot)
                grant_prio.append(prio)
            # Accept phase: each input picks a class, then an output.
            new_out = [Const(0, 1) for _ in range(n)]
            new_in = []
            for i in range(n):
                masks = [Cat(grant[o][i] & (grant_prio[o] == p) for o in range(n))
                         for p in range(np_)]
                prio, mask, ptr = self._highest(m, masks, a_ptr[i], f"a{it}_{i}")
                found, first = round_robin_grant(m, mask, ptr, n, f"a{it}_{i}")
                index = one_hot_index(m, first, n, f"a{it}_{i}")
                acc = Signal(name=f"accept{it}_{i}")
                m.d.comb += acc.eq(found)
                if it == 0:
                    # Pointers move one past the partner, first iteration only.
                    with m.If(acc):
                        for p in range(np_):
                            with m.If(prio == p):
                                m.d.sync += a_ptr[i][p].eq(Mux(index == n - 1, 0, index + 1))
                                for o in range(n):
                                    with m.If(first[o]):
                                        m.d.sync += g_ptr[o][p].eq((i + 1) % n)
                new_in.append(acc)
                for o in range(n):
                    new_out[o] = new_out[o] | first[o]
                match_out[i] = Mux(acc, index, match_out[i])
                match_prio[i] = Mux(acc, prio, match_prio[i])
            # Materialised so that later iterations share, not copy, the logic.
            in_next = Signal(n, name=f"in_matched{it}")
            out_next = Signal(n, name=f"out_matched{it}")
            m.d.comb += [in_next.eq(in_matched | Cat(new_in)),
                         out_next.eq(out_matched | Cat(new_out))]
            in_matched, out_matched = in_next, out_next
            for i in range(n):
                mo = Signal(range(n), name=f"match_out{it}_{i}")
                mp = Signal(range(max(np_, 2)), name=f"match_prio{it}_{i}")
                m.d.comb += [mo.eq(match_out[i]), mp.eq(match_prio[i])]
                match_out[i], match_prio[i] = mo, mp

        for i in range(n):
            m.d.comb += [
                self.match[i].valid.eq(in_matched[i]),
                self.match[i].payload.output.eq(match_out[i]),
                self.match[i].payload.prio.eq(match_prio[i]),
            ]
        return m
