"""z3 terms for the model's ring arithmetic.

:data:`Z3_OPS` is the ``ops`` object :mod:`shmspec.model.ring` takes: passed to
``placement``, ``free_step``, ``renormalise`` or ``next_id`` it makes them build
z3 integer terms instead of computing Python ints, so the obligations in
:mod:`.prove` are about the model's own definitions.

z3's integer ``div``/``mod`` are Euclidean; the model only divides by the ring
size ``B``, and every obligation assumes ``B >= 1``, where Euclidean and
Python's floor division agree.
"""

from __future__ import annotations

from typing import Any

import z3


class Z3Ops:
    """``ite`` -> ``z3.If``, ``mod`` -> ``%`` (z3 ``mod``), ``div`` -> ``/``
    (z3 integer ``div``), ``and_`` -> ``z3.And``."""

    @staticmethod
    def ite(cond: Any, then: Any, other: Any) -> Any:
        return z3.If(cond, then, other)

    @staticmethod
    def mod(a: Any, b: Any) -> Any:
        return a % b

    @staticmethod
    def div(a: Any, b: Any) -> Any:
        return a / b

    @staticmethod
    def and_(*conds: Any) -> Any:
        return z3.And(*conds)


Z3_OPS = Z3Ops()
