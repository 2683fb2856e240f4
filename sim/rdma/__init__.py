"""Golden model of the RDMA offload engine, its fabric, hosts, DCQCN, fault injector,
workloads, records and metrics.
"""
