"""The Python model's runs, which the compiled kernels are held to while both exist."""

from superfabric.sim.collective.engine import CollectiveEngines
from superfabric.sim.rdma.fabric import RdmaFabricModel


def run_collective(cfg, prepared, *, stall_limit=None, capture_link: int = -1):
    """``sim.collective.fabric.run_collective`` on the Python loop and engines."""
    engines = CollectiveEngines(cfg, prepared.schedule, prepared.layout, prepared.dtype)
    records = RdmaFabricModel(cfg).run_reference(prepared.workload, stall_limit=stall_limit,
                                                 device=engines, capture_link=capture_link)
    buffers = prepared.layout.buffers(records.memory, prepared.schedule, prepared.dtype)
    return records, engines, buffers
