"""How the model's cycle kernels are compiled.

Every rule of the model that runs per cycle is a plain Python function over
numpy arrays and integers, compiled with numba through :func:`kernel`, so
that a whole run stays inside compiled code. ``NUMBA_DISABLE_JIT=1`` runs the
same source as Python, for debugging with print and pdb.

The kernels are compiled without numba's reference counting of arrays
(``_nrt=False``): they never allocate, they only read and write the arrays
their callers own, and with the counting on, every call and every copy of
the state tuples increments and decrements an atomic counter per array,
which cost more than half the time of a cycle. They run without Python's
lock (``nogil``), so that a fabric's routers can be stepped on several
threads at once (``sim/threads.py``). Compiled code is cached on
disk (``cache=True``), so only the first run on a machine pays the compiler.

numba checks a cached kernel against its own source file only, but a kernel
compiles in the rules it calls from other files (``router_cycle`` into the
fabric's run loop, the routing function into both): edit one of those and
numba would load the stale kernel. So the cache lives in a directory named
after a digest of every source the kernels are compiled from
(:func:`cache_dir`), and any edit of them starts a fresh one. A user's own
``NUMBA_CACHE_DIR`` is left alone.
"""

import hashlib
import os
from pathlib import Path

import numba
from numba import njit, typeof
from numba.core.dispatcher import Dispatcher

from .. import formats, network

__all__ = ["kernel", "specialise", "cache_dir", "sources_digest"]

#: The packages whose sources the kernels are compiled from: the models, and the
#: packet formats and the routing they share with the RTL.
_KERNEL_SOURCES = (Path(__file__).resolve().parent, Path(formats.__file__).resolve().parent,
                   Path(network.__file__).resolve().parent)


def sources_digest(leave_out: tuple[str, ...] = ()) -> str:
    """A digest of every file of :data:`_KERNEL_SOURCES` but those named in ``leave_out``
    (as ``sim/collective/alpha_beta.py``)."""
    digest = hashlib.sha256()
    for folder in _KERNEL_SOURCES:
        for path in sorted(folder.rglob("*.py")):
            name = f"{folder.name}/{path.relative_to(folder)}"
            if name not in leave_out:
                digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """Where the compiled kernels of these sources are cached:
    ``$XDG_CACHE_HOME/superfabric/numba/<digest>`` (default ``~/.cache``), the digest
    of every file of :data:`_KERNEL_SOURCES`."""
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return home / "superfabric" / "numba" / sources_digest()


if not os.environ.get("NUMBA_CACHE_DIR"):
    numba.config.CACHE_DIR = str(cache_dir())


def kernel(function=None, *, inline: bool = False):
    """Compile ``function`` as a model kernel; ``inline=True`` for a rule that a
    larger kernel calls every cycle (it is compiled into its callers)."""
    options = {"cache": True, "_nrt": False, "nogil": True}
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
