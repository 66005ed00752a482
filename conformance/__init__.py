"""The conformance harness: targets, lockstep machine, gate, reports, CLI.

Imports :mod:`shmspec.model` and :mod:`shmspec.impl`; neither imports this.
"""
