"""``python -m shmspec.conformance.runner.fresh TASK RESULT``: run one pickled
task (:class:`~.executors.Task`) in this fresh process and write its pickled
``("ok", value)`` or ``("error", text)`` to RESULT (atomically: a process
killed while writing leaves none, which the caller reports as an error).

SIGTERM unwinds like Ctrl-C, so a gate stops its workers and removes its
segments on the way out (exit 130).  On Linux the process asks for SIGTERM
when its parent dies (``PR_SET_PDEATHSIG``: a Ray worker lost with its node),
and ends at once if that parent is already gone.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback


def _interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    from ..core import interrupt

    interrupt.record(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _die_with_parent() -> bool:
    """SIGTERM at the parent's death; False when it is already gone."""
    parent = os.environ.get("SHMSPEC_TASK_PARENT")
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's cancel still stops it
        return True
    return parent is None or os.getppid() == int(parent)


def main(argv: list[str]) -> int:
    task, result = argv
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    if not _die_with_parent():
        return 130
    with open(task, "rb") as f:
        fn, args = pickle.load(f)
    code = 0
    try:
        out: tuple[str, object] = ("ok", fn(*args))
    except KeyboardInterrupt:
        out, code = ("error", "interrupted"), 130
    except BaseException:  # noqa: BLE001 - the task's error, reported to the caller
        out, code = ("error", traceback.format_exc(limit=5).strip().splitlines()[-1]), 1
    tmp = result + ".part"
    with open(tmp, "wb") as f:
        pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, result)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
