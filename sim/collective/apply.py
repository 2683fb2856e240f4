"""The apply unit's timing (section 15.8.3), shared by the collective engine's model and
the alpha-beta model.

The apply unit's RTL is :mod:`superfabric.hdl.collective.apply`; the engine at every
accelerator (section 15.8) is modelled by the compiled kernels of :mod:`.kernels.engine`,
which the RDMA model's run loop steps.
"""

from __future__ import annotations

from numba.extending import register_jitable

__all__ = ["apply_cycles"]


# Plain Python for the alpha-beta model, compiled into the engine's kernels.
@register_jitable
def apply_cycles(words: int, dma_latency: int) -> int:
    """Cycles the apply unit is busy with a slot whose chunk covers ``words`` buffer words:
    the notification read (``dma_latency``), then one word a cycle, each written
    ``dma_latency`` cycles after its reads (section 15.8.3)."""
    return 1 + dma_latency + (dma_latency + words if words else 0)
