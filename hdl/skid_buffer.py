"""A skid buffer: a two-entry stream register slice with registered ``ready``."""

from amaranth.hdl import Signal, Module, ShapeLike
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .checks import check_shape

__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Register slice that breaks the ``valid``/``payload`` and the ``ready`` paths.

    Both ``o.valid``/``o.payload`` and ``i.ready`` come straight from flip-flops,
    so a stream can cross a long route (or a combinational ``ready`` inside a
    block, as in the switch's ingress) without a timing path through it. It
    holds up to two transfers: the output register and the skid register that
    catches the transfer accepted while the output was stalled. Throughput is
    one transfer per cycle; latency is one cycle.

    Behaviour, cycle by cycle (the golden model in ``sim/skid_buffer.py``
    mirrors it): ``i.ready`` is high while the skid register is empty; the
    output register loads when it is empty or being read, from the skid
    register when that holds a transfer, else from ``i``.

    Parameters
    ----------
    payload_shape : ShapeLike
        Shape of the stream payload, for the fabric a packet layout.
    """

    def __init__(self, *, payload_shape: ShapeLike):
        check_shape("payload_shape", payload_shape)
        self._payload_shape = payload_shape
        super().__init__({
            "i": In(stream.Signature(payload_shape)),
            "o": Out(stream.Signature(payload_shape)),
        })

    def elaborate(self, platform):
        m = Module()
        # The data registers need no reset: their contents are ignored while
        # the matching valid flag is low, and leaving them out saves routing.
        skid = Signal(self._payload_shape, reset_less=True)
        skid_valid = Signal()
        out = Signal(self._payload_shape, reset_less=True)
        out_valid = Signal()

        m.d.comb += [
            self.i.ready.eq(~skid_valid),
            self.o.valid.eq(out_valid),
            self.o.payload.eq(out),
        ]
        with m.If(self.o.ready | ~out_valid):
            with m.If(skid_valid):
                m.d.sync += [out.eq(skid), out_valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [out.eq(self.i.payload), out_valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m
