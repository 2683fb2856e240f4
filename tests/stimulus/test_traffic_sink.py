"""The statistics sink: bucket scheme and hash against their definitions, the model's
kernels, and the RTL against the model in Amaranth's simulator."""

import dataclasses
import random
import zlib

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module, Value
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.hdl.packet import packet_layout
from superfabric.hdl.stimulus.traffic_sink import TrafficSink
from superfabric.sim.stimulus.traffic_gen import stimulus_settings
from superfabric.sim.stimulus.traffic_sink import CRC32_TABLE, Sinks, sink_flit
from superfabric.formats.stimulus import (SINK_KEY, bucket_bounds, crc32_update, delivery_record,
                                  latency_bucket, port_bytes, port_key, record_bits)

#: A fabric above 256 endpoints (the 8x8x6 torus, one class): 2-byte source and output fields.
WIDE = ["switch.priorities=1", "fabric.topology=torus", "fabric.dims=[8, 8, 6]",
        "stimulus.hist_buckets=40", "stimulus.hist_sub_bits=2"]


def test_buckets_are_log_linear_and_cover_every_latency():
    for sub_bits in (0, 2, 4):
        size = 1 << sub_bits
        previous_hi = 0
        for index in range(2 * size + 40 * size):
            lo, hi = bucket_bounds(index, sub_bits)
            assert lo == previous_hi, (sub_bits, index)
            assert hi - lo == 1 if index < 2 * size else (hi - lo) * size <= lo
            assert latency_bucket(lo, sub_bits, 10 ** 9) == index
            assert latency_bucket(hi - 1, sub_bits, 10 ** 9) == index
            previous_hi = hi
    assert latency_bucket(1 << 30, 4, 256) == 255      # overflow into the last bucket


@pytest.mark.parametrize("endpoints, size", [(32, 12), (256, 12), (257, 14), (1024, 14)])
def test_hash_record_and_crc_follow_zlib(endpoints, size):
    assert record_bits(endpoints) == 8 * size
    rng = random.Random(1)
    crc = 0
    data = b""
    for _ in range(200):
        src, out = rng.randrange(endpoints), rng.randrange(endpoints)
        tag, cycle, ecn, prio = (rng.getrandbits(32), rng.getrandbits(40), rng.randrange(4),
                                 rng.randrange(8))
        record = delivery_record(tag, src, out, cycle, ecn, prio, endpoints=endpoints)
        field = port_bytes(endpoints)
        data += (tag.to_bytes(4, "little") + (cycle & 0xFFFFFFFF).to_bytes(4, "little")
                 + src.to_bytes(field, "little") + out.to_bytes(field, "little")
                 + bytes([ecn, prio]))
        assert record.to_bytes(size, "little") == data[-size:]
        crc = crc32_update(crc, record, record_bits(endpoints))
        assert crc == zlib.crc32(data)


@pytest.mark.parametrize("n", [4, 384])
def test_model_kernel_buckets_and_hash_equal_the_definitions(n):
    # One sink, one class: every packet's latency lands where latency_bucket says, and the
    # running hash is zlib's CRC-32 of the records (2-byte ports above 256 endpoints).
    buckets, out = 64, n - 2
    state = {name: np.zeros(shape, np.int64) for name, shape in (
        ("packets", (n, 1)), ("flits", (n, 1)), ("window_flits", n), ("latency_sum", n),
        ("latency_min", n), ("latency_max", n), ("crc", n), ("order_errors", n),
        ("ce_packets", n), ("hist", (n, buckets)), ("last_seq", (n, n)), ("seen", (n, n)))}
    rng = random.Random(2)
    data = b""
    want = np.zeros(buckets, np.int64)
    for k in range(3000):
        cycle = 10 ** 6 + k
        latency = rng.choice([rng.randrange(40), rng.randrange(5000), rng.getrandbits(24)])
        src = rng.randrange(n)
        sink_flit(out, cycle, True, 16, 3, port_bytes(n), src, k, cycle - latency, 0, 1, 2, True,
                  *state.values(), CRC32_TABLE)
        want[latency_bucket(latency, 3, buckets)] += 1
        data += delivery_record(k, src, out, cycle, 2, 0, endpoints=n).to_bytes(
            record_bits(n) // 8, "little")
    assert np.array_equal(state["hist"][out], want)
    assert state["crc"][out] == zlib.crc32(data)
    assert state["order_errors"][out] == 0


def flit_stream(cfg, port, rng, packets):
    """Packets toward sink ``port``: random sources, classes, lengths, ECN and latencies;
    per flow mostly increasing tags, sometimes a repeat or a step back; now and then a
    malformed flit (wrong first bit, a changed header field, another output; in a fabric,
    hops that change within the packet or a VC other than 0)."""
    sw = cfg.switch
    n, np_ = cfg.endpoints, sw.priorities
    fabric = cfg.fabric.is_fabric
    next_tag = {}
    for _ in range(packets):
        src, prio = rng.randrange(n), rng.randrange(np_)
        tag = next_tag.get((src, prio), rng.getrandbits(sw.tag_width))
        roll = rng.random()
        if roll < 0.03:
            tag -= 1
        elif roll < 0.05:
            tag -= rng.randrange(1, 50)
        tag %= 1 << sw.tag_width
        next_tag[(src, prio)] = (tag + rng.randint(1, 3)) % (1 << sw.tag_width)
        length = rng.randint(1, sw.max_packet_flits)
        latency = rng.choice([rng.randrange(64), rng.randrange(2000), rng.getrandbits(22)])
        fields = {"src": src, "prio": prio, "tag": tag, "length": length, "dst": port,
                  "ecn": rng.randrange(4), "latency": latency}
        if fabric:
            fields.update(hops=rng.randrange(8), vc=0)
        flits = []
        for k in range(length):
            flit = dict(fields, first=int(k == 0), last=int(k == length - 1))
            if rng.random() < 0.02:
                key = rng.choice(["first", "dst", "src", "tag", "prio", "ecn"]
                                 + (["hops", "vc"] if fabric else []))
                flit[key] ^= 1
                flit["prio"] %= np_
                flit["dst"] %= n
                flit["src"] %= n
            flits.append(flit)
        yield flits


def simulate(cfg, port, seed, *, stall, packets=400):
    st = cfg.stimulus
    layout = packet_layout(cfg)
    settings = dataclasses.replace(
        stimulus_settings(cfg, "uniform", load=0.5, cycles=1000, seed=seed, sink_stall=stall),
        run_cycles=rng_cycles(seed))
    dut = TrafficSink(layout=layout, ports=cfg.endpoints,
                      priorities=cfg.switch.priorities, counter_width=st.counter_width,
                      hist_buckets=st.hist_buckets, hist_sub_bits=st.hist_sub_bits)
    model = Sinks(cfg, settings)
    rng = random.Random(seed)
    expected_frame_errors = 0
    fields = ["first", "last", "dst", "src", "prio", "ecn", "length", "tag"]
    if cfg.fabric.is_fabric:
        fields += ["hops", "vc"]

    async def testbench(ctx):
        nonlocal expected_frame_errors
        ctx.set(dut.port, port)
        ctx.set(dut.seed, settings.seed)
        ctx.set(dut.key, port_key(SINK_KEY, port))
        ctx.set(dut.stall_threshold, settings.sink_stall)
        clearing = 0
        while not ctx.get(dut.cleared):
            await ctx.tick()
            clearing += 1
        assert clearing == max(st.hist_buckets, cfg.endpoints * cfg.switch.priorities)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.running, 1)
        payload = Value.cast(dut.i.payload)
        cycle = 0
        head = None
        for flits in flit_stream(cfg, port, rng, packets):
            gen = (cycle - flits[0]["latency"]) & 0xFFFFFFFF
            for k, flit in enumerate(flits):
                while True:
                    valid = rng.random() < 0.8
                    ctx.set(dut.i.valid, valid)
                    ctx.set(dut.timestamp, cycle & 0xFFFFFFFF)
                    ctx.set(dut.window, cycle < settings.run_cycles)
                    ctx.set(payload, layout.const({**{f: flit[f] for f in fields},
                                                   "data": gen}).as_bits())
                    ready = model.ready() >> port & 1
                    assert ctx.get(dut.i.ready) == ready, f"cycle {cycle}"
                    await ctx.tick()
                    cycle += 1
                    if valid and ready:
                        break
                if k == 0:
                    head = flit
                same = all(flit[f] == head[f] for f in ("src", "tag", "prio", "ecn", "hops")
                           if f in flit)
                expected_frame_errors += (flit["first"] != (k == 0) or (k > 0 and not same)
                                          or flit["dst"] != port or flit.get("vc", 0) != 0)
                sink_flit(port, cycle - 1, cycle - 1 < settings.run_cycles, cfg.switch.tag_width,
                          st.hist_sub_bits, model.port_bytes, flit["src"], flit["tag"], gen, flit["prio"],
                          flit["length"], flit["ecn"], flit["last"], model.packets, model.flits,
                          model.window_flits, model.latency_sum, model.latency_min,
                          model.latency_max, model.hash, model.order_errors, model.ce_packets,
                          model.histogram, model.last_seq, model.seen, CRC32_TABLE)
        ctx.set(dut.i.valid, 0)
        for p in range(cfg.switch.priorities):
            assert ctx.get(dut.packets[p]) == model.packets[port, p], f"packets[{p}]"
            assert ctx.get(dut.flits[p]) == model.flits[port, p], f"flits[{p}]"
        for name in ("window_flits", "latency_sum", "latency_min", "latency_max", "hash",
                     "order_errors", "ce_packets"):
            assert ctx.get(getattr(dut, name)) == getattr(model, name)[port], name
        assert ctx.get(dut.frame_errors) == expected_frame_errors
        for b in range(st.hist_buckets):
            ctx.set(dut.hist_addr, b)
            assert ctx.get(dut.hist_data) == model.histogram[port, b], f"bucket {b}"
        assert model.order_errors[port] > 0 and expected_frame_errors > 0
        assert np.count_nonzero(model.histogram[port]) > 20

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def rng_cycles(seed):
    """A generation window that ends inside the run, so window_flits counts only part."""
    return 500 + 97 * seed


@pytest.mark.parametrize("overrides, port, seed, stall", [
    ([], 3, 1, 0.0),
    ([], 0, 2, 0.4),
    (["switch.ports=5", "switch.priorities=3", "switch.tag_width=8", "switch.max_packet_flits=4",
      "stimulus.hist_buckets=40", "stimulus.hist_sub_bits=2", "stimulus.counter_width=32"],
     4, 3, 0.2),
    (WIDE, 300, 4, 0.2),
])
def test_sink_matches_model(overrides, port, seed, stall):
    simulate(FabricConfig.load(overrides=overrides), port, seed, stall=stall)


def test_a_reset_clears_the_statistics():
    cfg = FabricConfig.load(preset="tiny", overrides=["stimulus.hist_buckets=40",
                                                      "stimulus.hist_sub_bits=2"])
    st = cfg.stimulus
    layout = packet_layout(cfg)
    dut = TrafficSink(layout=layout, ports=4, priorities=2,
                      counter_width=st.counter_width, hist_buckets=st.hist_buckets,
                      hist_sub_bits=st.hist_sub_bits)

    async def testbench(ctx):
        ctx.set(dut.port, 1)
        for run in range(2):
            while not ctx.get(dut.cleared):
                await ctx.tick()
            for b in range(st.hist_buckets):
                ctx.set(dut.hist_addr, b)
                assert ctx.get(dut.hist_data) == 0, f"run {run}: bucket {b} not cleared"
            assert ctx.get(dut.packets[0]) == 0 and ctx.get(dut.latency_min) == 0xFFFFFFFF
            ctx.set(dut.i.valid, 1)
            for k in range(30):
                ctx.set(dut.timestamp, 100 + k)
                ctx.set(Value.cast(dut.i.payload), layout.const(
                    {"first": 1, "last": 1, "dst": 1, "src": 2, "length": 1, "tag": k,
                     "data": k}).as_bits())
                await ctx.tick()
            ctx.set(dut.i.valid, 0)
            assert ctx.get(dut.packets[0]) == 30 and ctx.get(dut.order_errors) == 0
            ctx.set(dut.hist_addr, latency_bucket(100, st.hist_sub_bits, st.hist_buckets))
            assert ctx.get(dut.hist_data) == 30
            ctx.set(domain.rst, 1)
            await ctx.tick()
            ctx.set(domain.rst, 0)

    top = Module()
    top.domains.sync = domain = ClockDomain()
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
