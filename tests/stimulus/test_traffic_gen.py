"""The traffic generator: its register settings, its model, and the RTL against the model
in Amaranth's simulator, flit by flit."""

import random

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, Value
from amaranth.sim import Simulator

from superfabric.config import FabricConfig
from superfabric.hdl.packet import packet_layout
from superfabric.hdl.stimulus.traffic_gen import TrafficGenerator
from superfabric.hdl.stimulus import traffic_gen
from superfabric.sim.traffic import TrafficError, generate
from superfabric.sim.stimulus.traffic_gen import Generators, stimulus_settings, xorshift_u64
from superfabric.formats.stimulus import (GENERATOR_KEY, MODES, StimulusSettings, port_key, port_seed,
                                  xorshift64)


class PacketTable:
    """Stands in for the switch model: registers packets, as FabricCore.add_packet does."""

    def __init__(self):
        self.dst, self.prio, self.length, self.ecn = [], [], [], []

    def add_packet(self, dst, prio, length, ecn):
        for column, value in zip((self.dst, self.prio, self.length, self.ecn),
                                 (dst, prio, length, ecn)):
            column.append(value)
        return len(self.length) - 1


def test_port_seed_logic_is_the_formats_port_seed():
    """A generator and a sink compute their start state from the run's seed and their key,
    as the model does, including the seed equal to the key (XOR 0: the key itself)."""
    seed, key = Signal(64), Signal(64)
    m = Module()
    out = Signal(64)
    m.d.comb += out.eq(traffic_gen.port_seed(seed, key))
    cases = [(5, 5), (0, 7), (1 << 63, port_key(GENERATOR_KEY, 383)), ((1 << 64) - 1, 1)]
    rng = random.Random(4)
    cases += [(rng.getrandbits(64), port_key(GENERATOR_KEY, rng.randrange(1024)))
              for _ in range(20)]
    sim = Simulator(m)

    async def bench(ctx):
        for s, k in cases:
            ctx.set(seed, s)
            ctx.set(key, k)
            assert ctx.get(out) == port_seed(s, k), (s, k)

    sim.add_testbench(bench)
    sim.run()


def random_settings(cfg, rng, port):
    """Register values drawn over their whole ranges, every mode, sometimes a small limit;
    ``port`` mostly enabled."""
    sw = cfg.switch
    n, np_ = sw.ports, sw.priorities
    short = rng.randint(1, sw.max_packet_flits)
    return StimulusSettings(
        seed=rng.getrandbits(64), run_cycles=rng.randint(500, 1500), mode=rng.choice(MODES),
        inject=rng.choice([rng.randint(0, 1 << 24), 1 << 24]), burst_start=rng.randint(0, 1 << 22),
        burst_end=rng.randint(0, 1 << 16), hot_port=rng.randrange(n),
        hot_threshold=rng.randint(0, 1 << 16), len_short=short,
        len_long=rng.randint(short, sw.max_packet_flits), len_threshold=rng.randint(0, 1 << 16),
        ect_threshold=rng.randint(0, 1 << 16), sink_stall=0,
        enable=rng.getrandbits(n) & ~(1 << port) | (rng.random() < 0.9) << port,
        limit=rng.choice([0, 0, 0, rng.randint(1, 200)]),
        prio_thresholds=tuple(sorted(rng.randint(0, 1 << 16) for _ in range(np_ - 1))),
        fixed_dst=tuple(rng.randrange(n) for _ in range(n)))


def simulate(cfg, settings, port, *, ready_stall, seed, extra=300):
    """Run generator ``port`` against :class:`Generators` for the generation window and
    ``extra`` cycles of draining; every cycle's valid and payload must equal the model's."""
    st = cfg.stimulus
    layout = packet_layout(cfg)
    dut = TrafficGenerator(layout=layout, ports=cfg.switch.ports,
                           priorities=cfg.switch.priorities, queue_depth=st.source_queue,
                           counter_width=st.counter_width)
    table = PacketTable()
    model = Generators(cfg, settings, table)
    rng = random.Random(seed)
    sent = []

    async def testbench(ctx):
        s = dut.settings
        for name, _ in s.shape():
            if name == "prio_thresholds":
                for k, t in enumerate(settings.prio_thresholds):
                    ctx.set(s.prio_thresholds[k], t)
            elif name == "mode":
                ctx.set(s.mode, MODES.index(settings.mode))
            else:
                ctx.set(getattr(s, name), getattr(settings, name))
        ctx.set(dut.port, port)
        ctx.set(dut.fixed_dst, settings.fixed_dst[port])
        ctx.set(dut.enable, settings.enable >> port & 1)
        ctx.set(dut.seed, settings.seed)
        ctx.set(dut.key, port_key(GENERATOR_KEY, port))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        payload = Value.cast(dut.o.payload)
        for cycle in range(settings.run_cycles + extra):
            ready = int(rng.random() >= ready_stall)
            ctx.set(dut.stepping, cycle < settings.run_cycles)
            ctx.set(dut.timestamp, cycle)
            ctx.set(dut.o.ready, ready)
            model.generate(cycle)
            pkt = model.offer(port, cycle)
            valid = ctx.get(dut.o.valid)
            assert valid == (pkt >= 0), f"cycle {cycle}: valid {valid}, model packet {pkt}"
            if pkt >= 0:
                flit = model.flit[port]
                got = layout.from_bits(ctx.get(payload))
                want = {"data": int(model.gen[pkt]), "first": int(flit == 0),
                        "last": int(flit == table.length[pkt] - 1), "dst": table.dst[pkt],
                        "src": port, "prio": table.prio[pkt], "ecn": table.ecn[pkt],
                        "length": table.length[pkt], "tag": int(model.seq[pkt])}
                have = {name: int(getattr(got, name)) for name in want}
                assert have == want, f"cycle {cycle}: RTL {have}, model {want}"
                if ready:
                    sent.append((cycle, want["tag"], flit))
                    model.accept(port)
            await ctx.tick()
        for name in ("generated", "generated_flits", "refused"):
            assert ctx.get(getattr(dut, name)) == getattr(model, name)[port], name

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return model, sent


CONFIGS = {
    "default-q3": FabricConfig.load(overrides=["stimulus.source_queue=3"]),
    "5port-1class-q2": FabricConfig.load(overrides=[
        "switch.ports=5", "switch.priorities=1", "switch.max_packet_flits=8",
        "switch.tag_width=8", "switch.data_width=32", "switch.islip_iterations=2",
        "stimulus.source_queue=2"]),
}


@pytest.mark.parametrize("name, seed", [("default-q3", 1), ("default-q3", 2), ("5port-1class-q2", 3)])
def test_generator_matches_model(name, seed):
    cfg = CONFIGS[name]
    rng = random.Random(seed)
    for _ in range(4):
        port = rng.randrange(cfg.switch.ports)
        settings = random_settings(cfg, rng, port)
        model, sent = simulate(cfg, settings, port, ready_stall=rng.choice([0.0, 0.3, 0.7]),
                               seed=seed)
        if settings.enable >> port & 1 and settings.inject > 1 << 20:
            assert model.generated[port] > 0 and sent


def test_generator_refuses_when_its_queue_is_full():
    # Line rate of 4-flit packets into a queue of 3 whose output is never ready.
    cfg = CONFIGS["default-q3"]
    settings = stimulus_settings(cfg, "uniform", load=1.0, cycles=600, seed=5,
                                 packet_lengths="fixed:4")
    model, sent = simulate(cfg, settings, 2, ready_stall=0.9, seed=5)
    assert model.refused[2] > 0 and model.generated[2] > 0
    # Back to back and in order: each packet's flits 0..3 in turn, tags counting up.
    assert [f for _, _, f in sent] == [k % 4 for k in range(len(sent))]
    assert [t for _, t, _ in sent] == [k // 4 for k in range(len(sent))]


def test_model_xorshift_matches_the_definition():
    x = 0x0123456789ABCDEF
    y = np.uint64(x)
    for _ in range(1000):
        x, y = xorshift64(x), xorshift_u64(y)
        assert int(y) == x


@pytest.mark.parametrize("pattern, check", [
    ("uniform", lambda s: s.mode == "uniform" and s.enable == 0xFF),
    ("bitcomp", lambda s: s.mode == "fixed" and s.fixed_dst == (7, 6, 5, 4, 3, 2, 1, 0)),
    ("incast:sources=3,sink=2", lambda s: s.fixed_dst == (2,) * 8 and s.enable == 0b1011),
    ("all-to-all", lambda s: s.mode == "rotate"),
    ("ring-allreduce:chunk=5", lambda s: s.limit == 70 and s.prio_thresholds == (0, 0, 0)
     and s.fixed_dst == (1, 2, 3, 4, 5, 6, 7, 0)),
    ("hotspot:fraction=0.5,port=3", lambda s: (s.hot_port, s.hot_threshold) == (3, 32768)),
    ("bursty:burst=4", lambda s: s.burst_end == 16384 and s.inject == 1 << 24),
])
def test_settings_of_each_pattern(pattern, check):
    cfg = FabricConfig.load()
    settings = stimulus_settings(cfg, pattern, load=0.5, cycles=1000, seed=3)
    assert check(settings), settings
    # Class thresholds are cumulative shares of 2**16; load 0.5 of 1-flit packets.
    if not pattern.startswith("ring"):
        assert settings.prio_thresholds == (16384, 32768, 49152)
    if not pattern.startswith(("ring", "bursty")):
        assert settings.inject == 1 << 23


def test_permutation_is_a_permutation_drawn_from_the_seed():
    cfg = FabricConfig.load()
    a, b, c = (stimulus_settings(cfg, "permutation", load=0.5, cycles=100, seed=s).fixed_dst
               for s in (1, 1, 2))
    assert sorted(a) == list(range(8)) and a == b and a != c


@pytest.mark.parametrize("kwargs, field", [
    ({"load": 0.0}, "traffic.load"),
    ({"seed": 1 << 64}, "traffic.seed"),
    ({"sink_stall": 1.0}, "traffic.sink_stall"),
    ({"packet_lengths": "fixed:17"}, "traffic.packet_lengths"),
    ({"priority_weights": [1, 1]}, "traffic.priority_weights"),
])
def test_bad_settings_are_one_line(kwargs, field):
    args = {"load": 0.5, "cycles": 100, "seed": 1, **kwargs}
    with pytest.raises(TrafficError) as e:
        stimulus_settings(FabricConfig.load(), "uniform", **args)
    assert field in str(e.value) and "\n" not in str(e.value)


def test_tornado_in_hardware_is_the_trace_patterns_destination():
    cfg = FabricConfig.load(overrides=["fabric.topology=torus", "fabric.dims=[8, 3]"])
    settings = stimulus_settings(cfg, "tornado", load=0.5, cycles=100, seed=1)
    trace = generate(cfg, "tornado", load=1.0, cycles=4, seed=1)
    assert settings.mode == "fixed"
    assert all(settings.fixed_dst[s] == d for s, d in zip(trace.src.tolist(), trace.dst.tolist()))


def test_a_pattern_the_generators_do_not_make_is_one_line():
    cfg = FabricConfig.load(overrides=["fabric.topology=torus"])
    with pytest.raises(TrafficError) as info:
        stimulus_settings(cfg, "neighbour", load=0.5, cycles=100, seed=1)
    assert str(info.value).startswith("traffic.pattern = 'neighbour': the hardware generators")
