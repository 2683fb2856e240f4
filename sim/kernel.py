"""How the model's cycle kernels are compiled.

Every rule of the model that runs per cycle is a plain Python function over
numpy arrays and integers, compiled with numba through :func:`kernel`, so
that a whole run stays inside compiled code. ``NUMBA_DISABLE_JIT=1`` runs the
same source as Python, for debugging with print and pdb.

The kernels are compiled without numba's reference counting of arrays
(``_nrt=False``): they never allocate, they only read and write the arrays
their callers own, and with the counting on, every call and every copy of
the state tuples increments and decrements an atomic counter per array,
which cost more than half the time of a cycle. Compiled code is cached on
disk (``cache=True``), so only the first run on a machine pays the compiler.
"""

from numba import njit, typeof
from numba.core.dispatcher import Dispatcher

__all__ = ["kernel", "specialise"]


def kernel(function=None, *, inline: bool = False):
    """Compile ``function`` as a model kernel; ``inline=True`` for a rule that a
    larger kernel calls every cycle (it is compiled into its callers)."""
    options = {"cache": True, "_nrt": False}
    if inline:
        options["inline"] = "always"
    if function is None:
        return njit(**options)
    return njit(**options)(function)


def specialise(function, *args):
    """``function`` compiled for the types of ``args``, to be called with values of
    those types without numba's per-call dispatch.

    Dispatch types every argument on each call, which for a state tuple of
    dozens of arrays costs tens of microseconds, far more than a cycle; a
    caller stepping the model one cycle at a time from Python (the RDMA
    fabric, the testbench's sources) holds the specialised entry instead.
    Under ``NUMBA_DISABLE_JIT`` it is ``function`` itself.
    """
    if not isinstance(function, Dispatcher):
        return function
    return function.compile(tuple(typeof(a) for a in args))
