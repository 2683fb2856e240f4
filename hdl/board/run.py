"""The stimulus top run by itself: settings from a ROM, one run, the report on a UART.

On a board nothing drives the stimulus top's configuration port, so this
block does what the testbench does (``tb/stimulus/testbench.py``): after
reset it writes the run's settings and starts the run, waits for ``done``,
then executes the report program of ``superfabric.formats.board`` from a
second ROM, which reads statistics back through the same port and prints
them. The run hash is computed here, over the sinks' hashes as they are
printed, and compared with the model's, which the program carries.
Section 13.5 of docs/architecture.md.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from ...config import FabricConfig
from ...formats.board import OPCODES, report_program
from ...formats.stimulus import CSR_DATA_BITS, RegisterMap, StimulusSettings
from ..stimulus.top import Stimulus
from ..uart import UartTransmitter

__all__ = ["BoardRun", "CRC32_POLYNOMIAL"]

#: CRC-32 (IEEE 802.3, zlib's), reflected: the run hash's polynomial.
CRC32_POLYNOMIAL = 0xEDB88320

#: Cycles from a configuration-port address to its word in ``value``: one register on the
#: way in, one on the way out, and this block's own address register.
_READ_CYCLES = 3


class BoardRun(wiring.Component):
    """One stimulus run of ``settings`` on ``cfg``, reported on ``tx`` at ``clocks_per_bit``.

    Ports
    -----
    tx : the UART line (8N1).
    running : the run is under way.
    finished : the report has been sent, its last stop bit too.
    mismatch : with ``finished``, the run hash differs from ``expected_hash`` (the model's).
    """

    def __init__(self, cfg: FabricConfig, settings: StimulusSettings, *, expected_hash: int,
                 clocks_per_bit: int):
        self._cfg = cfg
        # A word per read: the report sends a word at a time, and a page would be 4,096
        # flip-flops on the FPGA.
        self._stimulus = Stimulus(cfg, readout_words=1)
        #: The modules the stimulus top instances, each written once.
        self.modules = self._stimulus.modules
        regmap = RegisterMap(cfg)
        self._address_bits = regmap.address_bits
        self._writes = [*regmap.writes(settings), (regmap.CONTROL, 1)]
        self._program = report_program(cfg, expected_hash)
        self._expected = expected_hash
        self._uart = UartTransmitter(clocks_per_bit)
        super().__init__({"tx": Out(1, init=1), "running": Out(1), "finished": Out(1),
                          "mismatch": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.stimulus = stim = self._stimulus
        m.submodules.uart = uart = self._uart
        ab = self._address_bits
        m.d.comb += self.tx.eq(uart.tx)

        # The settings writes, (address, data) per word, and the program, (opcode, argument).
        m.submodules.writes = writes = Memory(
            shape=unsigned(ab + CSR_DATA_BITS), depth=len(self._writes),
            init=[a | d << ab for a, d in self._writes])
        arg_bits = max(ab, 8)
        m.submodules.program = program = Memory(
            shape=unsigned(3 + arg_bits), depth=len(self._program),
            init=[OPCODES[op] << arg_bits | arg for op, arg in self._program])
        w_rd, p_rd = writes.read_port(), program.read_port()

        index = Signal(range(len(self._writes)))
        pc = Signal(range(len(self._program)))
        m.d.comb += [w_rd.addr.eq(index), p_rd.addr.eq(pc)]
        op, arg = p_rd.data[arg_bits:], p_rd.data[:arg_bits]

        address = Signal(ab)                 # the port's address while reading
        value = Signal(CSR_DATA_BITS)
        crc = Signal(32, init=0xFFFFFFFF)
        byte = Signal(8)
        count = Signal(range(max(32, _READ_CYCLES) + 1))
        m.d.comb += stim.csr_addr.eq(address)

        nibble = value.word_select(arg[:4], 4)
        digit = Mux(nibble < 10, ord("0") + nibble, ord("a") - 10 + nibble)

        with m.FSM():
            with m.State("WRITE-FETCH"):
                m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [stim.csr_addr.eq(w_rd.data[:ab]), stim.csr_wdata.eq(w_rd.data[ab:]),
                             stim.csr_we.eq(1)]
                with m.If(index == len(self._writes) - 1):
                    m.next = "RUN"
                with m.Else():
                    m.d.sync += index.eq(index + 1)
                    m.next = "WRITE-FETCH"
            with m.State("RUN"):
                m.d.comb += self.running.eq(1)
                with m.If(stim.done):
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.next = "EXECUTE"
            with m.State("EXECUTE"):
                with m.Switch(op):
                    with m.Case(OPCODES["CHAR"]):
                        m.d.sync += byte.eq(arg[:8])
                        m.next = "SEND"
                    with m.Case(OPCODES["HEX"]):
                        m.d.sync += byte.eq(digit)
                        m.next = "SEND"
                    with m.Case(OPCODES["LOAD"]):
                        m.d.sync += [address.eq(arg[:ab]), count.eq(_READ_CYCLES)]
                        m.next = "LOAD"
                    with m.Case(OPCODES["FOLD"]):
                        m.d.sync += count.eq(32)
                        m.next = "FOLD"
                    with m.Case(OPCODES["HASH"]):
                        m.d.sync += [value.eq(~crc), self.mismatch.eq(~crc != self._expected),
                                     pc.eq(pc + 1)]
                        m.next = "FETCH"
                    with m.Default():    # END: once the last stop bit is out
                        with m.If(uart.i.ready):
                            m.next = "FINISHED"
            with m.State("SEND"):
                m.d.comb += [uart.i.valid.eq(1), uart.i.payload.eq(byte)]
                with m.If(uart.i.ready):
                    m.d.sync += pc.eq(pc + 1)
                    m.next = "FETCH"
            with m.State("LOAD"):
                with m.If(count == 0):
                    m.d.sync += [value.eq(stim.csr_rdata), pc.eq(pc + 1)]
                    m.next = "FETCH"
                with m.Else():
                    m.d.sync += count.eq(count - 1)
            with m.State("FOLD"):
                # Reflected CRC-32, one bit per cycle, bit 0 first: the word's 4 bytes
                # little-endian, each from its least significant bit, as zlib takes them.
                with m.If(count == 0):
                    m.d.sync += pc.eq(pc + 1)
                    m.next = "FETCH"
                with m.Else():
                    m.d.sync += [
                        crc.eq((crc >> 1) ^ Mux(crc[0] ^ value[0], CRC32_POLYNOMIAL, 0)),
                        value.eq(value >> 1), count.eq(count - 1)]
            with m.State("FINISHED"):
                m.d.comb += self.finished.eq(1)
        return m
