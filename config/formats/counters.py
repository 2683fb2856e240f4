"""The hardware counters: their width and their names, as RTL ports and in the records.

The RTL names its counter ports after these (``rx_packets__3``), the golden
model and the testbench key ``Records.counters`` and ``RdmaRecords.counters``
by them, and ``results.json`` reports them under the same names.
"""

__all__ = ["COUNTER_WIDTH", "PORT_COUNTERS", "PFC_COUNTERS", "ECN_COUNTERS", "DCQCN_COUNTERS",
           "RDMA_COUNTERS"]

#: Width of every event counter; they wrap.
COUNTER_WIDTH = 32

#: The switch's counters per port: packets in, packets out, packets dropped at ingress.
PORT_COUNTERS = ("rx_packets", "tx_packets", "drops")
#: With ``[pfc] enabled``, per (port, class): frames sent upstream, frames received
#: from downstream, cycles paused, and the peak occupancy (a level, not an event count).
PFC_COUNTERS = ("pfc_tx_frames", "pfc_rx_frames", "pfc_paused_cycles", "pfc_peak_occupancy")
#: With ``[ecn] enabled``, per (output, class): packets marked CE.
ECN_COUNTERS = ("ecn_marks",)

#: DCQCN's counters of the RDMA engine (section 10.13): CE-marked data packets received,
#: CNPs sent and CNPs received.
DCQCN_COUNTERS = ("ecn_marked", "cnp_sent", "cnp_handled")
#: The RDMA engine's counters, ``docs/architecture.md`` section 10.8, in the RTL's port order,
#: DCQCN's last.
RDMA_COUNTERS = ("tx_data", "retransmissions", "tx_acks", "naks", "timeouts", "duplicates",
                 "out_of_sequence", "corrupt", "completions", "errors",
                 "rx_completions") + DCQCN_COUNTERS
