"""The routing functions of the fabric (docs/architecture.md section 11.4), defined once.

A router decides, when a packet's head flit enters its input buffer, the
output port and the virtual channel the packet leaves by, from its own
place in the topology, the packet's source and destination endpoints and
class, and the credits it holds for its link outputs. These functions are
that decision; the golden model compiles them (they use integers and
arrays only), the deadlock check (``superfabric.network.deadlock``) walks them, and
the RTL's routing logic is held against them block by block.

``credits`` is this router's credit counters, indexed ``[port, prio, vc]``
(endpoint ports' entries are never read).
"""

__all__ = ["dimension_rank", "torus_dor_hop", "class_vcs", "best_vc", "torus_escape",
           "dor_margin", "torus_route", "ecmp_hash", "ecmp_vc", "fat_tree_route", "ESCAPE_VCS"]

#: Under adaptive torus routing, VCs 0 (lower) and 1 (upper) form the escape network.
ESCAPE_VCS = 2


def dimension_rank(dims, d, longest_first):
    """Where dimension ``d`` comes in the order dimension-order hops take the dimensions.

    ``dor`` takes the lowest dimension first. The escape of ``adaptive``
    (``longest_first``) takes the longest ring first, the lowest of equal
    rings, so that it turns the way the adaptive first choice (the longest
    remaining dimension) mostly does: on the 4x8 torus under tornado, an
    escape that took the 4-ring first made every packet that left its first
    choice for its escape turn early into the short ring and come back, and
    adaptive accepted up to 0.019 less than ``dor`` just past saturation
    (section 11.4). Any fixed order keeps the escape network acyclic (11.6).
    """
    if not longest_first:
        return d
    rank = 0
    for e in range(len(dims)):
        if dims[e] > dims[d] or (dims[e] == dims[d] and e < d):
            rank += 1
    return rank


def torus_dor_hop(dims, m, r, s, t, longest_first=False):
    """The dimension-order hop at router ``r`` toward router ``t`` of a packet from router ``s``.

    Returns ``(port, upper)``: the link port (``m + 2d`` plus, ``m + 2d + 1``
    minus) of the first unfinished dimension in :func:`dimension_rank`'s
    order, and whether the hop is in the upper VC class: the packet's path in
    this dimension crosses the dateline (plus from ``s_d > t_d``, minus from
    ``s_d < t_d``), the class of every hop of that path (section 11.4). ``r != t``.
    """
    port, upper, first = -1, False, len(dims)
    stride = 1
    for d in range(len(dims)):
        k = dims[d]
        here = stride
        stride *= k
        rank = dimension_rank(dims, d, longest_first)
        if rank > first:
            continue
        x = r // here % k
        xt = t // here % k
        xs = s // here % k
        if x == xt:
            continue
        first = rank
        delta = (xt - x) % k
        if delta <= k - delta:          # plus; a tie (delta = k/2) goes plus
            port, upper = m + 2 * d, xs > xt
        else:
            port, upper = m + 2 * d + 1, xs < xt
    return port, upper


def class_vcs(upper, vcs, adaptive):
    """The VCs ``[lo, hi)`` of a dimension-order hop's class.

    Dimension order splits the VCs in halves, lower and upper; under adaptive
    routing the escape VCs are 0 (lower) and 1 (upper). With one VC both
    classes are VC 0, which is what lets a ring deadlock.
    """
    if adaptive:
        return (1, 2) if upper else (0, 1)
    if vcs == 1:
        return 0, 1
    half = vcs // 2
    return (half, vcs) if upper else (0, half)


def best_vc(credits, port, prio, lo, hi):
    """The VC in ``[lo, hi)`` with the most credits toward ``port`` (ties: the lowest),
    and its credits."""
    vc, most = lo, credits[port, prio, lo]
    for v in range(lo + 1, hi):
        if credits[port, prio, v] > most:
            vc, most = v, credits[port, prio, v]
    return vc, most


def torus_escape(dims, m, r, src, dst, prio, vcs, adaptive):
    """The dimension-order hop and its VC at torus router ``r`` (``r`` is not the
    destination's router): under ``dor`` the route, under ``adaptive`` the escape."""
    port, upper = torus_dor_hop(dims, m, r, src // m, dst // m, adaptive)
    lo, hi = class_vcs(upper, vcs, adaptive)
    # A flow keeps one VC of its class (ecmp_vc), so under dor it arrives in order.
    return port, lo + ecmp_vc(src, dst, prio, hi - lo)


def dor_margin(max_packet):
    """The credits by which another minimal direction must lead to take an adaptive
    packet off its first choice, the longest remaining dimension's hop: three
    quarters of the longest packet.

    Choosing by credits alone moves packets off that hop whenever its port's
    credits dip by the packets under way on its link, and gathers traffic that
    dimension order spreads one input to one output (tornado) onto shared
    outputs (section 11.4). The margin must exceed those dips: with 16-flit packets, 12
    keeps tornado traffic on the 4x4x4 torus on dimension order up to load 1.0, where 8
    did not quite.
    """
    return 3 * max_packet // 4


def torus_route(dims, m, r, src, dst, prio, vcs, adaptive, credits, max_packet):
    """Output port and VC at torus router ``r`` for a packet from endpoint ``src`` to ``dst``.

    Under ``adaptive`` a VC ``>= ESCAPE_VCS`` is an adaptive choice: the
    router reserves the packet's room in it at once (section 11.4), if the
    room is still there after the choices of lower inputs in the same cycle.
    """
    t = dst // m
    if r == t:
        return dst % m, 0
    if adaptive:
        # The longest remaining dimension first (the lowest of equals), on the
        # flow's adaptive VC (one of them, as ecmp_vc picks), while it has room
        # for the longest packet and no other candidate has more than dor_margin
        # credits more on it: a candidate is a minimal direction of a dimension
        # with as many hops left. Else the escape, if it has that room (the
        # packet can start at once on the hop dimension order takes); else the
        # candidate with the most credits, if it has that room; else the escape
        # (dimension order, dateline).
        longest, first_port = -1, -1
        stride = 1
        for d in range(len(dims)):
            k = dims[d]
            delta = (t // stride % k - r // stride % k) % k
            stride *= k
            if delta and min(delta, k - delta) > longest:
                longest = min(delta, k - delta)
                first_port = m + 2 * d + (0 if delta <= k - delta else 1)
        flow = ESCAPE_VCS + ecmp_vc(src, dst, prio, vcs - ESCAPE_VCS)
        first_most = credits[first_port, prio, flow]
        best_port, most = -1, -1
        stride = 1
        for d in range(len(dims)):
            k = dims[d]
            delta = (t // stride % k - r // stride % k) % k
            stride *= k
            if delta == 0 or min(delta, k - delta) < longest:
                continue
            for minus in range(2):
                if (minus == 0 and delta <= k - delta) or (minus == 1 and delta >= k - delta):
                    cand = m + 2 * d + minus
                    c = credits[cand, prio, flow]
                    if c > most:
                        best_port, most = cand, c
        if first_most >= max_packet and first_most + dor_margin(max_packet) >= most:
            return first_port, flow
        port, vc = torus_escape(dims, m, r, src, dst, prio, vcs, adaptive)
        if credits[port, prio, vc] >= max_packet:
            return port, vc
        if most >= max_packet:
            return best_port, flow
    return torus_escape(dims, m, r, src, dst, prio, vcs, adaptive)


def ecmp_hash(src, dst, flow):
    """The 16-bit hash that picks a fat-tree packet's spine under ``ecmp`` and a flow's VC
    (:func:`ecmp_vc`). Its operands are widened first: the model's are narrow numpy
    integers, which under ``NUMBA_DISABLE_JIT`` would overflow in the multiplication."""
    x = int(src) | int(dst) << 10 | int(flow) << 20
    x ^= x >> 7
    x = x * 0x9E3779B1 & 0xFFFFFFFF
    x ^= x >> 15
    return x & 0xFFFF


def ecmp_vc(src, dst, flow, vcs):
    """A flow's VC among ``vcs``: on every link of a fat tree under ``ecmp``, within a hop's
    dateline class on a torus under ``dor``. From the hash's high byte (a fat tree's spine
    takes the low bits), so a flow keeps one VC, hence one queue at every router of its one
    path, and arrives in order, as RDMA's go-back-N needs."""
    return (ecmp_hash(src, dst, flow) >> 8) % vcs


def fat_tree_route(leaves, spines, hosts, r, src, dst, prio, vcs, adaptive, credits):
    """Output port and VC at fat-tree router ``r`` for a packet from ``src`` to ``dst``."""
    t = dst // hosts
    if r < leaves:
        if t == r:
            return dst % hosts, 0
        if adaptive:
            spine, most = 0, -1
            for s in range(spines):
                _, c = best_vc(credits, hosts + s, prio, 0, vcs)
                if c > most:
                    spine, most = s, c
        else:
            spine = ecmp_hash(src, dst, prio) % spines
        port = hosts + spine
    else:
        port = t
    if adaptive:
        vc, _ = best_vc(credits, port, prio, 0, vcs)
    else:
        vc = ecmp_vc(src, dst, prio, vcs)
    return port, vc
