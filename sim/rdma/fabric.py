"""Cycle-exact golden model of :class:`superfabric.hdl.rdma.fabric.RdmaFabric`.

``cfg.endpoints`` endpoints, each an RDMA engine (:mod:`.kernels.engine`) with
its host memory and a fault injector (:mod:`.kernels.fault_injector`) on its
uplink, attached to the switch or the fabric of routers
(:mod:`superfabric.sim.fabric.top`; below "the switch" is either).
Endpoint ``e`` offers its WRs from per-QP send queues (:mod:`.kernels.send_queues`):
in cycle ``c`` the oldest posted WR at the head of a send queue whose
channel has room for it. The rules are docs/architecture.md section 10.

Every decision of a cycle is made from the state at its start: the
engines' offered flits, then the injectors' (which pass or replace them),
then the switch's cycle (which takes the injectors' flits and delivers
flits to the engines), then the injectors' and engines' updates.
:meth:`RdmaFabricModel.run` runs the whole loop compiled (:mod:`.kernels.run`).
"""

import numpy as np

from ...config import FabricConfig
from ...network.topology import Topology
from ..threads import usable_threads
from .traffic import key_columns
from .records import RdmaRecords
from .kernels.run import default_stall_limit, packet_class, run as compiled_run

__all__ = ["RdmaFabricModel", "default_stall_limit", "packet_class"]


class RdmaFabricModel:
    """Run a workload of work requests through the RDMA fabric, cycle by cycle; ``threads``
    step the fabric's routers (docs/spec/timing.md 5.9), the same run on any number."""

    def __init__(self, cfg: FabricConfig, *, threads: int = 1):
        if not cfg.rdma.enabled:
            raise ValueError("rdma.enabled = false: the RDMA fabric needs rdma.enabled = true")
        self._cfg = cfg
        #: The threads that step the routers: as asked, but at most one a router.
        self.threads = usable_threads(threads, Topology.of(cfg).routers)

    def warm(self) -> None:
        """Compile the run loop (or load it from numba's cache) for this configuration,
        before a run that is timed: a run of no WR; and the key rule its results read
        the memories with (:class:`.keys.KeyTable`)."""
        from .keys import KeyTable
        from .traffic import WR_COLUMNS, RdmaWorkload
        cfg, E, rd = self._cfg, self._cfg.endpoints, self._cfg.rdma
        empty = RdmaWorkload("warm", 0.0, 0, 0, {c: np.zeros(0, t) for c, t in WR_COLUMNS.items()},
                             np.zeros((E, rd.keys, key_columns(E)), np.int64),
                             np.zeros((E, rd.pages), np.int64),
                             np.zeros((E, rd.memory_words), np.uint64))
        self.run(empty)
        KeyTable(empty.keys[0], empty.page_table[0], cfg).addresses(0, 0, 1)

    def run(self, workload, *, stall_limit: int | None = None, collective=None,
            capture_link: int = -1) -> RdmaRecords:
        """Simulate until every WR has its completion (and the collective engines of
        ``collective``, ``(schedule, layout, dtype)``, are done); returns
        :class:`RdmaRecords`. The loop is compiled (:func:`.kernels.run.run`).

        The run ends after the cycle in which the last completion is given (and the
        collective engines are done), or as stalled when no WR is taken, no completion
        given, no packet retired and no collective engine acts for ``stall_limit`` cycles
        (default
        :func:`default_stall_limit`). A cycle follows section 10.11's order: the hosts'
        offers, the engines' and the injectors' flits, the switch's cycle and its
        deliveries, then the injectors' and the engines' updates, then the collective
        engines', which may post further WRs; the records then hold the workload's WRs and
        the engines' after them. ``capture_link`` (a link id of the fabric) records in the
        delivered rows the cycle each packet entered that link and its codepoint there."""
        return compiled_run(self._cfg, workload, stall_limit=stall_limit, collective=collective,
                            capture_link=capture_link, threads=self.threads)[0]
