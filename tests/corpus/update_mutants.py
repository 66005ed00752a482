"""Refresh the seeded-fault counterexample corpus from a full ``shmspec mutants`` run.

Usage: ``.venv/bin/python tests/corpus/update_mutants.py REPORT_DIR`` where
REPORT_DIR holds a ``mutants.json`` (schema ``shmspec.mutants/1``) and each
fault's own gate report.  For every caught fault it writes
``tests/corpus/mutants/<fault>.json``: the first violation of the property the
fault names, as its report recorded it (the shrunk calls, or the exact
schedule, and the session config), which ``tests/conformance/commands/test_mutants_corpus.py``
replays.  Exits 1 when a fault was not caught, or its violation cannot be
replayed (a free-running history is re-run, not replayed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "mutants"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    run = json.loads((root / "mutants.json").read_text())
    bad = []
    for row in run["faults"]:
        report = json.loads((root / row["report"] / "report.json").read_text())
        found = [v for v in report["violations"] if v["property"] == row["expected"] and v["concurrency"] != "free"]
        if not row["caught"] or not found:
            bad.append(row["name"])
            continue
        v = found[0]
        steps = v["steps"]
        if v["concurrency"] == "controlled":
            calls = [{k: s[k] for k in ("process", "kind", "action", "args")} for s in steps]
        elif v["concurrency"] in ("faults", "threads"):
            calls = []  # a fixed scenario: re-run from its config (scenario name; SW: and the preemption point)
        else:
            calls = [{k: s[k] for k in ("process", "action", "args")} for s in steps if s["action"] != "close"]
        entry = {"fault": row["name"], "property": v["property"], "campaign": v["campaign"],
                 "concurrency": v["concurrency"], "message": v["message"], "config": v["config"], "calls": calls,
                 "from": f"shmspec mutants --profile {run['profile']} --seed {run['seed']} ({run['started']})"}
        (HERE / f"{row['name']}.json").write_text(json.dumps(entry, indent=1) + "\n")
    if bad:
        print(f"not caught or not replayable: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
