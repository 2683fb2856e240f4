"""The bidirectional ring: both directions at once, half of every chunk each way (section 15.4.2).

Each direction is the ring of ``superfabric.sim.collective.rings`` over half
of every block, the second along the ring reversed; an accelerator's steps
alternate between the directions round by round.
"""

from .rings import build_rings, order_rings, ring_rounds
from .rings import steps as ring_steps

__all__ = ["OPS", "build", "order", "steps", "rounds"]

OPS = ("allreduce", "reducescatter", "allgather")


def build(peers, op: str, elements: int, segment: int = 0):
    """The bidirectional ring's schedule, in segments of ``segment`` elements (0: whole)."""
    return build_rings(peers, op, elements, 2, "biring", segment)


def order(peers, op: str, elements: int):
    """Each half folded along its own direction."""
    return order_rings(peers, op, elements, 2)


def steps(peers, op: str) -> int:
    """Twice the ring's: one step per direction per round."""
    return 2 * ring_steps(peers, op)


def rounds(peers, op: str, elements: int):
    """The ring's rounds, each writing both halves' chunks (one per direction)."""
    return ring_rounds(peers, op, elements, 2)
