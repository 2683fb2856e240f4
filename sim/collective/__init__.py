"""Collectives: schedules the collective engine executes, the algorithms that build them from
the topology, a symbolic executor that checks them against numpy, and the alpha-beta model
that predicts them and picks ``auto`` (section 15).
"""
