"""The N x N packet switch: the router whose ports are all endpoints."""

from ..config import FabricConfig
from .fabric.router import SWITCH, Router

__all__ = ["Switch"]


class Switch(Router):
    """Input-queued packet switch, ``ports`` x ``ports``, configured by ``[switch]``.

    The :class:`~.router.Router` of ``fabric.topology = "switch"``: every
    port an endpoint, no routing (a packet leaves by its ``dst``), no VC or
    credit. Each input ``i[k]`` passes a skid buffer into a VOQ buffer;
    every cycle iSLIP (with ``scheduler = "fifo"`` it sees only each input's
    head packet) matches free inputs to free outputs; a match reads the
    packet from the input buffer flit by flit, across the crossbar, into the
    output's egress queue, which drives ``o[k]``. A match holds from head to
    tail flit (packet mode); an output waits for an input that has started
    ``starvation_limit`` packets past one for it. ``docs/architecture.md`` sections 4 and 5 give
    the cycle-by-cycle rules that the golden model mirrors.

    Ports
    -----
    i, o : packet streams, one per port
    pause : bit ``dst * priorities + prio`` set stops new packets of that
        class toward that output (a packet under way completes); driven by
        priority flow control or the testbench.
    rx_packets, tx_packets, drops : per-port packet counters.
    pfc_tx, pfc_rx : with ``[pfc] enabled``, pause frames sent upstream by
        each input port and received from downstream at each output port
        (a frame stream per port), and their counters.
    ecn_marks : with ``[ecn] enabled``, packets marked CE per (output,
        priority); ``ecn_decided``/``ecn_backlog`` show each output's marking
        decisions and the backlog they saw (for the testbench's curves).
    """

    def __init__(self, cfg: FabricConfig):
        super().__init__(cfg, SWITCH)
