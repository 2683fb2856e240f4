"""Golden model of :class:`superfabric.hdl.islip.ISLIP`."""

__all__ = ["ISLIPModel"]


class ISLIPModel:
    """Prioritised packet-mode iSLIP; the rules are those of the RTL's docstring.

    ``match(level)`` takes ``level[i][o]``, the highest class input ``i``
    requests toward output ``o`` (-1 for none), and returns for each input
    ``(output, class)`` or ``None``. Pointers move for first-iteration
    matches only.
    """

    def __init__(self, ports: int, priorities: int, iterations: int):
        self.n = ports
        self.p = priorities
        self.iterations = iterations
        self.g_ptr = [[0] * priorities for _ in range(ports)]
        self.a_ptr = [[0] * priorities for _ in range(ports)]

    def match(self, level):
        n = self.n
        in_m = [False] * n
        out_m = [False] * n
        result = [None] * n
        for it in range(self.iterations):
            grants = {}
            for o in range(n):
                if out_m[o]:
                    continue
                best = -1
                for i in range(n):
                    if not in_m[i] and level[i][o] > best:
                        best = level[i][o]
                if best < 0:
                    continue
                ptr = self.g_ptr[o][best]
                for k in range(n):
                    i = (ptr + k) % n
                    if not in_m[i] and level[i][o] == best:
                        grants.setdefault(i, []).append((o, best))
                        break
            if not grants:
                break
            for i, offers in grants.items():
                best = max(p for _, p in offers)
                ptr = self.a_ptr[i][best]
                o = min((o for o, p in offers if p == best), key=lambda o: (o - ptr) % n)
                result[i] = (o, best)
                in_m[i] = True
                out_m[o] = True
                if it == 0:
                    self.a_ptr[i][best] = (o + 1) % n
                    self.g_ptr[o][best] = (i + 1) % n
        return result
