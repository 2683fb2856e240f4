"""Per-packet records of a run, as written by the testbench and by the model."""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Records", "NOT_DELIVERED"]

#: Cycle value of a packet that was not (yet) delivered.
NOT_DELIVERED = -1


@dataclass
class Records:
    """What happened to each packet of a trace, indexed like the trace.

    Attributes
    ----------
    out_port : int16 array, the egress port it left by (-1 if never).
    head, tail : int64 arrays, cycles of the head and tail flit handshakes
        at egress (``NOT_DELIVERED`` if never).
    dropped : bool array, dropped whole at ingress.
    payload_ok : bool array, every flit's data arrived intact (the model
        sets it for every delivered packet).
    ecn_out : int8 array, the ECN codepoint the packet left with (CE when
        marked); the codepoint it was sent with if never delivered.
    ecn_backlog : int64 array, the backlog the ECN decision saw when the
        packet was scheduled (-1: no decision, ECN disabled).
    pfc_frames : int64 array of rows (cycle, input port, class-enable
        vector, eight pause times): the pause frames the switch sent.
    hops : int16 array, the router-to-router links the packet crossed
        (0 on a single switch).
    path : int16 array ``[packets, max links]``, the ids of those links in
        order, -1 beyond ``hops`` (a fabric's model runs; no columns otherwise).
        A fabric has at most 6,144 links (1,024 routers of a 3D torus), and the
        column is most of a large run's records (3 M packets of 11 links on the
        8x8x6 torus): int16 halves the memory it fills and the file it writes.
    link_cycle : int64 array, the cycle the packet's head entered the link a model run
        captured (``capture_link``), -1 if it did not cross it or none was captured.
    link_ecn : int8 array, the ECN codepoint it crossed that link with.
    cycles : cycles simulated.
    stalled : the run stopped because nothing moved for the stall limit.
    stuck : for a stalled fabric run, one line naming a cycle of channels that
        wait on each other (a deadlock); empty otherwise.
    counters : per-port hardware counters at the end, ``rx_packets``,
        ``tx_packets`` and ``drops``.
    """

    out_port: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    dropped: np.ndarray
    payload_ok: np.ndarray
    ecn_out: np.ndarray
    ecn_backlog: np.ndarray
    pfc_frames: np.ndarray = field(default_factory=lambda: np.zeros((0, 11), np.int64))
    hops: np.ndarray | None = None
    path: np.ndarray | None = None
    link_cycle: np.ndarray | None = None
    link_ecn: np.ndarray | None = None
    cycles: int = 0
    stalled: bool = False
    stuck: str = ""
    counters: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.head)
        if self.hops is None:
            self.hops = np.zeros(n, np.int16)
        if self.path is None:
            self.path = np.zeros((n, 0), np.int16)
        if self.link_cycle is None:
            self.link_cycle = np.full(n, -1, np.int64)
        if self.link_ecn is None:
            self.link_ecn = np.zeros(n, np.int8)

    @classmethod
    def empty(cls, packets: int, max_links: int = 0) -> "Records":
        """Records for ``packets`` packets, none delivered yet, with room for paths of
        ``max_links`` links."""
        return cls(hops=np.zeros(packets, np.int16),
                   path=np.full((packets, max_links), -1, np.int16),
                   link_cycle=np.full(packets, -1, np.int64),
                   link_ecn=np.zeros(packets, np.int8),
                   out_port=np.full(packets, -1, np.int16),
                   head=np.full(packets, NOT_DELIVERED, np.int64),
                   tail=np.full(packets, NOT_DELIVERED, np.int64),
                   dropped=np.zeros(packets, bool),
                   payload_ok=np.zeros(packets, bool),
                   ecn_out=np.zeros(packets, np.int8),
                   ecn_backlog=np.full(packets, -1, np.int64))

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` file."""
        np.savez(path, out_port=self.out_port, head=self.head, tail=self.tail,
                 dropped=self.dropped, payload_ok=self.payload_ok,
                 ecn_out=self.ecn_out, ecn_backlog=self.ecn_backlog, pfc_frames=self.pfc_frames,
                 hops=self.hops, path=self.path, link_cycle=self.link_cycle,
                 link_ecn=self.link_ecn,
                 cycles=self.cycles, stalled=self.stalled,
                 stuck=np.str_(self.stuck),
                 **{f"counter_{k}": np.asarray(v, np.int64) for k, v in self.counters.items()})

    @classmethod
    def load(cls, path: str | Path) -> "Records":
        """Read a file written by :meth:`save`."""
        with np.load(path) as z:
            counters = {k[len("counter_"):]: z[k].tolist() for k in z.files if k.startswith("counter_")}
            return cls(out_port=z["out_port"], head=z["head"], tail=z["tail"],
                       dropped=z["dropped"], payload_ok=z["payload_ok"],
                       ecn_out=z["ecn_out"], ecn_backlog=z["ecn_backlog"],
                       pfc_frames=z["pfc_frames"], hops=z["hops"], path=z["path"],
                       link_cycle=z["link_cycle"] if "link_cycle" in z.files else None,
                       link_ecn=z["link_ecn"] if "link_ecn" in z.files else None,
                       cycles=int(z["cycles"]), stalled=bool(z["stalled"]), stuck=str(z["stuck"]),
                       counters=counters)
