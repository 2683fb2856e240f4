"""Golden model of the IEEE 802.1Qbb priority flow control (PFC) frame codec.

:func:`encode` builds the 64-byte frame of a pause request, :func:`decode`
reads one back, as the RTL codec (:mod:`superfabric.hdl.pfc_frame`) must.
The byte layout and its constants are :mod:`superfabric.formats.pfc_frame`'s,
shared with the RTL; the CRC here is zlib's, independent of the RTL's.
"""

import zlib
from collections.abc import Sequence

from ..config import PfcConfig
from ..formats.pfc_frame import (CLASS_ENABLE_OFFSET, ETHERTYPE, FCS_BYTES, FRAME_BYTES, HEADER,
                                 OPCODE, PFC_DA, PRIORITIES, TIME_MAX, TIMES_OFFSET)

__all__ = ["encode", "decode", "pause_cycles"]


def _check_request(class_enable: int, times: Sequence[int]) -> None:
    if not isinstance(class_enable, int) or not 0 <= class_enable <= 0xFF:
        raise ValueError(f"class_enable = {class_enable!r}: must be an integer 0..255")
    if len(times) != PRIORITIES:
        raise ValueError(f"times has {len(times)} entries: must have {PRIORITIES}, "
                         "one per priority")
    for n, time in enumerate(times):
        if not isinstance(time, int) or not 0 <= time <= TIME_MAX:
            raise ValueError(f"times[{n}] = {time!r}: must be an integer 0..{TIME_MAX} "
                             "(pause quanta)")


def encode(class_enable: int, times: Sequence[int], *, src_mac: bytes = bytes(6),
           fcs: bool = True) -> bytes:
    """The PFC frame that pauses the priorities in ``class_enable`` for ``times`` quanta.

    Parameters
    ----------
    class_enable : int
        Priority enable vector, 0..255; bit n enables ``times[n]``.
    times : sequence of int
        Eight pause times in quanta, 0..65535, priority 0 first. Zero resumes
        an enabled priority. Times of disabled priorities are sent as given
        (a receiver ignores them); send zero there.
    src_mac : bytes
        Source address, six bytes.
    fcs : bool
        Append the FCS (64 bytes); without it the frame is 60 bytes.

    Returns
    -------
    bytes
        The frame in transmission order, from the destination address on.

    Raises
    ------
    ValueError
        An argument out of range, naming it and its value.
    """
    _check_request(class_enable, times)
    if not isinstance(src_mac, (bytes, bytearray)) or len(src_mac) != 6:
        raise ValueError(f"src_mac = {src_mac!r}: must be 6 bytes")
    frame = (PFC_DA + bytes(src_mac) + ETHERTYPE.to_bytes(2, "big") + OPCODE.to_bytes(2, "big")
             + bytes([0, class_enable]) + b"".join(t.to_bytes(2, "big") for t in times))
    frame = frame.ljust(FRAME_BYTES - FCS_BYTES, b"\0")
    if fcs:
        # Ethernet sends the CRC's least significant byte first, which is
        # zlib's (reflected) CRC-32 written little-endian.
        frame += zlib.crc32(frame).to_bytes(FCS_BYTES, "little")
    return frame


def decode(frame: bytes, *, fcs: bool = True) -> tuple[int, list[int]] | None:
    """The ``(class_enable, times)`` that a PFC frame requests.

    A frame is PFC when its destination address, EtherType and opcode are
    PFC's; the source address, the reserved upper byte of the enable vector
    and the padding are ignored, as the standard asks of a receiver. Of a
    frame too short to hold them all, the header bytes it has decide.

    Parameters
    ----------
    frame : bytes
        The frame from the destination address on.
    fcs : bool
        ``frame`` ends with its FCS (64 bytes), which is checked; else it is
        the 60 bytes before it.

    Returns
    -------
    tuple of (int, list of int) or None
        The enable vector and the eight times (priority 0 first, disabled
        ones included as received), or None when the frame is not PFC.

    Raises
    ------
    ValueError
        A PFC frame of the wrong length, or with a wrong FCS.
    """
    frame = bytes(frame)
    for offset, expected in HEADER.items():
        if frame[offset:offset + len(expected)] != expected[:max(0, len(frame) - offset)]:
            return None
    size = FRAME_BYTES if fcs else FRAME_BYTES - FCS_BYTES
    if len(frame) != size:
        raise ValueError(f"PFC frame of {len(frame)} bytes: must be {size}"
                         f"{' with' if fcs else ' without'} its FCS")
    if fcs:
        body, sent = frame[:-FCS_BYTES], int.from_bytes(frame[-FCS_BYTES:], "little")
        computed = zlib.crc32(body)
        if sent != computed:
            raise ValueError(f"PFC frame FCS is {sent:#010x}: its bytes give {computed:#010x}")
    times = [int.from_bytes(frame[TIMES_OFFSET + 2 * n:TIMES_OFFSET + 2 * n + 2], "big")
             for n in range(PRIORITIES)]
    return frame[CLASS_ENABLE_OFFSET], times


def pause_cycles(quanta: int, data_width: int) -> int:
    """Clock cycles that ``quanta`` pause quanta last on a link of ``data_width`` bits per cycle.

    A quantum is 512 bit times, so this is ``ceil(quanta * 512 / data_width)``:
    rounding up keeps a paused sender quiet for at least the time asked.

    Raises
    ------
    ValueError
        ``quanta`` outside 0..65535 or ``data_width`` below 1.
    """
    if not isinstance(quanta, int) or not 0 <= quanta <= TIME_MAX:
        raise ValueError(f"quanta = {quanta!r}: must be an integer 0..{TIME_MAX}")
    if not isinstance(data_width, int) or data_width < 1:
        raise ValueError(f"data_width = {data_width!r}: must be a positive integer "
                         "(bits per cycle)")
    return PfcConfig.quanta_to_cycles(quanta, data_width)
