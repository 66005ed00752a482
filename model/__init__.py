"""Reference model of the single-writer / multi-reader shared-memory object store.

Pure Python, no I/O, imports nothing else of shmspec.  Public surface:

* :func:`initial`, :func:`step`, :class:`State`, :class:`Action`,
  :class:`Outcome`, :class:`Sig` -- the transition function (``store``);
* :mod:`.ring` -- allocation / FIFO-free arithmetic;
* :mod:`.profile` -- version profiles;
* :mod:`.errors` -- the shared error taxonomy;
* :mod:`.properties` -- the properties of SEMANTICS.md by id;
* :mod:`.steps` -- the atomic steps operations are made of (yield points).
"""

from .errors import ALL_ERRORS, ERROR_KINDS, StoreError
from .profile import IMPL, PROFILES, Profile, profile_for_vllm
from .ring import HEADER_BYTES, ID_MAX, Chunk, Ring
from .store import ACTIONS, FORGED, WRITER, Action, Outcome, Sig, State, initial, is_free, step

__all__ = [
    "ACTIONS", "ALL_ERRORS", "Action", "Chunk", "ERROR_KINDS", "FORGED", "HEADER_BYTES",
    "ID_MAX", "IMPL", "Outcome", "PROFILES", "Profile", "Ring", "Sig", "State", "StoreError",
    "WRITER", "initial", "is_free", "profile_for_vllm", "step",
]
