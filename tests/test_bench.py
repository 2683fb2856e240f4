"""The fabric-scale benchmark's plumbing, without timing anything: BookSim2's output parser
on a canned output, the command line of ``make bench``, and the rows of a synthesis table."""

import json

import pytest

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.network.routing import torus_dor_hop
from superfabric.network.topology import Topology
from superfabric.sim.rdma.metrics import connection_state
from superfabric.sim.rdma.traffic import pattern_roles
from superfabric.tools import bench
from superfabric.tools.booksim import (BookSimSpeed, BookSimStats, parse_speed, parse_stats,
                                      run_stats)

#: The end of a BookSim2 run of ``torus444_dor2`` (abridged): its statistics, the line giving
#: the cycles it simulated, and its total run time in seconds.
BOOKSIM_OUTPUT = """\
BEGIN Configuration File: torus444_dor2
topology = torus;
END Configuration File: torus444_dor2
Class 0:
Packet latency average = 11.6139
	minimum = 1
	maximum = 57
Overall average accepted rate = 0.299843 (1 samples)
Time taken is 14000 cycles
====== Overall Traffic Statistics ======
====== Traffic class 0 ======
Packet latency average = 11.6139 (1 samples)
Accepted flit rate average = 0.299843 (1 samples)
Total run time 2.51482
"""


def test_booksim_output_gives_cycles_and_run_time():
    speed = parse_speed(BOOKSIM_OUTPUT)
    assert speed == BookSimSpeed(cycles=14_000, seconds=2.51482)
    assert speed.cycles_per_second == pytest.approx(14_000 / 2.51482)


def test_booksim_cycles_of_several_simulations_add_up():
    text = BOOKSIM_OUTPUT.replace("Time taken is 14000 cycles",
                                  "Time taken is 14000 cycles\nTime taken is 6000 cycles")
    assert parse_speed(text).cycles == 20_000


@pytest.mark.parametrize("cut, message", [
    ("Time taken is 14000 cycles\n", "Time taken"),
    ("Total run time 2.51482\n", "Total run time"),
])
def test_booksim_output_cut_short_is_refused(cut, message):
    with pytest.raises(ValueError, match=message):
        parse_speed(BOOKSIM_OUTPUT.replace(cut, ""))


def test_booksim_zero_run_time_is_refused():
    with pytest.raises(ValueError, match="must be positive"):
        parse_speed(BOOKSIM_OUTPUT.replace("Total run time 2.51482", "Total run time 0"))


def test_booksim_overall_statistics_give_the_runs_latency_and_accepted_rate():
    # A sample's latency, printed before the overall statistics, is not the run's.
    text = BOOKSIM_OUTPUT.replace("Packet latency average = 11.6139\n",
                                  "Packet latency average = 99\n", 1)
    assert parse_stats(text) == BookSimStats(latency=11.6139, accepted=0.299843)


def _fake_booksim(path, output):
    """An executable at ``path`` that prints ``output`` whatever it is given, as BookSim2."""
    path.write_text("#!/bin/sh\ncat <<'END'\n" + output + "END\n")
    path.chmod(0o755)
    return path


def test_booksim_unstable_load_has_no_statistics_and_says_so(tmp_path):
    unstable = (BOOKSIM_OUTPUT.partition("====== Overall")[0]
                + "Simulation unstable, ending ...\nTotal run time 1.2\n")
    with pytest.raises(ValueError, match="no overall 'Packet latency average'"):
        parse_stats(unstable)
    assert run_stats(_fake_booksim(tmp_path / "unstable", unstable), tmp_path / "c", 1.0) is None
    # Cut short without saying why: a failure, not a load past saturation.
    cut = _fake_booksim(tmp_path / "cut", BOOKSIM_OUTPUT.partition("====== Overall")[0])
    with pytest.raises(RuntimeError, match="BookSim2 on c failed"):
        run_stats(cut, tmp_path / "c", 0.5)
    assert run_stats(_fake_booksim(tmp_path / "ok", BOOKSIM_OUTPUT), tmp_path / "c", 0.3) == \
        BookSimStats(11.6139, 0.299843)


def test_scheduling_rows_measure_queueing_from_zero_load_against_the_bound(monkeypatch,
                                                                           tmp_path):
    latency = {0.01: 4.0, 0.5: 4.5, 0.8: 7.5, 0.9: 13.0, 0.95: 26.0, 1.0: 400.0}
    monkeypatch.setattr(bench, "run_point", lambda cfg, *, load, **_: {
        "throughput": min(load, 0.98), "latency": {"mean": latency[load]}})
    monkeypatch.setattr(bench, "_booksim", lambda peers: (tmp_path / "booksim", tmp_path,
                                                          "BookSim2 from here."))
    monkeypatch.setattr(bench.booksim, "run_stats", lambda exe, config, load: None
                        if load == 1.0 else BookSimStats(latency[load] + 1, load))
    text = bench.scheduling_table().markdown("make bench TABLES=scheduling")
    rows = {r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")]
                              for line in text.splitlines() if line.startswith("| ")
                              and not line.startswith("| offered"))}
    assert list(rows) == ["0.01", "0.5", "0.8", "0.9", "0.95", "1"]
    # W = (7/8) 0.8 / (2 x 0.2) = 1.75; both queue 3.5 cycles past their zero-load latency.
    assert rows["0.8"] == ["0.8", "1.75", "0.800", "7.50", "3.50", "2.00",
                           "0.800", "8.50", "3.50", "2.00"]
    assert rows["0.01"][4:6] == ["-", "-"] and rows["0.01"][8:] == ["-", "-"]
    assert rows["1"] == ["1", "-", "0.980", "400.00", "396.00", "-", "unstable", "-", "-", "-"]
    assert "BookSim2 from here." in text


def test_bench_runs_every_table_by_default_with_the_scale_defaults():
    args = bench.parse_args([])
    assert args.tables == list(bench.TABLES) and "scale" in bench.TABLES
    assert args.scale_dims is None
    assert (args.scale_cycles, args.runs, args.peers) == (bench.SCALE_CYCLES, 3, None)


def test_bench_scale_table_options(tmp_path):
    (tmp_path / "booksim2").mkdir()
    args = bench.parse_args(["scale", "--scale-dims", "4x4x4", "8x8x8", "--scale-cycles",
                             "2000", "--runs", "1", "--peers", str(tmp_path)])
    assert args.tables == ["scale"]
    assert args.scale_dims == ["4x4x4", "8x8x8"]
    assert (args.scale_cycles, args.runs, args.peers) == (2000, 1, tmp_path)


def test_bench_scale_rows_are_the_issues_sizes():
    assert sorted({bench.dims_name(dims) for dims, _, _, _ in bench.SCALE}) == \
        ["4x4x4", "6x6x6", "8x8x6", "8x8x8"]
    assert [load for dims, load, _, _ in bench.SCALE if dims == (4, 4, 4)] == [0.2, 0.3]
    # The issue's 384-endpoint run: 20,000 cycles at load 0.4.
    assert bench.SCALE[-1] == ((8, 8, 6), 0.4, None, 2) and bench.SCALE_CYCLES == 10_000


@pytest.mark.parametrize("argv, message", [
    (["nosuch"], "table 'nosuch'"),
    (["scale", "--scale-dims", "5x5x5"], "invalid choice: '5x5x5'"),
    (["scale", "--scale-cycles", "0"], "--scale-cycles 0: must be at least 1"),
    (["scale", "--runs", "0"], "--runs 0: must be at least 1"),
    (["scale", "--peers", "/nonexistent/peers"], "has no booksim2/"),
])
def test_bench_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_scale_table_without_peers_has_the_model_columns_only(monkeypatch):
    monkeypatch.setattr(bench.booksim, "find_peers", lambda peers: None)
    exe, configs, why = bench._booksim(None)
    assert (exe, configs) == (None, None)
    assert "no `../shared/peers/`" in why and "model's columns only" in why


def test_scale_table_says_how_to_get_missing_build_tools(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.booksim, "find_peers", lambda peers: tmp_path)
    monkeypatch.setattr(bench.booksim, "missing_tools", lambda: ["flex", "bison"])
    exe, _, why = bench._booksim(None)
    assert exe is None
    assert "needs flex, bison" in why and "apt-get install" in why


# -- the RDMA tables of the README: DCQCN over several hops, the connection state ------


def _dor_links(topo, src, dst):
    """The (router, output port) pairs a packet from endpoint ``src`` to ``dst`` leaves by,
    walked hop by hop with the torus's dimension-order rule."""
    r, t = topo.endpoint_router(src), topo.endpoint_router(dst)
    s, links = r, []
    while r != t:
        port, _ = torus_dor_hop(topo.dims, topo.endpoints_per_router, r, s, t)
        links.append((r, port))
        r = topo.peer(r, port)[0]
    return links


def test_hop_scenario_victim_shares_its_first_link_with_the_incast():
    """The victim's first link on the 4x4x4 torus carries its own and another sender's
    flows to the target, four links from it; its route to the bystander leaves every
    target-bound route after that link; the bench describes the same links."""
    cfg = FabricConfig.load(overrides=bench.HOPS)
    topo = Topology.of(cfg)
    roles = pattern_roles(bench.HOPS_PATTERN, cfg.accelerators, bench.HOPS_LOAD)
    target, victim, bystander = roles["target"], roles["victim"], roles["bystander"]
    assert (cfg.endpoints, len(roles["senders"])) == (64, 8)
    assert victim in roles["senders"] and bystander not in roles["senders"]
    to_target = {e: _dor_links(topo, e, target) for e in roles["senders"]}
    first = to_target[victim][0]
    sharing = [e for e, links in to_target.items() if first in links]
    assert len(sharing) >= 2 and victim in sharing
    assert len(to_target[victim]) >= 4
    to_bystander = _dor_links(topo, victim, bystander)
    incast_links = set().union(*map(set, to_target.values()))
    assert to_bystander[0] == first and not set(to_bystander[1:]) & incast_links
    # The incast converges: every sender's route ends on the target router's one input.
    assert len({links[-1] for links in to_target.values()}) == 1
    where = bench.hop_scenario(cfg)
    assert where["sharing"] == sharing
    assert where["first_link"] == (*first, topo.peer(*first)[0])


def _state_rows(page_text: str) -> dict:
    """The state table's rows: (accelerators, QPs each, channels per peer) -> cells."""
    rows = {}
    for line in page_text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[1].isdigit():
            rows[int(cells[1]), int(cells[2].replace(",", "")), int(cells[5])] = cells
    return rows


def test_state_table_follows_the_formula():
    """Every row of the connection-state table against the state spelled out: per
    channel the sender's five PSNs, timer, error bit, epoch and window of descriptors,
    the receiver's two PSNs, five flags, epoch, unacked count and ack timer, each side
    in whole bytes; per QP one such connection, aggregated (E - 1) * C per accelerator."""
    rd, sw = FabricConfig.load().rdma, FabricConfig.load().switch
    slot = sum(w for _, w in wire.descriptor_fields(wire.payload_words(sw.max_packet_flits))) + 1
    sender = 5 * wire.PSN_BITS + rd.retransmit_timeout.bit_length() + 1 + wire.EPOCH_BITS \
        + rd.window * slot
    receiver = 2 * wire.PSN_BITS + 5 + wire.EPOCH_BITS + rd.window.bit_length() \
        + rd.ack_timeout.bit_length()
    per_channel = -(-sender // 8) + -(-receiver // 8)
    rows = _state_rows(bench.state_table().markdown("test"))
    assert len(rows) == 2 * len(bench.STATE_QPS) * len(bench.STATE_CHANNELS)
    for (E, Q, C), cells in rows.items():
        per_qp, aggregated = E * Q * per_channel, E * (E - 1) * C * per_channel
        assert cells[3:5] == [f"{E * Q:,}", f"{per_qp:,}"]
        assert cells[6:9] == [f"{(E - 1) * C:,}", f"{aggregated:,}", str(per_channel)]
        assert cells[9] == f"{per_qp / aggregated:.2f}x"
    # The source design's supernode: 384 accelerators, 147,456 connections.
    assert rows[384, 384, 1][3] == "147,456"


def test_state_beyond_rdma_qps_is_the_same_formula():
    """Within rdma.qps's range, passing the QPs per accelerator gives what the
    configuration's rdma.qps gives."""
    fabric = ["fabric.topology=torus", "fabric.dims=[4, 4, 4]"]
    configured = connection_state(FabricConfig.load(overrides=fabric + ["rdma.qps=65536"]))
    assert configured == connection_state(FabricConfig.load(overrides=fabric),
                                          qps_per_endpoint=1024)
    assert configured["per_qp_bytes"] == 64 * 1024 * configured["bytes_per_channel"]


def test_fpga_fabric_rows_say_what_a_torus_needs_or_how_fast_it_runs(monkeypatch):
    """A torus that does not fit is a row with the LUT4 sites it needs (read back from the
    synth.json the flow writes before refusing it); one that fits, with Fmax and its path."""
    from superfabric.tools.synth import flow

    def synthesize(cfg, out, **kwargs):
        assert kwargs["top"] == "stimulus" and kwargs["target"] == "ecp5"
        routers = Topology.of(cfg).routers
        fits = routers < 9
        synth = {"fits": fits, "wall_seconds": 90.0,
                 "resources": {"lut": 1000 * routers, "ff": 500, "bram": 2, "lutram": 10},
                 "use": [{"resource": "LUT4 sites", "used": 40000 if fits else 90000,
                          "available": 83640, "percent": 47.8 if fits else 107.6}],
                 "timing": {"fmax_mhz": 18.94, "critical_path": {
                     "from": {"module": "a"}, "to": {"module": "b"}, "logic_levels": 47}}
                 if fits else None}
        out.mkdir(parents=True)
        (out / "synth.json").write_text(json.dumps(synth))
        if not fits:
            raise flow.SynthError("--device = LFE5UM-85F: the design does not fit")
        return synth

    monkeypatch.setattr(flow, "synthesize", synthesize)
    page = bench.fpga_fabric_table()
    rows = page.markdown("make bench TABLES=fpga-fabric").splitlines()
    assert "| 3x3 torus | 9 | 9,000 | 500 | 2 | 10 | 90,000 (108 %) | does not fit | - | 1.5 min |" \
        in rows
    assert "| ring of 4 | 4 | 4,000 | 500 | 2 | 10 | 40,000 (48 %) | 18.9 MHz | a -> b, 47 levels " \
        "| 1.5 min |" in rows


def test_switch_synth_rows_give_each_port_count_on_both_targets(monkeypatch):
    """One row per port count: ECP5's resources with Fmax, the critical path's ends and the
    build's minutes where it fits, what it runs out of where it does not; 7-series's
    resources beside them; a failed point says so."""
    from superfabric.tools.synth import bench as synth_bench

    def synth(ports, fits=True, routed=True):
        out = {"fits": fits, "wall_seconds": 60.0 * ports,
               "resources": {"lut": 1000 * ports, "ff": 300 * ports, "bram": 2 * ports,
                             "lutram": 10 * ports},
               "use": [{"resource": "LUT4 sites", "percent": 219.4 if not fits else 40.0}],
               "device": {"name": "LFE5UM-85F" if routed else "XC7K325T", "speed": 6},
               "tools": {"yosys": "Yosys 0.70", "nextpnr": "nextpnr 0.11.1"},
               "timing": None}
        if routed and fits:
            out["timing"] = {"fmax_mhz": 100.0 / ports, "critical_path": {
                "from": {"module": "voq0"}, "to": {"module": "islip"}, "logic_levels": 9 * ports}}
        return out

    sweeps = {"ecp5": {4: synth(4), 8: synth(8), 16: synth(16, fits=False)},
              "xilinx": {4: synth(4, routed=False), 8: synth(8, routed=False), 16: None}}
    monkeypatch.setattr(synth_bench, "_sweep", lambda cfg, target: sweeps[target])
    rows = synth_bench.switch_table().markdown("make bench-synth").splitlines()
    assert "| 4 | 4,000 | 1,200 | 8 | 40 | 25.00 | voq0 -> islip, 36 levels | 4.0 | 4,000 | " \
        "1,200 | 8 | 40 |" in rows
    assert "| 16 | 16,000 | 4,800 | 32 | 160 | does not fit | LUT4 sites 219 % of the device | " \
        "16.0 | failed | - | - | - |" in rows
    assert any(r.startswith("ECP5 LFE5UM-85F speed 6 (Yosys 0.70, nextpnr 0.11.1)") for r in rows)



def test_a_note_made_while_a_table_has_rows_to_come_waits_under_it():
    # A failed point's reason is noted as the point's row is written: the rows after it
    # once vanished from the page, the table closed by the note.
    from superfabric.tools.results_page import Column, ResultsPage
    page = ResultsPage("t", "T", "make t", "About.")
    page.table(Column("x", 1), Column("y", 1))
    page.row(1, "a")
    page.note("1 failed: why")
    page.row(2, "b")
    page.table(Column("z", 1))
    page.row(3)
    text = page.markdown("make t")
    assert text.endswith("| x | y |\n|---:|---:|\n| 1 | a |\n| 2 | b |\n\n1 failed: why\n\n"
                         "| z |\n|---:|\n| 3 |\n")
