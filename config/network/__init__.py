"""The fabric as a network: how routers are numbered and wired (topology), the routing
functions the golden model compiles and the RTL is held against, and the deadlock check
that walks them before anything runs. Neutral ground: imports neither Amaranth nor the
model, so ``superfabric.hdl`` and ``superfabric.sim`` both build on it.
"""
