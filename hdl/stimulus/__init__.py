"""RTL of the hardware stimulus: synthesizable traffic generators, statistics sinks, and
the stimulus top that puts them around a switch or a fabric.
"""
