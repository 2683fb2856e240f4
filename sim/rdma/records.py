"""What an RDMA fabric run did to each work request, as written by the model and the testbench."""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...formats.counters import RDMA_COUNTERS
from ..pfc import FRAME_COLUMNS

__all__ = ["RdmaRecords", "RX_COMPLETION_COLUMNS", "CNP_COLUMNS", "RATE_COLUMNS",
           "DELIVERED_COLUMNS", "event_rows"]

#: Columns of :attr:`RdmaRecords.rx_completions`.
RX_COMPLETION_COLUMNS = ("cycle", "endpoint", "src", "qp", "length")
#: Columns of :attr:`RdmaRecords.cnps`: the cycle a CNP was picked, its sender, the context.
CNP_COLUMNS = ("cycle", "endpoint", "context")
#: Columns of :attr:`RdmaRecords.rates`: the cycle of the change, the endpoint, the
#: channel and its rate from the next cycle on (``superfabric.formats.dcqcn`` units).
RATE_COLUMNS = ("cycle", "endpoint", "channel", "rate")
#: Columns of :attr:`RdmaRecords.delivered`: the cycle the packet's head flit reached the
#: endpoint, the endpoint (the switch output), the source endpoint, its flits and the ECN
#: codepoint it arrived with; on a fabric whose run captured a link, the cycle its head
#: entered that link and the codepoint it crossed it with (-1 and 0 if it did not).
DELIVERED_COLUMNS = ("cycle", "endpoint", "src", "flits", "ecn", "link_cycle", "link_ecn")


def event_rows(rows, columns) -> np.ndarray:
    """Rows of events as an int64 array, sorted by every column in turn (cycle first)."""
    return np.array(sorted(rows), np.int64).reshape(-1, len(columns))


@dataclass
class RdmaRecords:
    """Per work request (indexed like the workload's rows) and per endpoint results.

    Attributes
    ----------
    taken : int64 array, the cycle the engine took the WR from its WR stream (-1 never).
    done : int64 array, the cycle its completion was given (-1 none).
    status : int8 array, the completion's status (-1 none).
    completions : int16 array, how many completions named the WR (1 in a good run).
    order : int64 array, the index of the WR's completion among its endpoint's
        completions (-1 none).
    rx_completions : int64 array of rows (cycle, endpoint, src, qp, length),
        the receive completions in the order given.
    counters : name -> list per endpoint, the counters of section 10.8 at the end.
    memory : uint64 array [endpoints, memory_words], the host memories at the end.
    cnps : int64 array of rows :data:`CNP_COLUMNS`, the CNPs sent (section 10.13).
    rates : int64 array of rows :data:`RATE_COLUMNS`, every change of a channel's rate.
    pfc_frames : int64 array of rows (cycle, input port, class-enable vector, eight
        times), the switch's pause frames (section 4.11).
    queue_depth : int32 array [cycles, endpoints], per cycle (at its start) the flits
        inside the switch bound for each output: taken at an input and not yet
        handed to that output's sink.
    delivered : int64 array of rows :data:`DELIVERED_COLUMNS`, every packet the switch
        handed to an engine, in the order its last flit arrived (the model's records
        only; the testbench leaves it empty).
    delivered_words : uint64 array, the flits of the delivered packets one after the
        other, as they entered the switch (``delivered``'s ``flits`` say where each
        packet starts).
    link_flits : int64 array, on a fabric the flits sent over each directed link of the
        topology (``Topology.links`` order) by the run's end; empty for the switch.
    cycles : the cycle after the last one simulated.
    stalled : the run stopped because no WR was taken and no completion given
        for the stall limit.
    stuck : for a stalled run, one line naming an endpoint and channel that
        still owe completions, with its PSN state; empty otherwise.
    """

    taken: np.ndarray
    done: np.ndarray
    status: np.ndarray
    completions: np.ndarray
    order: np.ndarray
    rx_completions: np.ndarray
    memory: np.ndarray
    counters: dict = field(default_factory=dict)
    cnps: np.ndarray = field(default_factory=lambda: np.zeros((0, len(CNP_COLUMNS)), np.int64))
    rates: np.ndarray = field(default_factory=lambda: np.zeros((0, len(RATE_COLUMNS)), np.int64))
    pfc_frames: np.ndarray = field(default_factory=lambda: np.zeros((0, FRAME_COLUMNS), np.int64))
    queue_depth: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int32))
    delivered: np.ndarray = field(
        default_factory=lambda: np.zeros((0, len(DELIVERED_COLUMNS)), np.int64))
    delivered_words: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    link_flits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cycles: int = 0
    stalled: bool = False
    stuck: str = ""

    @classmethod
    def empty(cls, wrs: int, endpoints: int, memory_words: int) -> "RdmaRecords":
        """Records for ``wrs`` work requests, none taken yet."""
        return cls(taken=np.full(wrs, -1, np.int64), done=np.full(wrs, -1, np.int64),
                   status=np.full(wrs, -1, np.int8), completions=np.zeros(wrs, np.int16),
                   order=np.full(wrs, -1, np.int64),
                   rx_completions=np.zeros((0, len(RX_COMPLETION_COLUMNS)), np.int64),
                   memory=np.zeros((endpoints, memory_words), np.uint64),
                   counters={name: [0] * endpoints for name in RDMA_COUNTERS},
                   queue_depth=np.zeros((0, endpoints), np.int32))

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` file."""
        np.savez(path, taken=self.taken, done=self.done, status=self.status,
                 completions=self.completions, order=self.order,
                 rx_completions=self.rx_completions, memory=self.memory, cnps=self.cnps,
                 rates=self.rates, pfc_frames=self.pfc_frames, queue_depth=self.queue_depth,
                 delivered=self.delivered, delivered_words=self.delivered_words,
                 link_flits=self.link_flits, cycles=self.cycles, stalled=self.stalled,
                 stuck=np.str_(self.stuck),
                 **{f"counter_{k}": np.asarray(v, np.int64) for k, v in self.counters.items()})

    @classmethod
    def load(cls, path: str | Path) -> "RdmaRecords":
        """Read a file written by :meth:`save` (one written before the delivered packets,
        or the links' flits, were recorded reads with none)."""
        with np.load(path) as z:
            counters = {k[len("counter_"):]: z[k].tolist() for k in z.files
                        if k.startswith("counter_")}
            delivered = (z["delivered"] if "delivered" in z.files else np.zeros((0, 5), np.int64))
            if delivered.shape[1] < len(DELIVERED_COLUMNS):     # written before links were captured
                delivered = np.hstack([delivered, np.tile([-1, 0], (len(delivered), 1))])
            words = z["delivered_words"] if "delivered_words" in z.files else np.zeros(0, np.uint64)
            links = z["link_flits"] if "link_flits" in z.files else np.zeros(0, np.int64)
            return cls(taken=z["taken"], done=z["done"], status=z["status"],
                       completions=z["completions"], order=z["order"],
                       rx_completions=z["rx_completions"].reshape(-1, len(RX_COMPLETION_COLUMNS)),
                       memory=z["memory"], counters=counters,
                       cnps=z["cnps"].reshape(-1, len(CNP_COLUMNS)),
                       rates=z["rates"].reshape(-1, len(RATE_COLUMNS)),
                       pfc_frames=z["pfc_frames"].reshape(-1, FRAME_COLUMNS),
                       queue_depth=z["queue_depth"], delivered=delivered,
                       delivered_words=words, link_flits=links, cycles=int(z["cycles"]),
                       stalled=bool(z["stalled"]), stuck=str(z["stuck"]))
