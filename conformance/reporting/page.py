"""``report.html`` as a page a person reads (issue 15): a title, the run in
one line, the properties with their verdicts, a list of the violations that
links to one section each, and in each section the property's statement, the
message, the trace (the same table the console draws, lanes for a
controlled schedule, the breaking step marked ``✗`` and named), the
payloads decoded where they are printable, and the command that replays it.
The whole console output follows at the end.

Built from rich's HTML export of each renderable (one recording console,
:func:`.report.record_html`) inside a page of our own; element ids are
stable (``violations``, ``V1``, ``V2``, ..., ``properties``, ``console``)
so that a test or a link can find them.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from ..core.results import GateResult, Violation

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 110em; color: #1b1b1b; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
.verdict-pass { color: #0a7a0a; } .verdict-fail { color: #b00020; } .verdict-unknown, .verdict-error { color: #a06000; }
table.props { border-collapse: collapse; } table.props td, table.props th { padding: 0.2em 0.8em; text-align: left; }
table.props tr.fail td { color: #b00020; font-weight: bold; }
section.violation { border-left: 4px solid #b00020; padding-left: 1em; margin-top: 1.5em; }
pre.rich { font-size: 0.85em; line-height: 1.25; overflow-x: auto; }
code.replay { background: #f2f2f2; padding: 0.2em 0.4em; display: inline-block; }
"""

_BLOB = re.compile(r"Blob\(([0-9a-f]{2,})(?:\.\.\.)?, (\d+) B\)")


def decoded_payloads(text: str) -> list[tuple[str, str]]:
    """``(Blob(...) as written, its bytes as text)`` for every payload in
    ``text`` whose shown bytes are printable ASCII (``Blob(464f524745446833,
    8 B)`` -> ``FORGEDh3``, the harness's forged payload); others are left."""
    out = []
    for m in _BLOB.finditer(text):
        raw = bytes.fromhex(m.group(1))
        if raw and all(32 <= b < 127 for b in raw):
            out.append((m.group(0), raw.decode("ascii") + ("..." if "..." in m.group(0) else "")))
    return list(dict.fromkeys(out))


def _replay_command(report_dir: Path | None, n: int, v: Violation) -> str:
    import shlex
    import sys

    where = f"{report_dir}/repro_test.py" if report_dir is not None else "repro_test.py"
    # the interpreter that ran the gate: the one with shmspec installed (a bare `python` may not have it)
    return f'{shlex.quote(sys.executable)} -m pytest {shlex.quote(where)} -k "V{n}-{v.property}"'


def page(result: GateResult, report_dir: Path | None, console_html: str,
         panels: list[str], started: str | None = None) -> str:
    """The page.  ``console_html``: rich's export of the whole console
    report (its ``<pre>`` is kept); ``panels``: one exported ``<pre>`` per
    violation, in order."""
    e = html.escape
    verdict = result.verdict
    title = f"shmspec check {result.target}: {verdict.upper()}"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>shmspec check <code>{e(result.target)}</code>: "
             f"<span class='verdict-{e(verdict)}'>{e(verdict.upper())}</span></h1>",
             "<p id='run'>" + e(f"protocol {result.protocol}, gate profile {result.profile}, seed {result.seed_text}, "
                                 f"concurrency {result.concurrency}, construction {result.construction.name}, "
                                 f"contract (model profile) {result.model_profile}, {result.seconds:.1f} s"
                                 + (f", started {started}" if started else "")) + "</p>"]
    vs = result.violations
    parts.append(f"<section id='violations'><h2>Violations ({len(vs)})</h2>")
    if vs:
        parts.append("<ol class='violations'>")
        for i, v in enumerate(vs, 1):
            parts.append(f"<li><a href='#V{i}'>V{i} {e(v.property)}</a>: {e(v.message)} "
                         f"<small>(campaign {e(v.campaign)}, {e(v.concurrency)})</small></li>")
        parts.append("</ol>")
    else:
        parts.append("<p>none</p>")
    parts.append("</section>")
    props = result.properties
    parts.append("<section id='properties'><h2>Properties</h2><table class='props'><tr><th>property</th><th>verdict</th>"
                 "<th>violations</th><th>statement</th></tr>")
    for p in result.registry:
        links = " ".join(f"<a href='#V{i}'>V{i}</a>" for i, v in enumerate(vs, 1) if v.property == p.id)
        parts.append(f"<tr class='{e(props[p.id])}'><td>{e(p.id)}</td><td>{e(props[p.id])}</td><td>{links}</td>"
                     f"<td>{e(p.statement)}</td></tr>")
    parts.append("</table></section>")
    for i, (v, panel) in enumerate(zip(vs, panels), 1):
        statement = result.descriptions.get(v.property, "")
        broken = [s for s in v.steps if s.get("violations")]
        step = broken[-1] if broken else None
        parts.append(f"<section class='violation' id='V{i}'><h2>V{i} {e(v.property)}: {e(statement)}</h2>")
        parts.append(f"<p class='message'>{e(v.message)}</p>")
        where = (f"step {step['index']} ({step['process']} {step['action']})" if step else "the last step")
        parts.append(f"<p class='breaking'>Broken at <strong>{e(where)}</strong>, marked ✗ in the trace; "
                     f"construction {e(v.construction.name)}, campaign {e(v.campaign)}, round {v.round}.</p>")
        payloads = decoded_payloads(v.message + " " + " ".join(str(s.get("observed", "")) for s in v.steps))
        if payloads:
            parts.append("<p class='payloads'>Payloads as text: " + "; ".join(
                f"<code>{e(raw)}</code> = <code>{e(text)}</code>" for raw, text in payloads) + "</p>")
        parts.append(panel)
        parts.append(f"<p>Replay: <code class='replay'>{e(_replay_command(report_dir, i, v))}</code> "
                     "(fails while the violation stands; <code>SHMSPEC_TARGET=...</code> replays it on another "
                     "target)</p></section>")
    body = re.search(r"<pre[^>]*>.*</pre>", console_html, flags=re.S)
    parts.append("<section id='console'><h2>Console output</h2>" + (body.group(0) if body else "") + "</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["decoded_payloads", "page"]
