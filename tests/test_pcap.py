"""``superfabric pcap``: a run's packets as frames that Wireshark's own decoder reads back.

tshark (Debian's, installed by tools/install-debian-tools.sh) decodes the pcap of an RDMA
run with faults and of a congested one (CNPs and pause frames): every frame is the
protocol it should be, none malformed or with an expert error, and the opcodes, PSNs,
QPs, syndromes, pause times and timestamps tshark prints equal the run's records,
frame for frame, through the mapping of docs/spec/capture.md. The ICRC is checked by
a CRC written here from the RoCEv2 rule, itself held to a CNP captured on a NIC.
"""

import dataclasses
import json
import subprocess
import zlib
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from superfabric.formats import rdma_wire as wire
from superfabric.sim.rdma.records import RdmaRecords
from superfabric.tools.cli import main
from superfabric.tools.pcap import roce_frame

from conftest import RDMA_SMALL, require_tool

#: Four endpoints, one channel per peer, PFC, ECN in packets and DCQCN: an incast that
#: pauses, marks and sends CNPs (as tests/rdma/test_congestion.py's).
CONGESTED = ["rdma.enabled=true", "rdma.qps=8", "rdma.channels_per_peer=1",
             "rdma.memory_words=8192", "rdma.page_words=64", "rdma.pages=128",
             "pfc.enabled=true", "ecn.enabled=true", "ecn.kmin=32", "ecn.kmax=128",
             "ecn.pmax=0.5", "dcqcn.enabled=true"]

#: Wireshark 4.0's RPC-over-RDMA heuristic guesses at every SEND's payload and throws on
#: one shorter than its own header (an 8-byte SEND is "malformed RPCoRDMA"); the payload
#: here is host memory, not RPC, so the guess is switched off (docs/spec/capture.md).
TSHARK_OPTIONS = ["--disable-heuristic", "rpcrdma_infiniband"]

FIELDS = ["frame.protocols", "frame.time_epoch", "infiniband.bth.opcode", "infiniband.bth.psn",
          "infiniband.bth.destqp", "infiniband.bth.a", "infiniband.bth.reserved7",
          "infiniband.aeth.syndrome", "infiniband.reth.va", "infiniband.reth.dmalen",
          "infiniband.invariant.crc", "ip.dsfield.ecn", "macc.opcode", "macc.cbfc.enbv",
          *(f"macc.cbfc.pause_time.c{k}" for k in range(8))]


def tshark(pcap: Path, *args: str) -> str:
    exe = require_tool("tshark", "tools/install-debian-tools.sh")
    out = subprocess.run([exe, *TSHARK_OPTIONS, "-r", str(pcap), *args], capture_output=True,
                         text=True, check=True)
    return out.stdout


def decoded(pcap: Path) -> list[dict]:
    """Per frame, the :data:`FIELDS` tshark prints (empty where absent)."""
    args = ["-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]
    for f in FIELDS:
        args += ["-e", f]
    return [dict(zip(FIELDS, line.split("\t"))) for line in tshark(pcap, *args).splitlines()]


def icrc(frame: bytes) -> bytes:
    """The ICRC of an Ethernet/IPv4/UDP/BTH frame, from the RoCEv2 rule (IBA Annex A17):
    CRC-32 over 8 bytes of 0xFF, then the IP header with DSCP/ECN, TTL and checksum as
    ones, the UDP header with its checksum as ones, the BTH with its FECN/BECN byte as
    ones, and the rest up to the ICRC; sent least significant byte first."""
    ip = bytearray(frame[14:-4])
    ihl = (ip[0] & 0xF) * 4
    ip[1] = ip[8] = 0xFF
    ip[10:12] = b"\xff\xff"
    ip[ihl + 6:ihl + 8] = b"\xff\xff"
    ip[ihl + 8 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(ip)).to_bytes(4, "little")


def test_icrc_of_a_cnp_captured_on_a_nic():
    # A RoCEv2 CNP a ConnectX-4 Lx sent, as quoted in scapy's RoCE tests.
    frame = bytes.fromhex("""
        e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
        003c 718c 4000 4011 9161 0a00 1101 0a00
        1201 0000 12b7 0028 0000 8100 ffff 4000
        0118 0000 0000 0000 0000 0000 0000 0000
        0000 0000 0000 82fd 002a""")
    assert icrc(frame) == frame[-4:]


def test_a_corrupted_header_gets_a_bad_icrc():
    bth = wire.pack(wire.BTH_FIELDS, opcode=wire.ACK_OPCODE, ch=1, psn=77)
    bth |= wire.hcs(bth) << 16
    good = bytes(roce_frame([bth], src=0, dst=1, prio=1, ecn=0))
    assert icrc(good) == good[-4:]
    bad = bytes(roce_frame([bth ^ 1 << 40], src=0, dst=1, prio=1, ecn=0))
    assert icrc(bad) != bad[-4:]


def _run(tmp: Path, overrides: list[str], traffic: str, cycles: int, bad: float = 0.0):
    """A model run with ``--pcap``; returns its records, its configuration and the pcap."""
    out, pcap = tmp / "run", tmp / "run.pcap"
    args = ["run", "--preset", "tiny", "--traffic", traffic, "--load", "0.6", "--cycles",
            str(cycles), "--bad-fraction", str(bad), "-o", str(out), "--pcap", str(pcap)]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0
    cfg = json.loads((out / "results.json").read_text())["config"]
    return RdmaRecords.load(out / "model_records.npz"), cfg, out, pcap


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """Drops, and bad requests whose NAKs move the channels' epochs."""
    return _run(tmp_path_factory.mktemp("faulty"), RDMA_SMALL + ["faults.drop_rate=0.03"],
                "rdma-uniform", 1200, bad=0.2)


@pytest.fixture(scope="module")
def congested(tmp_path_factory):
    """An incast with PFC and DCQCN, and drops: CNPs, pause frames, CE marks; at a clock of
    1 GHz, which ``run --pcap`` takes from the configuration."""
    return _run(tmp_path_factory.mktemp("congested"),
                CONGESTED + ["faults.drop_rate=0.01", "fabric.clock_mhz=1000"], "rdma-incast",
                1500)


def _expected(rec: RdmaRecords) -> list[tuple]:
    """The frames the records call for, in cycle order: per cycle the delivered packets in
    record order, then the pause frames (``("pfc", cycle, row)``)."""
    starts = np.concatenate(([0], np.cumsum(rec.delivered[:, 3])))
    frames = [("rdma", int(r[0]), r, [int(w) for w in rec.delivered_words[s:s + int(r[3])]])
              for r, s in zip(rec.delivered, starts)]
    frames += [("pfc", int(r[0]), r, None) for r in rec.pfc_frames]
    return sorted(frames, key=lambda f: f[1])


def num(text: str) -> int:
    """A number as tshark prints it: hexadecimal with 0x, else decimal."""
    return int(text, 16) if text.startswith("0x") else int(text)


def _check(rec: RdmaRecords, pcap: Path, clock_mhz: int) -> dict:
    """Every frame against its record, time-stamped at ``clock_mhz``; returns how many frames
    of each kind."""
    frames = decoded(pcap)
    expected = _expected(rec)
    assert len(frames) == len(expected) > 0
    raw = _raw_frames(pcap)
    kinds = {}
    for i, (got, (kind, cycle, row, words), data) in enumerate(zip(frames, expected, raw)):
        where = f"frame {i + 1} (cycle {cycle})"
        ns = round(Decimal(cycle) * 1000 / Decimal(clock_mhz))
        assert Decimal(got["frame.time_epoch"]) * 10 ** 9 == ns, where
        if kind == "pfc":
            assert got["frame.protocols"] == "eth:ethertype:macc", where
            assert num(got["macc.opcode"]) == 0x0101, where
            assert num(got["macc.cbfc.enbv"]) == row[2], where
            times = [int(got[f"macc.cbfc.pause_time.c{k}"]) for k in range(8)]
            assert times == list(row[3:]), where
            kinds["pfc"] = kinds.get("pfc", 0) + 1
            continue
        bth = wire.unpack(wire.BTH_FIELDS, words[0])
        one_flit = bth["opcode"] in (wire.ACK_OPCODE, wire.CNP_OPCODE)
        assert got["frame.protocols"] == "eth:ethertype:ip:udp:infiniband" + \
            ("" if one_flit else ":data"), where
        assert num(got["infiniband.bth.opcode"]) == bth["opcode"], where
        assert num(got["infiniband.bth.psn"]) == bth["psn"], where
        qp = 0x800000 | bth["ch"] << 16 | bth["dqp"]
        assert num(got["infiniband.bth.destqp"]) == qp, where
        assert num(got["infiniband.bth.reserved7"]) == bth["epoch"], where
        assert int(got["ip.dsfield.ecn"]) == row[4], where
        assert icrc(data) == data[-4:], where
        # Wireshark 4.0 knows no CNP opcode: it shows a CNP's padding and ICRC as one
        # vendor-specific block, as it does a NIC's, and so no ICRC field.
        if bth["opcode"] != wire.CNP_OPCODE:
            assert num(got["infiniband.invariant.crc"]) == int.from_bytes(data[-4:], "big"), where
        if bth["opcode"] == wire.ACK_OPCODE:
            syndrome = {wire.SYN_ACK: 0x1F, wire.SYN_NAK_SEQ: 0x60, wire.SYN_NAK_ACCESS: 0x62}
            assert num(got["infiniband.aeth.syndrome"]) == syndrome[bth["syndrome"]], where
            name = "ack" if bth["syndrome"] == wire.SYN_ACK else "nak"
            kinds[name] = kinds.get(name, 0) + 1
        elif bth["opcode"] == wire.CNP_OPCODE:
            kinds["cnp"] = kinds.get("cnp", 0) + 1
        else:
            assert got["infiniband.bth.a"] == str(bth["ack_req"]), where
            if bth["opcode"] in (0x06, 0x0A):
                reth = wire.unpack(wire.RETH_FIELDS, words[1])
                assert num(got["infiniband.reth.va"]) == 8 * reth["raddr"], where
                assert int(got["infiniband.reth.dmalen"]) == 8 * reth["mlen"], where
            payload = b"".join(w.to_bytes(8, "little") for w in words[2:])
            assert data[-4 - len(payload):-4] == payload, where
            kinds["data"] = kinds.get("data", 0) + 1
    return kinds


def _raw_frames(pcap: Path) -> list[bytes]:
    from scapy.utils import rdpcap
    return [bytes(p) for p in rdpcap(str(pcap))]


def _no_errors(pcap: Path) -> None:
    """No frame malformed or carrying an expert error (ICRC checks are ours, above)."""
    bad = tshark(pcap, "-Y", "_ws.malformed || _ws.expert.severity >= error")
    assert bad == "", bad[:2000]


def test_rdma_run_with_faults_decodes_as_its_records(faulty):
    rec, cfg, _, pcap = faulty
    assert rec.counters and sum(rec.counters["naks"]) > 0     # the faults did their part
    _no_errors(pcap)
    kinds = _check(rec, pcap, 625)     # the preset's clock
    assert kinds["data"] > 100 and kinds["ack"] > 0 and kinds["nak"] > 0, kinds
    # Each frame's sender and receiver are the endpoints of its record.
    hosts = tshark(pcap, "-T", "fields", "-e", "ip.src", "-e", "ip.dst").splitlines()
    want = [f"10.0.0.{r[2] + 1}\t10.0.0.{r[1] + 1}" for _, _, r, _ in _expected(rec)]
    assert hosts == want


def test_congested_run_decodes_cnps_and_pause_frames(congested):
    rec, _, _, pcap = congested
    _no_errors(pcap)
    kinds = _check(rec, pcap, 1000)
    assert kinds.get("cnp", 0) > 0 and kinds.get("pfc", 0) > 0, kinds


def test_corrupted_headers_are_the_frames_with_a_bad_icrc(tmp_path):
    # The engines count a packet whose header check fails as corrupt; in the capture
    # those, and only those, fail the ICRC, and they still decode.
    rec, _, _, pcap = _run(tmp_path, RDMA_SMALL + ["faults.corrupt_rate=0.03"], "rdma-uniform",
                           1200)
    _no_errors(pcap)
    bad = sum(icrc(frame) != frame[-4:] for frame in _raw_frames(pcap))
    assert bad == sum(rec.counters["corrupt"]) > 0


@pytest.mark.parametrize("config_clock, option, mhz", [
    ([], ["--clock-mhz", "100"], 100),                                       # the option
    (["--set", "fabric.clock_mhz=100"], [], 100),                            # the run's clock
    (["--set", "fabric.clock_mhz=100"], ["--clock-mhz", "250"], 250),        # overridden
])
def test_switch_run_as_udp_with_its_header(tmp_path, config_clock, option, mhz):
    out, pcap = tmp_path / "run", tmp_path / "switch.pcap"
    assert main(["run", "--preset", "tiny", "--traffic", "uniform", "--load", "0.5", "--cycles",
                 "200", "--lengths", "fixed:2", *config_clock, "-o", str(out)]) == 0
    assert main(["pcap", str(out), "-o", str(pcap), *option]) == 0
    with np.load(out / "packets.npz") as z:
        delivered = np.flatnonzero(z["model_head"] >= 0)
        heads = z["model_head"][delivered]
        tags = z["tag"][delivered][np.argsort(heads, kind="stable")]
        heads = np.sort(heads)
    _no_errors(pcap)
    lines = tshark(pcap, "-T", "fields", "-e", "frame.protocols", "-e", "udp.dstport",
                   "-e", "frame.time_epoch", "-e", "data.data").splitlines()
    assert len(lines) == len(tags) > 0
    for line, tag, head in zip(lines, tags, heads):
        protocols, port, time, data = line.split("\t")
        assert (protocols, port) == ("eth:ethertype:ip:udp:data", "50000")
        assert Decimal(time) == Decimal(int(head)) / (Decimal(mhz) * 10 ** 6)
        header = bytes.fromhex(data)
        assert header[:3] == b"SF\x01" and int.from_bytes(header[12:20], "big") == tag


def _on_the_link(rec: RdmaRecords) -> RdmaRecords:
    """The records as the captured link saw them: the delivered packets that crossed it,
    each at the cycle it entered the link and with its codepoint there; no pause frame."""
    starts = np.concatenate(([0], np.cumsum(rec.delivered[:, 3])))
    kept = np.flatnonzero(rec.delivered[:, 5] >= 0)
    rows = rec.delivered[kept].copy()
    rows[:, 0], rows[:, 4] = rows[:, 5], rows[:, 6]
    words = [rec.delivered_words[starts[i]:starts[i + 1]] for i in kept]
    return dataclasses.replace(rec, delivered=rows, delivered_words=np.concatenate(words),
                               pfc_frames=np.zeros((0, 11), np.int64))


def test_a_captured_link_holds_the_packets_that_crossed_it(tmp_path):
    # An incast into endpoint 0 on a 2x2x2 torus with ECN and DCQCN, captured on router 1's
    # link toward router 0: every frame is a packet that crossed it, at the cycle its head
    # entered it.
    out, pcap = tmp_path / "run", tmp_path / "link.pcap"
    args = ["run", "--preset", "tiny", "--traffic", "rdma-incast", "--load", "0.4", "--cycles",
            "1500", "--capture-link", "1:1", "-o", str(out), "--pcap", str(pcap)]
    for o in CONGESTED + ["fabric.topology=torus", "fabric.dims=[2, 2, 2]",
                          "faults.drop_rate=0.01"]:
        args += ["--set", o]
    assert main(args) == 0
    rec = RdmaRecords.load(out / "model_records.npz")
    link = json.loads((out / "results.json").read_text())["capture_link"]
    assert (link["router"], link["port"], link["peer"]) == (1, 1, 0)
    crossed = rec.delivered[:, 5] >= 0
    assert link["packets"] == int(crossed.sum()) > 50
    assert (rec.delivered[crossed, 5] < rec.delivered[crossed, 0]).all()
    _no_errors(pcap)
    kinds = _check(_on_the_link(rec), pcap, 625)
    assert kinds.get("data", 0) > 50, kinds
    # Dimension order takes only endpoint 1's packets over it, all toward endpoint 0.
    assert set(rec.delivered[crossed, 2].tolist()) == {1}
    assert set(rec.delivered[crossed, 1].tolist()) == {0}


def test_a_collective_run_decodes_as_its_records(tmp_path):
    # The collective engines' WRITEs and SENDs on a 2x2x2 torus, as RDMA runs' are.
    out, pcap = tmp_path / "run", tmp_path / "allreduce.pcap"
    assert main(["run", "--set", "fabric.topology=torus", "--set", "fabric.dims=[2, 2, 2]",
                 "--set", "rdma.enabled=true", "--traffic",
                 "collective:op=allreduce,algo=ring,bytes=4096", "-o", str(out),
                 "--pcap", str(pcap)]) == 0
    rec = RdmaRecords.load(out / "model_records.npz")
    _no_errors(pcap)
    kinds = _check(rec, pcap, 625)
    assert kinds["data"] > 0 and kinds["ack"] > 0, kinds


def test_a_fabric_run_captured_on_a_link(tmp_path):
    # The packets of a trace run that crossed router 0's link toward router 1 of a 4x4
    # torus, at the cycles they entered it, their tags in the header.
    out, pcap = tmp_path / "run", tmp_path / "link.pcap"
    assert main(["run", "--preset", "tiny", "--set", "fabric.topology=torus", "--set",
                 "fabric.dims=[4, 4]", "--traffic", "uniform", "--load", "0.5", "--cycles",
                 "300", "--capture-link", "0:1", "-o", str(out), "--pcap", str(pcap)]) == 0
    link = json.loads((out / "results.json").read_text())["capture_link"]["link"]
    with np.load(out / "packets.npz") as z:
        crossed = np.flatnonzero(z["model_link_cycle"] >= 0)
        assert ((z["model_path"] == link).any(axis=1) == (z["model_link_cycle"] >= 0)).all()
        when = z["model_link_cycle"][crossed]
        tags = z["tag"][crossed][np.argsort(when, kind="stable")]
        when = np.sort(when)
    _no_errors(pcap)
    lines = tshark(pcap, "-T", "fields", "-e", "frame.time_epoch", "-e", "data.data").splitlines()
    assert len(lines) == len(tags) > 20
    for line, tag, cycle in zip(lines, tags, when):
        time, data = line.split("\t")
        assert Decimal(time) * 10 ** 9 == round(Decimal(int(cycle)) * 1000 / Decimal(625))
        assert int.from_bytes(bytes.fromhex(data)[12:20], "big") == tag


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    for args in (["pcap", str(tmp_path / "missing"), "-o", str(tmp_path / "x.pcap")],
                 ["pcap", str(tmp_path), "-o", str(tmp_path / "x.pcap")],
                 ["pcap", str(tmp_path), "-o", str(tmp_path)],
                 ["pcap", str(tmp_path), "-o", str(tmp_path / "x.pcap"), "--clock-mhz", "0"],
                 ["pcap", str(tmp_path), "-o", str(tmp_path / "x.pcap"), "--clock-mhz", "inf"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("superfabric: error: "), err
    assert not (tmp_path / "x.pcap").exists()
