"""Core of the harness: its error base and exit codes, session configuration, constructions, results
(violations, campaign and gate results), the harness serde and interrupt handling.  Imports nothing of the
harness; no Hypothesis, no multiprocess.
"""
