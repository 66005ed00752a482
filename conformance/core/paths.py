"""Where shmspec reads its data and writes its files, in a source checkout
and in an installed package alike.

* :func:`tla_dir`: the TLA+ spec and its TLC configs, package data of
  ``shmspec.tla`` (the repository's ``tla/`` folder; in an editable install
  that folder itself).
* :func:`cache_dir`: fetched vLLM store files and, outside a checkout, the
  reports: ``$SHMSPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/shmspec``, else
  ``~/.cache/shmspec``.
* :func:`report_root`: the folder each command's default report directory is
  made in: ``$SHMSPEC_REPORT_DIR``; else the checkout's ``reports/`` when
  shmspec runs from its source checkout (wherever the command is run from);
  else ``cache_dir()/reports``.  Never the current directory unless asked
  (``--report-dir``, or ``SHMSPEC_REPORT_DIR=.``); every command prints the
  directory it wrote.

Imports nothing of the harness; reads only the environment and the file
system.
"""

from __future__ import annotations

import os
from pathlib import Path


def tla_dir() -> Path:
    """The installed ``shmspec.tla`` package's folder (``ShmStore.tla``,
    ``MC*.cfg``, ``deep/MC*.cfg``)."""
    import shmspec.tla  # noqa: PLC0415 - an empty package: its folder is the data

    return Path(shmspec.tla.__file__).resolve().parent


def cache_dir() -> Path:
    """``$SHMSPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/shmspec``, else ``~/.cache/shmspec``."""
    if os.environ.get("SHMSPEC_CACHE_DIR"):
        return Path(os.environ["SHMSPEC_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "shmspec"


def checkout_root() -> Path | None:
    """The source checkout shmspec runs from (the folder holding its
    ``pyproject.toml`` and ``reports/README.md``), or None when shmspec is
    installed from a wheel."""
    import shmspec  # noqa: PLC0415

    root = Path(shmspec.__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "reports" / "README.md").is_file():
        return root
    return None


def report_root() -> Path:
    """``$SHMSPEC_REPORT_DIR``, else the checkout's ``reports/``, else
    ``cache_dir()/reports`` (see the module docstring)."""
    env = os.environ.get("SHMSPEC_REPORT_DIR")
    if env:
        return Path(env)
    root = checkout_root()
    return root / "reports" if root is not None else cache_dir() / "reports"


__all__ = ["cache_dir", "checkout_root", "report_root", "tla_dir"]
