"""The formats that RTL, golden model and testbench share, written once as plain data.

Bit layouts of the packet and of the RDMA headers, the PFC frame's byte
layout, the names and width of the hardware counters, and the ``match``
section a comparison of RTL and model writes into ``results.json``. These
modules import the standard library and :mod:`superfabric.config` only, so
``superfabric.hdl`` builds its Amaranth layouts from them without importing
the model, and ``superfabric.sim`` uses them without importing Amaranth.
"""
