"""Tests of the fabric configuration (:mod:`superfabric.config`).

A configuration is built from a preset, a TOML file and ``--set`` overrides;
every error a user can make ends in one :class:`ConfigError` line that names
the field, the value and what is allowed.
"""

import os
import subprocess
import sys

import pytest

from superfabric.config import PRESETS, ConfigError, FabricConfig, parse_override


def write_toml(tmp_path, text, name="fabric.toml"):
    """A TOML file holding ``text``, in the test's own directory."""
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(call, *fragments):
    """Run ``call``; it must raise one :class:`ConfigError` line holding every fragment."""
    with pytest.raises(ConfigError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, f"message spans lines: {message!r}"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# -- presets ------------------------------------------------------------------


@pytest.mark.parametrize("preset, ports, islip_iterations", [
    ("tiny", 4, 2),
    ("default", 8, 3),
    ("large", 16, 4),
])
def test_preset_port_counts(preset, ports, islip_iterations):
    cfg = FabricConfig.load(preset=preset)
    assert cfg.switch.ports == ports
    assert cfg.switch.islip_iterations == islip_iterations


def test_default_preset_when_none_named():
    assert FabricConfig.load() == FabricConfig.load(preset="default")


def test_unknown_preset():
    config_error(lambda: FabricConfig.load(preset="huge"), "preset = 'huge'", "tiny, default, large")


# -- TOML files and overrides ---------------------------------------------------------


def test_file_merges_a_partial_section_over_the_preset(tmp_path):
    path = write_toml(tmp_path, '[switch]\nports = 6\nscheduler = "fifo"\n')
    cfg = FabricConfig.load(preset="tiny", path=path)
    expected = FabricConfig.load(preset="tiny").to_dict()
    expected["switch"].update(ports=6, scheduler="fifo")
    assert cfg.to_dict() == expected


def test_empty_file_keeps_the_preset(tmp_path):
    path = write_toml(tmp_path, "# nothing to change\n")
    assert FabricConfig.load(preset="large", path=path) == FabricConfig.load(preset="large")


def test_overrides_apply_after_the_file_in_order(tmp_path):
    path = write_toml(tmp_path, "[switch]\nports = 6\ndata_width = 128\n")
    cfg = FabricConfig.load(preset="tiny", path=path,
                            overrides=["switch.ports=5", "switch.ports=7"])
    assert cfg.switch.ports == 7
    assert cfg.switch.data_width == 128


@pytest.mark.parametrize("item, expected", [
    ("switch.ports=6", ("switch", "ports", 6)),
    ("switch.data_width = 0x80", ("switch", "data_width", 128)),
    ("switch.flag=true", ("switch", "flag", True)),
    ("switch.flag=false", ("switch", "flag", False)),
    ("switch.scheduler=fifo", ("switch", "scheduler", "fifo")),
    ('switch.scheduler="islip"', ("switch", "scheduler", "islip")),
    ('switch.ports="6"', ("switch", "ports", "6")),
    ("switch.ratio=0.5", ("switch", "ratio", 0.5)),
])
def test_parse_override_reads_toml_values(item, expected):
    section, key, value = parse_override(item)
    assert (section, key, value) == expected
    # bool is an int and "6" == 6 is false only by type: compare the types too.
    assert type(value) is type(expected[2])


@pytest.mark.parametrize("item, key, value", [
    ("switch.ports=6", "ports", 6),
    ("switch.tag_width=16", "tag_width", 16),
    ("switch.scheduler=fifo", "scheduler", "fifo"),
    ('switch.ingress_full="drop"', "ingress_full", "drop"),
    ("switch.registered_grant=true", "registered_grant", True),
    ("switch.starvation_limit=0", "starvation_limit", 0),
])
def test_set_overrides_a_preset(item, key, value):
    cfg = FabricConfig.load(preset="tiny", overrides=[item])
    assert getattr(cfg.switch, key) == value
    assert cfg != FabricConfig.load(preset="tiny")


# -- serialisation and key --------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_json_round_trip(preset):
    cfg = FabricConfig.load(preset=preset, overrides=["switch.scheduler=fifo", "switch.tag_width=20"])
    again = FabricConfig.from_json(cfg.to_json())
    assert again == cfg
    assert again.to_json() == cfg.to_json()
    assert again.key == cfg.key


@pytest.mark.parametrize("preset", PRESETS)
def test_toml_round_trip(preset, tmp_path):
    cfg = FabricConfig.load(preset=preset, overrides=[
        "switch.scheduler=fifo", "pfc.enabled=true", "pfc.priorities=[0, 1]", "ecn.pmax=0.05",
        "faults.drop_rate=1e-05", "fabric.dims=[2, 3]"])
    path = write_toml(tmp_path, cfg.to_toml())
    # Read as --config reads it: merged over the default preset, it replaces every key.
    assert FabricConfig.load(path=path) == cfg
    assert FabricConfig.load(preset="tiny", path=path) == cfg


def test_key_is_stable_across_processes():
    # The key names build directories shared by separate runs, so it must not
    # depend on the interpreter's hash seed.
    script = "from superfabric.config import FabricConfig; print(FabricConfig.load(preset='tiny').key)"
    keys = {subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}
    assert keys == {FabricConfig.load(preset="tiny").key}


def test_key_differs_between_configurations():
    configs = [FabricConfig.load(preset=p) for p in PRESETS]
    configs += [FabricConfig.load(preset="tiny", overrides=[o])
                for o in ("switch.ports=5", "switch.scheduler=fifo", "switch.ingress_full=drop",
                          "switch.tag_width=31", "switch.registered_grant=true")]
    keys = [cfg.key for cfg in configs]
    assert len(set(keys)) == len(keys)
    assert all(len(k) == 12 and set(k) <= set("0123456789abcdef") for k in keys)


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, fragments", [
    # out of range
    (["switch.ports=0"], ["switch.ports = 0:", "2..32"]),
    (["switch.ports=33"], ["switch.ports = 33:", "2..32"]),
    (["switch.data_width=2048"], ["switch.data_width = 2048:", "8..1024"]),
    # wrong type
    (["switch.ports=four"], ["switch.ports = 'four':", "integer"]),
    (['switch.data_width="64"'], ["switch.data_width = '64':", "integer"]),
    (["switch.ports=true"], ["switch.ports = True:", "integer"]),
    (["switch.ports=4.0"], ["switch.ports = 4.0:", "integer"]),
    (["switch.scheduler=1"], ["switch.scheduler = 1:", "'fifo' or 'islip'"]),
    (["switch.registered_grant=1"], ["switch.registered_grant = 1:", "true or false"]),
    (["switch.registered_grant=yes"], ["switch.registered_grant = 'yes':", "true or false"]),
    (["switch.starvation_limit=256"], ["switch.starvation_limit = 256:", "0..255"]),
    # unknown names
    (["switch.speed=100"], ["switch.speed:", "unknown key", "ports"]),
    (["network.ports=4"], ["network:", "unknown section", "switch"]),
    # bad choices
    (["switch.scheduler=round_robin"], ["switch.scheduler = 'round_robin':", "'fifo' or 'islip'"]),
    (["switch.ingress_full=tail_drop"], ["switch.ingress_full = 'tail_drop':", "'backpressure' or 'drop'"]),
    # fields that constrain each other
    (["switch.buffer_flits=8"], ["switch.buffer_flits = 8:", "switch.max_packet_flits (16)"]),
    (["switch.islip_iterations=5"], ["switch.islip_iterations = 5:", "1..4", "switch.ports"]),
    (["switch.ports=2", "switch.islip_iterations=3"], ["switch.islip_iterations = 3:", "1..2"]),
    # malformed --set
    (["switch.ports"], ["--set 'switch.ports'", "section.key=value"]),
    (["ports=3"], ["--set 'ports=3'", "section.key=value"]),
    (["=3"], ["--set '=3'", "section.key=value"]),
    (["switch.=3"], ["--set 'switch.=3'", "section.key=value"]),
])
def test_bad_override(overrides, fragments):
    config_error(lambda: FabricConfig.load(preset="tiny", overrides=overrides), *fragments)


@pytest.mark.parametrize("text, fragments", [
    ("[switch]\nports = 64\n", ["switch.ports = 64:", "2..32"]),
    ("[switch]\nports = true\n", ["switch.ports = True:", "integer"]),
    ("[switch]\npriorities = 2.5\n", ["switch.priorities = 2.5:", "1..8"]),
    ("[switch]\nspeed = 100\n", ["switch.speed:", "unknown key"]),
    ("[network]\nports = 4\n", ["network:", "unknown section", "switch"]),
    ('[switch]\nscheduler = "wfq"\n', ["switch.scheduler = 'wfq':", "'fifo' or 'islip'"]),
    ("[switch]\nbuffer_flits = 4\nmax_packet_flits = 8\n", ["switch.buffer_flits = 4:", "(8)"]),
    ("switch = 4\n", ["switch = 4:", "outside any section", "[switch]"]),
    ("ports = 4\n", ["ports = 4:", "outside any section"]),
])
def test_bad_value_in_file(tmp_path, text, fragments):
    path = write_toml(tmp_path, text)
    config_error(lambda: FabricConfig.load(preset="tiny", path=path), *fragments)


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = write_toml(tmp_path, "[switch]\nports = \n")
    config_error(lambda: FabricConfig.load(path=path), str(path), "TOML syntax error", "line 2")


def test_missing_file(tmp_path):
    path = tmp_path / "absent.toml"
    config_error(lambda: FabricConfig.load(path=path), str(path), "no such config file")


@pytest.mark.parametrize("text, fragments", [
    ("{", ["config JSON:", "line 1"]),
    ("[]", ["config JSON:", "list"]),
    ('{"switch": {"ports": 4}}', ["switch.data_width:", "missing"]),
    ("{}", ["switch:", "section missing"]),
])
def test_bad_json(text, fragments):
    config_error(lambda: FabricConfig.from_json(text), *fragments)


@pytest.mark.parametrize("make", ["not-utf8", "directory"])
def test_unreadable_config_file_is_one_line(tmp_path, make):
    if make == "not-utf8":
        path = tmp_path / "bad.toml"
        path.write_bytes(b'[switch]\nscheduler = "\xff"\n')
    else:
        path = tmp_path
    with pytest.raises(ConfigError) as e:
        FabricConfig.load(path=path)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg


# -- [rdma] and [faults] ----------------------------------------------------------


@pytest.mark.parametrize("overrides, fragments", [
    (["rdma.window=24"], ["rdma.window = 24", "power of two"]),
    (["rdma.ack_every=64"], ["rdma.ack_every = 64", "rdma.window (32)"]),
    (["rdma.retransmit_timeout=64"], ["rdma.retransmit_timeout = 64", "rdma.ack_timeout (64)"]),
    (["rdma.page_words=32768"], ["rdma.page_words = 32768", "rdma.memory_words (16384)"]),
    (["rdma.channels_per_peer=9"], ["rdma.channels_per_peer = 9", "1..8"]),
    (["rdma.start_psn=16777216"], ["rdma.start_psn = 16777216", "0..16777215"]),
    (["faults.drop_rate=0.6", "faults.corrupt_rate=0.5"], ["drop_rate", "1.1", "at most 1"]),
    (["faults.seed=0"], ["faults.seed = 0", "1..65535"]),
    (["faults.reorder_rate=-0.1"], ["faults.reorder_rate = -0.1", "0..1"]),
])
def test_bad_rdma_and_fault_values(overrides, fragments):
    config_error(lambda: FabricConfig.load(overrides=overrides), *fragments)


@pytest.mark.parametrize("overrides, fragments", [
    (["switch.data_width=32"], ["switch.data_width = 32", "must be 64 with rdma.enabled"]),
    (["switch.max_packet_flits=2"], ["switch.max_packet_flits = 2", "at least 3"]),
    (["rdma.qps=1001"], ["rdma.qps = 1001", "multiple of the endpoints (8"]),
    (["rdma.data_priority=4"], ["rdma.data_priority = 4", "0..3 (switch.priorities = 4)"]),
    (["rdma.control_priority=7"], ["rdma.control_priority = 7", "0..3"]),
    (["pfc.enabled=true", "rdma.control_priority=0"],
     ["rdma.control_priority = 0", "must differ from rdma.data_priority with pfc.enabled"]),
])
def test_rdma_rules_across_sections(overrides, fragments):
    # The same values are fine while the engines are off.
    FabricConfig.load(overrides=overrides)
    config_error(lambda: FabricConfig.load(overrides=["rdma.enabled=true", *overrides]), *fragments)


@pytest.mark.parametrize("overrides", [["pfc.enabled=true"], ["ecn.enabled=true"],
                                       ["pfc.enabled=true", "ecn.enabled=true"],
                                       ["pfc.enabled=true", "ecn.enabled=true", "dcqcn.enabled=true"]])
def test_rdma_runs_with_pfc_ecn_both_or_dcqcn(overrides):
    cfg = FabricConfig.load(overrides=["rdma.enabled=true", *overrides])
    assert cfg.rdma.enabled and (cfg.pfc.enabled or cfg.ecn.enabled)


# -- [dcqcn] --------------------------------------------------------------------------

_DCQCN = ["rdma.enabled=true", "ecn.enabled=true", "dcqcn.enabled=true"]


@pytest.mark.parametrize("override, fragments", [
    ("dcqcn.cnp_interval=0", ["dcqcn.cnp_interval = 0", "1..1048576", "between CNPs"]),
    ("dcqcn.alpha_timer=2000000", ["dcqcn.alpha_timer = 2000000", "1..1048576"]),
    ("dcqcn.increase_timer=-5", ["dcqcn.increase_timer = -5", "1..1048576"]),
    ("dcqcn.byte_counter=0", ["dcqcn.byte_counter = 0", "1..16777216", "flits"]),
    ("dcqcn.fast_recovery=32", ["dcqcn.fast_recovery = 32", "1..31"]),
    ("dcqcn.g_shift=0", ["dcqcn.g_shift = 0", "1..15", "g = 2**-g_shift"]),
    ("dcqcn.g_shift=8.0", ["dcqcn.g_shift = 8.0", "must be an integer"]),
    ("dcqcn.ai_rate=1.5", ["dcqcn.ai_rate = 1.5", "a number in 0..1"]),
    ("dcqcn.hai_rate=true", ["dcqcn.hai_rate = True", "a number in 0..1"]),
    ("dcqcn.min_rate=0", ["dcqcn.min_rate = 0.0", "at least 2**-16", "never send"]),
    ("dcqcn.ai_rate=0.000001", ["dcqcn.ai_rate = 1e-06", "at least 2**-16", "never rise"]),
    ("dcqcn.hai_rate=0.003", ["dcqcn.hai_rate = 0.003", "at least dcqcn.ai_rate (0.004)"]),
    ("dcqcn.alpha_timer=16", ["dcqcn.alpha_timer = 16", "must exceed dcqcn.cnp_interval (16)"]),
    ("dcqcn.enabled=1", ["dcqcn.enabled = 1", "true or false"]),
    ("dcqcn.gain=3", ["dcqcn.gain: unknown key", "cnp_interval"]),
])
def test_bad_dcqcn_values(override, fragments):
    config_error(lambda: FabricConfig.load(overrides=[*_DCQCN, override]), *fragments)


@pytest.mark.parametrize("overrides, fragments", [
    (["dcqcn.enabled=true"], ["dcqcn.enabled = true", "needs rdma.enabled = true"]),
    (["rdma.enabled=true", "dcqcn.enabled=true"], ["dcqcn.enabled = true",
                                                   "needs ecn.enabled = true"]),
])
def test_dcqcn_needs_the_engines_and_the_marks(overrides, fragments):
    config_error(lambda: FabricConfig.load(overrides=overrides), *fragments)


def test_dcqcn_units_are_the_scaled_published_parameters():
    u = FabricConfig.load(overrides=_DCQCN).dcqcn.units
    # 4 cycles per published microsecond; rates in 2**-16 of the line rate.
    assert (u.cnp_interval, u.alpha_timer, u.increase_timer) == (16, 220, 240)
    assert (u.byte_counter, u.fast_recovery, u.g_shift) == (8000, 5, 8)
    assert (u.ai_rate, u.hai_rate, u.min_rate) == (262, 1311, 655)


def test_a_bad_dcqcn_value_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "superfabric.tools.cli", "generate",
                           "--set", "rdma.enabled=true", "--set", "ecn.enabled=true",
                           "--set", "dcqcn.enabled=true", "--set", "dcqcn.g_shift=16",
                           "--top", "rdma_fabric", "-o", str(tmp_path / "rtl")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "dcqcn.g_shift = 16" in lines[0] and "1..15" in lines[0]


def test_fault_thresholds_and_link_seeds():
    faults = FabricConfig.load(overrides=["faults.drop_rate=0.25", "faults.duplicate_rate=0.25",
                                          "faults.corrupt_rate=0.5"]).faults
    # Cumulative in the order drop, duplicate, reorder, corrupt, out of 65536.
    assert faults.thresholds() == (16384, 32768, 32768, 65536)
    seeds = {faults.link_seed(port) for port in range(32)}
    assert len(seeds) == 32 and 0 not in seeds


def test_faults_are_left_out_of_the_build_key():
    base = FabricConfig.load(overrides=["rdma.enabled=true"])
    lossy = FabricConfig.load(overrides=["rdma.enabled=true", "faults.drop_rate=0.1"])
    assert lossy.key != base.key and lossy.build_key == base.build_key
    assert FabricConfig.load(overrides=["rdma.enabled=true", "rdma.window=64"]).build_key != base.build_key


# -- fabric.clock_mhz -----------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_has_the_clock_of_a_40_gbps_link(preset):
    cfg = FabricConfig.load(preset=preset)
    # One 64-bit flit a cycle at 625 MHz: 40 Gb/s, DCQCN's line rate (docs/spec/rdma.md 10.13).
    assert cfg.fabric.clock_mhz == 625.0 and cfg.switch.data_width == 64
    assert cfg.link_gbps == 5.0


def test_the_link_rate_follows_the_clock_and_the_flit():
    cfg = FabricConfig.load(overrides=["fabric.clock_mhz=1000", "switch.data_width=256"])
    assert cfg.fabric.clock_mhz == 1000.0 and cfg.link_gbps == 32.0


@pytest.mark.parametrize("value, shown", [("0", "0"), ("-625", "-625"), ("nan", "nan"),
                                          ("inf", "inf"), ("true", "True"), ("fast", "'fast'"),
                                          ("[625]", "[625]")])
def test_bad_clock(value, shown):
    config_error(lambda: FabricConfig.load(overrides=[f"fabric.clock_mhz={value}"]),
                 f"fabric.clock_mhz = {shown}:", "must be a positive finite number", "MHz")


@pytest.mark.parametrize("overrides, fragments", [
    (["fabric.ports_per_accelerator=0"], ["fabric.ports_per_accelerator = 0", "1..8"]),
    (["fabric.topology=torus", "fabric.ports_per_accelerator=2"],
     ["fabric.ports_per_accelerator = 2: must divide fabric.endpoints_per_router (1)",
      "an accelerator's ports are on one router"]),
    (["fabric.topology=fat_tree", "fabric.routing=ecmp", "fabric.leaves=6",
      "fabric.ports_per_accelerator=4"],
     ["fabric.ports_per_accelerator = 4: must divide fabric.leaves (6)", "rail of leaves"]),
    (["switch.ports=6", "fabric.ports_per_accelerator=4"],
     ["fabric.ports_per_accelerator = 4: must divide switch.ports (6)"]),
])
def test_bad_ports_per_accelerator(overrides, fragments):
    config_error(lambda: FabricConfig.load(overrides=overrides), *fragments)


def test_ports_per_accelerator_group_ports_and_are_not_in_the_build_key():
    torus = ["fabric.topology=torus", "fabric.dims=[2, 2]", "fabric.endpoints_per_router=2"]
    one = FabricConfig.load(overrides=torus)
    two = FabricConfig.load(overrides=torus + ["fabric.ports_per_accelerator=2"])
    assert (one.endpoints, one.accelerators, two.endpoints, two.accelerators) == (8, 8, 8, 4)
    assert two.key != one.key and two.build_key == one.build_key


def test_the_clock_is_in_the_key_and_not_in_the_build_key():
    base = FabricConfig.load()
    faster = FabricConfig.load(overrides=["fabric.clock_mhz=1250.5"])
    assert faster.key != base.key and faster.build_key == base.build_key


# -- [stimulus] -----------------------------------------------------------------------


@pytest.mark.parametrize("overrides, fragments", [
    (["stimulus.source_queue=1"], ["stimulus.source_queue = 1", "2..256"]),
    (["stimulus.counter_width=16"], ["stimulus.counter_width = 16", "32..64"]),
    (["stimulus.hist_buckets=31"], ["stimulus.hist_buckets = 31", "at least 32"]),
    (["stimulus.hist_sub_bits=2", "stimulus.hist_buckets=7"], ["stimulus.hist_buckets = 7",
                                                               "at least 8"]),
    (["stimulus.fault_packet=-1"], ["stimulus.fault_packet = -1"]),
])
def test_bad_stimulus_values(overrides, fragments):
    config_error(lambda: FabricConfig.load(overrides=overrides), *fragments)


def test_stimulus_sizes_are_in_the_build_key():
    base = FabricConfig.load()
    assert FabricConfig.load(overrides=["stimulus.hist_buckets=64"]).build_key != base.build_key
