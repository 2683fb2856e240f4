"""Amaranth 0.5 components of the fabric, generated to Verilog by ``superfabric generate``."""
