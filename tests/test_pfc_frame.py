"""Tests of the PFC frame codec: the model against the standard's layout written out
by hand, the RTL encoder and decoder against the model in Amaranth's simulator,
and the generated Verilog under Verilator's lint."""

import gc
import random
import subprocess
import zlib

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Value
from amaranth.lib import wiring
from amaranth.sim import Simulator

from superfabric.formats.packet import FlitCodec
from superfabric.formats.pfc_frame import FRAME_BYTES
from superfabric.hdl.pfc_frame import (REQUEST_LAYOUT, PFCFrameDecoder, PFCFrameEncoder, _crc32,
                                       flit_layout)
# The generator's waivers for Yosys's idioms, each with its reason.
from superfabric.hdl.verilog import _LINT_WAIVERS
from superfabric.sim.pfc_frame import decode, encode, pause_cycles
from superfabric.tb.runner import find_simulator

from conftest import require_simulator

#: Flit widths simulated: a byte stream, one with a partial last flit (64 bytes
#: in 3-byte flits), a 64-bit MAC and a whole frame per flit.
WIDTHS = [8, 24, 64, 512]

#: class_enable 0b00001001, times [0xFFFF, 0, 0, 0x0010, 0, 0, 0, 0], SA zero:
#: the 60 bytes before the FCS, field by field as IEEE 802.1Qbb lays them out.
HAND_FRAME = bytes.fromhex(
    "0180c2000001"      # DA: MAC Control multicast
    "000000000000"      # SA
    "8808"              # EtherType: MAC Control
    "0101"              # opcode: PFC
    "0009"              # priority enable vector: reserved 0x00, then e[7:0]
    "ffff" "0000" "0000" "0010" "0000" "0000" "0000" "0000"     # time[0..7]
    + "00" * 26         # padding to 60 bytes
)


def random_request(rng):
    """A random ``(class_enable, times)``, the extreme times often."""
    return rng.getrandbits(8), [rng.choice([0, 0xFFFF, rng.getrandbits(16)]) for _ in range(8)]


def with_fcs(body: bytes) -> bytes:
    """``body`` followed by its FCS, whatever its header and length."""
    return body + zlib.crc32(body).to_bytes(4, "little")


# -- the model alone -------------------------------------------------------------------


def test_encode_matches_the_standard_layout():
    frame = encode(0b00001001, [0xFFFF, 0, 0, 0x0010, 0, 0, 0, 0])
    assert len(HAND_FRAME) == 60
    assert frame[:60] == HAND_FRAME
    assert encode(0b00001001, [0xFFFF, 0, 0, 0x0010, 0, 0, 0, 0], fcs=False) == HAND_FRAME
    # The FCS is the CRC-32 of the 60 bytes, least significant byte first; a
    # frame so ended leaves Ethernet's fixed residue in the CRC.
    assert frame[60:] == zlib.crc32(HAND_FRAME).to_bytes(4, "little")
    assert zlib.crc32(frame) == 0x2144DF1C


def test_encode_puts_the_source_address_after_the_destination():
    frame = encode(1, [5] + [0] * 7, src_mac=bytes.fromhex("02005e001234"))
    assert frame[6:12] == bytes.fromhex("02005e001234")
    assert decode(frame) == (1, [5] + [0] * 7)


def test_round_trip():
    rng = random.Random(1)
    for _ in range(300):
        class_enable, times = random_request(rng)
        src_mac = rng.randbytes(6)
        frame = encode(class_enable, times, src_mac=src_mac)
        assert len(frame) == FRAME_BYTES
        assert decode(frame) == (class_enable, times)
        assert decode(frame[:60], fcs=False) == (class_enable, times)


def test_decode_ignores_the_reserved_bytes():
    body = bytearray(encode(3, [1, 2, 0, 0, 0, 0, 0, 0], fcs=False))
    body[16] = 0xA5     # reserved upper byte of the enable vector
    body[59] = 0x5A     # padding
    assert decode(with_fcs(bytes(body))) == (3, [1, 2, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("frame", [
    # 802.3x PAUSE: MAC Control, but opcode 0x0001
    with_fcs(bytes.fromhex("0180c2000001" "000000000000" "8808" "0001" "ffff") + bytes(42)),
    # PFC type and opcode to another station
    with_fcs(bytes.fromhex("0180c2000002" "000000000000" "8808" "0101") + bytes(44)),
    # an IPv4 frame
    with_fcs(bytes.fromhex("0180c2000001" "000000000000" "0800" "4500") + bytes(44)),
    # a runt whose first byte already differs
    bytes.fromhex("ff"),
], ids=["pause", "other-da", "ipv4", "runt"])
def test_decode_returns_none_for_other_frames(frame):
    assert decode(frame) is None


@pytest.mark.parametrize("frame, words", [
    (encode(1, [1] * 8)[:-1], "63 bytes"),
    (encode(1, [1] * 8) + b"\0", "65 bytes"),
    (encode(1, [1] * 8)[:10], "10 bytes"),
    (encode(1, [1] * 8)[:60] + bytes(4), "FCS"),
    (encode(1, [1] * 8)[:20] + b"\x01" + encode(1, [1] * 8)[21:], "FCS"),
], ids=["short", "long", "runt", "no-fcs", "bit-flip"])
def test_decode_rejects_a_malformed_pfc_frame(frame, words):
    with pytest.raises(ValueError, match=words) as info:
        decode(frame)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("args, field", [
    ((256, [0] * 8), "class_enable = 256"),
    ((-1, [0] * 8), "class_enable = -1"),
    ((1, [0] * 7), "times has 7"),
    ((1, [0, 0, 0, 65536, 0, 0, 0, 0]), r"times\[3\] = 65536"),
    ((1, [0, -2, 0, 0, 0, 0, 0, 0]), r"times\[1\] = -2"),
])
def test_encode_names_a_bad_argument(args, field):
    with pytest.raises(ValueError, match=field):
        encode(*args)


def test_encode_names_a_bad_source_address():
    with pytest.raises(ValueError, match="src_mac"):
        encode(0, [0] * 8, src_mac=bytes(5))


@pytest.mark.parametrize("quanta, data_width, cycles", [
    (65535, 64, 524280),
    (65535, 512, 65535),
    (1, 8, 64),
    (3, 1024, 2),       # 1.5 cycles: a pause lasts at least the time asked
    (1, 24, 22),
    (0, 64, 0),
])
def test_pause_cycles(quanta, data_width, cycles):
    assert pause_cycles(quanta, data_width) == cycles


@pytest.mark.parametrize("quanta, data_width, field", [
    (65536, 64, "quanta = 65536"), (-1, 64, "quanta = -1"), (1, 0, "data_width = 0"),
])
def test_pause_cycles_names_a_bad_argument(quanta, data_width, field):
    with pytest.raises(ValueError, match=field):
        pause_cycles(quanta, data_width)


# -- the RTL's CRC and constructors ----------------------------------------------------


def test_parallel_crc_matches_zlib():
    # With constant inputs the RTL's CRC network folds to the CRC itself.
    rng = random.Random(2)
    for size in (1, 3, 8, 60, 64):
        message = rng.randbytes(size)
        register = _crc32(0xFFFF_FFFF, int.from_bytes(message, "little"), 8 * size)
        assert register ^ 0xFFFF_FFFF == zlib.crc32(message)


# Amaranth counts a component as created before its constructor can refuse
# the arguments, and warns that the refused one was never elaborated.
_REFUSED = pytest.mark.filterwarnings("ignore:.*created but never used")


@_REFUSED
@pytest.mark.parametrize("data_width", [0, 4, 12, 63, "64"])
def test_components_name_a_bad_width(data_width):
    for component in (PFCFrameEncoder, PFCFrameDecoder):
        with pytest.raises(ValueError, match=f"data_width = {data_width!r}"):
            component(data_width)
    gc.collect()    # warn here, under the filter, not in a later test


@_REFUSED
def test_encoder_names_a_bad_source_address():
    with pytest.raises(ValueError, match="src_mac"):
        PFCFrameEncoder(64, src_mac=b"\x02")
    gc.collect()


# -- RTL against the model in Amaranth's simulator -------------------------------------


def to_flits(frame: bytes, data_width: int) -> list[tuple[int, int, int]]:
    """``(data, first, last)`` of each flit of ``frame``, byte 0 in the low lane."""
    lanes = data_width // 8
    words = [frame[k:k + lanes] for k in range(0, len(frame), lanes)]
    return [(int.from_bytes(w, "little"), int(k == 0), int(k == len(words) - 1))
            for k, w in enumerate(words)]


def request_const(class_enable, times):
    """A request payload for ``ctx.set``."""
    return REQUEST_LAYOUT.const({"class_enable": class_enable, "times": times})


def request_of(payload) -> tuple[int, list[int]]:
    """``(class_enable, times)`` of a request payload read with ``ctx.get``."""
    return payload.class_enable, [payload.times[n] for n in range(8)]


def run_encoder(dut, data_width, requests, *, seed, valid_gap, ready_stall):
    """Offer ``requests`` to a :class:`PFCFrameEncoder` and collect its flits, with stalls.

    Each cycle ``o.valid`` is read with ``o.ready`` low and high (it must not
    change), and ``i.ready`` is checked high exactly while no frame is out.
    Returns the frames as the bytes of their flits, and the flit framing seen.
    """
    rng = random.Random(seed)
    codec = FlitCodec(flit_layout(data_width))
    frames, framing = [], []

    async def testbench(ctx):
        pending, flits = list(requests), None
        cycle = 0
        while len(frames) < len(requests):
            assert cycle < 200 * len(requests) * 64, f"cycle {cycle}: {len(frames)} frames out"
            offer = bool(pending) and rng.random() >= valid_gap
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload, request_const(*pending[0]))
            ctx.set(dut.o.ready, 0)
            valid = ctx.get(dut.o.valid)
            ctx.set(dut.o.ready, 1)
            assert ctx.get(dut.o.valid) == valid, f"cycle {cycle}: o.valid follows o.ready"
            ready = rng.random() >= ready_stall
            ctx.set(dut.o.ready, ready)
            assert ctx.get(dut.i.ready) == (not valid), (
                f"cycle {cycle}: i.ready is {ctx.get(dut.i.ready)} with o.valid {valid}")
            if valid and ready:
                flit = codec.unpack(ctx.get(Value.cast(dut.o.payload)))
                if flit["first"]:
                    assert flits is None, f"cycle {cycle}: first flit inside a frame"
                    flits = []
                flits.append(flit["data"])
                framing.append((flit["first"], flit["last"]))
                if flit["last"]:
                    frames.append(b"".join(d.to_bytes(data_width // 8, "little") for d in flits))
                    flits = None
            if offer and ctx.get(dut.i.ready):
                pending.pop(0)
            cycle += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return frames, framing


@pytest.mark.parametrize("data_width", WIDTHS)
def test_encoder_matches_model(data_width):
    rng = random.Random(data_width)
    requests = [(0, [0] * 8), (0xFF, [0xFFFF] * 8)] + [random_request(rng) for _ in range(4)]
    src_mac = bytes.fromhex("02005e0000" + f"{data_width % 256:02x}")
    dut = PFCFrameEncoder(data_width, src_mac=src_mac)
    frames, framing = run_encoder(dut, data_width, requests, seed=data_width,
                                  valid_gap=0.3, ready_stall=0.4)
    flits = -(-FRAME_BYTES * 8 // data_width)
    assert len(frames) == len(requests)
    assert framing == [(int(k == 0), int(k == flits - 1)) for k in range(flits)] * len(requests)
    for frame, (class_enable, times) in zip(frames, requests):
        assert frame[:FRAME_BYTES] == encode(class_enable, times, src_mac=src_mac)
        assert frame[FRAME_BYTES:] == bytes(len(frame) - FRAME_BYTES), "unused lanes not zero"


def run_decoder(dut, data_width, frames, *, seed, valid_gap):
    """Feed ``frames`` (each a list of flits) to a :class:`PFCFrameDecoder` with gaps in valid.

    ``o.ready`` stays low: the output is a pulse and must not wait on it.
    Returns the requests delivered, in order, and the final ``errors``.
    """
    rng = random.Random(seed)
    codec = FlitCodec(flit_layout(data_width))
    delivered = []

    async def testbench(ctx):
        ctx.set(dut.o.ready, 0)
        queue = [flit for frame in frames for flit in frame]
        for _ in range(len(queue) * 10):
            if not queue:
                break
            offer = rng.random() >= valid_gap
            ctx.set(dut.i.valid, offer)
            # Idle cycles carry junk, which must not count.
            data, first, last = queue[0] if offer else (rng.getrandbits(data_width), 1, 1)
            ctx.set(Value.cast(dut.i.payload), codec.pack(data=data, first=first, last=last))
            assert ctx.get(dut.i.ready) == 1
            if offer:
                queue.pop(0)
            if ctx.get(dut.o.valid):
                delivered.append(request_of(ctx.get(dut.o.payload)))
            await ctx.tick()
        assert not queue, "the stimulus did not finish"
        ctx.set(dut.i.valid, 0)
        for _ in range(3):
            if ctx.get(dut.o.valid):
                delivered.append(request_of(ctx.get(dut.o.payload)))
            await ctx.tick()
        errors.append(ctx.get(dut.errors))

    errors = []
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return delivered, errors[0]


def decoder_stimulus(rng, data_width):
    """Frames of every kind, as flits, with the model's verdict on each.

    Returns the flit lists and, from :func:`decode`, the requests a decoder
    must deliver and the number of PFC frames it must count as errors.
    """
    frames = []
    for _ in range(3):
        frames.append(encode(*random_request(rng), src_mac=rng.randbytes(6)))
    pause = with_fcs(bytes.fromhex("0180c2000001" "000000000000" "8808" "0001" "ffff") + bytes(42))
    ipv4 = with_fcs(bytes.fromhex("0180c2000001" "000000000000" "0800") + rng.randbytes(100))
    corrupted = bytearray(encode(*random_request(rng)))
    corrupted[25] ^= 0x10
    reserved = bytearray(encode(5, [7, 0, 9, 0, 0, 0, 0, 0], fcs=False))
    reserved[16], reserved[40] = 0xFF, 0x77     # ignored on receipt
    # PFC frames a flit too long and four bytes too short, each with an FCS
    # that checks out over its own length.
    body = encode(*random_request(rng), fcs=False)
    long, short = with_fcs(body + rng.randbytes(data_width // 8)), with_fcs(body[:56])
    frames += [pause, ipv4, bytes(corrupted), encode(1, [2] * 8), with_fcs(bytes(reserved)),
               long, short]
    # A PFC frame whose FCS was never filled in.
    frames.append(encode(0x80, [0] * 7 + [0x1234], fcs=False) + bytes(4))
    frames.append(encode(0x42, [0, 100, 0, 0, 0, 0, 0, 0]))
    flits = [to_flits(frame, data_width) for frame in frames]

    expected, errors = [], 0
    for frame in frames:
        try:
            result = decode(frame)
        except ValueError:
            errors += 1
        else:
            if result is not None:
                expected.append(result)
    # A stray flit outside any frame is ignored; so is a frame cut short by
    # the next one's first flit.
    flits.insert(1, [(rng.getrandbits(data_width), 0, 1)])
    if len(flits[0]) > 1:
        flits.insert(2, to_flits(encode(0x10, [3] * 8), data_width)[:-1])
    return flits, expected, errors


@pytest.mark.parametrize("data_width", WIDTHS)
def test_decoder_matches_model(data_width):
    rng = random.Random(100 + data_width)
    flits, expected, errors = decoder_stimulus(rng, data_width)
    assert len(expected) == 6 and errors == 4, "the stimulus lost a case"
    delivered, counted = run_decoder(PFCFrameDecoder(data_width), data_width, flits,
                                     seed=data_width, valid_gap=0.3)
    assert delivered == expected
    assert counted == errors


@pytest.mark.parametrize("data_width", [8, 512])
def test_encoder_into_decoder(data_width):
    # The loopback an FPGA user builds: the encoder's frames, unchanged, decode
    # to the requests that made them.
    m = Module()
    m.submodules.encoder = encoder = PFCFrameEncoder(data_width)
    m.submodules.decoder = decoder = PFCFrameDecoder(data_width)
    wiring.connect(m, encoder.o, decoder.i)
    rng = random.Random(7)
    requests = [random_request(rng) for _ in range(3)]
    delivered = []

    async def testbench(ctx):
        pending = list(requests)
        for _ in range(100 * len(requests)):
            ctx.set(encoder.i.valid, bool(pending))
            if pending:
                ctx.set(encoder.i.payload, request_const(*pending[0]))
            accepted = bool(pending) and ctx.get(encoder.i.ready)
            if ctx.get(decoder.o.valid):
                delivered.append(request_of(ctx.get(decoder.o.payload)))
            await ctx.tick()
            if accepted:
                pending.pop(0)

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert delivered == requests


# -- generated Verilog -----------------------------------------------------------------

@pytest.mark.parametrize("data_width", WIDTHS)
@pytest.mark.parametrize("component", [PFCFrameEncoder, PFCFrameDecoder])
def test_verilog_lint_clean(component, data_width, tmp_path):
    require_simulator("verilator")
    name = f"pfc_{component.__name__.lower()}_{data_width}"
    path = tmp_path / f"{name}.v"
    path.write_text(verilog.convert(component(data_width), name=name))
    lint = subprocess.run([str(find_simulator("verilator")), "--lint-only", "-Wall",
                           *(f"-Wno-{rule}" for rule in _LINT_WAIVERS), str(path)],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr[:3000]
    assert "%Warning" not in lint.stderr, lint.stderr[:3000]
