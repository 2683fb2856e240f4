"""The host memory behind an RDMA engine's DMA ports, in the RDMA simulation top."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ..checks import check_config
from .engine import dma_signature

__all__ = ["HostMemory", "host_memory_signature"]


def host_memory_signature(cfg: FabricConfig) -> wiring.Signature:
    """The ports of :class:`HostMemory` for ``cfg``."""
    return wiring.Signature({
        "dma": In(dma_signature(cfg)),
        "load_we": In(1), "load_addr": In(range(cfg.rdma.memory_words)),
        "load_wdata": In(64), "load_rdata": Out(64),
    })


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
    """

    def __init__(self, cfg: FabricConfig):
        check_config(cfg)
        self._cfg = cfg
        super().__init__(host_memory_signature(cfg))

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
        valid, data = self.dma.rd_req.valid, dma_rd.data
        for stage in range(cfg.rdma.dma_latency):
            v = Signal(name=f"rd_valid{stage}")
            d = Signal(64, name=f"rd_data{stage}")
            m.d.sync += [v.eq(valid), d.eq(data)]
            valid, data = v, d
        m.d.comb += [self.dma.rd_rsp.valid.eq(valid), self.dma.rd_rsp.payload.eq(data)]
        with m.If(self.load_we):
            m.d.comb += [wr.en.eq(1), wr.addr.eq(self.load_addr), wr.data.eq(self.load_wdata)]
        with m.Else():
            m.d.comb += [wr.en.eq(self.dma.wr.valid), wr.addr.eq(self.dma.wr.payload.addr),
                         wr.data.eq(self.dma.wr.payload.data)]
        return m
