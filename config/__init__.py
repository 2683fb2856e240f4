"""superfabric: RTL and golden model of an AI supernode switch fabric.

The package root holds the one piece that every consumer shares, the fabric
configuration (:mod:`superfabric.config`). The hardware (``superfabric.hdl``),
the golden model (``superfabric.sim``), the cocotb testbenches
(``superfabric.tb``) and the command line (``superfabric.tools``) are its
sub-packages.
"""

__version__ = "0.1.0"
