"""The collective engine's apply unit (section 15.8.3): it counts the receive completions its
RDMA engine gives, reads the next receive slot's notification word and, when it is there,
adds (or copies) the slot's staged chunk into the buffer, one word a cycle, slot after
slot; bit for bit and cycle for cycle the apply unit of the model's collective engine
(``superfabric.sim.collective.kernels.engine``).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from ...config import FabricConfig
from ...formats.collective import NOTIFY_FIELDS, SLOT_BITS
from .adder import LaneAdder

__all__ = ["notify_layout", "ApplyUnit"]

#: The notification word's fields (``formats.collective.NOTIFY_FIELDS``, LSB first).
notify_layout = data.StructLayout(dict(NOTIFY_FIELDS))


class _Phase(enum.Enum, shape=2):
    IDLE = 0      # may read the next slot's notification word
    NOTIFY = 1    # its read is in flight
    APPLY = 2     # the chunk's words are read, added and written


class ApplyUnit(wiring.Component):
    """One accelerator's apply unit, for ``cfg``'s host memory (``rdma.memory_words`` words
    read ``rdma.dma_latency`` cycles after the request, as
    :class:`~superfabric.hdl.rdma.host_memory.HostMemory` answers).

    With ``D`` the latency, a read of a notification word in cycle ``t`` that finds it
    valid, for a chunk covering ``w`` buffer words, reads staging words in cycles ``t + D ..
    t + D + w`` (one more than ``w``: an element realigned to the other lane takes the next
    or the previous word's), buffer word ``j`` in ``t + D + 1 + j``, writes word ``j`` in
    ``t + 2D + 1 + j`` and counts the slot applied at the end of ``t + 2D + w``.

    Attributes
    ----------
    received : In(1)
        The RDMA engine gives a receive completion in this cycle (it counts from the next).
    binary32 : In(1)
        Add as binary32 (1) or int32 (0).
    slots, notify, staging, capacity : In
        The run's receive slots and the layout
        (:class:`~superfabric.sim.collective.host_memory.Layout`): the first notification
        and staging words and the words each slot's staging holds; held for the run.
    note_addr : Out
        The read port of the notification words and the staging, its data ``note_data``
        ``D`` cycles later.
    buffer_addr : Out
        The buffer's read port, its data ``buffer_data`` ``D`` cycles later.
    write_en, write_addr, write_data : Out
        The buffer's write port.
    applied : Out(SLOT_BITS + 1)
        Slots applied.
    """

    def __init__(self, cfg: FabricConfig):
        rd = cfg.rdma
        self._latency = rd.dma_latency
        address = range(rd.memory_words)
        super().__init__({
            "received": In(1), "binary32": In(1), "slots": In(SLOT_BITS + 1),
            "notify": In(address), "staging": In(address), "capacity": In(address),
            "note_addr": Out(address), "note_data": In(64),
            "buffer_addr": Out(address), "buffer_data": In(64),
            "write_en": Out(1), "write_addr": Out(address), "write_data": Out(64),
            "applied": Out(SLOT_BITS + 1),
        })

    def elaborate(self, platform):
        m, D = Module(), self._latency
        address = self.note_addr.shape()
        m.submodules.adder = adder = LaneAdder()

        arrivals = Signal(SLOT_BITS + 1)
        m.d.sync += arrivals.eq(arrivals + self.received)
        # One more than the arrivals counted at the last read that found no notification: a
        # read waits for a completion after it.
        stale = Signal(SLOT_BITS + 2)
        read_arrivals = Signal(SLOT_BITS + 1)
        phase = Signal(_Phase)
        timer = Signal(range(D))
        # The first staging word of slot ``applied``, past ``staging``.
        slot_offset = Signal(address)
        slot_staging = self.staging + slot_offset
        m.d.comb += self.note_addr.eq(self.notify + self.applied)

        # The chunk being applied, from its notification word: its first buffer word, the
        # lane of its first element, its elements and words, whether it is added.
        note = data.View(notify_layout, self.note_data[:notify_layout.size])
        first, lo, length = Signal(address), Signal(1), Signal(len(note.length))
        words, reduce = Signal(len(note.length)), Signal(1)
        # Its elements sit in the other lane in the staging (``misaligned``), the lane before
        # (``late``: the staging is read a word behind) or after.
        misaligned, late = Signal(1), Signal(1)
        step = Signal(len(note.length) + 1)     # cycles since the first staging read
        previous = Signal(64)                   # the staging word read a cycle before
        m.d.sync += previous.eq(self.note_data)

        with m.Switch(phase):
            with m.Case(_Phase.IDLE):
                with m.If((arrivals > self.applied) & (arrivals >= stale)
                          & (self.applied < self.slots)):
                    m.d.sync += [phase.eq(_Phase.NOTIFY), read_arrivals.eq(arrivals),
                                 timer.eq(D - 1)]
            with m.Case(_Phase.NOTIFY):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    behind = note.parity < note.dst[0]
                    with m.If(~note.valid):
                        m.d.sync += [stale.eq(read_arrivals + 1), phase.eq(_Phase.IDLE)]
                    with m.Elif(note.length == 0):
                        m.d.sync += [self.applied.eq(self.applied + 1),
                                     slot_offset.eq(slot_offset + self.capacity),
                                     phase.eq(_Phase.IDLE)]
                    with m.Else():
                        m.d.comb += self.note_addr.eq(slot_staging - behind)
                        m.d.sync += [
                            first.eq(note.dst[1:]), lo.eq(note.dst[0]),
                            length.eq(note.length), reduce.eq(note.reduce),
                            words.eq((note.dst[0] + note.length + 1) >> 1),
                            misaligned.eq(note.parity != note.dst[0]), late.eq(behind),
                            step.eq(1), phase.eq(_Phase.APPLY),
                        ]
            with m.Case(_Phase.APPLY):
                m.d.sync += step.eq(step + 1)
                m.d.comb += [self.note_addr.eq(slot_staging - late + step),
                             self.buffer_addr.eq(first + step - 1)]
                with m.If(step > D):
                    m.d.comb += self.write_en.eq(1)
                with m.If(step == D + words):
                    m.d.sync += [self.applied.eq(self.applied + 1),
                                 slot_offset.eq(slot_offset + self.capacity),
                                 phase.eq(_Phase.IDLE)]

        # Word j (written D + 1 + j cycles after the first staging read): staging words j and
        # j + 1 (or j - 1 and j when late) have arrived, the later one this cycle.
        j = Signal(address)
        m.d.comb += j.eq(step - (D + 1))
        staged = Mux(misaligned, Cat(previous[32:], self.note_data[:32]), previous)
        element = j << 1                            # the word's first element, from ``first``'s
        inside = [(element + lane >= lo) & (element + lane < lo + length) for lane in (0, 1)]
        m.d.comb += [adder.here.eq(self.buffer_data), adder.staged.eq(staged),
                     adder.binary32.eq(self.binary32), self.write_addr.eq(first + j)]
        for lane, within in enumerate(inside):
            bits = slice(32 * lane, 32 * lane + 32)
            m.d.comb += self.write_data[bits].eq(
                Mux(within, Mux(reduce, adder.sum[bits], staged[bits]), self.buffer_data[bits]))
        return m
