"""The IEEE 802.1Qbb priority flow control (PFC) frame and the pause request it carries.

A PFC frame is an IEEE 802.3 MAC Control frame (Annex 31D) of the minimum
frame size, 64 bytes, laid out as::

    bytes  0..5    destination address, PFC_DA (01-80-C2-00-00-01)
    bytes  6..11   source address
    bytes 12..13   EtherType 0x8808 (MAC Control), big-endian
    bytes 14..15   opcode 0x0101 (PFC), big-endian
    bytes 16..17   priority enable vector: 0x00, then bit n enables priority n
    bytes 18..33   time[0] .. time[7], 16 bits each, big-endian, in pause quanta
    bytes 34..59   zero padding up to the 60-byte minimum before the FCS
    bytes 60..63   FCS: CRC-32 of bytes 0..59, least significant byte first

Inside the switch a frame's content travels as a *pause request*: the enable
vector in bits 0..7, then ``time[n]`` in bits ``8 + 16 n``. The RTL codec
(``superfabric.hdl.pfc_frame``), the golden model (``superfabric.sim.pfc_frame``)
and the testbench take both layouts from here.
"""

__all__ = ["PFC_DA", "ETHERTYPE", "OPCODE", "QUANTUM_BITS", "PRIORITIES", "TIME_BITS", "TIME_MAX",
           "FRAME_BYTES", "FCS_BYTES", "HEADER", "SA_OFFSET", "CLASS_ENABLE_OFFSET", "TIMES_OFFSET",
           "pack_request", "unpack_request"]

#: Destination address of every PFC frame: the MAC Control reserved multicast group.
PFC_DA = bytes.fromhex("0180C2000001")
#: EtherType of MAC Control frames.
ETHERTYPE = 0x8808
#: MAC Control opcode of PFC (PAUSE, 802.3x, is 0x0001).
OPCODE = 0x0101
#: Bit times in one pause quantum.
QUANTUM_BITS = 512
#: Priorities a PFC frame addresses.
PRIORITIES = 8
#: Width of one pause time, in quanta.
TIME_BITS = 16
#: The longest pause time.
TIME_MAX = (1 << TIME_BITS) - 1
#: Bytes of a PFC frame with its FCS (the Ethernet minimum frame size).
FRAME_BYTES = 64
#: Bytes of the FCS at the end of the frame.
FCS_BYTES = 4
#: Byte offset of the source address.
SA_OFFSET = 6
#: Byte offset of the 8 used bits of the priority enable vector.
CLASS_ENABLE_OFFSET = 17
#: Byte offset of time[0]; time[n] is at ``TIMES_OFFSET + 2 * n``.
TIMES_OFFSET = 18

#: DA, EtherType and opcode at their byte offsets: what marks a frame as PFC.
HEADER = {0: PFC_DA, 12: ETHERTYPE.to_bytes(2, "big"), 14: OPCODE.to_bytes(2, "big")}


def pack_request(class_enable: int, times) -> int:
    """The pause request ``(class_enable, times)`` as an integer (enable vector LSB first)."""
    bits = class_enable & 0xFF
    for n, time in enumerate(times):
        bits |= (time & TIME_MAX) << (PRIORITIES + TIME_BITS * n)
    return bits


def unpack_request(bits: int) -> tuple[int, list[int]]:
    """The ``(class_enable, times)`` of a pause request integer."""
    return bits & 0xFF, [(bits >> (PRIORITIES + TIME_BITS * n)) & TIME_MAX
                         for n in range(PRIORITIES)]
