"""A run's traffic as a pcap file that Wireshark and tshark decode (``superfabric pcap``).

Every packet a run delivered becomes an Ethernet frame, time-stamped from the
cycle its head reached the endpoint and the clock: an RDMA run's packets as
RoCEv2 (IPv4, UDP port 4791, BTH, RETH or AETH as the opcode needs, payload,
ICRC), its CNPs as RoCEv2 CNPs, the switch's pause frames as 802.1Qbb frames,
and a switch or fabric run's packets as UDP datagrams to :data:`SWITCH_PORT`
carrying a :class:`SwitchPacket` header. The frames are built with scapy's
layers (its RoCE layers compute the ICRC); the mapping of the engine's fields
onto RoCEv2's is docs/spec/capture.md.
"""

from __future__ import annotations

import ipaddress
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import (ByteField, IntField, LongField, ShortField, SignedLongField,
                           XShortField)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.data import DLT_EN10MB
from scapy.utils import PcapWriter

from ..config import FabricConfig
from ..formats import rdma_wire as wire
from ..sim.pfc_frame import encode as pfc_frame

__all__ = ["PcapError", "ROCE_PORT", "SWITCH_PORT", "QP_BASE", "RETH",
           "SwitchPacket", "endpoint_mac", "endpoint_ip", "switch_mac", "dest_qp", "roce_frame",
           "write_pcap"]

#: RoCEv2's UDP destination port (IANA).
ROCE_PORT = 4791
#: The UDP destination port of a switch or fabric run's packets: in the dynamic range, which
#: IANA never assigns, and no Wireshark dissector claims it.
SWITCH_PORT = 50000
#: The UDP source port of RoCEv2 frames is this plus the channel (``ch`` of the BTH).
ROCE_SOURCE_PORT = 0xC000

#: AETH syndromes of the engine's acknowledgement syndromes: an ACK without a credit count
#: (0x1F, "invalid credit count"), a NAK for a PSN sequence error (0x60), for a remote
#: access error (0x62); the unused syndrome 3, which only a corrupted header carries,
#: as a remote operational error (0x63).
AETH_SYNDROMES = {wire.SYN_ACK: 0x1F, wire.SYN_NAK_SEQ: 0x60, wire.SYN_NAK_ACCESS: 0x62, 3: 0x63}
#: The opcodes whose packets carry a RETH on the wire (RDMA WRITE first and only).
_RETH_OPCODES = frozenset({wire.OPCODES[(wire.OP_WRITE, True, False)],
                           wire.OPCODES[(wire.OP_WRITE, True, True)]})
_WORD_BYTES = 8


class PcapError(Exception):
    """A run directory the command cannot read; printed as one line, exit status 2."""


class RETH(Packet):
    """The RDMA extended transport header (IBA 9.3.3), which scapy's RoCE layers lack."""

    name = "RETH"
    fields_desc = [LongField("va", 0), IntField("rkey", 0), IntField("dmalen", 0)]


class SwitchPacket(Packet):
    """The header a switch or fabric run's packet travels under, to :data:`SWITCH_PORT`.

    ``magic`` 0x5346 ("SF"), ``version`` 1; then the packet's record:
    ``tag``, ``src`` and ``dst`` endpoints, the class ``prio``, ``flits``, ``ecn``
    (the codepoint it left with), ``hops`` (router-to-router links), and the
    cycles ``gen`` (generated), ``head`` and ``tail`` (its first and last flit
    at the egress; -1 for a tail that never left). Its data words are not recorded,
    so not carried.
    """

    name = "superfabric packet"
    fields_desc = [XShortField("magic", 0x5346), ByteField("version", 1), ByteField("prio", 0),
                   ByteField("ecn", 0), ByteField("hops", 0), ShortField("flits", 0),
                   ShortField("src", 0), ShortField("dst", 0), LongField("tag", 0),
                   SignedLongField("gen", 0), SignedLongField("head", 0),
                   SignedLongField("tail", 0)]


def endpoint_mac(endpoint: int) -> str:
    """The MAC address of an endpoint: locally administered, 02:53:46 ("SF") then 0, the number."""
    return _mac(0, endpoint)


def switch_mac(port: int) -> str:
    """The MAC address of a switch port (the source of its pause frames)."""
    return _mac(1, port)


def _mac(kind: int, number: int) -> str:
    return ":".join(f"{b:02x}" for b in (0x02, 0x53, 0x46, kind, number >> 8, number & 0xFF))


def endpoint_ip(endpoint: int) -> str:
    """The IPv4 address of an endpoint: 10.0.0.1 for endpoint 0, counting up."""
    return str(ipaddress.IPv4Address("10.0.0.1") + endpoint)


#: Bit 23 of every destination QP: InfiniBand reserves QPs 0 and 1 (subnet management and
#: general services), and Wireshark decodes what they carry as management datagrams.
QP_BASE = 0x800000


def dest_qp(bth: dict) -> int:
    """RoCEv2's 24-bit destination QP of an engine BTH: bit 23 set (:data:`QP_BASE`), the
    channel in bits 18:16, the BTH's QP (the WR's for data, 0 for ACKs, NAKs and CNPs)
    in bits 15:0."""
    return QP_BASE | bth["ch"] << 16 | bth["dqp"]


def _ipv4(src: int, dst: int, prio: int, ecn: int) -> IP:
    """The IPv4 header between two endpoints: DSCP CS<prio> (the traffic class), the ECN
    codepoint the packet arrived with, don't fragment."""
    return IP(src=endpoint_ip(src), dst=endpoint_ip(dst), tos=(prio << 5) | ecn, ttl=64,
              flags="DF", id=0)


def _frame(*layers: Packet) -> bytes:
    """The frame of scapy ``layers``, outermost first, built once (linked in place:
    scapy's ``/`` copies both sides at every step)."""
    for lower, upper in zip(layers, layers[1:]):
        lower.add_payload(upper)
    return bytes(layers[0])


def roce_frame(words, *, src: int, dst: int, prio: int, ecn: int) -> bytes:
    """The RoCEv2 frame of one engine packet, ``words`` its flits (BTH, RETH, payload).

    A packet whose header check fails (a header the fault injector corrupted) gets
    the bitwise complement of its ICRC, so that a receiver, and Wireshark, sees
    the corruption as the link's check would have caught it.
    """
    words = [int(w) for w in words]
    bth = wire.unpack(wire.BTH_FIELDS, words[0])
    reth = words[1] if len(words) > 1 else None
    opcode = bth["opcode"]
    layers = [Ether(src=endpoint_mac(src), dst=endpoint_mac(dst)), _ipv4(src, dst, prio, ecn),
              UDP(sport=ROCE_SOURCE_PORT + bth["ch"], dport=ROCE_PORT, chksum=0),
              BTH(opcode=opcode, pkey=0xFFFF, becn=int(opcode == wire.CNP_OPCODE),
                  dqpn=dest_qp(bth), ackreq=bth["ack_req"], resv7=bth["epoch"], psn=bth["psn"])]
    if opcode == wire.ACK_OPCODE:
        layers.append(AETH(syndrome=AETH_SYNDROMES[bth["syndrome"]], msn=0))
    elif opcode == wire.CNP_OPCODE:
        layers.append(CNPPadding())
    elif opcode in _RETH_OPCODES and reth is not None:
        r = wire.unpack(wire.RETH_FIELDS, reth)
        layers.append(RETH(va=(r["raddr"] + r["offset"]) * _WORD_BYTES, rkey=r["rkey"],
                           dmalen=r["mlen"] * _WORD_BYTES))
    payload = b"".join(w.to_bytes(_WORD_BYTES, "little") for w in words[2:])
    if payload:
        layers.append(Raw(payload))
    frame = _frame(*layers)
    if wire.hcs(words[0], reth) != bth["hcs"]:
        frame = frame[:-4] + bytes(b ^ 0xFF for b in frame[-4:])
    return frame


def _rdma_frames(run: Path, cfg: FabricConfig, link: bool) -> list:
    """``(cycle, frame bytes)`` of every packet an RDMA run's model delivered, with its
    pause frames; with ``link``, of those that crossed the run's captured link, at the
    cycle and with the codepoint they crossed it with (pause frames cross no router
    link)."""
    from ..sim.rdma.fabric import packet_class
    from ..sim.rdma.records import RdmaRecords
    path = run / "model_records.npz"
    with np.load(path) as z:
        if "delivered" not in z.files:
            raise PcapError(f"{path}: no delivered packets recorded (written before superfabric "
                            f"recorded them): run it again")
    rec = RdmaRecords.load(path)
    starts = np.concatenate(([0], np.cumsum(rec.delivered[:, 3])))
    out = []
    for i, (cycle, endpoint, src, flits, ecn, link_cycle, link_ecn) in enumerate(
            rec.delivered.tolist()):
        if link:
            if link_cycle < 0:
                continue
            cycle, ecn = link_cycle, link_ecn
        words = rec.delivered_words[starts[i]:starts[i] + flits]
        prio, _ = packet_class(cfg, flits)
        out.append((cycle, roce_frame(words, src=src, dst=endpoint, prio=prio, ecn=ecn)))
    if not link:
        out.extend(_pause_frames(rec.pfc_frames))
    return out


def _pause_frames(rows) -> list:
    """``(cycle, frame bytes)`` of the switch's pause frames, rows (cycle, port, enable, times):
    the switch's own frame (:func:`superfabric.sim.pfc_frame.encode`) without its FCS."""
    out = []
    for cycle, port, enable, *times in np.asarray(rows).tolist():
        mac = bytes.fromhex(switch_mac(port).replace(":", ""))
        out.append((cycle, pfc_frame(enable, times, src_mac=mac, fcs=False)))
    return out


def _switch_frames(run: Path, link: bool) -> list:
    """``(cycle, frame bytes)`` of every packet a switch or fabric run's model delivered,
    with its pause frames; with ``link``, of those that crossed the run's captured
    link, at the cycle and with the codepoint they crossed it with."""
    names = ("tag", "gen", "src", "prio", "length", "model_out", "model_head", "model_tail",
             "model_ecn_out", "model_hops")
    if link:
        names += ("model_link_cycle", "model_link_ecn")
    with np.load(run / "packets.npz") as z:
        cols = {k: z[k] for k in names}
    out = []
    when = cols["model_link_cycle"] if link else cols["model_head"]
    for i in np.flatnonzero(when >= 0):
        c = {k: int(v[i]) for k, v in cols.items()}
        if link:
            c["model_ecn_out"] = c["model_link_ecn"]
        frame = _frame(Ether(src=endpoint_mac(c["src"]), dst=endpoint_mac(c["model_out"])),
                       _ipv4(c["src"], c["model_out"], c["prio"], c["model_ecn_out"]),
                       UDP(sport=SWITCH_PORT, dport=SWITCH_PORT),
                       SwitchPacket(prio=c["prio"], ecn=c["model_ecn_out"], hops=c["model_hops"],
                                    flits=c["length"], src=c["src"], dst=c["model_out"],
                                    tag=c["tag"], gen=c["gen"], head=c["model_head"],
                                    tail=c["model_tail"]))
        out.append((int(when[i]), frame))
    if not link:
        with np.load(run / "pfc_frames.npz") as z:
            out.extend(_pause_frames(z["model"].reshape(-1, 11)))
    return out


def _results(run: Path) -> dict:
    """The run's ``results.json``, refusing anything that is not a run directory."""
    if not run.is_dir():
        raise PcapError(f"RUN_DIR = {str(run)!r}: no such directory")
    path = run / "results.json"
    if not path.is_file():
        sweep = (run / "points").is_dir()
        hint = " (a sweep: give one of its points/ directories)" if sweep else ""
        raise PcapError(f"RUN_DIR = {str(run)!r}: not a run directory, no results.json{hint}")
    return json.loads(path.read_text())


def write_pcap(run_dir: str | Path, out: str | Path, *, clock_mhz: float | None = None) -> int:
    """Write the pcap of a run directory; returns the number of frames.

    Frames are in cycle order (a delivered packet at the cycle its head reached
    the endpoint, a pause frame at the cycle the switch sent it); within a
    cycle, the delivered packets in the order of the records, then the pause
    frames. Cycle ``c`` is at ``c / clock_mhz`` microseconds after the epoch,
    written with nanosecond timestamps; ``clock_mhz`` None is the run's
    ``fabric.clock_mhz``. The frames are the model's records (an RTL run's
    scoreboard held the RTL to them). A run that captured a link (``run
    --capture-link``) gives the packets that crossed it instead, each at the cycle
    its head entered the link, with the ECN codepoint it had there.
    """
    if clock_mhz is not None and not 0 < clock_mhz < math.inf:
        raise PcapError(f"--clock-mhz = {clock_mhz:g}: must be a positive finite number")
    run = Path(run_dir)
    results = _results(run)
    if "stimulus" in results:
        raise PcapError(f"RUN_DIR = {str(run)!r}: a hardware-stimulus run records no packets "
                        f"(run it with --stimulus trace)")
    cfg = FabricConfig.from_dict(results["config"])
    if clock_mhz is None:
        clock_mhz = cfg.fabric.clock_mhz
    link = "capture_link" in results
    if "rdma" in results or "collective" in results:
        frames = _rdma_frames(run, cfg, link)
    elif (run / "packets.npz").is_file():
        frames = _switch_frames(run, link)
    else:
        raise PcapError(f"RUN_DIR = {str(run)!r}: no packets.npz or model_records.npz")
    frames.sort(key=lambda f: f[0])
    ns_per_cycle = Fraction(1000) / Fraction(repr(float(clock_mhz)))
    with PcapWriter(str(out), linktype=DLT_EN10MB, nano=True, sync=False) as writer:
        writer.write_header(None)
        for cycle, frame in frames:
            ns = round(cycle * ns_per_cycle)
            writer.write_packet(frame, sec=ns // 10 ** 9, usec=ns % 10 ** 9)
    return len(frames)
