"""FPGA targets and devices of ``superfabric synth``: Yosys mapping, nextpnr options, capacities.

A :class:`Target` is one FPGA family as the open tools see it: the Yosys
synthesis command, the nextpnr build that places and routes it (none for
Xilinx, whose open place and route is out of scope), how its mapped cells
count as LUTs, flip-flops, block RAMs, DSPs and LUT RAM, and the device
resources a design must fit in. A :class:`Device` is one part of a family
with its capacities.

ECP5 and iCE40 capacities are nextpnr 0.11's own (its utilisation report's
``available``; ``tests/test_synth.py`` checks the one it places against
them); the Xilinx 7-series ones are from the family's data sheet (DS180),
in the same units as Yosys's cells: LUT6 sites, flip-flops, RAMB18 halves of
the block RAMs, DSP48E1 slices and LUT6 sites of the SLICEMs (LUT RAM).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CATEGORIES", "DEVICES", "TARGETS", "Device", "Target", "find_device"]

#: Resource categories of synth.json, in report order.
CATEGORIES = ("lut", "ff", "bram", "dsp", "lutram")


@dataclass(frozen=True)
class Target:
    """One FPGA family: how Yosys maps to it, how nextpnr places it, how its cells count.

    Attributes
    ----------
    name : str
        ``ecp5``, ``ice40`` or ``xilinx`` (the ``--target`` value).
    synth : str
        The Yosys command that maps a design to the family.
    nextpnr : str or None
        The tool (:data:`superfabric.tools.synth.eda_tool.TOOLS`) that places and
        routes it; ``None``: resources only.
    counts : dict
        ``cell type -> (category, weight)``: a category's count is the
        weighted sum of its cells (an ECP5 ``CCU2C`` carry cell is two LUT4s).
        Cells of no category are listed by type under ``other``.
    sites : tuple
        The fit check: ``(resource, {cell type: sites per cell}, capacity
        key)``; a design fits when every resource's sites are within the
        device's capacity of that key.
    default_device : str
    default_freq_mhz : float or None
        Clock constraint of place and route when ``--freq`` is not given.
    keep_hierarchy, flatten : str
        The synthesis command's option that keeps module boundaries, and the
        one that flattens the design first (each family defaults to one).
    """

    name: str
    synth: str
    nextpnr: str | None
    counts: dict
    sites: tuple
    default_device: str
    default_freq_mhz: float | None
    keep_hierarchy: str
    flatten: str


@dataclass(frozen=True)
class Device:
    """One FPGA part: its name, nextpnr's options for it and its capacities.

    Attributes
    ----------
    name : str
        The vendor's part name, as ``--device`` takes it (case-insensitive).
    target : str
    nextpnr_args : tuple
        Device options of nextpnr (its ``--um-85k``, ``--hx8k``).
    package : str or None
        Default package (``--package`` replaces it); ``None`` for Xilinx.
    speed : int or None
        Default speed grade (ECP5: 6, 7 or 8; ``--speed`` replaces it).
    capacity : dict
        Resource capacities, by the keys of :attr:`Target.sites`.
    """

    name: str
    target: str
    nextpnr_args: tuple = ()
    package: str | None = None
    speed: int | None = None
    capacity: dict = field(default_factory=dict)


_ECP5_LUTS = {"LUT4": ("lut", 1), "CCU2C": ("lut", 2), "TRELLIS_FF": ("ff", 1),
              "DP16KD": ("bram", 1), "PDPW16KD": ("bram", 1), "MULT18X18D": ("dsp", 1),
              "TRELLIS_DPR16X4": ("lutram", 1)}
# A TRELLIS_DPR16X4 (16x4 LUT RAM) takes four LUT4 sites for its storage and
# two for its write port (nextpnr's "RAM LUTs" and "RAMW LUTs").
_ECP5_SITES = (("LUT4 sites", {"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 6}, "TRELLIS_COMB"),
               ("flip-flops", {"TRELLIS_FF": 1}, "TRELLIS_FF"),
               ("LUT RAM write ports", {"TRELLIS_DPR16X4": 1}, "TRELLIS_RAMW"),
               ("DP16KD block RAMs", {"DP16KD": 1, "PDPW16KD": 1}, "DP16KD"),
               ("MULT18X18D multipliers", {"MULT18X18D": 1}, "MULT18X18D"))

_ICE40_FFS = ("SB_DFF", "SB_DFFE", "SB_DFFSR", "SB_DFFR", "SB_DFFS", "SB_DFFESR", "SB_DFFER",
              "SB_DFFES", "SB_DFFSS", "SB_DFFESS", "SB_DFFN", "SB_DFFNE", "SB_DFFNSR",
              "SB_DFFNR", "SB_DFFNS", "SB_DFFNESR", "SB_DFFNER", "SB_DFFNES", "SB_DFFNSS",
              "SB_DFFNESS")
_ICE40_LUTS = {"SB_LUT4": ("lut", 1), "SB_RAM40_4K": ("bram", 1), "SB_MAC16": ("dsp", 1),
               **{ff: ("ff", 1) for ff in _ICE40_FFS}}
# A logic cell holds one LUT4 and one flip-flop: a design needs at least as
# many cells as it has of either (nextpnr's packer decides the pairing).
_ICE40_SITES = (("logic cells (LUTs)", {"SB_LUT4": 1}, "ICESTORM_LC"),
                ("logic cells (flip-flops)", {ff: 1 for ff in _ICE40_FFS}, "ICESTORM_LC"),
                ("SB_RAM40_4K block RAMs", {"SB_RAM40_4K": 1}, "ICESTORM_RAM"),
                ("SB_MAC16 DSPs", {"SB_MAC16": 1}, "ICESTORM_DSP"))

_XILINX_FFS = ("FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1")
# LUT6 sites of each LUT RAM and shift register cell (UG474).
_XILINX_LUTRAM = {"RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4,
                  "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4,
                  "SRL16E": 1, "SRLC32E": 1}
_XILINX_LUTS = {**{f"LUT{k}": ("lut", 1) for k in range(1, 7)},
                **{ff: ("ff", 1) for ff in _XILINX_FFS},
                "RAMB18E1": ("bram", 1), "RAMB36E1": ("bram", 2), "DSP48E1": ("dsp", 1),
                **{ram: ("lutram", 1) for ram in _XILINX_LUTRAM}}
# The fit check counts Yosys's INV cells (inverters in front of flip-flop and
# RAM pins that have no inversion of their own) as LUT1s, as Vivado would
# map any it does not absorb; the LUT count leaves them with the other cells.
_XILINX_SITES = (("LUT6 sites", {**{f"LUT{k}": 1 for k in range(1, 7)}, "INV": 1,
                                 **_XILINX_LUTRAM}, "lut"),
                 ("SLICEM LUTs (LUT RAM)", dict(_XILINX_LUTRAM), "lutram"),
                 ("flip-flops", {ff: 1 for ff in _XILINX_FFS}, "ff"),
                 ("RAMB18 block RAMs", {"RAMB18E1": 1, "RAMB36E1": 2}, "bram"),
                 ("DSP48E1 slices", {"DSP48E1": 1}, "dsp"))

#: The ``--target`` values.
TARGETS = {
    "ecp5": Target(name="ecp5", synth="synth_ecp5", nextpnr="nextpnr-ecp5", counts=_ECP5_LUTS,
                   sites=_ECP5_SITES, default_device="LFE5UM-85F", default_freq_mhz=100.0,
                   keep_hierarchy="-noflatten", flatten=""),
    "ice40": Target(name="ice40", synth="synth_ice40", nextpnr="nextpnr-ice40",
                    counts=_ICE40_LUTS, sites=_ICE40_SITES, default_device="iCE40HX8K",
                    default_freq_mhz=50.0, keep_hierarchy="-noflatten", flatten=""),
    "xilinx": Target(name="xilinx", synth="synth_xilinx -family xc7", nextpnr=None,
                     counts=_XILINX_LUTS, sites=_XILINX_SITES, default_device="XC7K325T",
                     default_freq_mhz=None, keep_hierarchy="", flatten="-flatten"),
}


def _ecp5(name: str, flag: str, luts: int, ramw: int, ebr: int, mult: int) -> Device:
    return Device(name=name, target="ecp5", nextpnr_args=(f"--{flag}",), package="CABGA381",
                  speed=6, capacity={"TRELLIS_COMB": luts, "TRELLIS_FF": luts,
                                     "TRELLIS_RAMW": ramw, "DP16KD": ebr, "MULT18X18D": mult})


def _ice40(name: str, flag: str, package: str, lcs: int, rams: int, dsps: int = 0) -> Device:
    return Device(name=name, target="ice40", nextpnr_args=(f"--{flag}",), package=package,
                  capacity={"ICESTORM_LC": lcs, "ICESTORM_RAM": rams, "ICESTORM_DSP": dsps})


def _xc7(name: str, luts: int, ffs: int, bram36: int, dsps: int, dist_kbit: int) -> Device:
    return Device(name=name, target="xilinx", capacity={
        "lut": luts, "ff": ffs, "bram": 2 * bram36, "dsp": dsps, "lutram": dist_kbit * 1024 // 64})


#: Devices by target, the default first.
DEVICES = {
    "ecp5": [_ecp5("LFE5UM-85F", "um-85k", 83640, 10455, 208, 156),
             _ecp5("LFE5UM-45F", "um-45k", 43848, 5481, 108, 72),
             _ecp5("LFE5UM-25F", "um-25k", 24288, 3036, 56, 28),
             _ecp5("LFE5U-85F", "85k", 83640, 10455, 208, 156),
             _ecp5("LFE5U-45F", "45k", 43848, 5481, 108, 72),
             _ecp5("LFE5U-25F", "25k", 24288, 3036, 56, 28),
             _ecp5("LFE5UM5G-85F", "um5g-85k", 83640, 10455, 208, 156)],
    "ice40": [_ice40("iCE40HX8K", "hx8k", "ct256", 7680, 32),
              _ice40("iCE40HX4K", "hx4k", "tq144", 7680, 32),
              _ice40("iCE40HX1K", "hx1k", "tq144", 1280, 16),
              _ice40("iCE40LP8K", "lp8k", "ct256", 7680, 32),
              _ice40("iCE40LP4K", "lp4k", "tq144", 7680, 32),
              _ice40("iCE40LP1K", "lp1k", "tq144", 1280, 16),
              _ice40("iCE40LP384", "lp384", "qn32", 384, 0),
              _ice40("iCE40UP5K", "up5k", "sg48", 5280, 30, 8),
              _ice40("iCE40UP3K", "up3k", "sg48", 5280, 30, 8)],
    "xilinx": [_xc7("XC7K325T", 203800, 407600, 445, 840, 4000),
               _xc7("XC7K410T", 254200, 508400, 795, 1540, 5663),
               _xc7("XC7K160T", 101400, 202800, 325, 600, 2188),
               _xc7("XC7A200T", 134600, 269200, 365, 740, 2888),
               _xc7("XC7A100T", 63400, 126800, 135, 240, 1188),
               _xc7("XC7A35T", 20800, 41600, 50, 90, 400),
               _xc7("XC7VX485T", 303600, 607200, 1030, 2800, 8175),
               _xc7("XC7VX690T", 433200, 866400, 1470, 3600, 10888)],
}


def find_device(target: str, name: str | None) -> Device:
    """The device ``name`` of ``target`` (case-insensitive), or the target's default.

    Raises
    ------
    ValueError
        Naming ``--target`` or ``--device``, the value and the allowed ones.
    """
    if target not in TARGETS:
        raise ValueError(f"--target = {target!r}: must be one of {', '.join(TARGETS)}")
    wanted = (name or TARGETS[target].default_device).lower()
    for device in DEVICES[target]:
        if device.name.lower() == wanted:
            return device
    raise ValueError(f"--device = {name!r}: not a {target} device; must be one of "
                     f"{', '.join(d.name for d in DEVICES[target])}")
