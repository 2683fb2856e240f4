"""The hosts' send queues (``sim/rdma/kernels/send_queues.py``, section 10.11) with WRs
posted while a run goes, as a device (the collective engines) posts them: they join their
QP's tail and follow the workload's offer rules, and QPs out of range (bad WRs) queue too.
"""

import numpy as np

from superfabric.config import FabricConfig
from superfabric.formats import rdma_wire as wire
from superfabric.sim.rdma.kernels.send_queues import (
    NEVER, heads, owed, send_queues_add, send_queues_next_post, send_queues_offer,
    send_queues_params, send_queues_state, send_queues_taken, window_state)

from ..test_model import _config, _workload


class Queues:
    """Every endpoint's send queues of ``requests`` (``test_model``'s dicts), with room for
    ``extra`` WRs posted later; the windows' free slots are ``free`` (one value for every
    channel)."""

    def __init__(self, requests, extra: int):
        self.cfg = cfg = _config()
        self.workload = _workload(cfg, requests)
        self.prm = send_queues_params(cfg)
        self.sq = send_queues_state(cfg, self.workload, len(requests) + extra)
        self.free = cfg.rdma.window

    def offer(self, e: int, cycle: int) -> int:
        E, C = self.cfg.endpoints, self.prm.channels
        nxt, ret = window_state(self.prm, np.full((E, E * C), self.free, np.int64))
        return int(send_queues_offer(self.sq, self.prm, e, cycle, nxt, ret))

    def take(self, e: int) -> None:
        send_queues_taken(self.sq, self.prm, e)

    def post(self, post: int, src: int, qp: int, dst: int, length: int = 4) -> int:
        """A WRITE posted from ``post`` on; its row (and tag)."""
        return int(send_queues_add(self.sq, self.prm, post, src, qp, dst, wire.OP_WRITE, 1,
                                   0x1000, 2, 0x40000, length))

    def next_post(self, e: int, cycle: int) -> int:
        return int(send_queues_next_post(self.sq, self.prm, e, cycle))


def test_a_posted_wr_joins_its_qps_tail_and_is_offered_from_its_post():
    q = Queues([{"post": 5, "src": 0, "qp": 0, "dst": 1, "opcode": 0, "length": 3}], 2)
    later = q.post(2, 0, 0, 1)                       # posted first, behind row 0 on QP 0
    other = q.post(9, 0, 1, 2)                       # on QP 1, posted from cycle 9
    assert (later, other) == (1, 2) and q.sq.wr[later, -1] == later
    assert heads(q.sq, 0) == [0, other] and owed(q.sq, 0) == 0
    assert q.offer(0, 4) == -1                       # QP 0's head is not posted yet
    assert q.next_post(0, 4) == 5 and q.next_post(0, 5) == 9 and q.next_post(0, 9) == NEVER
    assert q.offer(0, 5) == 0
    q.take(0)
    assert q.offer(0, 6) == later
    q.take(0)
    assert q.offer(0, 8) == -1 and q.offer(0, 9) == other
    q.take(0)
    assert q.offer(0, 100) == -1 and owed(q.sq, 0) == -1


def test_a_posted_wr_waits_for_window_room_unless_it_names_no_channel():
    cfg = _config()
    Q = cfg.rdma.per_endpoint(cfg.endpoints)
    q = Queues([], 4)
    q.free = 0
    good = q.post(1, 2, 0, 3)
    to_itself = q.post(1, 2, 1, 2)
    out_of_range = [q.post(1, 2, Q + 1, 3), q.post(1, 2, Q + 1, 0)]
    assert q.sq.channel[good] >= 0 and q.sq.channel[to_itself] < 0
    assert all(q.sq.channel[r] < 0 for r in out_of_range)
    taken = []
    while (row := q.offer(2, 1)) >= 0:               # no window room anywhere
        taken.append(row)
        q.take(2)
    # The bad WRs go (the engine completes them with an error); the out-of-range QP's
    # queue keeps its posting order; the good one waits for room.
    assert taken == [to_itself, *out_of_range] and heads(q.sq, 2) == [good]
    q.free = cfg.rdma.window
    assert q.offer(2, 1) == good
