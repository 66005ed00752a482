"""What the bench scripts share: sizes, machine facts, JSON output."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA = "shmspec.bench/1"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "reports" / "bench"

_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3}


def parse_size(text: str) -> int:
    """``"1KiB"`` -> 1024, ``"16MiB"`` -> 16777216, ``"4096"`` -> 4096.

    Raises:
        ValueError: not a size.
    """
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]i?[bB]|[bB])?\s*", text)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 1KiB, 64KiB, 1MiB, 16MiB)")
    return int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def parse_sizes(text: str) -> list[int]:
    return [parse_size(t) for t in text.split(",") if t.strip()]


def parse_ints(text: str) -> list[int]:
    out = [int(t) for t in text.split(",") if t.strip()]
    if not out or any(n < 1 for n in out):
        raise ValueError(f"expected positive integers, got {text!r}")
    return out


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``"0"`` is refused, not taken as the default).

    Raises:
        ValueError: not an integer, or below 1.
    """
    n = int(text)
    if n < 1:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return n


def unwritable(path: Path, is_dir: bool = False) -> str | None:
    """Why ``path`` cannot be written (a file, or with ``is_dir`` a folder to
    write files into), or None when it can: checked before a run, so a bad
    path fails in a second and not after the benchmark.  Creates the missing
    folders (as the write would); leaves no other file behind."""
    folder = path if is_dir else path.parent
    if not is_dir and path.is_dir():
        return f"{path} is a directory"
    blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        return f"{blocker} is not a directory"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".{path.name if not is_dir else 'bench'}.{os.getpid()}.probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"cannot write to {folder}: {exc.strerror or exc}"
    return None


def fmt_size(n: int) -> str:
    """1024 -> ``1 KiB``; 16777216 -> ``16 MiB``; 1000 -> ``1000 B``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """CPU count, CPU model, Python, platform, load average right now."""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "load_average": load_average(),
    }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded to 3 places, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def wide_console(width: int = 200) -> "Console":
    """A rich console at least ``width`` columns wide when stdout is not a
    terminal (a log keeps the tables' columns); a terminal keeps its width."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and console.width < width:
        console = Console(width=width)
    return console
