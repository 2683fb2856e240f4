"""The fabrics the collective tests run on, as the project builds configurations: presets and
overrides."""

from functools import lru_cache

from superfabric.config import FabricConfig
from superfabric.sim.collective.peers import Peers

FABRICS = {
    "torus-2x2x2": ["fabric.topology=torus", "fabric.dims=[2, 2, 2]"],
    "torus-4x4x4": ["fabric.topology=torus", "fabric.dims=[4, 4, 4]"],
    "leaf-spine-4": ["fabric.topology=fat_tree", "fabric.routing=ecmp", "fabric.leaves=4"],
}


@lru_cache(maxsize=None)
def config(name: str) -> FabricConfig:
    """The configuration of fabric ``name`` (:data:`FABRICS`), or of a tuple of overrides."""
    return FabricConfig.load(overrides=list(FABRICS.get(name, name)))


@lru_cache(maxsize=None)
def peers(name) -> Peers:
    """The accelerators of fabric ``name``."""
    return Peers.of(config(name))
