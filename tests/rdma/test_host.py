"""The hosts' send queues with a device that posts work requests as a run goes
(``sim/rdma/host.py:HostDevice``, section 10.11): its WRs follow the same offer rules and
timing as a workload's, and the run waits for it."""

from superfabric.sim.rdma.fabric import RdmaFabricModel
from superfabric.sim.rdma.host import HostDevice

from .test_model import _config, _workload


class Chain(HostDevice):
    """Reposts the workload's first WR each time a completion arrives, ``count`` times."""

    def __init__(self, workload, count: int):
        self.wr = {c: int(v[0]) for c, v in workload.wr.items()}
        self.count = self.left = count
        self.heard = []
        self.done = False

    def attach(self, host, memories):
        self.host = host

    def completed(self, e, cycle, completion):
        self.heard.append(cycle)

    def step(self, cycle):
        if self.left and len(self.heard) > self.count - self.left:
            w = self.wr
            self.host.add(cycle + 1, w["src"], w["qp"], w["dst"], w["opcode"], w["lkey"],
                          w["laddr"], w["rkey"], w["raddr"], w["length"])
            self.left -= 1
            self.done = not self.left
            return True
        return False


def test_a_device_posts_in_reaction_to_completions():
    cfg = _config()
    D, words = cfg.rdma.dma_latency, 5
    w = _workload(cfg, [{"post": 7, "src": 0, "qp": 0, "dst": 1, "opcode": 0, "length": words}])
    alone = RdmaFabricModel(cfg).run_reference(w)
    chain = Chain(w, 2)
    rec = RdmaFabricModel(cfg).run_reference(w, device=chain)
    # The workload's own WR runs as it does without the device.
    assert (rec.taken[0], rec.done[0]) == (alone.taken[0], alone.done[0])
    assert len(rec.taken) == 3 and list(rec.status) == [0, 0, 0]
    for k in (1, 2):
        # Posted at the end of the cycle of the completion before, offered from the next,
        # and timed as a workload WR posted then (section 10.11's zero-load timing).
        assert rec.taken[k] == rec.done[k - 1] + 1
        assert rec.done[k] == rec.taken[k] + 2 * words + D + 14
    assert chain.heard == list(rec.done)
    assert rec.cycles == rec.done[2] + 1
