"""Creating, attaching and releasing the POSIX shared-memory segment.

The writer creates (and later unlinks) the segment; readers only attach.  An
attaching process must not register the segment with
``multiprocessing.resource_tracker``: the tracker would unlink the writer's
segment when the reader process exits (CPython issue 82300).  vLLM 0.11+ works
around this by patching ``resource_tracker.register`` during attach; here we
use ``SharedMemory(track=False)`` where it exists (Python >= 3.13) and
otherwise swap in a filter that drops only ``shared_memory`` registrations,
serialised by a module lock so concurrent attaches in one process are safe.
"""

from __future__ import annotations

import inspect
import threading
from contextlib import suppress
from multiprocessing import resource_tracker, shared_memory

_HAS_TRACK = "track" in inspect.signature(shared_memory.SharedMemory).parameters
_ATTACH_LOCK = threading.Lock()


def create_segment(size: int, name: str | None) -> shared_memory.SharedMemory:
    """Create a new zero-filled segment of ``size`` bytes (``name`` None: random)."""
    return shared_memory.SharedMemory(name=name, create=True, size=size)


def attach_segment(name: str) -> shared_memory.SharedMemory:
    """Attach to an existing segment without registering it with the resource tracker."""
    if _HAS_TRACK:
        return shared_memory.SharedMemory(name=name, track=False)
    with _ATTACH_LOCK:
        original = resource_tracker.register

        def _register_except_shm(rname, rtype):
            if rtype != "shared_memory":
                original(rname, rtype)

        resource_tracker.register = _register_except_shm
        try:
            return shared_memory.SharedMemory(name=name)
        finally:
            resource_tracker.register = original


def release_segment(shm: shared_memory.SharedMemory, unlink: bool) -> None:
    """Close ``shm``; when ``unlink``, also remove its name (FileNotFoundError ignored).

    The unlink happens even if closing fails (e.g. a caller still holds a view
    of the buffer), so the writer never leaks the segment name.
    """
    try:
        shm.close()
    finally:
        if unlink:
            with suppress(FileNotFoundError):
                shm.unlink()
