"""One endpoint's host in hardware (section 10.16): its work requests in a memory, its send
queues, the offer rule of section 10.11, and running hashes of what its engine did.

The hosts of an RDMA run are the send queues of the model
(``superfabric.sim.rdma.kernels.send_queues``): each endpoint offers, when its WR stream
offers nothing, the oldest WR at the head of a send queue that is posted and whose channel
has window room for it, and an offered WR stays offered until the engine takes it. Here
that rule is logic, so a run needs no testbench per cycle (``hdl/rdma/hosted.py``).

The endpoint's WRs sit in a memory in row order, each with what the rule reads of it
(``post``, its ``channel`` and the window ``slots`` it needs, ``bad`` for one that names no
channel) and the next WR of its QP (``next``, ``last``), all computed before the run from
the model's own send-queue state. Each QP's queue keeps its head's index and those fields in
registers; the offer is the lowest head index among the queues whose head is posted and
fits, found by a tree of comparisons. The offered WR and the head after it are read from
the memory, so a queue moves on in the cycle its head is taken. The rule equals the model's
walk over the heads for WRs posted in row order, which every generated workload is (a
runner refuses others).

The hashes (:mod:`superfabric.formats.rdma_hash`) fold the engine's events until ``stop``
(rate changes one cycle longer) and, while ``sweep``, the host memory's words.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats import rdma_wire as wire
from ...formats.dcqcn import RATE_BITS
from ...formats.packet import port_bits
from ...formats.rdma_hash import CYCLE_BITS, HASH_BITS, HASHES, record_bits
from ..pfc_frame import REQUEST_LAYOUT
from ..stimulus.traffic_sink import crc32_network
from .header import cpl_layout, rcpl_layout, wr_layout

__all__ = ["DEPTH", "entry_layout", "host_signature", "RdmaHost"]

#: WRs an endpoint's memory holds, unless a build says otherwise.
DEPTH = 1024


def entry_layout(cfg: FabricConfig, depth: int = DEPTH) -> data.StructLayout:
    """One WR of the host's memory (``formats.rdma_wire.host_entry_fields``), the WR a
    struct as the engine takes it."""
    return data.StructLayout({name: wr_layout(cfg) if name == "wr" else width
                              for name, width in wire.host_entry_fields(cfg, depth)})


def host_signature(cfg: FabricConfig, depth: int = DEPTH) -> wiring.Signature:
    """The ports of :class:`RdmaHost` for ``cfg`` and ``depth``."""
    nc = cfg.endpoints * cfg.rdma.channels_per_peer
    return wiring.Signature({
        "load_en": In(1), "load_sel": In(1), "load_addr": In(range(depth)),
        "load_data": In(entry_layout(cfg, depth)), "rows": In(range(depth + 1)),
        "run": In(1), "stop": In(1), "cycle": In(CYCLE_BITS),
        "wr": Out(stream.Signature(wr_layout(cfg))),
        "free": In(wire.free_slot_bits(cfg.rdma.window)).array(nc),
        "cpl": In(stream.Signature(cpl_layout(), always_ready=True)),
        "rcpl": In(stream.Signature(rcpl_layout(cfg), always_ready=True)),
        "cnp_valid": In(1), "cnp_context": In(port_bits(nc)),
        "rate": In(nc * RATE_BITS), "rate_changed": In(nc),
        "pause_valid": In(1), "pause": In(REQUEST_LAYOUT.size),
        "depth": In(wire.queue_depth_bits(cfg)),
        "sweep": In(1), "word": In(64),
        "finished": Out(1), "hashes": Out(HASH_BITS).array(len(HASHES)),
    })


def _rotate_left(value, amount: int):
    return Cat(value[len(value) - amount:], value[:len(value) - amount]) if amount else value


class RdmaHost(wiring.Component):
    """One endpoint's host for ``cfg`` (with ``[rdma] enabled``), holding up to ``depth``
    WRs.

    Ports
    -----
    load_en, load_sel, load_addr, load_data : before the run, ``load_sel`` 0 writes WR
        ``load_addr`` of the memory (an :func:`entry_layout`); 1 makes WR ``load_addr``,
        already written, the head of its QP's queue (``load_data.wr.qp``).
    rows : the endpoint's WRs; held for the run. ``finished`` rises once as many send
        completions came.
    run, cycle : the run has started; its cycle. ``stop``: the run is over (the hashes
        keep what they hold, the rates' one cycle later).
    wr, free, cpl, rcpl : the engine's WR stream, its free window slots per channel, its
        send and receive completions.
    cnp_valid, cnp_context, rate, rate_changed : the engine's CNPs and rates.
    pause_valid, pause : a pause frame from the endpoint's switch input.
    depth : the queue depth of the endpoint's switch output.
    sweep, word : after the run, the host memory's words in address order.
    hashes : :data:`~superfabric.formats.rdma_hash.HASHES`, in that order.
    """

    def __init__(self, cfg: FabricConfig, *, depth: int = DEPTH):
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the RDMA host needs rdma.enabled = true")
        self._cfg, self._depth = cfg, depth
        super().__init__(host_signature(cfg, depth))

    def elaborate(self, platform):
        m = Module()
        self._offer(m)
        self._hash(m)
        return m

    def _offer(self, m: Module) -> None:
        """The memory, the queues and the offer rule."""
        cfg, depth = self._cfg, self._depth
        Q = cfg.rdma.per_endpoint(cfg.endpoints)
        entry = entry_layout(cfg, depth)
        m.submodules.wrs = wrs = Memory(shape=entry, depth=depth, init=[])
        write = wrs.write_port()
        m.d.comb += [write.en.eq(self.load_en & ~self.load_sel), write.addr.eq(self.load_addr),
                     write.data.eq(self.load_data)]
        offered = wrs.read_port(domain="comb")      # the WR offered
        after = wrs.read_port(domain="comb")        # the next head of its queue, or one loaded

        busy, bad = Signal(Q), Signal(Q)
        head, post, channel, slots = ([Signal.like(getattr(after.data, name), name=f"{name}{q}")
                                       for q in range(Q)]
                                      for name in ("next", "post", "channel", "slots"))

        free = Array(self.free)
        fits = []
        for q in range(Q):
            fit = Signal(name=f"fits{q}")
            m.d.comb += fit.eq(self.run & busy[q] & (post[q] <= self.cycle)
                               & (bad[q] | (free[channel[q]] >= slots[q])))
            fits.append(fit)
        found, best = _oldest(m, fits, head)

        # The offer: the WR held since an earlier cycle, else the oldest head that fits.
        holding = Signal()
        held = Signal(range(Q))
        chosen = Signal(range(Q))
        m.d.comb += [chosen.eq(Mux(holding, held, best)),
                     self.wr.valid.eq(holding | found),
                     offered.addr.eq(Array(head)[chosen]),
                     self.wr.payload.eq(offered.data.wr)]
        taken = self.wr.valid & self.wr.ready
        m.d.sync += [holding.eq(self.wr.valid & ~self.wr.ready), held.eq(chosen)]

        loading = self.load_en & self.load_sel
        m.d.comb += after.addr.eq(Mux(loading, self.load_addr, offered.data.next))
        load_qp = self.load_data.wr.qp
        for q in range(Q):
            def head_is(index):
                return [head[q].eq(index), post[q].eq(after.data.post),
                        channel[q].eq(after.data.channel), bad[q].eq(after.data.bad),
                        slots[q].eq(after.data.slots)]
            with m.If(loading & (load_qp == q)):
                m.d.sync += [busy[q].eq(1), *head_is(self.load_addr)]
            with m.Elif(taken & (chosen == q)):
                with m.If(offered.data.last):
                    m.d.sync += busy[q].eq(0)
                with m.Else():
                    m.d.sync += head_is(offered.data.next)

        completed = Signal(range(depth + 1))
        with m.If(self.run & self.cpl.valid):
            m.d.sync += completed.eq(completed + 1)
        m.d.comb += self.finished.eq(completed == self.rows)

    def _hash(self, m: Module) -> None:
        """The running hashes (``formats/rdma_hash.py``)."""
        nc = len(self.free)
        counting = self.run & ~self.stop
        stopped = Signal()
        m.d.sync += stopped.eq(stopped | (self.run & self.stop))
        cycle = self.cycle

        rates = [self.rate[RATE_BITS * k:RATE_BITS * (k + 1)] for k in range(nc)]
        rate_fold = Const(0, 32)
        for k, rate in enumerate(rates):
            rotated = _rotate_left(Cat(rate, Const(0, 32 - RATE_BITS)), k % 32)
            rate_fold = rate_fold ^ Mux(self.rate_changed[k], rotated, 0)
        folded = Signal(32)
        m.d.comb += folded.eq(rate_fold)

        cpl, rcpl = self.cpl.payload, self.rcpl.payload
        events = {
            "taken": (counting & self.wr.valid & self.wr.ready,
                      dict(cycle=cycle, tag=self.wr.payload.tag)),
            "completion": (counting & self.cpl.valid,
                           dict(cycle=cycle, tag=cpl.tag, status=cpl.status)),
            "receive": (counting & self.rcpl.valid,
                        dict(cycle=cycle, src=rcpl.src, qp=rcpl.qp, length=rcpl.length)),
            "cnp": (counting & self.cnp_valid, dict(cycle=cycle, context=self.cnp_context)),
            "rate": (self.run & ~stopped & self.rate_changed.any(),
                     dict(cycle=(cycle - 1)[:CYCLE_BITS], fold=folded, mask=self.rate_changed)),
            "pause": (counting & self.pause_valid, dict(cycle=cycle, request=self.pause)),
            "depth": (counting, dict(depth=self.depth)),
            "memory": (self.sweep, dict(word=self.word)),
        }
        for k, kind in enumerate(HASHES):
            enable, values = events[kind]
            fields = []
            for name, width in record_bits(kind, nc):
                value = values[name]
                fields.append(Cat(value, Const(0, max(0, width - len(value))))[:width])
            record = Signal(sum(len(f) for f in fields), name=f"{kind}_record")
            m.d.comb += record.eq(Cat(*fields))
            result = crc32_network(m, self.hashes[k], record, name=kind)
            with m.If(enable):
                m.d.sync += self.hashes[k].eq(result)


def _oldest(m: Module, fits: list, head: list):
    """Whether any queue ``fits``, and the one among them with the lowest ``head`` index:
    a tree of comparisons, each stage a signal."""
    nodes = [(fit, Const(q, range(len(fits))), h) for q, (fit, h) in enumerate(zip(fits, head))]
    level = 0
    while len(nodes) > 1:
        joined = []
        for k in range(0, len(nodes) - 1, 2):
            (fa, qa, ha), (fb, qb, hb) = nodes[k], nodes[k + 1]
            better = fb & (~fa | (hb < ha))
            f = Signal(name=f"oldest{level}_{k // 2}_found")
            q = Signal(range(len(fits)), name=f"oldest{level}_{k // 2}_qp")
            h = Signal(len(ha), name=f"oldest{level}_{k // 2}_head")
            m.d.comb += [f.eq(fa | fb), q.eq(Mux(better, qb, qa)), h.eq(Mux(better, hb, ha))]
            joined.append((f, q, h))
        if len(nodes) % 2:
            joined.append(nodes[-1])
        nodes, level = joined, level + 1
    return nodes[0][0], nodes[0][1]
