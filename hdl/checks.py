"""The argument checks of the blocks' constructors.

A block built with a wrong argument fails at once, in one line that names
the argument and its value, rather than deep inside its elaboration (the
pattern of Amaranth's own ``SyncFIFO(*, width, depth)``).
"""

from amaranth.hdl import Shape

from ..config import FabricConfig

__all__ = ["check_config", "check_count", "check_shape"]


def check_config(cfg) -> None:
    """``cfg`` must be a :class:`~superfabric.config.FabricConfig`."""
    if not isinstance(cfg, FabricConfig):
        raise TypeError(f"cfg must be a FabricConfig, not {cfg!r}")


def check_count(name: str, value, *, least: int = 1) -> None:
    """``value`` (the argument ``name``) must be an integer of at least ``least``."""
    what = "a positive integer" if least == 1 else f"an integer of at least {least}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {what}, not {value!r}")
    if value < least:
        raise ValueError(f"{name} must be {what}, not {value!r}")


def check_shape(name: str, value) -> Shape:
    """``value`` (the argument ``name``) must be a shape; returns it as a :class:`Shape`."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return Shape.cast(value)
    except TypeError:
        raise TypeError(f"{name} must be a shape, not {value!r}") from None
