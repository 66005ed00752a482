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
.finding-new { background: #b00020; color: #fff; padding: 0 .4em; border-radius: 3px; font-weight: bold; }
.finding-known { background: #777; color: #fff; padding: 0 .4em; border-radius: 3px; }
p.notice { background: #fff4ce; padding: .3em .6em; }
pre.rich { font-size: 0.85em; line-height: 1.25; overflow-x: auto; }
code.replay { background: #f2f2f2; padding: 0.2em 0.4em; display: inline-block; }
table.lanes { border-collapse: collapse; font-size: 0.85em; margin: 0.8em 0; }
table.lanes th, table.lanes td { border: 1px solid #ddd; padding: 0.15em 0.5em; vertical-align: top; text-align: left; }
table.lanes td.step { color: #666; text-align: right; }
table.lanes td.harmful { background: #fde7ea; border: 2px solid #b00020; font-weight: bold; }
p.why { background: #f7f7fb; padding: 0.5em 0.8em; border-left: 3px solid #6060a0; }
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
    return f'{shlex.quote(sys.executable)} -m pytest {shlex.quote(where)} -k "V{n}-{v.property}" -p no:cacheprovider'


def page(result: GateResult, report_dir: Path | None, console_html: str,
         panels: list[str], started: str | None = None, baseline: dict | None = None) -> str:
    """The page.  ``console_html``: rich's export of the whole console
    report (its ``<pre>`` is kept); ``panels``: one exported ``<pre>`` per
    violation, in order; ``baseline``: report.json's ``baseline`` block of a
    run judged against one (each violation is then marked new or known, and
    a section lists the baseline's notices and the findings it had that this
    run did not find)."""
    e = html.escape
    verdict = result.verdict
    title = f"shmspec check {result.target}: {verdict.upper()}"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>shmspec check <code>{e(result.target)}</code>: "
             f"<span class='verdict-{e(verdict)}'>{e(verdict.upper())}</span></h1>",
             "<p id='run'>" + e(f"protocol {result.protocol}, gate profile {result.profile}, seed {result.seed_text}, "
                                 f"concurrency {result.concurrency}, construction {result.construction.name}, "
                                 f"contract {result.contract_name}"
                                 + (f" (declared by {result.contract.source})"
                                    if result.contract is not None and result.contract.source else "")
                                 + f", {result.seconds:.1f} s"
                                 + (f", started {started}" if started else "")) + "</p>"]
    vs = result.violations
    from .report import standings  # noqa: PLC0415 - report imports this module when it writes a page

    standing = standings(baseline)
    if baseline is not None:
        parts.append(_baseline_section(baseline))
    parts.append(f"<section id='violations'><h2>Violations ({len(vs)})</h2>")
    if vs:
        parts.append("<ol class='violations'>")
        for i, v in enumerate(vs, 1):
            mark = (f"<span class='finding-{standing[f'V{i}']}'>{standing[f'V{i}']}</span> "
                    if f"V{i}" in standing else "")
            parts.append(f"<li>{mark}<a href='#V{i}'>V{i} {e(v.property)}</a>: {e(v.message)} "
                         f"<small>(campaign {e(v.campaign)}, {e(v.concurrency)}; "
                         f"<code>{e(v.fingerprint)}</code>)</small></li>")
        parts.append("</ol>")
    else:
        parts.append("<p>none</p>")
    parts.append("</section>")
    props = result.properties
    parts.append("<section id='properties'><h2>Properties</h2><table class='props'><tr><th>property</th><th>verdict</th>"
                 "<th>violations</th><th>statement</th></tr>")
    unclaimed = result.contract.not_claimed if result.contract is not None else {}
    for p in result.registry:
        links = " ".join(f"<a href='#V{i}'>V{i}</a>" for i, v in enumerate(vs, 1) if v.property == p.id)
        why = f" <em>Not claimed by the contract: {e(unclaimed[p.id])}</em>" if p.id in unclaimed else ""
        parts.append(f"<tr class='{e(props[p.id])}'><td>{e(p.id)}</td><td>{e(props[p.id])}</td><td>{links}</td>"
                     f"<td>{e(p.statement)}{why}</td></tr>")
    parts.append("</table></section>")
    for i, (v, panel) in enumerate(zip(vs, panels), 1):
        statement = result.descriptions.get(v.property, "")
        broken = [s for s in v.steps if s.get("violations")]
        step = broken[-1] if broken else None
        mark = (f" <span class='finding-{standing[f'V{i}']}'>{standing[f'V{i}']} finding</span>"
                if f"V{i}" in standing else "")
        parts.append(f"<section class='violation' id='V{i}'><h2>V{i} {e(v.property)}: {e(statement)}{mark}</h2>")
        parts.append(f"<p class='message'>{e(v.message)}</p>")
        where = (f"step {step['index']} ({step['process']} {step['action']})" if step else "the last step")
        parts.append(f"<p class='breaking'>Broken at <strong>{e(where)}</strong>, marked ✗ in the trace; "
                     f"construction {e(v.construction.name)}, campaign {e(v.campaign)}, round {v.round}.</p>")
        payloads = decoded_payloads(v.message + " " + " ".join(str(s.get("observed", "")) for s in v.steps))
        if payloads:
            parts.append("<p class='payloads'>Payloads as text: " + "; ".join(
                f"<code>{e(raw)}</code> = <code>{e(text)}</code>" for raw, text in payloads) + "</p>")
        parts.append(lanes_table(v, step, f"V{i}"))
        why = why_text(v.property, v.protocol)
        if why:
            parts.append(f"<p class='why'><strong>Why the store allowed it.</strong> {e(why)} The marked step is "
                         f"where this run's target did so.</p>")
        parts.append(panel)
        parts.append(f"<p>Replay: <code class='replay'>{e(_replay_command(report_dir, i, v))}</code> "
                     "(fails while the violation stands; <code>SHMSPEC_TARGET=...</code> replays it on another "
                     "target)</p></section>")
    body = re.search(r"<pre[^>]*>.*</pre>", console_html, flags=re.S)
    parts.append("<section id='console'><h2>Console output</h2>" + (body.group(0) if body else "") + "</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _baseline_section(block: dict) -> str:
    """The run against its baseline: notices, new / known / fixed counts, and
    the baseline's findings this run did not find."""
    e = html.escape
    found = block.get("findings") or {}
    out = [f"<section id='baseline'><h2>Baseline</h2><p>Judged against <code>{e(str(block.get('source')))}</code>"
           + (f" (recorded on <code>{e(str(block['target']))}</code>)" if block.get("target") else "")
           + f", matched by {e(str(block.get('matched_by', 'fingerprint')))}: "
           f"<span class='finding-new'>{len(found.get('new', ()))} new</span> (failing the run), "
           f"{len(found.get('known', ()))} known, {len(found.get('fixed', ()))} fixed.</p>"]
    out += [f"<p class='notice'>{e(n)}</p>" for n in block.get("notices", ())]
    if found.get("fixed"):
        out.append("<p>Known findings not found by this run (fixed, or not reached):</p><ul>"
                   + "".join(f"<li><code>{e(f['fingerprint'])}</code>: {e(str(f.get('message') or ''))}</li>"
                             for f in found["fixed"]) + "</ul>")
    out.append("</section>")
    return "".join(out)


def lanes_table(v: Violation, broken: dict | None, anchor: str = "V") -> str:
    """The trace as a timeline: one column (lane) per process in order of
    first appearance, one row per step; the breaking step's cell has class
    ``harmful`` (id ``<anchor>-harmful``; the table's ``<anchor>-lanes``)
    and names the property it breaks."""
    from html import escape as e

    lanes = list(dict.fromkeys(str(s.get("process", "?")) for s in v.steps))
    rows = [f"<table class='lanes' id='{e(anchor)}-lanes'><tr><th>step</th>"
            + "".join(f"<th>{e(p)}</th>" for p in lanes) + "</tr>"]
    for s in v.steps:
        what = " ".join(str(x) for x in (s.get("kind") if s.get("kind") not in (None, "", "call") else "",
                                         s.get("action", "")) if x)
        if s.get("yield_point"):
            what += f" ▸ {s['yield_point']}"
        args = ", ".join(f"{k}={a}" for k, a in (s.get("args") or {}).items())
        text = what + (f"({args})" if args else "")
        if s.get("observed") not in (None, ""):
            text += f" → {s['observed']}"
        harmful = broken is not None and s is broken
        cells = []
        for p in lanes:
            if p != str(s.get("process", "?")):
                cells.append("<td></td>")
            elif harmful:
                cells.append(f"<td class='harmful' id='{e(anchor)}-harmful' "
                             f"title='the step that breaks {e(v.property)}'>✗ breaks "
                             f"{e(v.property)}: {e(text)}</td>")
            else:
                cells.append(f"<td>{e(text)}</td>")
        rows.append(f"<tr><td class='step'>{e(str(s.get('index', '')))}</td>{''.join(cells)}</tr>")
    rows.append("</table>")
    return "".join(rows)


def why_text(prop: str, protocol: str = "ringbuffer") -> str | None:
    """How a store comes to allow a violation of ``prop``: the mechanism
    behind this property's counterexamples on the stores shmspec has judged
    (docs/semantics.md, docs/matrix.md).  Another protocol's come from its
    ``why`` attribute (:class:`~shmspec.conformance.core.protocol.StoreProtocol`);
    None when it has none for ``prop``."""
    if protocol != "ringbuffer":
        from .. import protocols

        try:
            return dict(getattr(protocols.get(protocol), "why", {}) or {}).get(prop)
        except Exception:  # noqa: BLE001 - a protocol no longer registered: no paragraph
            return None
    return WHY.get(prop)


WHY: dict[str, str] = {
    "NRR": "A get trusted the handle's address: it deserialized the bytes there without first confirming, while "
           "the chunk could not change, that the chunk at that address is still the one the handle names (its id in "
           "the chunk header). The writer had reclaimed and refilled it, so the reader read a recycled slot (ABA).",
    "DUP": "The put did not find the cached key before it wrote (the check came late or not at all), so a second "
           "put of the key overwrote or duplicated the first.",
    "LOCK": "The reader's constructor accepted a missing lock; nothing then orders the reader's count updates "
            "against the writer's reclaim.",
    "SIZE": "The size check came after the allocation, or not at all, so an oversized object changed the ring.",
    "OOM": "The put's fit test disagrees with the room FIFO reclaim leaves: it refused when a contiguous run "
           "existed (an off-by-one at the tail or the wrap), or it allocated over a live chunk.",
    "FIFO": "Reclaim freed a younger chunk while an older one was still busy, so the free region is no longer the "
            "one run FIFO order keeps.",
    "RC": "The chunk's read count reached its threshold before every promised read was made (a count shared by "
          "all readers, or bumped before the read was validated), so the writer reclaimed it early.",
    "DISJ": "The allocation placed a chunk over a live one or past the segment's end (the wrap arithmetic).",
    "WRAP": "Ids were not kept modulo 2**31 consistently, so after the wrap two live chunks carried one id and a "
            "handle resolved to the wrong one.",
    "CLR": "clear() left handles issued before it resolvable. Under the drain contract only a resolution to another "
           "object breaks CLR: the ids or addresses clear() reset are reused by new puts, so an old handle lands on a "
           "new object. Under the strict contract any resolution after the clear breaks it, even to the handle's "
           "own intact object (a store that drains, as vLLM's and impl's do, keeps the drain contract, not this one).",
    "AUTH": "The handle's signature was checked after shared bytes were read, or it does not cover the fields that "
            "locate the chunk, so a forged or altered handle was followed.",
    "LEAK": "Closing the writer did not unlink the segment, or a path out of it skipped the unlink.",
    "EXC": "The operation changed shared state before the step that raised and did not undo it, so the store was "
           "left between its before- and after-states.",
    "PROM": "One reader's reads counted toward another reader's promise (a count shared by the readers), so the "
            "chunk was reclaimed before this reader made its read.",
    "PROG": "A count threshold that can no longer be reached pins the oldest chunk, and FIFO reclaim stops at it.",
    "LIVE": "A wait depends on another process's progress without a bound: a lock a killed process held (no "
            "robust release), or a spin on a flag only that process would set.",
    "LEASE": "The writer kept counting the reads a gone reader still owed (its process dead, its slot's lock "
             "released by the kernel), so the oldest chunk stayed pinned and every put after the ring wrapped "
             "failed, although the store declares reader leases.",
    "SW": "The writer's state (the ring's tail, the key index) changes in several steps with no lock around them, "
          "so two threads interleaved between the steps.",
    "CONFORMANCE": "The target's outcome or state differs from the model's for the same step: a behaviour the "
                   "contract does not allow, or bookkeeping the model does not know.",
}


__all__ = ["WHY", "decoded_payloads", "lanes_table", "page", "why_text"]
