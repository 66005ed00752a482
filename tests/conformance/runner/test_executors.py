"""Executors (conformance/runner/executors.py): a task in a fresh process, and
Ray as the executor of seed units, on a Ray cluster this module starts on the
machine (a head node without CPUs and a worker node of 2, so every task runs
on a node the tests can kill).

Construction: the seeded fault early_free of impl in vLLM's construction
(writer without the readers' lock, 2 forked readers), lockstep campaigns
(``--concurrency off``) on the smoke profile, so a run takes seconds; the
interrupt test runs impl's ci gate with its controlled campaign.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shmspec.conformance.core.errors import UsageError
from shmspec.conformance.runner import executors
from shmspec.conformance.runner.executors import RayExecutor, Task, TaskError

pytestmark = pytest.mark.xdist_group("test_executors")  # one cluster at a time

ROOT = Path(__file__).resolve().parents[3]
FAULT = f"file:{ROOT / 'conformance' / 'mutants' / 'early_free.py'}"
FRESH = "shmspec.conformance.runner.fresh"


# -- tasks of the fresh-process tests: module-level, so they pickle by reference

def _add(a: int, b: int) -> int:
    return a + b


def _raises() -> None:
    raise ValueError("the task's own error")


def _dies() -> None:
    os._exit(7)


def _sleeps_with_a_child(pidfile: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(pidfile).write_text(f"{os.getpid()} {child.pid}")
    time.sleep(120)


@pytest.fixture(autouse=True)
def _tasks_importable(monkeypatch):
    """A fresh process imports this module's tasks by name, as pytest does."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                   os.environ.get("PYTHONPATH")])))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


MARK = f"SHMSPEC_TEST_CLUSTER={os.getpid()}-{time.monotonic_ns()}"
"""In the environment of this module's cluster nodes, so of every task process
they start: another run's task processes on the machine are not counted."""


def _fresh_pids() -> list[int]:
    """This module's task processes now running."""
    out = subprocess.run(["pgrep", "-f", FRESH], capture_output=True, text=True).stdout
    pids = []
    for p in map(int, out.split()):
        try:
            if MARK.encode() in Path(f"/proc/{p}/environ").read_bytes().split(b"\0"):
                pids.append(p)
        except OSError:
            pass
    return pids


def test_a_task_runs_in_a_fresh_process_and_returns_its_value():
    assert executors.run_fresh(Task("add", _add, (2, 3)).payload()) == 5
    with pytest.raises(TaskError, match="ValueError: the task's own error"):
        executors.run_fresh(Task("raises", _raises).payload())
    with pytest.raises(TaskError, match=r"ended \(exit 7\) without a result"):
        executors.run_fresh(Task("dies", _dies).payload())


def test_a_task_whose_parent_is_already_gone_does_not_run(tmp_path):
    """The task process asks for SIGTERM at its parent's death, and a parent
    dead before it could ask (the pid it was given is not its parent) means
    it ends at once, running nothing."""
    task, result = tmp_path / "task.pkl", tmp_path / "result.pkl"
    task.write_bytes(Task("sleeps", _sleeps_with_a_child, (str(tmp_path / "pids"),)).payload())
    proc = subprocess.run([sys.executable, "-m", FRESH, str(task), str(result)], timeout=60,
                          env={**os.environ, executors.PARENT_ENV: "1"})
    assert proc.returncode == 130 and not result.exists() and not (tmp_path / "pids").exists()


def test_a_task_that_does_not_pickle_is_refused_before_any_work():
    with pytest.raises(UsageError, match="seed 3: cannot be sent to another process"):
        Task("seed 3", _add, (lambda: 1, 2)).payload()


def test_an_interrupted_task_stops_its_whole_process_group(tmp_path):
    """A KeyboardInterrupt while the task runs (what Ray's cancel raises in a
    task, and Ctrl-C in a local caller) stops the task's process and every
    process of its group before it propagates."""
    pidfile = tmp_path / "pids"

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and len(pidfile.read_text().split()) == 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)  # handled in the main thread, which is in run_fresh

    def raise_interrupt(*_):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, raise_interrupt)
    watcher = threading.Thread(target=interrupt_once_started, daemon=True)
    try:
        watcher.start()
        with pytest.raises(KeyboardInterrupt):
            executors.run_fresh(Task("sleeps", _sleeps_with_a_child, (str(pidfile),)).payload(), grace=5.0)
    finally:
        watcher.join(5)
        signal.signal(signal.SIGUSR1, previous)
    task_pid, child_pid = map(int, pidfile.read_text().split())
    assert not _alive(task_pid) and not _alive(child_pid)


def test_executor_names_are_checked():
    assert executors.make("local") is None and executors.make(None) is None
    with pytest.raises(UsageError, match="unknown executor 'dask'"):
        executors.make("dask")
    with pytest.raises(UsageError, match="--address applies to --executor ray only"):
        executors.make("local", "127.0.0.1:6379")
    assert isinstance(executors.make("ray"), RayExecutor) and isinstance(executors.make("ray", "auto"), RayExecutor)


def test_workers_with_ray_is_refused_in_one_line(capsys):
    from shmspec.conformance.cli import main

    assert main(["check", "--target", "impl", "--executor", "ray", "--workers", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("shmspec: error: --workers applies to --executor local; on Ray the "
                                               "cluster's CPUs decide how many units run at once")


def test_an_address_where_nothing_listens_is_one_line_at_once(capsys):
    from shmspec.conformance.cli import main

    t0 = time.monotonic()
    assert main(["check", "--target", "impl", "--executor", "ray", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("shmspec: error: --executor ray: nothing answers at 127.0.0.1:1") and "\n" not in err
    assert time.monotonic() - t0 < 30  # Ray's own connect retried for minutes (a fresh user's trial, 2026-12-04)


def test_without_ray_installed_the_cli_says_how_to_get_it(monkeypatch, capsys):
    from shmspec.conformance.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert main(["check", "--target", "impl", "--executor", "ray"]) == 2
    assert "--executor ray needs Ray: pip install 'shmspec[ray]'" in capsys.readouterr().err


# -- on a Ray cluster -----------------------------------------------------------

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'shmspec[ray]')")


class _Cluster:
    """A head node without CPUs and one worker node of 2 (replaceable)."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        self.worker = self.c.add_node(num_cpus=2)
        self.c.wait_for_nodes()

    @property
    def address(self) -> str:
        return self.c.address

    def replace_worker(self) -> None:
        self.c.remove_node(self.worker)
        self.worker = self.c.add_node(num_cpus=2)

    def remove_worker(self) -> None:
        self.c.remove_node(self.worker)

    def shutdown(self) -> None:
        self.c.shutdown()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The nodes start with this test's own user cache (a fake release the
    matrix test publishes must not reach the real one)."""
    monkeypatch.setenv("SHMSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv(*MARK.split("=", 1))
    c = _Cluster()
    try:
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def _findings(report: dict) -> list[tuple]:
    return [(v["property"], v["campaign"], v["seed"], v["fingerprint"], json.dumps(v["steps"]))
            for v in report["violations"]]


def _check(tmp_path: Path, name: str, *extra: str, timeout: float = 600) -> tuple[int, dict, str]:
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "shmspec.conformance.cli", "check", "--target", FAULT, "--profile", "smoke",
                           "--concurrency", "off", "--seeds", "4", "--report-dir", str(out), *extra],
                          capture_output=True, text=True, timeout=timeout)
    assert "(raylet)" not in proc.stderr and "worker.py" not in proc.stderr, proc.stderr  # no Ray log lines
    return proc.returncode, json.loads((out / "report.json").read_text()), proc.stdout


@pytest.mark.slow
def test_seed_units_on_ray_find_what_one_local_worker_finds(cluster, tmp_path):
    code_l, local, _ = _check(tmp_path, "local", "--workers", "1")
    code_r, on_ray, out = _check(tmp_path, "ray", "--executor", "ray", "--address", cluster.address)
    assert code_l == code_r == 1
    assert local["violations"] and _findings(on_ray) == _findings(local)
    assert on_ray["properties"] == local["properties"] and on_ray["seeds"] == local["seeds"]
    assert on_ray["executor"] == f"ray ({cluster.address})" and local["executor"] == "local"
    assert out.rstrip().splitlines()[-1].startswith("verdict: FAIL")
    assert not _fresh_pids()


def _run_api(address: str, retries: int, report: Path) -> subprocess.Popen:
    code = (
        "import json, sys\n"
        "from shmspec import api\n"
        "from shmspec.conformance.runner.executors import RayExecutor\n"
        "def progress(name, done, total):\n"
        "    print('PROGRESS', name, flush=True)\n"
        f"r = api.check('impl', profile='ci', concurrency='off', seeds=2, report_dir={str(report)!r},\n"
        f"              executor=RayExecutor({address!r}, retries={retries}), on_progress=progress)\n"
        "print('VERDICT', r.verdict)\n"

    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _when_tasks_run(timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not _fresh_pids():
        assert time.monotonic() < deadline, "no task started"
        time.sleep(0.2)
    time.sleep(1.0)  # inside the gate, past its imports


@pytest.mark.slow
def test_a_task_lost_with_its_node_is_retried_on_another(cluster, tmp_path):
    proc = _run_api(cluster.address, 3, tmp_path / "r")
    _when_tasks_run()
    cluster.replace_worker()
    out, _ = proc.communicate(timeout=600)
    assert "VERDICT pass" in out, out
    # the node died under a running task (Ray's notice, in one line of ours, not Ray's print)
    assert "PROGRESS seed units: Ray: Task _ray_task failed. There are 3 retries remaining" in out, out
    assert "(raylet)" not in out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["verdict"] == "pass" and not report["errors"]
    assert len(report["seeds"]) == 2


@pytest.mark.slow
def test_a_task_that_cannot_finish_makes_the_verdict_error_never_pass(cluster, tmp_path):
    proc = _run_api(cluster.address, 0, tmp_path / "r")
    _when_tasks_run()
    cluster.remove_worker()  # no retry, and no node left to run one
    out, _ = proc.communicate(timeout=600)
    assert "VERDICT error" in out, out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["verdict"] == "error"
    assert any("the Ray task ended without a result" in e for e in report["errors"]), report["errors"]
    for _ in range(50):  # the lost node's gate processes got SIGTERM from their dead parents
        if not _fresh_pids():
            break
        time.sleep(0.2)
    assert not _fresh_pids()


@pytest.mark.slow
def test_ctrl_c_cancels_every_task(cluster, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "shmspec.conformance.cli", "check", "--target", "impl", "--profile", "ci",
                             "--seeds", "3", "--executor", "ray", "--address", cluster.address,
                             "--report-dir", str(tmp_path / "r")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _when_tasks_run()
    running = _fresh_pids()
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "interrupted" in out.rstrip().splitlines()[-1]
    assert time.monotonic() - t0 < 60
    assert running and not any(_alive(p) for p in running)
    assert not _fresh_pids()
    assert not (tmp_path / "r" / "report.json").exists()  # no verdict from an interrupted run


def test_cancel_all_is_safe_on_finished_refs():
    class FakeRay:
        calls: list = []

        def cancel(self, ref, force=False):
            self.calls.append((ref, force))
            raise ValueError("already finished")

        def wait(self, refs, num_returns, timeout):
            return refs, []

    fake = FakeRay()
    executors._cancel_all(fake, ["a", "b"], grace=0.0)
    assert fake.calls == [("a", False), ("b", False), ("a", True), ("b", True)]


def test_results_of_a_task_are_its_pickle():
    raw = executors.run_raw(Task("add", _add, (1, 1)).payload())
    assert pickle.loads(raw) == ("ok", 2)


def _rows(data: dict, keys: tuple[str, ...]) -> list[dict]:
    return [{k: r.get(k) for k in keys} for r in data]


@pytest.mark.slow
def test_seeded_faults_on_ray_are_the_local_rows(cluster, tmp_path, capsys):
    from shmspec.conformance.cli import main

    runs = {}
    for name, extra in (("local", ["--jobs", "1"]), ("ray", ["--executor", "ray", "--address", cluster.address])):
        code = main(["mutants", "--only", "early_free,dup_overwrite", "--profile", "smoke",
                     "--report-dir", str(tmp_path / name), *extra])
        out = capsys.readouterr().out
        assert code == 0, out
        assert out.rstrip().splitlines()[-1].startswith("verdict: PASS")
        runs[name] = json.loads((tmp_path / name / "mutants.json").read_text())
    keys = ("name", "caught", "caught_by", "campaign", "violated", "error", "report")
    assert _rows(runs["ray"]["faults"], keys) == _rows(runs["local"]["faults"], keys)
    assert [r["caught_by"] for r in runs["ray"]["faults"]] == ["RC", "DUP"]
    assert runs["ray"]["executor"] == f"ray ({cluster.address})" and runs["local"]["executor"] == "local"
    for fault in ("early_free", "dup_overwrite"):  # each gate's report, sent back from its node
        local, on_ray = (json.loads((tmp_path / n / fault / "report.json").read_text()) for n in ("local", "ray"))
        assert _findings(on_ray) == _findings(local)
    assert (tmp_path / "ray" / "early_free" / "repro_test.py").is_file()


def _matrix_helpers():
    import importlib.util

    path = ROOT / "tests" / "conformance" / "commands" / "test_matrix.py"
    spec = importlib.util.spec_from_file_location("_matrix_helpers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_matrix_cells_on_ray_are_the_local_cells(cluster, tmp_path, capsys):
    from shmspec.conformance.cli import main

    h = _matrix_helpers()
    index = h.Index()
    try:
        index.publish({"0.33.0": {h.whl("0.33.0"): h.wheel(h.DUP_BUG, filler=1 << 14)}})
        runs = {}
        for name, extra in (("local", []), ("ray", ["--executor", "ray", "--address", cluster.address])):
            code = main(["matrix", "--index-url", index.url, "--releases", "0.33.0", "--profile", "smoke",
                         "--seed", "0", "--report-dir", str(tmp_path / name), *extra])
            out = capsys.readouterr().out
            assert code == 0, out  # the release fails DUP; impl's rows pass
            runs[name] = json.loads((tmp_path / name / "matrix.json").read_text())
    finally:
        index.close()
    keys = ("label", "target", "verdict", "properties", "exit_code", "report", "report_json", "log")
    assert _rows(runs["ray"]["rows"], keys) == _rows(runs["local"]["rows"], keys)
    assert runs["ray"]["rows"][0]["properties"]["DUP"] == "fail"
    assert runs["ray"]["executor"] == f"ray ({cluster.address})"
    for row in runs["ray"]["rows"]:  # each cell's files, sent back from its node into its folder
        for key in ("report", "report_json", "log"):
            assert (tmp_path / "ray" / row[key]).is_file()
        local, on_ray = (json.loads((tmp_path / n / row["report_json"]).read_text()) for n in ("local", "ray"))
        assert _findings(on_ray) == _findings(local)


@pytest.mark.slow
def test_without_an_address_ray_runs_on_a_new_local_instance_and_stops_it():
    tasks = [Task("add", _add, (2, 3)), Task("raises", _raises), Task("dies", _dies)]
    got = RayExecutor(None).map(tasks)
    assert got[0] == 5
    assert got[1] == "raises: ValueError: the task's own error"
    assert got[2].startswith("dies: its process ended (exit 7) without a result")
    assert not ray.is_initialized()  # the instance it started is stopped
