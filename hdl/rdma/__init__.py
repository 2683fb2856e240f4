"""RTL of the RDMA offload engine and what surrounds it: the engine, its headers, memory
keys, DCQCN, the link fault injector, and the RDMA fabric top.
"""
