"""A UART transmitter: 8 data bits, no parity, one stop bit (8N1), least significant bit first."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UartTransmitter"]


class UartTransmitter(wiring.Component):
    """Sends each byte of ``i`` as a start bit (low), its 8 bits from bit 0, and a stop bit
    (high), every bit ``clocks_per_bit`` cycles long; ``tx`` idles high.

    ``i.ready`` is high while the line is idle and in the last cycle of a stop
    bit, so bytes offered back to back leave with no gap: a byte is taken in
    the cycle both are high, and its start bit begins at the next edge. The
    bit clock is the system clock divided by ``clocks_per_bit`` (``round(f /
    baud)``, so at 20 MHz and 115,200 baud 174 cycles, 0.2 % fast: a receiver
    samples mid-bit and tolerates several per cent over a frame).

    Ports
    -----
    i : stream of bytes in.
    tx : the serial line.
    """

    def __init__(self, clocks_per_bit: int):
        if not (isinstance(clocks_per_bit, int) and clocks_per_bit >= 2):
            raise ValueError(f"clocks_per_bit = {clocks_per_bit!r}: must be an integer >= 2")
        self.clocks_per_bit = clocks_per_bit
        super().__init__({"i": In(stream.Signature(8)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        # The frame as it leaves, shifted right one bit per bit time: stop bit, data,
        # start bit in the low end; ``bits`` counts what remains of it.
        frame = Signal(10, init=0x3FF)
        bits = Signal(range(11))
        timer = Signal(range(self.clocks_per_bit))
        last = (bits == 1) & (timer == 0)
        m.d.comb += [self.i.ready.eq((bits == 0) | last), self.tx.eq(frame[0])]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [frame.eq(Cat(0, self.i.payload, 1)), bits.eq(10),
                         timer.eq(self.clocks_per_bit - 1)]
        with m.Elif((bits != 0) & (timer == 0)):
            m.d.sync += [frame.eq(Cat(frame[1:], 1)), bits.eq(bits - 1),
                         timer.eq(self.clocks_per_bit - 1)]
        with m.Elif(bits != 0):
            m.d.sync += timer.eq(timer - 1)
        return m
