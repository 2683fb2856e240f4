"""Golden model of :class:`superfabric.hdl.islip.ISLIP`, compiled.

:func:`islip_match` is the rule the switch model's cycle kernel calls, on
requests held as bit masks of inputs per (output, class), so an iteration
costs O(ports x classes), not O(ports^2). :class:`ISLIPModel` holds the
pointers for a caller outside the kernel (the block-level tests).
"""

import numpy as np

from .arbiter import first_at_or_after
from .kernel import kernel

__all__ = ["islip_match", "highest_class", "ISLIPModel", "NO_REQUEST"]

#: ``level[i][o]`` of an input that requests nothing toward an output.
NO_REQUEST = -1

#: The highest set bit of a class mask (at most eight classes), -1 for none.
_HIGHEST = np.array([b.bit_length() - 1 for b in range(256)], np.int64)


@kernel(inline=True)
def highest_class(classes):
    """The highest class set in a mask of at most eight classes, -1 for none."""
    return _HIGHEST[classes]


@kernel(inline=True)
def islip_match(req, g_ptr, a_ptr, iterations, match_out, match_prio, grant_to, grant_prio,
                grants):
    """Prioritised packet-mode iSLIP (docs/architecture.md section 4.4).

    ``req[o, p]`` has bit ``i`` set when ``p`` is the highest class input
    ``i`` requests toward output ``o``. Writes each input's match into
    ``match_out[i]`` and ``match_prio[i]`` (-1 when unmatched) and moves the
    grant pointers ``g_ptr[o, p]`` and accept pointers ``a_ptr[i, p]`` for
    first-iteration matches. ``grant_to`` and ``grant_prio`` (per output)
    and ``grants`` (per [input, class]) are scratch.
    """
    n, classes = g_ptr.shape
    for k in range(n):
        match_out[k] = -1
        match_prio[k] = -1
    in_matched = 0
    out_matched = 0
    for it in range(iterations):
        # Grant: each unmatched output takes the highest class with an
        # unmatched request, then the first such input at or after its pointer.
        granted = 0
        for o in range(n):
            grant_to[o] = -1
            if out_matched >> o & 1:
                continue
            for p in range(classes - 1, -1, -1):
                waiting = req[o, p] & ~in_matched
                if waiting:
                    i = first_at_or_after(waiting, g_ptr[o, p])
                    grant_to[o] = i
                    grant_prio[o] = p
                    granted |= 1 << i
                    break
        if not granted:
            break
        for o in range(n):
            i = grant_to[o]
            if i >= 0:
                for p in range(classes):
                    grants[i, p] = 0
        for o in range(n):
            i = grant_to[o]
            if i >= 0:
                grants[i, grant_prio[o]] |= 1 << o
        # Accept: each granted input takes its highest granted class, then the
        # first granting output of that class at or after its pointer.
        for i in range(n):
            if not granted >> i & 1:
                continue
            for p in range(classes - 1, -1, -1):
                offers = grants[i, p]
                if offers:
                    o = first_at_or_after(offers, a_ptr[i, p])
                    match_out[i] = o
                    match_prio[i] = p
                    in_matched |= 1 << i
                    out_matched |= 1 << o
                    if it == 0:
                        a_ptr[i, p] = o + 1 if o + 1 < n else 0
                        g_ptr[o, p] = i + 1 if i + 1 < n else 0
                    break


class ISLIPModel:
    """The pointers of one scheduler and :func:`islip_match` on them.

    ``match(level)`` takes ``level[i][o]``, the highest class input ``i``
    requests toward output ``o`` (:data:`NO_REQUEST` for none), and returns
    for each input ``(output, class)`` or ``None``.
    """

    def __init__(self, ports: int, priorities: int, iterations: int):
        self.n = ports
        self.p = priorities
        self.iterations = iterations
        self.g_ptr = np.zeros((ports, priorities), np.int64)
        self.a_ptr = np.zeros((ports, priorities), np.int64)
        self._req = np.zeros((ports, priorities), np.int64)
        self._out = np.zeros(ports, np.int64)
        self._prio = np.zeros(ports, np.int64)
        self._grant_to = np.zeros(ports, np.int64)
        self._grant_prio = np.zeros(ports, np.int64)
        self._grants = np.zeros((ports, priorities), np.int64)

    def match(self, level) -> list:
        self._req[:] = 0
        for i, row in enumerate(level):
            for o, p in enumerate(row):
                if p >= 0:
                    self._req[o, p] |= 1 << i
        islip_match(self._req, self.g_ptr, self.a_ptr, self.iterations, self._out, self._prio,
                    self._grant_to, self._grant_prio, self._grants)
        return [None if o < 0 else (int(o), int(p)) for o, p in zip(self._out, self._prio)]
