"""Targets: loading a store (impl, a vLLM release, a file) and the adapter that drives one through the
harness's calls, with its warp hooks.  Imports ``core`` only.
"""
