"""An output's egress queue: a small FIFO between the crossbar and the output port."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..config import EGRESS_DEPTH
from .checks import check_shape

__all__ = ["EgressQueue"]


class EgressQueue(wiring.Component):
    """A FIFO of ``EGRESS_DEPTH`` flits that the crossbar writes under a credit rule
    (docs/architecture.md 4.7).

    ``o.valid`` while a flit is held, ``o.payload`` the oldest (read
    asynchronously), popped by a handshake; a flit written at an edge is on
    ``o`` from the next cycle. ``credit`` is the rule the writer obeys: a
    read issued now may be written at the next edge, because the flits held
    and the one arriving on ``i`` now leave room (a flit leaving now is not
    counted, so the sink's ``o.ready`` never reaches the scheduler). A writer
    that issues reads only under ``credit`` never finds ``i.ready`` low, and
    the router never consults it. The golden model's rules are in
    ``sim/egress_queue.py``.

    Parameters
    ----------
    payload_shape : ShapeLike
        Shape of a flit, for the fabric a packet layout.

    Ports
    -----
    i : stream, the flit written at this edge (the crossbar's).
    o : stream, the oldest flit.
    credit : out, ``flits held + i.valid < EGRESS_DEPTH``.
    """

    def __init__(self, *, payload_shape):
        self._width = check_shape("payload_shape", payload_shape).width
        self._payload_shape = payload_shape
        super().__init__({
            "i": In(stream.Signature(payload_shape)),
            "o": Out(stream.Signature(payload_shape)),
            "credit": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFO(width=self._width, depth=EGRESS_DEPTH)
        m.d.comb += [
            fifo.w_en.eq(self.i.valid), fifo.w_data.eq(self.i.payload),
            self.i.ready.eq(fifo.w_rdy),
            self.o.valid.eq(fifo.r_rdy), self.o.payload.eq(fifo.r_data),
            fifo.r_en.eq(self.o.ready),
            self.credit.eq(fifo.level + self.i.valid < EGRESS_DEPTH),
        ]
        return m
