"""Figures of an RDMA run: requests, goodput, latency, recovery, data, connection state,
congestion (the congested queue, pause frames, CNPs, rates, fairness, the victim).

:func:`rdma_summary` is the ``rdma`` section of ``results.json``
(``docs/architecture.md`` section 10.9); it reads the workload and the
records of one execution, the model's or the RTL's.
"""

import math

import numpy as np

from ...config import FabricConfig
from ...formats.counters import DCQCN_COUNTERS
from ...formats.dcqcn import LINE_RATE
from ...formats.rdma_wire import (EPOCH_BITS, OP_SEND, PSN_BITS, STATUS_NAMES, STATUS_OK,
                                 descriptor_fields, payload_words)
from ...network.topology import Topology
from ..metrics import latency_figures
from .keys import KeyTable
from .traffic import RdmaWorkload, incast_roles, wr_cost

__all__ = ["rdma_summary", "connection_state", "data_check", "congestion", "jain_index",
           "rate_steps", "RECOVERY_COUNTERS", "FAIRNESS_WINDOW", "FAIR_JAIN"]

#: Counters reported with their total and per endpoint: how the engines recovered.
RECOVERY_COUNTERS = ("retransmissions", "naks", "timeouts", "duplicates", "corrupt",
                     "out_of_sequence")
#: Cycles of the windows over which fairness is followed in time.
FAIRNESS_WINDOW = 8192
#: Jain's index from which the senders' shares count as fair.
FAIR_JAIN = 0.95


def rdma_summary(cfg: FabricConfig, workload: RdmaWorkload, records) -> dict:
    """The ``rdma`` section of ``results.json``.

    Parameters
    ----------
    cfg : FabricConfig
    workload : RdmaWorkload
    records : RdmaRecords
        Indexed like the workload's rows (``sim/rdma/records.py``).

    Returns
    -------
    dict
        ``requests`` (posted, taken, completed, ok, by status, not
        completed, completions whose status differs from the intended one,
        WRs completed more than once), ``offered_load`` (share of the
        uplinks the WRs would occupy), ``offered_words`` (their payload
        words per window cycle per endpoint), ``goodput`` (payload words of OK
        completions given within the posting window, per cycle of the
        window per endpoint), ``goodput_run`` (all OK words per simulated
        cycle per endpoint), ``latency`` (``done - post`` of OK completions),
        ``rx_completions``, the :data:`RECOVERY_COUNTERS` (``total`` and
        ``per_endpoint``), ``counters`` (all, per endpoint), ``per_endpoint``
        (``offered_words`` and ``goodput`` of each endpoint port, as sources),
        ``per_accelerator`` and ``per_router`` (:func:`_by_place`), ``links``
        (:func:`_links`), ``data`` (:func:`data_check`), ``connection_state``
        (:func:`connection_state`), ``congestion`` (:func:`congestion`), ``cycles``,
        ``stalled``, ``stuck``.
    """
    wr = workload.wr
    E = cfg.endpoints
    n = len(workload)
    status = np.asarray(records.status)
    done = np.asarray(records.done, np.int64)
    completed = status >= 0
    ok = status == STATUS_OK
    length = wr["length"].astype(np.int64)
    window = max(workload.cycles, 1)
    unexpected = np.flatnonzero(completed & (status != wr["expect"]))
    mtu = payload_words(cfg.switch.max_packet_flits)
    counters = records.counters
    return {
        "requests": {
            "posted": n,
            "taken": int((np.asarray(records.taken) >= 0).sum()),
            "completed": int(completed.sum()),
            "ok": int(ok.sum()),
            "by_status": {name: int((status == s).sum()) for s, name in STATUS_NAMES.items()},
            "not_completed": int(n - completed.sum()),
            "unexpected_status": int(unexpected.size),
            "first_unexpected": int(wr["tag"][unexpected[0]]) if unexpected.size else None,
            "repeated_completions": int((np.asarray(records.completions) > 1).sum()),
        },
        "offered_load": float(wr_cost(length, mtu).sum() / window / E),
        "offered_words": float(length.sum() / window / E),
        "goodput": float(length[ok & (done < workload.cycles)].sum() / window / E),
        "goodput_run": float(length[ok].sum() / max(records.cycles, 1) / E),
        "latency": latency_figures((done - wr["post"])[ok]),
        "rx_completions": {"count": int(len(records.rx_completions)),
                           "expected": int((ok & (wr["opcode"] == OP_SEND)).sum())},
        **{name: {"total": int(sum(counters.get(name, []))),
                  "per_endpoint": [int(v) for v in counters.get(name, [])]}
           for name in RECOVERY_COUNTERS},
        "counters": {name: [int(v) for v in values] for name, values in counters.items()},
        **_by_place(cfg, workload, records),
        "links": _links(cfg, records),
        "data": data_check(cfg, workload, records),
        "connection_state": connection_state(cfg, workload),
        "congestion": congestion(cfg, workload, records),
        "cycles": int(records.cycles),
        "stalled": bool(records.stalled),
        "stuck": records.stuck or None,
    }


def _by_place(cfg: FabricConfig, workload: RdmaWorkload, records) -> dict:
    """``per_endpoint``, ``per_accelerator`` and ``per_router`` of :func:`rdma_summary`: what
    each port and each accelerator (its ports summed) offered and delivered, as sources, in
    payload words per cycle of the posting window, and the accelerators' recovery counters;
    per router, the pause frames it sent to its engines and its engines' retransmissions,
    CE-marked arrivals and CNPs."""
    wr, topo = workload.wr, Topology.of(cfg)
    E, window = topo.endpoints, max(workload.cycles, 1)
    src, length = wr["src"].astype(np.int64), wr["length"].astype(np.int64)
    delivered = (np.asarray(records.status) == STATUS_OK) & \
        (np.asarray(records.done, np.int64) < workload.cycles)
    offered = np.bincount(src, weights=length, minlength=E) / window
    goodput = np.bincount(src, weights=length * delivered, minlength=E) / window
    ports = [list(p) for p in topo.accelerator_ports]
    at = [list(topo.router_endpoints(r)) for r in range(topo.routers)]
    counters = records.counters
    frames = np.asarray(records.pfc_frames)
    paused = np.bincount(frames[:, 1], minlength=E) if len(frames) else np.zeros(E, np.int64)

    def sums(names, groups):
        return {name: [int(sum(counters[name][e] for e in g)) for g in groups]
                for name in names if name in counters}

    return {
        "per_endpoint": {"offered_words": offered.tolist(), "goodput": goodput.tolist()},
        "per_accelerator": {
            "ports": ports,
            "offered_words": [float(offered[p].sum()) for p in ports],
            "goodput": [float(goodput[p].sum()) for p in ports],
            **sums(RECOVERY_COUNTERS, ports)},
        "per_router": {
            "endpoints": at,
            "pause_frames": [int(paused[g].sum()) for g in at],
            **sums(("retransmissions", *DCQCN_COUNTERS), at)},
    }


def _links(cfg: FabricConfig, records) -> dict | None:
    """On a fabric, every directed link (``Topology.links``: router, port, peer router,
    peer port), the flits sent over it and its ``utilisation`` (flits per cycle of the run),
    which the report draws as the fabric's heatmap; None for the switch."""
    if not cfg.fabric.is_fabric:
        return None
    flits = np.asarray(records.link_flits, np.int64)
    return {"links": [list(link) for link in Topology.of(cfg).links], "flits": flits.tolist(),
            "utilisation": (flits / max(records.cycles, 1)).tolist()}


def data_check(cfg: FabricConfig, workload: RdmaWorkload, records) -> dict:
    """Whether host memory at the end holds what the OK completions promise.

    For every WR completed OK, its receive range at the target (through the
    target's tables) must hold the source's send words (through the
    source's tables, from the memory at the start). Every other word must
    be unchanged: a changed word outside those ranges is *stray*, written by
    a WR that failed, a duplicate, or a wrong translation.

    Returns
    -------
    dict
        ``checked`` (OK WRs), ``intact``, ``corrupted``, ``first_corrupted``
        (tag or None) and ``stray_words``.
    """
    wr = workload.wr
    E = cfg.endpoints
    tables = [KeyTable(workload.keys[e], workload.page_table[e], cfg) for e in range(E)]
    start, end = workload.memory, np.asarray(records.memory, np.uint64)
    written = np.zeros(end.shape, bool)
    corrupted = []
    rows = np.flatnonzero(np.asarray(records.status) == STATUS_OK)
    for i in rows:
        s, d, n = int(wr["src"][i]), int(wr["dst"][i]), int(wr["length"][i])
        source = tables[s].addresses(int(wr["lkey"][i]), int(wr["laddr"][i]), n)
        target = tables[d].addresses(int(wr["rkey"][i]), int(wr["raddr"][i]), n)
        written[d, target] = True
        if not np.array_equal(end[d, target], start[s, source]):
            corrupted.append(int(wr["tag"][i]))
    return {"checked": int(rows.size), "intact": int(rows.size - len(corrupted)),
            "corrupted": len(corrupted), "first_corrupted": corrupted[0] if corrupted else None,
            "stray_words": int(((end != start) & ~written).sum())}


def connection_state(cfg: FabricConfig, workload: RdmaWorkload | None = None, *,
                     qps_per_endpoint: int | None = None) -> dict:
    """Reliability state of channel aggregation against one connection per QP.

    A channel (or a per-QP connection) holds, at the sender, five 24-bit
    PSNs (``nxt``, ``snd``, ``una``, ``ret``, ``hsn``), a retransmission
    timer of ``bit_length(retransmit_timeout)`` bits, the ``msgerr`` bit,
    the 2-bit ``epoch`` and a window of ``W`` packet descriptors
    (``descriptor_fields(M)``) with an ``err`` bit each; at the receiver a
    context of ``epsn`` and ``denied`` (24 each), five flag bits, its epoch,
    ``unacked`` (``bit_length(W)``) and an ack timer
    (``bit_length(ack_timeout)``). Each side is rounded up to whole bytes.
    Aggregation uses ``(E - 1) * C`` channels per endpoint, as many as the RTL
    holds (none toward itself); one connection per QP would need ``Q`` per
    endpoint. Fabric totals count both ends of every channel.

    With a workload, also the channels and QPs that carry a WR meant to
    succeed. ``qps_per_endpoint`` stands for ``rdma.qps / E`` where a fabric's
    QPs are more than ``rdma.qps`` can be (a supernode's 384 accelerators with
    1,024 QPs each): the state is a formula of the configuration, nothing runs.
    """
    sw, r = cfg.switch, cfg.rdma
    E = cfg.endpoints
    C, W = r.channels_per_peer, r.window
    Q = r.qps // E if qps_per_endpoint is None else qps_per_endpoint
    slot = sum(width for _, width in descriptor_fields(payload_words(sw.max_packet_flits))) + 1
    sender_bits = 5 * PSN_BITS + r.retransmit_timeout.bit_length() + 1 + EPOCH_BITS + W * slot
    receiver_bits = 2 * PSN_BITS + 5 + EPOCH_BITS + W.bit_length() + r.ack_timeout.bit_length()
    per_channel = math.ceil(sender_bits / 8) + math.ceil(receiver_bits / 8)
    channels = (E - 1) * C
    aggregated = E * channels * per_channel
    per_qp = E * Q * per_channel
    out = {"sender_bits": sender_bits, "receiver_bits": receiver_bits,
           "bytes_per_channel": per_channel,
           "channels_per_endpoint": channels, "aggregated_bytes": aggregated,
           "connections_per_endpoint": Q, "per_qp_bytes": per_qp,
           "reduction": per_qp / aggregated}
    if workload is not None:
        wr = workload.wr
        good = wr["expect"] == STATUS_OK
        src, dst, qp = (wr[c][good].astype(np.int64) for c in ("src", "dst", "qp"))
        out["channels_carrying_traffic"] = int(np.unique((src * E + dst) * C + qp % C).size)
        out["qps_carrying_traffic"] = int(np.unique(src * (1 << 32) + qp).size)
    return out


def jain_index(values) -> float | None:
    """Jain's fairness index, ``(sum x)**2 / (n sum x**2)``: 1 when all are equal, 1/n
    when one takes everything; None for no values or all zero."""
    x = np.asarray(values, np.float64)
    square = float((x ** 2).sum())
    return float(x.sum() ** 2 / (len(x) * square)) if len(x) and square else None


def rate_steps(records, endpoint: int, channel: int) -> tuple[np.ndarray, np.ndarray]:
    """Channel ``channel`` of ``endpoint``'s rate as a step function: ``(cycles, shares)``,
    each share of the line rate holding from its cycle to the next (the line rate from 0)."""
    rows = np.asarray(records.rates)
    mine = rows[(rows[:, 1] == endpoint) & (rows[:, 2] == channel)]
    return (np.concatenate(([0], mine[:, 0] + 1)).astype(np.int64),
            np.concatenate(([1.0], mine[:, 3] / LINE_RATE)))


def congestion(cfg: FabricConfig, workload: RdmaWorkload, records) -> dict:
    """How the fabric handled its congested output: queue, pauses, CNPs, fairness, victims.

    The congested accelerator is the target of ``rdma-incast`` and ``rdma-victim``
    (:func:`~.rdma_traffic.incast_roles`), else the accelerator that receives the
    most payload; its senders the accelerators with requests to it (with one port per
    accelerator, accelerators are endpoints). Goodput is
    counted as in :func:`rdma_summary`, payload words of requests completed OK
    within the posting window, per cycle of it.

    Returns
    -------
    dict
        ``target``, ``target_ports`` (its endpoints), ``senders``; ``queue`` (the flits
        inside the fabric bound for the target's ports, per cycle over the run:
        ``mean``, ``p50``, ``p99``, ``max``, ``kmax`` and ``cycles_over_kmax`` with
        ECN); ``pause_frames``
        (``sent``, ``pauses`` with a non-zero time, ``resumes``, ``per_port``);
        ``cnp`` (``sent``, ``handled``, ``ecn_marked``: the counters' totals);
        ``goodput_per_sender`` toward the target, ``fair_share`` (their mean),
        ``jain`` over them; ``window`` (:data:`FAIRNESS_WINDOW`), ``jain_per_window``
        (the full windows of the posting window), ``converge_cycle`` (the start of the
        first window from which every one is fair, Jain's index at least
        :data:`FAIR_JAIN`; None if the last is not); ``rate_changes``,
        ``lowest_rate`` (a share of the line rate; None without a change);
        ``victim``: for ``rdma-victim``, the victim's ``demand`` and ``goodput``
        toward the bystander (payload words per cycle of the posting window) and
        their ratio ``share``, else None.
    """
    wr, topo = workload.wr, Topology.of(cfg)
    E = topo.endpoints
    window = max(workload.cycles, 1)
    status, done = np.asarray(records.status), np.asarray(records.done, np.int64)
    length = wr["length"].astype(np.int64)
    # Accelerators, not ports: with several ports an accelerator's traffic is spread
    # over them (section 11.2).
    accelerator = np.array(topo.endpoint_accelerator, np.int64)
    src, dst = accelerator[wr["src"]], accelerator[wr["dst"]]
    in_window = (status == STATUS_OK) & (done < workload.cycles)
    roles = incast_roles(workload)
    if roles is not None:
        target, senders = roles["target"], list(roles["senders"])
    else:
        target = (int(np.bincount(dst, weights=length, minlength=topo.accelerators).argmax())
                  if len(wr["dst"]) else 0)
        senders = sorted(set(src[dst == target].tolist()))
    goodput = [float(length[in_window & (src == e) & (dst == target)].sum() / window)
               for e in senders]

    depth = np.asarray(records.queue_depth)
    ports = list(topo.accelerator_ports[target])
    q = depth[:, ports].sum(axis=1).astype(np.float64) if depth.size else np.zeros(0)
    kmax = cfg.ecn.kmax if cfg.ecn.enabled else None
    queue = {"mean": float(q.mean()) if q.size else None,
             "p50": float(np.percentile(q, 50)) if q.size else None,
             "p99": float(np.percentile(q, 99)) if q.size else None,
             "max": float(q.max()) if q.size else None, "kmax": kmax,
             "cycles_over_kmax": int((q > kmax).sum()) if kmax is not None else None}

    frames = np.asarray(records.pfc_frames)
    pausing = (frames[:, 3:] > 0).any(axis=1) if len(frames) else np.zeros(0, bool)
    pauses = {"sent": int(len(frames)), "pauses": int(pausing.sum()),
              "resumes": int(len(frames) - pausing.sum()),
              "per_port": np.bincount(frames[:, 1], minlength=E).tolist() if len(frames)
              else [0] * E}

    counters = records.counters
    cnp = {name: int(sum(counters.get(key, []))) for name, key in
           (("sent", "cnp_sent"), ("handled", "cnp_handled"), ("ecn_marked", "ecn_marked"))}

    step = FAIRNESS_WINDOW
    per_window = []
    for start in range(0, workload.cycles - step + 1, step):
        inside = in_window & (done >= start) & (done < start + step) & (dst == target)
        per_window.append(jain_index([length[inside & (src == e)].sum() for e in senders]))
    unfair = [k for k, j in enumerate(per_window) if j is None or j < FAIR_JAIN]
    converge = None if not per_window or (unfair and unfair[-1] == len(per_window) - 1) \
        else (unfair[-1] + 1) * step if unfair else 0

    rates = np.asarray(records.rates)
    victim = None
    if roles is not None and roles["victim"] is not None:
        aside = (src == roles["victim"]) & (dst == roles["bystander"])
        demand = float(length[aside].sum() / window)
        got = float(length[aside & in_window].sum() / window)
        victim = {"demand": demand, "goodput": got, "share": got / demand if demand else None}
    return {"target": int(target), "target_ports": ports,
            "senders": [int(e) for e in senders], "queue": queue,
            "pause_frames": pauses, "cnp": cnp, "goodput_per_sender": goodput,
            "fair_share": float(np.mean(goodput)) if goodput else None,
            "jain": jain_index(goodput), "window": step, "jain_per_window": per_window,
            "converge_cycle": converge, "rate_changes": int(len(rates)),
            "lowest_rate": float(rates[:, 3].min() / LINE_RATE) if len(rates) else None,
            "victim": victim}
