"""Driver of test_matrix.py's test_an_interrupt_while_the_gate_starts_stops_it:
Ctrl-C arrives while ``subprocess.Popen`` is still returning (the gate has
started), as a loaded machine can schedule it.  Prints whether the gate got
SIGTERM.  Usage: ``python interrupt_during_start.py DIR``."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shmspec.conformance.commands import matrix

# Ctrl-C as a terminal delivers it, whatever this process inherited (a shell
# starting the suite in the background leaves SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
tmp = Path(sys.argv[1])
tmp.mkdir(exist_ok=True)
child = tmp / "gate.py"
marker = tmp / "terminated"
child.write_text(
    "import signal, sys, time\n"
    "def stop(signum, frame):\n"
    f"    open({str(marker)!r}, 'w').write('SIGTERM')\n"
    "    sys.exit(130)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    f"open({str(tmp / 'started')!r}, 'w').close()\n"
    "time.sleep(30)\n")
real = subprocess.Popen


class SlowPopen(real):
    """Returns only after the gate started, with a SIGINT sent before that."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        while not (tmp / "started").exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)


matrix.subprocess.Popen = SlowPopen
matrix.GATE_COMMAND = [sys.executable, str(child)]
try:
    matrix.run_cell("impl", tmp / "cell", "ci", None, None)
    print("not interrupted")
except KeyboardInterrupt:
    time.sleep(0.5)
    print("interrupted; child got SIGTERM:", marker.exists())
