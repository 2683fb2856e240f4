"""The stimulus top: the switch, or the fabric, with a traffic generator on every endpoint
input and a statistics sink on every endpoint output.

A run needs no testbench per cycle: after reset the host writes the run's
settings (pattern, load, lengths, class weights, seed, run length) through
the configuration port ``csr_*`` (addresses in
``superfabric.formats.stimulus.RegisterMap``), writes ``control`` to start, waits
for ``done`` and reads the statistics back through the same port. So one
simulator build, or one FPGA bitstream, serves every point of a sweep. The
model is ``sim/stimulus/top.py``; ``docs/architecture.md`` section 12.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats.stimulus import (CSR_DATA_BITS, ENABLE_BITS, GENERATOR_KEY, PAGE_WORDS, SINK_KEY,
                                 TIMESTAMP_BITS, RegisterMap, check_stimulus, port_key)
from ..fabric.top import Fabric
from ..packet import packet_layout
from ..ports import SharedModule, add_instance, behind_registered_reset, stream_wires
from ..switch import Switch
from .traffic_gen import TrafficGenerator, generator_signature
from .traffic_sink import TrafficSink, sink_signature
from ..checks import check_config

__all__ = ["Stimulus"]

_GENERATOR_STATS = ("generated", "generated_flits", "refused")
#: The configuration port's read side selects a page of 2**_PAGE_BITS words, then the
#: ``readout_words`` of it that it returns.
_PAGE_BITS = PAGE_WORDS.bit_length() - 1
_SINK_STATS = ("window_flits", "latency_sum", "latency_min", "latency_max", "hash",
               "order_errors", "frame_errors", "ce_packets")


def _total(values, width: int):
    """The sum of ``values`` modulo ``2**width`` as a balanced adder tree: Python's ``sum``
    would nest a fabric's thousands of counters one addition deep each, past what Amaranth
    can recurse through. Every partial sum is cut to ``width`` bits, which changes nothing
    modulo ``2**width`` and keeps each adder as narrow as its result."""
    values = [value[:width] for value in values]
    while len(values) > 1:
        values = [(values[k] + values[k + 1])[:width] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]


def _select(values, index):
    """``values[index]``, or 0 past the end of ``values`` (where an ``Array`` would give its
    last value)."""
    if not values:
        return Const(0)
    if len(values) == 1 << len(index):
        return Array(values)[index] if len(index) else values[0]
    return Mux(index < len(values), Array(values)[index], 0)


def _words(values):
    """``values`` side by side, each zero-extended to a configuration port word."""
    return Cat(*(Cat(value, Const(0, CSR_DATA_BITS - len(value)))
                 for value in map(Value.cast, values)))


class Stimulus(wiring.Component):
    """Generators, switch or fabric, and sinks for ``cfg`` (``[stimulus]`` sizes them), read
    back ``readout_words`` words per cycle.

    With ``fabric.topology`` a torus or a fat tree the core is the fabric top
    (:class:`~.fabric.Fabric`, its routers instances of their tiers' modules),
    with a generator and a sink at every endpoint. The generators are
    instances of one module, ``traffic_gen``, and the sinks of another,
    ``traffic_sink`` (sink 0 of ``traffic_sink_fault`` when a fault is planted):
    :attr:`modules` lists every module the top's file holds once.

    Parameters
    ----------
    cfg : FabricConfig
    readout_words : int
        Words ``csr_rdata`` returns per cycle: a power of two from 1 to
        :data:`~superfabric.formats.stimulus.PAGE_WORDS`. A host that reads a word at a
        time (the board's UART) takes 1; a simulator's, which pays a clock cycle of the
        whole fabric per read, the most.

    Ports
    -----
    clk, rst : the clock; a synchronous reset, registered on the way in.
    csr_addr, csr_we, csr_wdata : registered on the way in; a write in a
        cycle with ``csr_we`` takes effect at the next edge but one. Writing
        bit 0 of ``control`` arms the run: it begins (cycle 0) in the first
        cycle after that in which the sinks have cleared their memories
        after reset. One run per reset: the switch's buffers start from
        their initial contents.
    csr_rdata : ``readout_words`` words: the aligned block of them that holds the
        address presented two cycles before, word ``j`` at bits ``[64 j, 64 j + 64)``,
        0 for an unused address; ``control`` reads as bit 0 done, bit 1 running, bit 2
        armed.
    done : the run is over: past its generation window, and every packet
        generated was delivered or dropped. ``cycle`` then stays put.
    running, cycle : started; the cycle of the run.
    generated, delivered, dropped : packets so far, over all endpoints and
        ports (the progress a host or testbench watches).
    """

    def __init__(self, cfg: FabricConfig, *, readout_words: int = 1):
        if (not isinstance(readout_words, int) or not 1 <= readout_words <= PAGE_WORDS
                or readout_words & (readout_words - 1)):
            raise ValueError(f"readout_words must be a power of two from 1 to {PAGE_WORDS}, "
                             f"not {readout_words!r}")
        check_config(cfg)
        check_stimulus(cfg)
        self._cfg = cfg
        self._readout_words = readout_words
        self._map = RegisterMap(cfg)
        self._core = Fabric(cfg) if cfg.fabric.is_fabric else Switch(cfg)
        layout, n, np_, st = packet_layout(cfg), cfg.endpoints, cfg.switch.priorities, cfg.stimulus
        gen = dict(layout=layout, ports=n, priorities=np_, counter_width=st.counter_width)
        sink = dict(layout=layout, ports=n, priorities=np_, counter_width=st.counter_width,
                    hist_buckets=st.hist_buckets, hist_sub_bits=st.hist_sub_bits)
        #: The modules the top instances, each written once, by module name: the core's
        #: routers (none for the switch), the generator and the sink.
        self.modules = {
            **getattr(self._core, "modules", {}),
            "traffic_gen": SharedModule(
                generator_signature(**gen),
                lambda: TrafficGenerator(**gen, queue_depth=st.source_queue)),
            "traffic_sink": SharedModule(sink_signature(**sink), lambda: TrafficSink(**sink)),
        }
        if st.fault_packet:
            self.modules["traffic_sink_fault"] = SharedModule(
                sink_signature(**sink), lambda: TrafficSink(**sink, fault_packet=st.fault_packet))
        width = cfg.stimulus.counter_width
        super().__init__({
            "csr_addr": In(self._map.address_bits),
            "csr_we": In(1),
            "csr_wdata": In(CSR_DATA_BITS),
            "csr_rdata": Out(CSR_DATA_BITS * readout_words),
            "done": Out(1),
            "running": Out(1),
            "cycle": Out(width),
            "generated": Out(width),
            "delivered": Out(width),
            "dropped": Out(32),
        })

    def elaborate(self, platform):
        # The reset is registered on the way in, like the configuration port.
        return behind_registered_reset(self._fabric(), "fabric")

    def _fabric(self):
        """Everything but the reset register, in the ``sync`` domain."""
        m = Module()
        cfg, regmap = self._cfg, self._map
        sw, st = cfg.switch, cfg.stimulus
        n, np_ = cfg.endpoints, sw.priorities

        # The configuration port is registered on the way in, like the reset,
        # and without reset: a write in the first cycle after reset, while
        # the registered reset still holds the rest, must not be lost.
        addr = Signal.like(self.csr_addr, reset_less=True)
        we = Signal(reset_less=True)
        wdata = Signal.like(self.csr_wdata, reset_less=True)
        m.d.sync += [addr.eq(self.csr_addr), we.eq(self.csr_we), wdata.eq(self.csr_wdata)]

        # Settings registers.
        regs = {name: [Signal(width, name=f"{name}{k}" if words > 1 else name)
                       for k in range(words)]
                for name, width, words in regmap.settings}
        with m.If(we):
            with m.Switch(addr):
                for name, _, words in regmap.settings:
                    for k in range(words):
                        with m.Case(regmap.address(name, k)):
                            m.d.sync += regs[name][k].eq(wdata)
        # A start arms the run; it begins once the sinks have cleared their
        # memories after reset (at most a few hundred cycles).
        armed = Signal()
        with m.If(we & (addr == regmap.CONTROL) & wdata[0]):
            m.d.sync += armed.eq(1)
        cleared = Signal()
        start = Signal()
        m.d.comb += start.eq(armed & cleared & ~self.running)
        with m.If(start):
            m.d.sync += [self.running.eq(1), self.cycle.eq(0)]
        with m.Elif(self.running & ~self.done):
            m.d.sync += self.cycle.eq(self.cycle + 1)
        (run_cycles,), (seed,) = regs["run_cycles"], regs["seed"]
        window = Signal()
        m.d.comb += window.eq(self.running & (self.cycle < run_cycles))
        timestamp = self.cycle[:TIMESTAMP_BITS]

        core = self._core
        m.submodules["fabric" if cfg.fabric.is_fabric else "switch"] = core
        m.d.comb += core.pause.eq(0)
        # The generators' and sinks' ports are bound to the wires they drive or read (the
        # core's streams, the shared settings and run state) rather than assigned to
        # copies of them: in a fabric of hundreds of endpoints the copies would be a large
        # part of what the Verilog generator has to build.
        settings = Signal(self.modules["traffic_gen"].signature.members["settings"].shape)
        for name, _ in settings.shape():
            if name == "prio_thresholds":
                for j, threshold in enumerate(regs[name]):
                    m.d.comb += settings.prio_thresholds[j].eq(threshold)
            else:
                m.d.comb += getattr(settings, name).eq(regs[name][0])
        hist_addr = addr[(regmap.sink_stride - 1).bit_length():]
        gens, sinks = [], []
        for k in range(n):
            gen = add_instance(m, self.modules, "traffic_gen", f"gen{k}", {
                **stream_wires("o", core.i[k]), "settings": settings, "seed": seed,
                "start": start, "stepping": window, "timestamp": timestamp,
                "fixed_dst": regs["fixed_dst"][k]})
            m.d.comb += [
                gen.port.eq(k), gen.key.eq(port_key(GENERATOR_KEY, k)),
                gen.enable.eq(regs["enable"][k // ENABLE_BITS][k % ENABLE_BITS]),
            ]
            gens.append(gen)

            faulty = k == 0 and "traffic_sink_fault" in self.modules
            sink = add_instance(
                m, self.modules, "traffic_sink_fault" if faulty else "traffic_sink", f"sink{k}", {
                    **stream_wires("i", core.o[k]), "seed": seed, "start": start,
                    "running": self.running, "timestamp": timestamp, "window": window,
                    "stall_threshold": regs["sink_stall"][0]})
            m.d.comb += [sink.port.eq(k), sink.key.eq(port_key(SINK_KEY, k)),
                         sink.hist_addr.eq(hist_addr)]
            sinks.append(sink)
        m.d.comb += cleared.eq(Cat(s.cleared for s in sinks).all())

        # Progress, and the end of the run: the generation window is over and
        # every packet generated was delivered or dropped (modulo 2**32 is
        # enough: fewer than 2**32 packets are ever in flight).
        width = st.counter_width
        m.d.comb += [
            self.generated.eq(_total((g.generated for g in gens), width)),
            self.delivered.eq(_total((p for s in sinks for p in s.packets), width)),
            self.dropped.eq(_total(core.drops, 32)),
        ]
        in_flight = (self.generated - self.delivered - self.dropped)[:32]
        m.d.comb += self.done.eq(self.running & ~window & (in_flight == 0))

        self._readout(m, addr, armed, regs, gens, sinks)
        return m

    def _readout(self, m, addr, armed, regs, gens, sinks):
        """``csr_rdata``: the block of words that holds the address presented two cycles
        before (``addr`` is one behind)."""
        regmap, np_ = self._map, self._cfg.switch.priorities
        words = {"cycle": [self.cycle]}
        for name in _GENERATOR_STATS:
            words[name] = [getattr(g, name) for g in gens]
        for name in ("packets", "flits"):
            words[name] = [getattr(s, name)[p] for s in sinks for p in range(np_)]
        for name in _SINK_STATS:
            words[name] = [getattr(s, name) for s in sinks]
        # The core's counters: per (global) port, per link, per router.
        for name in ("rx_packets", "tx_packets", "drops", "ecn_marks", "link_flits",
                     "router_peak"):
            if hasattr(self._core, name):
                words[name] = list(getattr(self._core, name))
        register = {regmap.CONTROL: Cat(self.done, self.running, armed)}
        for name, _, count in regmap.settings:
            for k in range(count):
                register[regmap.address(name, k)] = regs[name][k]
        for name, _, count in regmap.stats:
            assert len(words[name]) == count, name
            for k, value in enumerate(words[name]):
                register[regmap.address(name, k)] = value
        # Two levels of selection, the page by the high address bits and the block of
        # readout_words in it by the low ones, rather than one case per block: a
        # multiplexer of n cases is a priority chain whose size (and Amaranth's check of
        # it) grows as n**2, and a fabric of hundreds of endpoints has tens of thousands
        # of words. A page never reaches into the histograms' region (hist_base, a power
        # of two, is a multiple of a page).
        size = self._readout_words
        block_bits = size.bit_length() - 1
        pages = {}
        for address, value in register.items():
            blocks = pages.setdefault(address >> _PAGE_BITS, {})
            blocks.setdefault(address % PAGE_WORDS >> block_bits, {})[address % size] = value
        block = addr[block_bits:_PAGE_BITS]
        with m.Switch(addr[_PAGE_BITS:]):
            for page, blocks in sorted(pages.items()):
                with m.Case(page):
                    used = [_words(blocks.get(k, {}).get(j, 0) for j in range(size))
                            for k in range(max(blocks) + 1)]
                    m.d.sync += self.csr_rdata.eq(_select(used, block))
            with m.Default():
                m.d.sync += self.csr_rdata.eq(self._histograms(addr, sinks))

    def _histograms(self, addr, sinks):
        """The block of histogram words at ``addr``, 0 outside the histograms' region. Every
        sink's memory reads the bucket addressed (``hist_addr``); word ``j`` of the block
        is the bucket of the sink ``j`` modulo ``readout_words`` the address picks."""
        regmap, size = self._map, self._readout_words
        block_bits = size.bit_length() - 1
        sink_bits = (regmap.sink_stride - 1).bit_length()
        region_bit = regmap.hist_base.bit_length() - 1
        valid = addr[region_bit]
        if regmap.hist_buckets < 1 << (region_bit - sink_bits):
            valid &= addr[sink_bits:region_bit] < regmap.hist_buckets
        group = addr[block_bits:sink_bits]
        block = _words(_select([s.hist_data for s in sinks[j::size]], group)
                       for j in range(size))
        return Mux(valid, block, 0)
