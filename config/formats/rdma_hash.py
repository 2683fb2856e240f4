"""The running hashes of a hardware-hosted RDMA run (docs/spec/rdma.md section 10.16): what
each endpoint's hardware host (``hdl/rdma/host.py``) folds into a CRC-32 and what the model
folds from its records (``sim/rdma/hashes.py``), record for record.

A run with the hosts in hardware records nothing per cycle: every endpoint keeps one CRC-32
per kind of event, :data:`HASHES`, each folding that endpoint's events of the kind in cycle
order, one record per event (one per cycle at most: an engine takes one WR, gives one
completion of each kind and sends one CNP a cycle, and its switch input sends one pause
frame). A record is its fields side by side, the first at the lowest bits, each the width
given here, padded to whole bytes, and folds as ``zlib.crc32(record_bytes_little_endian,
crc)``: the RTL's network and the model's table compute the same function
(``superfabric.formats.stimulus.crc32_update``). Every hash starts at 0.

- ``taken``: (cycle, tag) of each WR the engine took.
- ``completion``: (cycle, tag, status) of each send completion.
- ``receive``: (cycle, source, QP, length) of each receive completion.
- ``cnp``: (cycle, receive context) of each CNP the engine sent.
- ``rate``: per cycle in which rates changed, (the cycle before, :func:`rate_fold` of the
  new rates, the mask of the channels that changed): a change at an edge belongs to the
  cycle that edge ends, as the records say (section 10.9).
- ``pause``: (cycle, the pause request as ``formats.pfc_frame.pack_request`` packs it) of
  each frame the endpoint's switch input sent it.
- ``depth``: every cycle's queue depth of the endpoint's switch output (16 bits).
- ``memory``: after the run, every word of the host memory in address order.

Events count in cycles ``0 .. C - 1``, ``C`` the run's cycles (the cycle after the last
completion), rate changes in cycles ``0 .. C``: the same span as the records of the
testbench that steps every cycle (section 10.12).
"""

import zlib

from .pfc_frame import PRIORITIES, TIME_BITS

__all__ = ["HASHES", "CYCLE_BITS", "HASH_BITS", "RECORD_FIELDS", "record_bits", "rate_fold",
           "fold"]

#: The hashes of every endpoint, in the order the top's ``hashes`` port packs them.
HASHES = ("taken", "completion", "receive", "cnp", "rate", "pause", "depth", "memory")

#: Bits of the run's cycle counter and of a cycle in a record.
CYCLE_BITS = 32
#: Bits of one hash.
HASH_BITS = 32

#: Each hash's record fields and widths (the rate mask's width is the engine's channels, and
#: the pause request's is fixed by the frame format, see :func:`record_bits`).
RECORD_FIELDS = {
    "taken": (("cycle", CYCLE_BITS), ("tag", 32)),
    "completion": (("cycle", CYCLE_BITS), ("tag", 32), ("status", 8)),
    "receive": (("cycle", CYCLE_BITS), ("src", 16), ("qp", 16), ("length", 16)),
    "cnp": (("cycle", CYCLE_BITS), ("context", 16)),
    "rate": (("cycle", CYCLE_BITS), ("fold", 32), ("mask", None)),
    "pause": (("cycle", CYCLE_BITS), ("request", PRIORITIES + TIME_BITS * PRIORITIES)),
    "depth": (("depth", 16),),
    "memory": (("word", 64),),
}


def _bytes(bits: int) -> int:
    return -(-bits // 8) * 8


def record_bits(kind: str, channels: int) -> tuple[tuple[str, int], ...]:
    """The fields of a ``kind`` record and their widths for an engine of ``channels``
    channels, the last padded so that the record is whole bytes."""
    fields = [(name, channels if width is None else width) for name, width in
              RECORD_FIELDS[kind]]
    total = sum(width for _, width in fields)
    name, width = fields[-1]
    fields[-1] = (name, width + _bytes(total) - total)
    return tuple(fields)


def rate_fold(rates) -> int:
    """The 32 bits that stand for the new ``rates`` of one cycle (``(channel, rate)``
    pairs): the XOR of each rate rotated left by its channel modulo 32, so that two
    channels' rates swapped read differently."""
    out = 0
    for channel, rate in rates:
        k, r = channel % 32, rate & 0xFFFFFFFF
        out ^= ((r << k) | (r >> (32 - k))) & 0xFFFFFFFF
    return out


def fold(crc: int, kind: str, channels: int, **values) -> int:
    """``crc`` with one ``kind`` record of ``values`` folded in."""
    record, shift = 0, 0
    for name, width in record_bits(kind, channels):
        record |= (int(values[name]) & ((1 << width) - 1)) << shift
        shift += width
    return zlib.crc32(record.to_bytes(shift // 8, "little"), crc)
