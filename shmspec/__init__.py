"""shmspec: reference model and conformance harness for single-writer /
multi-reader shared-memory object stores.

The code lives in three top-level folders of the repository, installed as
subpackages: ``shmspec.model`` (``model/``, the pure reference semantics),
``shmspec.impl`` (``impl/``, our shared-memory store) and
``shmspec.conformance`` (``conformance/``, targets, lockstep machine, gate,
reports, CLI).  Imports go one way: model <- impl is forbidden, conformance
imports both.
"""

__version__ = "0.1.0"
