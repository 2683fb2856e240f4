"""The shared formats: the RTL's layouts are built from them, field for field."""

import random

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.formats.packet import FlitCodec, packet_fields
from superfabric.formats.pfc_frame import PRIORITIES, TIME_MAX, pack_request, unpack_request
from superfabric.hdl.packet import packet_layout
from superfabric.hdl.pfc_frame import REQUEST_LAYOUT
from superfabric.hdl.rdma.header import cpl_layout, key_entry_layout, rcpl_layout, wr_layout

CONFIGS = [FabricConfig.load(preset=p) for p in ("tiny", "default", "large")] + [
    FabricConfig.load(overrides=["switch.ports=5", "switch.priorities=3", "switch.tag_width=9"])]


def _offsets(fields):
    out, offset = {}, 0
    for name, width in fields:
        out[name] = (offset, width)
        offset += width
    return out


def _layout_offsets(layout):
    return {name: (f.offset, f.width) for name, f in layout}


def test_packet_layout_is_the_field_list():
    for cfg in CONFIGS:
        assert _layout_offsets(packet_layout(cfg)) == _offsets(packet_fields(cfg))
        # The codec reads the same offsets from the list and from the layout.
        by_list, by_layout = FlitCodec(packet_fields(cfg)), FlitCodec(packet_layout(cfg))
        assert by_list.width == by_layout.width == packet_layout(cfg).size
        for name, _ in packet_fields(cfg):
            assert by_list.field_spec(name) == by_layout.field_spec(name)
    # docs/architecture.md section 3: 113 bits in the default preset, the tag at bit 81.
    default = dict(_offsets(packet_fields(FabricConfig.load())))
    assert default["tag"] == (81, 32) and sum(w for _, w in packet_fields(FabricConfig.load())) == 113


def test_rdma_layouts_are_the_field_lists():
    for ports in (4, 5, 8, 16):
        rdma = FabricConfig.load(overrides=[f"switch.ports={ports}", "rdma.enabled=true",
                                            f"rdma.qps={ports * 8}"])
        pairs = ((wr_layout(rdma), wire.wr_fields(rdma.switch.ports)),
                 (cpl_layout(), wire.CPL_FIELDS),
                 (rcpl_layout(rdma), wire.rcpl_fields(rdma.switch.ports)),
                 (key_entry_layout(rdma), wire.key_entry_fields(rdma)))
        for layout, fields in pairs:
            assert _layout_offsets(layout) == _offsets(fields)


def test_pause_request_packs_as_the_rtl_layout():
    codec, rng = FlitCodec(REQUEST_LAYOUT), random.Random(1)
    for _ in range(200):
        enable = rng.randrange(256)
        times = [rng.randrange(TIME_MAX + 1) for _ in range(PRIORITIES)]
        bits = pack_request(enable, times)
        assert bits == codec.pack(class_enable=enable,
                                  times=sum(t << (16 * n) for n, t in enumerate(times)))
        assert unpack_request(bits) == (enable, times)


def test_opcode_classes_follow_the_opcode_table():
    for (op, first, last), code in wire.OPCODES.items():
        assert wire.is_last_opcode(code) == last
        assert wire.is_send_opcode(code) == (op == wire.OP_SEND)
    assert not wire.is_last_opcode(wire.ACK_OPCODE) and not wire.is_send_opcode(wire.ACK_OPCODE)
