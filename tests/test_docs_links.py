"""Every in-repository Markdown link with an anchor (``[x](file.md#anchor)``
or ``[x](#anchor)``) names a heading that exists, by GitHub's slug rule
(lowercased; characters other than letters, digits, spaces and hyphens
dropped; spaces become hyphens).  Seen 2026-12-04: five anchors that had
drifted from their headings."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "reports" / "README.md"]


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_slug_follows_githubs_rule():
    assert slug("Seed units (`--seeds`, `--workers`, `--shard`)") == "seed-units---seeds---workers---shard"
    assert slug("The pytest plugin on vLLM 0.33.0, 2026-12-02") == "the-pytest-plugin-on-vllm-0330-2026-12-02"


def test_every_anchor_names_a_heading():
    anchors = {p.resolve(): {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", p.read_text(), re.M)}
               for p in PAGES}
    bad = []
    for page in PAGES:
        for m in re.finditer(r"\]\(([^)#\s]*\.md)?#([^)\s]+)\)", page.read_text()):
            target = (page.parent / m.group(1)).resolve() if m.group(1) else page.resolve()
            if target in anchors and m.group(2) not in anchors[target]:
                bad.append(f"{page.relative_to(ROOT)} -> {m.group(1) or ''}#{m.group(2)}")
    assert bad == []
