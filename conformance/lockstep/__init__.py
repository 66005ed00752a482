"""Lockstep: a model and a target executing the same calls, every property checked at every step
(``session``), and the Hypothesis state machine that generates the calls (``machine``).
"""
