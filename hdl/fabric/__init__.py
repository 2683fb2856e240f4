"""RTL of a multi-router fabric: the router (a switch is the fabric of one router), its
routing logic, and the fabric top that wires routers in a topology.
"""
