"""``superfabric synth``: the FPGA flow (Yosys, nextpnr), its devices, sweeps and bench.
"""
