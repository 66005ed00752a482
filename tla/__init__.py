"""The TLA+ spec of the ring-buffer store (ShmStore.tla) and its TLC configs
(MC*.cfg; the larger ones in deep/), installed as package data of
``shmspec.tla`` so that ``shmspec model`` runs from a wheel too.  No Python
code: docs/tla.md describes the spec."""
