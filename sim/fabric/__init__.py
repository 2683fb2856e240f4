"""Golden model of a multi-router fabric: the router kernel, the whole-fabric run, and its
metrics.
"""
