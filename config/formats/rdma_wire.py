"""The RDMA engine's formats: wire headers, work requests, completions, descriptors, keys.

One source for the RTL (``superfabric.hdl.rdma.header`` builds its layouts
from these field lists), the golden model, the testbench and the
connection-state arithmetic of the results. Bit layouts are in
``docs/architecture.md`` section 10.4. All fields are LSB first.
"""

from ..config import EGRESS_DEPTH, FabricConfig
from .packet import port_bits

__all__ = [
    "PSN_BITS", "PSN_MOD", "QP_BITS", "KEY_BITS", "VA_BITS", "LEN_BITS", "TAG_BITS", "CH_BITS",
    "EPOCH_BITS", "STATUS_BITS",
    "BTH_FIELDS", "RETH_FIELDS", "WR_FIELDS", "KEY_ENTRY_FIELDS", "CPL_FIELDS", "wr_fields",
    "rcpl_fields", "key_entry_fields", "page_bits", "descriptor_fields",
    "OP_SEND", "OP_WRITE", "OPCODES", "ACK_OPCODE", "CNP_OPCODE", "SYN_ACK", "SYN_NAK_SEQ", "SYN_NAK_ACCESS",
    "STATUS_OK", "STATUS_LOCAL", "STATUS_REMOTE", "STATUS_BAD", "STATUS_NAMES",
    "ACCESS_LOCAL_READ", "ACCESS_REMOTE_WRITE",
    "pack", "unpack", "hcs", "psn_le", "psn_lt", "packet_opcode", "is_last_opcode",
    "is_send_opcode", "payload_words", "free_slot_bits", "queue_depth_bits", "host_entry_fields",
    "host_rows_bits",
]

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
QP_BITS = 16
KEY_BITS = 16
VA_BITS = 24          # virtual addresses, in 64-bit words
LEN_BITS = 12         # message length in words: 1..4095
TAG_BITS = 32
CH_BITS = 3           # channels_per_peer <= 8
EPOCH_BITS = 2        # a target tells the next epoch from a stale one (section 10.6)

# Work request opcodes (the WR's 1-bit opcode field).
OP_WRITE = 0
OP_SEND = 1

#: RoCE RC opcodes by (WR opcode, first, last).
OPCODES = {
    (OP_SEND, True, False): 0x00, (OP_SEND, False, False): 0x01,
    (OP_SEND, False, True): 0x02, (OP_SEND, True, True): 0x04,
    (OP_WRITE, True, False): 0x06, (OP_WRITE, False, False): 0x07,
    (OP_WRITE, False, True): 0x08, (OP_WRITE, True, True): 0x0A,
}
ACK_OPCODE = 0x11
#: RoCEv2's congestion notification packet (a one-flit packet here, like an ACK).
CNP_OPCODE = 0x81

SYN_ACK = 0
SYN_NAK_SEQ = 1
SYN_NAK_ACCESS = 2

#: Width of a completion's status.
STATUS_BITS = 2
STATUS_OK = 0
STATUS_LOCAL = 1      # local protection: lkey, range or right
STATUS_REMOTE = 2     # remote access error, NAKed by the target
STATUS_BAD = 3        # bad request: dst is self or out of range, length 0, qp >= Q
STATUS_NAMES = {STATUS_OK: "ok", STATUS_LOCAL: "local protection error",
                STATUS_REMOTE: "remote access error", STATUS_BAD: "bad request"}

ACCESS_LOCAL_READ = 1
ACCESS_REMOTE_WRITE = 2

#: Flit 0 of every RDMA packet.
BTH_FIELDS = (("opcode", 8), ("ack_req", 1), ("ch", CH_BITS), ("epoch", EPOCH_BITS), ("syndrome", 2), ("hcs", 8),
              ("dqp", QP_BITS), ("psn", PSN_BITS))
#: Flit 1 of a data packet: the message's remote range and this packet's offset in it.
RETH_FIELDS = (("rkey", KEY_BITS), ("raddr", VA_BITS), ("mlen", LEN_BITS), ("offset", LEN_BITS))

#: A work request as offered on the engine's WR stream (``dst`` width depends on the ports).
WR_FIELDS = (("qp", QP_BITS), ("opcode", 1), ("lkey", KEY_BITS), ("laddr", VA_BITS),
             ("rkey", KEY_BITS), ("raddr", VA_BITS), ("length", LEN_BITS), ("tag", TAG_BITS))

#: A registration table entry (``page`` and ``peers`` widths depend on the configuration).
KEY_ENTRY_FIELDS = (("valid", 1), ("key", KEY_BITS), ("va", VA_BITS), ("words", VA_BITS + 1),
                    ("access", 2))

#: A send completion: the WR's QP and tag, and its status.
CPL_FIELDS = (("qp", QP_BITS), ("tag", TAG_BITS), ("status", STATUS_BITS))


def wr_fields(ports: int) -> tuple[tuple[str, int], ...]:
    """A work request on the engine's WR stream: :data:`WR_FIELDS` and the destination endpoint."""
    return WR_FIELDS + (("dst", port_bits(ports)),)


def rcpl_fields(ports: int) -> tuple[tuple[str, int], ...]:
    """A receive completion (a SEND at its target): the QP, the source endpoint, the length."""
    return (("qp", QP_BITS), ("src", port_bits(ports)), ("length", LEN_BITS))


def page_bits(pages: int) -> int:
    """Bits of a page table index (at least one)."""
    return max(1, (pages - 1).bit_length())


def key_entry_fields(cfg: FabricConfig) -> tuple[tuple[str, int], ...]:
    """A registration table entry for ``cfg``: :data:`KEY_ENTRY_FIELDS`, first page, peers."""
    return KEY_ENTRY_FIELDS + (("page", page_bits(cfg.rdma.pages)), ("peers", cfg.endpoints))


def descriptor_fields(mtu_words: int) -> tuple[tuple[str, int], ...]:
    """One window slot: everything needed to (re)build a packet and complete its WR."""
    return (("qp", QP_BITS), ("opcode", 1), ("first", 1), ("last", 1), ("lkey", KEY_BITS),
            ("va", VA_BITS), ("rkey", KEY_BITS), ("raddr", VA_BITS), ("mlen", LEN_BITS),
            ("offset", LEN_BITS), ("words", mtu_words.bit_length()), ("tag", TAG_BITS))


def pack(fields, **values: int) -> int:
    """The integer holding ``values`` in the layout ``fields`` (missing fields are zero)."""
    bits, offset = 0, 0
    for name, width in fields:
        bits |= (values.get(name, 0) & ((1 << width) - 1)) << offset
        offset += width
    return bits


def unpack(fields, bits: int) -> dict[str, int]:
    """The fields of an integer in the layout ``fields``."""
    out, offset = {}, 0
    for name, width in fields:
        out[name] = (bits >> offset) & ((1 << width) - 1)
        offset += width
    return out


_HCS_OFFSET = 16      # bits 23:16 of the BTH


def hcs(bth: int, reth: int | None = None) -> int:
    """The header check: XOR of the BTH's bytes (its HCS byte as 0) and the RETH's."""
    word = bth & ~(0xFF << _HCS_OFFSET)
    if reth is not None:
        word ^= reth
    x = 0
    for k in range(8):
        x ^= (word >> (8 * k)) & 0xFF
    return x


def psn_le(a: int, b: int) -> bool:
    """``a <= b`` in 24-bit serial arithmetic."""
    return (b - a) % PSN_MOD < PSN_MOD // 2


def psn_lt(a: int, b: int) -> bool:
    """``a < b`` in 24-bit serial arithmetic."""
    return a != b and psn_le(a, b)


def packet_opcode(opcode: int, first: bool, last: bool) -> int:
    """The BTH opcode of a data packet."""
    return OPCODES[(opcode, bool(first), bool(last))]


_LAST_OPCODES = frozenset(code for (_, _, last), code in OPCODES.items() if last)
_SEND_OPCODES = frozenset(code for (op, _, _), code in OPCODES.items() if op == OP_SEND)


def is_last_opcode(bth_opcode: int) -> bool:
    """The BTH opcode is of the last packet of a message."""
    return bth_opcode in _LAST_OPCODES


def is_send_opcode(bth_opcode: int) -> bool:
    """The BTH opcode is of a SEND packet."""
    return bth_opcode in _SEND_OPCODES


def payload_words(max_packet_flits: int) -> int:
    """Payload words per packet (the MTU): the flits left after BTH and RETH."""
    return max_packet_flits - 2


def free_slot_bits(window: int) -> int:
    """Width of a channel's free window slots, 0 .. window."""
    return (window + 1).bit_length()


def queue_depth_bits(cfg: FabricConfig) -> int:
    """Width of an endpoint output's queue depth in the RDMA fabric: every buffer of the
    switch or fabric could hold its flits (input buffers, skid buffers and read registers,
    egress queues, and in a fabric every link's VC buffers and registers)."""
    from ..network.topology import Topology
    sw, f = cfg.switch, cfg.fabric
    topo = Topology.of(cfg)
    ports = sum(topo.ports(r) for r in range(topo.routers))
    links = len(topo.links)
    pools = sw.priorities * f.vcs
    most = (topo.endpoints * (sw.buffer_flits + 3) + ports * EGRESS_DEPTH
            + links * (pools * f.vc_buffer_flits + 3 + f.link_latency))
    return most.bit_length()


def host_entry_fields(cfg: FabricConfig, depth: int) -> tuple[tuple[str, int], ...]:
    """A WR in the memory of an endpoint's hardware host of ``depth`` WRs (section 10.16):
    the WR as its engine takes it (:func:`wr_fields`, one field), the cycle it is posted,
    its channel number, whether it names none (``bad``), the window slots it needs, and the
    next WR of its QP in the memory unless it is the QP's ``last``."""
    n, rd = cfg.endpoints, cfg.rdma
    return (("wr", sum(width for _, width in wr_fields(n))), ("post", 32),
            ("channel", port_bits(n * rd.channels_per_peer)), ("bad", 1),
            ("slots", free_slot_bits(rd.window)), ("next", port_bits(depth)), ("last", 1))


def host_rows_bits(depth: int) -> int:
    """Bits of the WR count of a hardware host of ``depth`` WRs, 0 .. ``depth``."""
    return depth.bit_length()
