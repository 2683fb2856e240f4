"""Golden model of the hardware stimulus: generators, sinks, the stimulus top and its
statistics.
"""
