"""The board top: :class:`~.run.BoardRun` on a real ECP5 board (amaranth-boards), with the
board's oscillator through a PLL to the run's clock, a button as reset, the UART and LEDs.

``superfabric board`` builds it (``tools/board.py``); docs/fpga.md tells how
to load the bitstream and read the report. Section 13.5 of docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.build import Attrs
from amaranth.hdl import ClockDomain, Elaboratable, Instance, Module, Signal
from amaranth.lib.cdc import ResetSynchronizer
from amaranth_boards.orangecrab_r0_2 import OrangeCrabR0_2_25FPlatform, OrangeCrabR0_2_85FPlatform
from amaranth_boards.resources import UARTResource
from amaranth_boards.ulx3s import (ULX3S_12F_Platform, ULX3S_25F_Platform, ULX3S_45F_Platform,
                                   ULX3S_85F_Platform)

from .run import BoardRun

__all__ = ["BOARDS", "Board", "BoardTop"]


@dataclass(frozen=True)
class Board:
    """One board: its platforms by FPGA size, and where its clock, reset button, UART and
    LEDs are."""

    platforms: dict          #: FPGA size ("85F", ...) -> amaranth-boards platform class
    default_size: str
    clock: str               #: the oscillator's resource
    button: str              #: the reset button's resource (number 0)
    uart_pins: tuple | None  #: (rx, tx, connector) where the board has no UART resource
    leds: str                #: "led" (separate LEDs 0..2) or "rgb_led" (one RGB LED)
    how_to_connect: str
    #: How to load a bitstream ``{bit}`` into the FPGA, with the board on USB.
    load: str
    #: Programs the platform's build runs besides Yosys, nextpnr and ecppack (from Debian).
    programs: tuple = ()

    def platform(self, size: str | None = None):
        platform = self.platforms[size or self.default_size]()
        if self.uart_pins is not None:
            rx, tx, conn = self.uart_pins
            platform.add_resources([UARTResource(0, rx=rx, tx=tx, conn=conn,
                                                 attrs=Attrs(IO_TYPE="LVCMOS33"))])
        return platform


BOARDS = {
    "ulx3s": Board(
        platforms={"12F": ULX3S_12F_Platform, "25F": ULX3S_25F_Platform,
                   "45F": ULX3S_45F_Platform, "85F": ULX3S_85F_Platform},
        default_size="85F", clock="clk25", button="button_fire", uart_pins=None, leds="led",
        how_to_connect="the USB port US1 (its FTDI chip is the UART); LEDs D0 running, "
                       "D1 finished, D2 mismatch; button F1 (FIRE1) runs again",
        load="openFPGALoader --board ulx3s {bit}"),
    "orangecrab": Board(
        platforms={"25F": OrangeCrabR0_2_25FPlatform, "85F": OrangeCrabR0_2_85FPlatform},
        default_size="85F", clock="clk", button="button", uart_pins=("0", "1", ("io", 0)),
        leds="rgb_led",
        how_to_connect="a 3.3 V USB-serial adapter on the Feather pins 0 (RX) and 1 (TX); "
                       "the RGB LED is blue while running, green when finished, red on a "
                       "mismatch; the button runs again",
        # The build marks top.bit for the bootloader (dfu-suffix), which takes it as it is.
        load="dfu-util -D {bit} (in the bootloader: plug it in with the button held)",
        # amaranth-boards ends the OrangeCrab's build by marking the bitstream for its
        # DFU bootloader.
        programs=("dfu-suffix",)),
}


class BoardTop(Elaboratable):
    """``run`` (a :class:`~.run.BoardRun` at ``clock_hz``) on ``board``, its clock from
    the board's oscillator through an ECP5 PLL set by ``pll`` (the divisors of
    ``yowasp-ecppll``: ``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``, ``CLKOP_CPHASE``)."""

    def __init__(self, board: Board, run: BoardRun, *, clock_hz: float, pll: dict):
        self._board, self._run, self._clock_hz, self._pll = board, run, clock_hz, pll

    def elaborate(self, platform):
        m = Module()
        board, pll = self._board, self._pll
        oscillator = platform.request(board.clock, 0)
        osc_mhz = platform.lookup(board.clock, 0).clock.frequency / 1e6
        locked = Signal()
        # No constraint of its own on the PLL's output: nextpnr derives it from the
        # oscillator's (the board's FREQUENCY PORT) and the divisors, and
        # tools/board.py checks that the routed clock is the run's.
        m.domains.sync = sync = ClockDomain("sync")
        clk = sync.clk
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{osc_mhz:g}", a_FREQUENCY_PIN_CLKOP=f"{self._clock_hz / 1e6:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD", p_CLKOP_ENABLE="ENABLED",
            p_CLKI_DIV=pll["CLKI_DIV"], p_CLKFB_DIV=pll["CLKFB_DIV"], p_CLKOP_DIV=pll["CLKOP_DIV"],
            p_CLKOP_CPHASE=pll["CLKOP_CPHASE"], p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
            i_RST=0, i_STDBY=0, i_CLKI=oscillator.i, o_CLKOP=clk, i_CLKFB=clk,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        # Held in reset until the PLL locks and while the button is down; released in step
        # with the clock.
        button = platform.request(board.button, 0)
        m.submodules.reset = ResetSynchronizer(~locked | button.i, domain="sync")

        m.submodules.run = run = self._run
        uart = platform.request("uart", 0)
        m.d.comb += uart.tx.o.eq(run.tx)
        if board.leds == "led":
            for k, status in enumerate((run.running, run.finished, run.mismatch)):
                m.d.comb += platform.request("led", k).o.eq(status)
        else:
            rgb = platform.request(board.leds, 0)
            m.d.comb += [rgb.b.o.eq(run.running), rgb.g.o.eq(run.finished & ~run.mismatch),
                         rgb.r.o.eq(run.finished & run.mismatch)]
        return m
