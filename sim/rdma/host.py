"""The hosts' work requests as the RDMA engines take them.

Each endpoint's host offers one WR at a time on its engine's WR stream, from its send
queues (:mod:`.kernels.send_queues`, the rule of ``docs/architecture.md`` section 10.11).
A WR is a row of the workload's table (``sim/rdma/traffic.py``); the engines, the send
queues and the testbench read it as the row index followed by :data:`WR_ROW_FIELDS`.
"""

__all__ = ["WR_ROW_FIELDS"]

#: The WR columns in the order the engine takes a WR (after the row index).
WR_ROW_FIELDS = ("qp", "dst", "opcode", "lkey", "laddr", "rkey", "raddr", "length", "tag")
