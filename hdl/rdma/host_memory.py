"""The host memory behind an RDMA engine's DMA ports, in the RDMA simulation top."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ..checks import check_config
from .engine import dma_signature

__all__ = ["HostMemory", "host_memory_signature"]


def host_memory_signature(cfg: FabricConfig, *, apply: bool = False) -> wiring.Signature:
    """The ports of :class:`HostMemory` for ``cfg``, with the apply unit's (``apply``)."""
    address = range(cfg.rdma.memory_words)
    ports = {
        "dma": In(dma_signature(cfg)),
        "load_we": In(1), "load_addr": In(address),
        "load_wdata": In(64), "load_rdata": Out(64),
    }
    if apply:
        ports |= {"note_addr": In(address), "note_data": Out(64),
                  "buffer_addr": In(address), "buffer_data": Out(64),
                  "write_en": In(1), "write_addr": In(address), "write_data": In(64)}
    return wiring.Signature(ports)


class HostMemory(wiring.Component):
    """``rdma.memory_words`` words of 64 bits standing in for a host's memory: the engine's
    DMA reads are answered ``rdma.dma_latency`` cycles after the request, in request
    order, with the word as it was in the cycle of the request; its DMA writes land at
    once. The testbench loads and reads it back through ``load_*``, and its write wins
    over the engine's in the same cycle (it writes only before and after a run).

    A module of its own so that the top, which holds one per endpoint, converts it
    once: a memory of a quarter of a million words takes tens of seconds to convert.

    Ports
    -----
    dma : the engine's DMA ports (:func:`~.engine.dma_signature`), flipped.
    load_we, load_addr, load_wdata : the testbench's write; load_rdata: the word at
        ``load_addr``, in the same cycle.
    note_addr, note_data, buffer_addr, buffer_data, write_en, write_addr, write_data
        With ``apply``: a collective engine's apply unit (:class:`~..collective.apply.
        ApplyUnit`), whose two reads are answered as the DMA reads are and whose write
        lands at once, beside the engine's (the collective's layout keeps them apart:
        the RDMA engine writes only the staging slots and notifications, the apply unit
        only the buffer).
    """

    def __init__(self, cfg: FabricConfig, *, apply: bool = False):
        check_config(cfg)
        self._cfg, self._apply = cfg, apply
        super().__init__(host_memory_signature(cfg, apply=apply))

    def elaborate(self, platform):
        cfg, m = self._cfg, Module()
        m.submodules.mem = memory = Memory(shape=64, depth=cfg.rdma.memory_words, init=[])
        dma_rd = memory.read_port(domain="comb")
        load_rd = memory.read_port(domain="comb")
        wr = memory.write_port()
        m.d.comb += [
            dma_rd.addr.eq(self.dma.rd_req.payload), self.dma.rd_req.ready.eq(1),
            load_rd.addr.eq(self.load_addr), self.load_rdata.eq(load_rd.data),
        ]
        valid, data = _delayed(m, "rd", cfg.rdma.dma_latency, self.dma.rd_req.valid, dma_rd.data)
        m.d.comb += [self.dma.rd_rsp.valid.eq(valid), self.dma.rd_rsp.payload.eq(data)]
        with m.If(self.load_we):
            m.d.comb += [wr.en.eq(1), wr.addr.eq(self.load_addr), wr.data.eq(self.load_wdata)]
        with m.Else():
            m.d.comb += [wr.en.eq(self.dma.wr.valid), wr.addr.eq(self.dma.wr.payload.addr),
                         wr.data.eq(self.dma.wr.payload.data)]
        if self._apply:
            for name in ("note", "buffer"):
                port = memory.read_port(domain="comb")
                m.d.comb += port.addr.eq(getattr(self, f"{name}_addr"))
                _, data = _delayed(m, name, cfg.rdma.dma_latency, 1, port.data)
                m.d.comb += getattr(self, f"{name}_data").eq(data)
            apply_wr = memory.write_port()
            m.d.comb += [apply_wr.en.eq(self.write_en), apply_wr.addr.eq(self.write_addr),
                         apply_wr.data.eq(self.write_data)]
        return m


def _delayed(m: Module, name: str, latency: int, valid, data):
    """``valid`` and ``data`` ``latency`` cycles later, through registers named ``name``."""
    for stage in range(latency):
        v = Signal(name=f"{name}_valid{stage}")
        d = Signal(64, name=f"{name}_data{stage}")
        m.d.sync += [v.eq(valid), d.eq(data)]
        valid, data = v, d
    return valid, data
