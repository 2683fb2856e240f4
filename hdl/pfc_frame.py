"""IEEE 802.1Qbb priority flow control (PFC) frames to and from a MAC's byte stream.

:class:`PFCFrameEncoder` turns a pause request (enable vector and eight
pause times) into the 64-byte PFC frame, FCS included, for a MAC's transmit
stream; :class:`PFCFrameDecoder` picks PFC frames out of a MAC's receive
stream and delivers their requests. Both carry frames as flits of
:func:`flit_layout`: byte k of a frame is byte lane ``k % (data_width // 8)``
of flit ``k // (data_width // 8)``, least significant lane first, as in
AXI-Stream. The frame layout and its constants are
:mod:`superfabric.formats.pfc_frame`'s, which the golden model shares.
"""

from functools import cache

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..formats.pfc_frame import (CLASS_ENABLE_OFFSET, FCS_BYTES, FRAME_BYTES, HEADER, PRIORITIES,
                                 SA_OFFSET, TIME_BITS, TIMES_OFFSET)

__all__ = ["REQUEST_LAYOUT", "flit_layout", "PFCFrameEncoder", "PFCFrameDecoder"]

#: A PFC request: ``class_enable`` bit n enables ``times[n]``, in pause quanta; the
#: bit layout of :func:`superfabric.formats.pfc_frame.pack_request`.
REQUEST_LAYOUT = data.StructLayout({
    "class_enable": PRIORITIES,
    "times": data.ArrayLayout(TIME_BITS, PRIORITIES),
})

#: Ethernet's CRC-32 polynomial 0x04C11DB7, bit-reversed: the bits of each
#: byte go on the wire, and into the CRC, least significant first.
_CRC32_POLY = 0xEDB88320
#: CRC register after a frame followed by its own correct FCS, whatever the frame.
_CRC32_RESIDUE = 0xDEBB20E3
#: Bytes before the FCS: the ones it covers.
_BODY_BYTES = FRAME_BYTES - FCS_BYTES


def flit_layout(data_width: int) -> data.StructLayout:
    """The flit payload of a MAC stream of ``data_width`` bits; ``first``/``last`` delimit frames."""
    return data.StructLayout({"data": data_width, "first": 1, "last": 1})


def _check_data_width(data_width) -> None:
    if not isinstance(data_width, int) or data_width < 8 or data_width % 8:
        raise ValueError(f"data_width = {data_width!r}: must be a multiple of 8, at least 8")


@cache
def _crc32_matrix(data_bits: int) -> tuple[int, ...]:
    """The CRC-32 register after ``data_bits`` bits as a linear map of what it depends on.

    Entry j is the mask of the inputs that register bit j is the XOR of:
    mask bits 0..31 are the register before, bits 32.. the data bits in the
    order they are sent. Found by running the bit-serial LFSR on symbols.
    """
    register = [1 << j for j in range(32)]
    for i in range(data_bits):
        feedback = register[0] ^ (1 << (32 + i))
        register = register[1:] + [0]
        for j in range(32):
            if _CRC32_POLY >> j & 1:
                register[j] ^= feedback
    return tuple(register)


def _crc32(register, data, data_bits: int):
    """The CRC-32 register after the ``data_bits`` bits of ``data``, least significant first.

    ``register`` (32 bits) and ``data`` are each a :class:`Value` or an
    integer. Each register bit is the XOR of a fixed set of input bits; the
    integer inputs' share is folded here, so the logic XORs only the
    variable ones. The result is an integer when both inputs are.
    """
    bits, variable = [], False
    for mask in _crc32_matrix(data_bits):
        constant, terms = 0, []
        for value, taps in ((register, mask & 0xFFFF_FFFF), (data, mask >> 32)):
            if isinstance(value, int):
                constant ^= (value & taps).bit_count() & 1
            elif taps:
                terms.append((value & taps).xor())
        if terms:
            parity = Cat(*terms).xor()
            bits.append(~parity if constant else parity)
            variable = True
        else:
            bits.append(constant)
    if not variable:
        return sum(bit << j for j, bit in enumerate(bits))
    return Cat(*(C(bit, 1) if isinstance(bit, int) else bit for bit in bits))


def _body(src_mac: bytes, request) -> list:
    """Bytes 0..59 of the PFC frame for ``request`` (a :data:`REQUEST_LAYOUT` view).

    Constant bytes are integers, so that the encoder can fold them.
    """
    body = [0] * _BODY_BYTES
    for offset, field in HEADER.items():
        body[offset:offset + len(field)] = field
    body[SA_OFFSET:SA_OFFSET + len(src_mac)] = src_mac
    body[CLASS_ENABLE_OFFSET] = request.class_enable
    for n in range(PRIORITIES):
        # Pause times are big-endian on the wire.
        body[TIMES_OFFSET + 2 * n] = request.times[n][8:16]
        body[TIMES_OFFSET + 2 * n + 1] = request.times[n][0:8]
    return body


class PFCFrameEncoder(wiring.Component):
    """Send a PFC frame for each request, as flits for a MAC's transmit stream.

    A request accepted on ``i`` becomes the 64-byte frame (source address
    ``src_mac``, FCS computed in logic) in ``ceil(512 / data_width)`` flits on
    ``o``, the first marked ``first`` and the last ``last``. When the frame
    does not fill the last flit, the lanes past byte 63 are zero (a MAC with
    byte enables enables only the lanes of the frame).

    One frame at a time: ``i.ready`` is high while idle and drops from the
    cycle after a request is accepted until the cycle after the last flit
    is sent. The FCS is computed when the request is accepted and registered
    with it, so ``o.payload`` comes from flip-flops through a flit
    multiplexer only. ``o.valid`` is a register and never waits on ``o.ready``.

    Parameters
    ----------
    data_width : int
        Bits per flit, a multiple of 8, at least 8.
    src_mac : bytes
        Source address of the frames, six bytes.

    Raises
    ------
    ValueError
        ``data_width`` or ``src_mac`` out of range.
    """

    def __init__(self, data_width: int, *, src_mac: bytes = bytes(6)):
        _check_data_width(data_width)
        if not isinstance(src_mac, (bytes, bytearray)) or len(src_mac) != 6:
            raise ValueError(f"src_mac = {src_mac!r}: must be 6 bytes")
        self._data_width = data_width
        self._src_mac = bytes(src_mac)
        self._flits = -(-FRAME_BYTES * 8 // data_width)
        super().__init__({
            "i": In(stream.Signature(REQUEST_LAYOUT)),
            "o": Out(stream.Signature(flit_layout(data_width))),
        })

    def elaborate(self, platform):
        m = Module()
        flits, width = self._flits, self._data_width
        # Read only while busy, which a reset clears, so they need no reset.
        request = Signal(REQUEST_LAYOUT, reset_less=True)
        fcs = Signal(32, reset_less=True)
        busy = Signal()

        # Ethernet sends the complement of the CRC register, least significant
        # byte first: as a little-endian word it is the register's complement.
        # The CRC is linear, so the share of the constant bytes is found here
        # and the logic only adds that of the request's 17 bytes.
        body = _body(self._src_mac, self.i.payload)
        constant = sum(byte << 8 * k for k, byte in enumerate(body) if isinstance(byte, int))
        request_bytes = Cat(*(C(0, 8) if isinstance(byte, int) else byte for byte in body))
        accepted_fcs = ~(_crc32(0xFFFF_FFFF, constant, len(request_bytes))
                         ^ _crc32(0, request_bytes, len(request_bytes)))
        frame = Cat(*(C(byte, 8) if isinstance(byte, int) else byte
                      for byte in _body(self._src_mac, request)), fcs)
        if flits * width > len(frame):
            frame = Cat(frame, C(0, flits * width - len(frame)))

        m.d.comb += [self.i.ready.eq(~busy), self.o.valid.eq(busy)]
        with m.If(self.i.valid & ~busy):
            m.d.sync += [request.eq(self.i.payload), fcs.eq(accepted_fcs), busy.eq(1)]

        if flits == 1:
            m.d.comb += [self.o.p.data.eq(frame), self.o.p.first.eq(1), self.o.p.last.eq(1)]
            with m.If(busy & self.o.ready):
                m.d.sync += busy.eq(0)
        else:
            index = Signal(range(flits))
            m.d.comb += [
                self.o.p.data.eq(frame.word_select(index, width)),
                self.o.p.first.eq(index == 0),
                self.o.p.last.eq(index == flits - 1),
            ]
            with m.If(busy & self.o.ready):
                with m.If(self.o.p.last):
                    m.d.sync += [index.eq(0), busy.eq(0)]
                with m.Else():
                    m.d.sync += index.eq(index + 1)
        return m


class PFCFrameDecoder(wiring.Component):
    """Deliver the request of each valid PFC frame in a MAC's receive stream.

    A frame is a run of flits from one with ``first`` to one with ``last``.
    It is a PFC frame when its destination address, EtherType and opcode are
    PFC's; the source address, the reserved upper byte of the enable vector
    and the padding are not checked. A PFC frame of exactly 64 bytes
    (``ceil(512 / data_width)`` flits; lanes past byte 63 are ignored) whose
    CRC-32 checks out raises ``o.valid`` for one cycle, the cycle after its
    last flit, with its enable vector and times (those of disabled priorities
    included, as received). ``errors`` counts the other PFC frames: wrong FCS
    or wrong length. Other frames are consumed and ignored, and so are flits
    outside a frame; a ``first`` inside a frame abandons the frame so far.

    ``i.ready`` is always high: a MAC's receive path cannot wait. For the
    same reason ``o`` is a pulse and ``o.ready`` is ignored: connect ``o`` to
    a consumer that is always ready, such as a pause timer per priority.

    Parameters
    ----------
    data_width : int
        Bits per flit, a multiple of 8, at least 8.

    Raises
    ------
    ValueError
        ``data_width`` out of range.
    """

    def __init__(self, data_width: int):
        _check_data_width(data_width)
        self._data_width = data_width
        self._flits = -(-FRAME_BYTES * 8 // data_width)
        super().__init__({
            "i": In(stream.Signature(flit_layout(data_width))),
            "o": Out(stream.Signature(REQUEST_LAYOUT)),
            "errors": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        flits, lanes = self._flits, self._data_width // 8
        flit = self.i.payload
        lane = [flit.data[8 * k:8 * k + 8] for k in range(lanes)]
        header = {offset + k: byte
                  for offset, field in HEADER.items() for k, byte in enumerate(field)}

        # The flit's number in the frame; `flits` once the frame is too long.
        index = Signal(range(flits + 1))
        in_frame = Signal()
        header_ok = Signal()
        # Only read while o.valid is high, which a reset clears.
        request = Signal(REQUEST_LAYOUT, reset_less=True)
        delivered = Signal()
        errors = Signal(16)

        position = Mux(flit.first, 0, index)
        header_next = Signal()
        # The first flit starts the CRC afresh; a frame of one flit needs no
        # CRC register. Only the bytes of a 64-byte frame are checked, so the
        # last flit's CRC stops at byte 63.
        if flits > 1:
            # Only read within a frame, whose first flit writes it.
            crc = Signal(32, reset_less=True)
            crc_in = Mux(flit.first, 0xFFFF_FFFF, crc)
        else:
            crc_in = 0xFFFF_FFFF
        tail_lanes = FRAME_BYTES - (flits - 1) * lanes
        crc_ok = _crc32(crc_in, flit.data[:8 * tail_lanes], 8 * tail_lanes) == _CRC32_RESIDUE

        m.d.comb += [
            self.i.ready.eq(1),
            self.o.valid.eq(delivered),
            self.o.payload.eq(request),
            self.errors.eq(errors),
        ]
        m.d.sync += delivered.eq(0)

        with m.If(self.i.valid & (flit.first | in_frame)):
            with m.Switch(position):
                for k in range(flits):
                    in_flit = {b: lane[b - k * lanes]
                               for b in range(k * lanes, min((k + 1) * lanes, FRAME_BYTES))}
                    with m.Case(k):
                        expected = [(byte, header[b]) for b, byte in in_flit.items() if b in header]
                        match = C(1, 1)
                        if expected:
                            match = (Cat([value for value, _ in expected])
                                     == Cat([C(byte, 8) for _, byte in expected]))
                        m.d.comb += header_next.eq(match if k == 0 else header_ok & match)
                        for b, byte in in_flit.items():
                            if b == CLASS_ENABLE_OFFSET:
                                m.d.sync += request.class_enable.eq(byte)
                            elif TIMES_OFFSET <= b < TIMES_OFFSET + 2 * PRIORITIES:
                                n, low = divmod(b - TIMES_OFFSET, 2)
                                bits = slice(0, 8) if low else slice(8, 16)
                                m.d.sync += request.times[n][bits].eq(byte)
                with m.Default():
                    # Too long to be PFC: the header verdict stands, to count it.
                    m.d.comb += header_next.eq(header_ok)

            m.d.sync += [header_ok.eq(header_next), in_frame.eq(~flit.last)]
            if flits > 1:
                m.d.sync += crc.eq(_crc32(crc_in, flit.data, self._data_width))
            with m.If(position != flits):
                m.d.sync += index.eq(position + 1)
            with m.If(flit.last & header_next):
                with m.If((position == flits - 1) & crc_ok):
                    m.d.sync += delivered.eq(1)
                with m.Elif(~errors.all()):
                    # Saturates: a status counter that wraps would read as few errors.
                    m.d.sync += errors.eq(errors + 1)
        return m
