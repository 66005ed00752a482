"""Concurrency: real writer and reader processes (``procs``), controlled schedules (``schedule``), the
preemption sweep (``races``), free-running loads with a linearizability check (``freerun``, ``history``),
process faults (``faults``) and two threads on one writer (``sw``).
"""
