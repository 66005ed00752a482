"""Spec-to-test generation: behaviours sampled from TLC's state graph, replayed
as tests on a target.

:func:`generate` runs TLC on one config with ``-dump dot,actionlabels``
(every reachable state, one per symmetry orbit, and every transition with its
action's name), then samples a fixed, seeded set of *maximal paths* from the
initial state: random walks, each step drawn uniformly among the transitions
the store can take next (:func:`store_admissible`) into states not yet on
the path, until none is left; of these, the paths that cover the most step
kinds and outcomes (:func:`features`), then the most states, are kept.
Each transition is followed on the Python model
(:func:`shmspec.model.atomic.follow`), which recovers the step's process and
arguments and a concrete state that equals TLC's up to the spec's symmetry;
what each step must show is :func:`.spectrace.expected` of those states.

The result (:class:`SpecTests`, JSON schema ``shmspec.spectests/1``) is
replayed on a target with :func:`replay_all` (one
:func:`.spectrace.replay_on_target` per behaviour): on impl, every behaviour
of a hardened config must be followed step by step
(``tests/conformance/spec/test_spec_to_test.py`` generates and replays 40 behaviours of
``tla/MC_impl_reread.cfg`` on every run).  From the command line::

    python -m shmspec.conformance.commands.spectests tla/MC_impl_reread.cfg --target impl [--out FILE]

The same config, count and seed give the same behaviours (TLC 2.15, one
worker).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shmspec.model import atomic
from shmspec.model.atomic import WRITER, Config, State, Step

from ..concurrency.procs import ProcessPool
from ..core.documents import header
from ..core.errors import ExitCode
from ..spec.agreement import abstract, model_config
from ..spec.spectrace import ACTION_NAMES, Behaviour, TargetReplay, replay_on_target
from ..spec.tlavalue import parse_state
from ..spec.tlc import ConfigFile, TlcError, find_jar, read_config
from ..targets.loader import LoadedTarget

SCHEMA = "shmspec.spectests/1"
BEHAVIOURS = 40
"""Paths sampled by default."""
SEED = 0
CANDIDATES = 10
"""Random walks drawn per behaviour kept."""

_NODE = re.compile(r'^(-?\d+) \[label="((?:[^"\\]|\\.)*)"(,style = filled)?\]', re.M)
_ESC = re.compile(r"\\(.)")
_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="(\w+)"', re.M)


@dataclass
class StateGraph:
    """TLC's state graph: node id -> state text (``/\\ var = value`` lines),
    node id -> ``[(action, node id)]`` (duplicates dropped, ordered by action
    and state text: node ids are fingerprints, which differ between TLC
    runs), the initial nodes, and TLC's counts."""

    labels: dict[str, str]
    edges: dict[str, list[tuple[str, str]]]
    initial: list[str]
    distinct: int = 0
    seconds: float = 0.0


def parse_dot(text: str) -> StateGraph:
    """A ``-dump dot,actionlabels`` file.

    Raises:
        ValueError: no initial state in the file.
    """
    labels, initial = {}, []
    for m in _NODE.finditer(text):
        labels[m.group(1)] = _ESC.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        if m.group(3):
            initial.append(m.group(1))
    edges: dict[str, set[tuple[str, str]]] = {}
    for m in _EDGE.finditer(text):
        edges.setdefault(m.group(1), set()).add((ACTION_NAMES.get(m.group(3), m.group(3)), m.group(2)))
    if not initial:
        raise ValueError("no initial state in the dot dump")
    # node ids are TLC's fingerprints, which change from run to run (a random
    # polynomial): order by the states themselves
    return StateGraph(labels, {k: sorted(v, key=lambda e: (e[0], labels.get(e[1], e[1]))) for k, v in edges.items()},
                      sorted(initial, key=lambda n: labels[n]), len(labels))


def state_graph(cf: ConfigFile, timeout: float = 600.0) -> StateGraph:
    """Run TLC on ``cf`` (one worker, checking the invariants the config does
    not expect violated, so that it explores every reachable state) and read
    its state graph.

    Raises:
        TlcError: java or the jar is missing, TLC failed or ran past ``timeout``.
    """
    java = shutil.which("java")
    if java is None:
        raise TlcError("java is not on PATH (TLC needs Java 11 or newer)")
    spec = cf.path.parent / "ShmStore.tla"
    if not spec.is_file():
        spec = cf.path.parent.parent / "ShmStore.tla"
    with tempfile.TemporaryDirectory(prefix="shmspec-graph-") as tmp:
        dot = Path(tmp) / "graph"
        keep = " ".join(i for i in cf.invariants if i not in cf.expected)
        run_cfg = Path(tmp) / cf.path.name
        run_cfg.write_text(re.sub(r"^INVARIANTS?\s+.*(?:\n[ \t]+\w.*)*", f"INVARIANTS {keep}" if keep else "",
                                  cf.path.read_text(), flags=re.M))
        cmd = [java, f"-Djava.io.tmpdir={tmp}", "-XX:+UseParallelGC", "-cp", str(find_jar()), "tlc2.TLC",
               "-config", str(run_cfg), "-workers", "1", "-deadlock", "-metadir", str(Path(tmp) / "states"),
               "-dump", "dot,actionlabels", str(dot), spec.name]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=spec.parent, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TlcError(f"TLC on {cf.name} ran past {timeout:g} s") from None
        if p.returncode != 0:
            raise TlcError(f"TLC on {cf.name} exited {p.returncode}: {(p.stdout + p.stderr)[-400:]}")
        graph = parse_dot(Path(f"{dot}.dot").read_text())
    graph.seconds = time.monotonic() - t0
    return graph


# ------------------------------------------------------------------ sampling
def store_admissible(cfg: Config, freeing: bool, step: Step) -> bool:
    """Whether the store can take ``step`` next.  ``freeing``: the writer's
    last step was a ``free_step`` and the oldest chunk is reclaimable again.

    The spec lets the writer stop reclaiming at any chunk; the store's
    ``free_unused`` (vLLM 0.11 - 0.33 and impl) reclaims every chunk that is
    reclaimable when it gets there, from the oldest, in one call.  So while
    ``freeing``, the writer's next step is another ``free_step``; readers
    take any step meanwhile (impl's writer holds no lock while it reclaims).
    """
    if not freeing:
        return True
    return step.process != WRITER or step.name in ("free_step", "retire")


def _free_enabled(cfg: Config, s: State) -> bool:
    return any(st.name == "free_step" for st, _ in atomic.successors(cfg, s))


@dataclass
class SpecTests:
    """Behaviours sampled from one config's state graph (see the module docstring)."""

    config: str
    constants: dict[str, str]
    seed: int
    distinct: int
    behaviours: list[Behaviour]
    ids: list[str]
    visited: int = 0
    """Distinct TLC states on some behaviour."""
    actions: dict[str, int] = field(default_factory=dict)
    """Behaviours per feature (``"<step kind> <outcome>"``, :func:`features`)."""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {**header(SCHEMA, "spectests"), "config": self.config, "constants": self.constants, "seed": self.seed,
                "tlc_distinct": self.distinct, "visited": self.visited, "actions": self.actions,
                "behaviours": [dict(id=i, **b.to_json()) for i, b in zip(self.ids, self.behaviours)]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SpecTests":
        """Raises:
            ValueError: another schema.
        """
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file (schema {d.get('schema')!r})")
        return cls(d["config"], d["constants"], d["seed"], d["tlc_distinct"],
                   [Behaviour.from_json(b) for b in d["behaviours"]], [b["id"] for b in d["behaviours"]],
                   d["visited"], d["actions"])

    def model_config(self) -> Config:
        """The spec constants as a model :class:`Config`."""
        from ..spec.tlavalue import parse_value  # noqa: PLC0415

        return Config.from_constants({k: parse_value(v) for k, v in self.constants.items()})


def features(b: Behaviour) -> set[tuple[str, str]]:
    """What a behaviour exercises: each step's kind (its action,
    ``reader_check`` as ``check``) with the first word of the outcome it
    must show."""
    out = set()
    for st, ob in zip(b.steps[1:], b.expect[1:]):
        kind = "check" if st.name == "reader_check" else st.name
        out.add((kind, ob.outcome.split(" ")[0]))
    return out


def sample(cf: ConfigFile, graph: StateGraph, n: int = BEHAVIOURS, seed: int = SEED,
           candidates: int = CANDIDATES) -> SpecTests:
    """``n`` maximal store-admissible paths of ``graph``: ``candidates * n``
    walks (each step drawn uniformly among the store-admissible transitions
    into states not yet on the path, with ``random.Random(seed)``), of which
    ``n`` distinct ones are kept greedily, each time the one adding the most
    new :func:`features` (then the most states no kept path visits).

    Raises:
        ValueError: TLC's initial state is not the model's, or the model
            cannot follow one of TLC's transitions (the two disagree).
    """
    cfg = model_config(cf)
    rng = random.Random(seed)
    cache: dict[str, Any] = {}
    states: dict[str, State] = {}

    def state(node: str) -> State:
        if node not in states:
            states[node] = abstract(cfg, parse_state(graph.labels[node], cache))
        return states[node]

    init = graph.initial[0]
    if atomic.canonical(cfg, state(init)) != atomic.canonical(cfg, atomic.initial(cfg)):
        raise ValueError("TLC's initial state is not the model's")
    walks: dict[tuple, tuple[Behaviour, frozenset[str]]] = {}
    for _ in range(n * candidates):
        node, cur, freeing = init, atomic.initial(cfg), False
        on_path = [init]
        sts: list[State] = [cur]
        steps: list[Step | None] = [None]
        while True:
            options = []
            for action, dst in graph.edges.get(node, []):
                if dst in on_path:
                    continue
                hit = atomic.follow(cfg, cur, action, state(dst))
                if hit is None:
                    raise ValueError(f"the model cannot follow TLC's {action} from node {node} to {dst}")
                if store_admissible(cfg, freeing, hit[0]):
                    options.append((dst, hit))
            if not options:
                break
            dst, (step, nxt) = rng.choice(options)
            if step.process == WRITER:
                freeing = step.name == "free_step" and _free_enabled(cfg, nxt)
            elif freeing:
                freeing = _free_enabled(cfg, nxt)
            node, cur = dst, nxt
            on_path.append(dst)
            sts.append(nxt)
            steps.append(step)
        walks.setdefault(tuple(on_path), (Behaviour.from_states(cfg, sts, steps), frozenset(on_path)))
    pool = [(b, nodes, features(b)) for b, nodes in walks.values()]
    chosen: list[Behaviour] = []
    covered: set = set()
    visited: set[str] = set()
    while pool and len(chosen) < n:
        best = max(range(len(pool)), key=lambda i: (len(pool[i][2] - covered), len(pool[i][1] - visited), -i))
        b, nodes, feats = pool.pop(best)
        chosen.append(b)
        covered |= feats
        visited |= nodes
    ids = [f"b{i:02d}-{len(b.steps) - 1}steps" for i, b in enumerate(chosen)]
    actions: dict[str, int] = {}
    for b in chosen:
        for k, o in features(b):
            actions[f"{k} {o}"] = actions.get(f"{k} {o}", 0) + 1
    return SpecTests(cf.name, dict(cf.constants), seed, graph.distinct, chosen, ids, len(visited),
                     dict(sorted(actions.items())))


def generate(config: Path, n: int = BEHAVIOURS, seed: int = SEED) -> SpecTests:
    """TLC's state graph of ``config`` (a ``tla/MC*.cfg`` path), sampled
    (:func:`sample`).

    Raises:
        TlcError: the config cannot be read or TLC cannot run.
        ValueError: the model and TLC disagree (see :func:`sample`).
    """
    t0 = time.monotonic()
    cf = read_config(Path(config))
    tests = sample(cf, state_graph(cf), n, seed)
    tests.seconds = time.monotonic() - t0
    return tests


def load(path: Path) -> SpecTests:
    """A generated file.

    Raises:
        OSError: it cannot be read.
        ValueError: it is not a ``shmspec.spectests/1`` file.
    """
    return SpecTests.from_json(json.loads(Path(path).read_text()))


def dump(tests: SpecTests) -> str:
    """The file's text, one behaviour a line (stable: same tests, same bytes)."""
    d = tests.to_json()
    lines = ",\n  ".join(json.dumps(b, separators=(",", ":")) for b in d.pop("behaviours"))
    return json.dumps(d, indent=1)[:-2] + ',\n "behaviours": [\n  ' + lines + "\n ]\n}\n"


def replay_all(tests: SpecTests, target: LoadedTarget) -> list[TargetReplay]:
    """Every behaviour of ``tests`` on ``target`` (:func:`.spectrace.replay_on_target`,
    one process pool), in order."""
    cfg = tests.model_config()
    with ProcessPool(target, tuple(cfg.readers)) as pool:
        return [replay_on_target(cfg, b, target, pool) for b in tests.behaviours]


def main(argv: list[str] | None = None) -> int:
    """``python -m shmspec.conformance.commands.spectests CONFIG [--out FILE] [-n N]
    [--seed S] [--target T]``: generate (and save, and replay on ``T``).
    Exit 0; 1 when the target departs from a behaviour; 2 on a usage error,
    when TLC cannot run or the target cannot be loaded."""
    import argparse  # noqa: PLC0415

    from ..targets.loader import TargetError, load_target  # noqa: PLC0415

    p = argparse.ArgumentParser(prog="python -m shmspec.conformance.commands.spectests", description=main.__doc__)
    p.add_argument("config", type=Path, help="a TLC config, e.g. tla/MC_impl_reread.cfg")
    p.add_argument("--out", type=Path, default=None, help="write the behaviours here (shmspec.spectests/1)")
    p.add_argument("-n", type=int, default=BEHAVIOURS, help=f"behaviours (default {BEHAVIOURS})")
    p.add_argument("--seed", type=int, default=SEED, help=f"sampling seed (default {SEED})")
    p.add_argument("--target", default=None, help="replay every behaviour on this store (impl, file:PATH, vllm==X.Y.Z)")
    args = p.parse_args(argv)
    try:
        tests = generate(args.config, args.n, args.seed)
        target = load_target(args.target) if args.target else None
    except (TlcError, TargetError, ValueError) as exc:
        print(f"spectests: error: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    steps = sum(len(b.steps) - 1 for b in tests.behaviours)
    print(f"{len(tests.behaviours)} behaviours, {steps} steps, {tests.visited} of {tests.distinct} TLC states "
          f"visited ({tests.seconds:.1f} s); behaviours per step kind and outcome: {tests.actions}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(dump(tests))
        print(f"written to {args.out}")
    if target is None:
        return ExitCode.PASS
    t0 = time.monotonic()
    replays = replay_all(tests, target)
    departed = [(i, r) for i, r in zip(tests.ids, replays) if r.departs is not None or r.error]
    for i, r in departed:
        print(f"{i}: {r.summary()}" + (f" [{r.error}]" if r.error else ""))
    print(f"{target.spec}: {len(replays) - len(departed)} of {len(replays)} behaviours followed step by step "
          f"({time.monotonic() - t0:.1f} s)")
    return ExitCode.FAIL if departed else ExitCode.PASS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["BEHAVIOURS", "CANDIDATES", "SCHEMA", "SEED", "SpecTests", "StateGraph", "dump", "features",
           "generate", "load", "main", "parse_dot", "replay_all", "sample", "state_graph", "store_admissible"]
