"""The TLA+ bridge: running TLC (``tlc``), parsing its values (``tlavalue``), comparing its state space
with the Python model (``agreement``) and replaying its behaviours on targets (``spectrace``).
"""
