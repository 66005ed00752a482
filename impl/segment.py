"""Creating, reserving, attaching and releasing POSIX shared-memory segments.

The writer creates (and later unlinks) every segment; readers only attach.
Creation reserves every byte (``posix_fallocate`` on the segment's file), so
a ``/dev/shm`` that cannot hold the segment raises
:class:`~shmspec.model.errors.SharedMemoryFull` at once, with the sizes,
instead of a SIGBUS at the first write into a page tmpfs cannot back (vLLM
0.11 - 0.33 create sparse segments and die that way).

An attaching process must not register the segment with
``multiprocessing.resource_tracker``: the tracker would unlink the writer's
segment when the reader process exits (CPython issue 82300).  vLLM 0.11+ works
around this by patching ``resource_tracker.register`` during attach; here we
use ``SharedMemory(track=False)`` where it exists (Python >= 3.13) and
otherwise swap in a filter that drops only ``shared_memory`` registrations,
serialised by a module lock so concurrent attaches in one process are safe.
"""

from __future__ import annotations

import errno
import inspect
import os
import threading
from contextlib import suppress
from multiprocessing import resource_tracker, shared_memory

from shmspec.model.errors import SharedMemoryFull

_HAS_TRACK = "track" in inspect.signature(shared_memory.SharedMemory).parameters
_ATTACH_LOCK = threading.Lock()
SHM_DIR = "/dev/shm"


def _free_bytes() -> int | None:
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def create_segment(size: int, name: str | None) -> shared_memory.SharedMemory:
    """Create a new zero-filled segment of ``size`` bytes (``name`` None: random)
    and reserve all of its bytes.

    Raises:
        SharedMemoryFull: the shared-memory filesystem cannot hold ``size``
            bytes (the half-made segment is removed).
        FileExistsError: a segment of that name exists.
    """
    try:
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise SharedMemoryFull(name or "<random>", size, _free_bytes()) from None
        raise
    fd = getattr(shm, "_fd", -1)
    if fd >= 0 and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            release_segment(shm, unlink=True)
            if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
                raise SharedMemoryFull(shm.name, size, _free_bytes()) from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
                raise
            # a filesystem without fallocate: the segment stays sparse
        except BaseException:  # a KeyboardInterrupt (a cancelled run) mid-reservation: no segment left behind
            release_segment(shm, unlink=True)
            raise
    return shm


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


UNCLOSED: list[shared_memory.SharedMemory] = []
"""Segments whose close found their mapping still exported (a caller's
zero-copy views outliving the store), held here with their file descriptor
closed.  Left to the garbage collector, such a segment's ``__del__`` raises
``BufferError`` inside whichever collection reaches it ("Exception ignored in
SharedMemory.__del__"); under a Python-level ``sys.unraisablehook`` (pytest's)
that report parses source with ``ast`` and, when the collection ran inside
another ``ast.parse``, CPython 3.11 fails that one with "SystemError: AST
constructor recursion depth mismatch" (seen 2026-12-04 in this project's
suite: a gate's own ``ast`` read of a store file, and pytest's report of a
failing test).  Every :func:`release_segment` retries them: one whose views
are gone is closed then and let go."""


def defer_close(shm: shared_memory.SharedMemory) -> None:
    """``shm``, whose ``close`` raised ``BufferError``: hold it in
    :data:`UNCLOSED` (its descriptor closed now) until a later
    :func:`release_segment` can close its mapping."""
    fd = getattr(shm, "_fd", -1)
    if isinstance(fd, int) and fd >= 0:
        with suppress(OSError):
            os.close(fd)
        shm._fd = -1  # noqa: SLF001 - the descriptor's owner; close() then skips it
    if all(shm is not s for s in UNCLOSED):
        UNCLOSED.append(shm)


def retry_unclosed() -> int:
    """Close every :data:`UNCLOSED` segment whose views are gone; how many
    remain."""
    for shm in list(UNCLOSED):
        try:
            shm.close()
        except BufferError:
            continue
        UNCLOSED.remove(shm)
    return len(UNCLOSED)


def release_segment(shm: shared_memory.SharedMemory, unlink: bool) -> None:
    """Close ``shm``; when ``unlink``, also remove its name (FileNotFoundError ignored).

    The unlink happens even if closing fails (e.g. a caller still holds a view
    of the buffer), so the writer never leaks the segment name; the segment is
    then held until its views are gone (:func:`defer_close`).

    Raises:
        BufferError: views of the segment are still held (it stays mapped,
            in :data:`UNCLOSED`).
    """
    retry_unclosed()
    try:
        shm.close()
    except BufferError:
        defer_close(shm)
        raise
    finally:
        if unlink:
            with suppress(FileNotFoundError):
                shm.unlink()
