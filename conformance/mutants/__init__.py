"""Seeded faults (mutants) of impl: the fault library of ``shmspec mutants``.

Each ``<name>.py`` here is a module file that is ``shmspec.impl`` with one
realistic bug, made by subclassing impl's classes (impl's source is never
edited).  It is loaded as a ``file:`` target (conformance/loader.py) and
declares ``SHMSPEC_PROFILE = "impl"``; its docstring states the bug and, on a
``Must be caught by: <PROPERTY>`` line, the property whose violation must
detect it.  The files ship inside the package, so ``shmspec mutants`` works
from an installed copy; they are never imported as part of this package.
"""

from __future__ import annotations

from pathlib import Path

MUTANTS_DIR = Path(__file__).resolve().parent
"""Folder holding the fault module files."""
