"""What an RDMA fabric run did to each work request, as written by the model and the testbench."""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..formats.counters import RDMA_COUNTERS

__all__ = ["RdmaRecords", "RX_COMPLETION_COLUMNS"]

#: Columns of :attr:`RdmaRecords.rx_completions`.
RX_COMPLETION_COLUMNS = ("cycle", "endpoint", "src", "qp", "length")


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
                   counters={name: [0] * endpoints for name in RDMA_COUNTERS})

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` file."""
        np.savez(path, taken=self.taken, done=self.done, status=self.status,
                 completions=self.completions, order=self.order,
                 rx_completions=self.rx_completions, memory=self.memory,
                 cycles=self.cycles, stalled=self.stalled, stuck=np.str_(self.stuck),
                 **{f"counter_{k}": np.asarray(v, np.int64) for k, v in self.counters.items()})

    @classmethod
    def load(cls, path: str | Path) -> "RdmaRecords":
        """Read a file written by :meth:`save`."""
        with np.load(path) as z:
            counters = {k[len("counter_"):]: z[k].tolist() for k in z.files if k.startswith("counter_")}
            return cls(taken=z["taken"], done=z["done"], status=z["status"],
                       completions=z["completions"], order=z["order"],
                       rx_completions=z["rx_completions"].reshape(-1, len(RX_COMPLETION_COLUMNS)),
                       memory=z["memory"], counters=counters, cycles=int(z["cycles"]),
                       stalled=bool(z["stalled"]), stuck=str(z["stuck"]))
