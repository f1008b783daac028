"""Order-dependency sweep: every test file alone in a fresh pytest, against the full run.

A test that passes alone but fails in the suite is a *victim* (something earlier
pollutes it); one that fails alone but passes in the suite is *dependent* (it
uses state an earlier test left, like a secret another file set); one whose
outcome alone differs between repeats is *flaky*. ``classify`` is pure; ``sweep``
runs the processes, a small pool sized by CPUs and the memory budget.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from suitefit import timing
from suitefit.costs import DEFAULT_WORKER
from suitefit.diagnose.pytest_runs import PytestResult, is_ok, run_recorded
from suitefit.errors import SuitefitError
from suitefit.history import History, RunRecord
from suitefit.plan.planner import DEFAULT_FILE_MB as PLAN_DEFAULT_FILE_MB

SUITE_KINDS = ("profile", "pytest", "run")
# A file never measured, run alone: a worker's default baseline plus the plan's default file.
DEFAULT_FILE_MB = DEFAULT_WORKER.baseline_mb + PLAN_DEFAULT_FILE_MB


@dataclass(frozen=True)
class Finding:
    kind: str  # "victim", "dependent", "flaky"
    nodeid: str
    file: str
    suite: str | None  # outcome in the full run
    alone: tuple[str, ...]  # outcome alone, one per repeat ("missing": not reported)

    def explain(self) -> str:
        alone = "/".join(self.alone)
        if self.kind == "victim":
            return f"{self.suite} in the suite, {alone} alone: an earlier test pollutes it"
        if self.kind == "dependent":
            return f"{alone} alone, {self.suite} in the suite: it needs state an earlier test left"
        return f"{alone} across repeats alone ({self.suite} in the suite): flaky"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "nodeid": self.nodeid, "file": self.file, "suite": self.suite,
                "alone": list(self.alone), "why": self.explain()}


def classify(suite: Mapping[str, str], alone: Mapping[str, Sequence[str]],
             file_of: Callable[[str], str] = lambda n: n.split("::", 1)[0]) -> list[Finding]:
    """Compare each test's outcome in the suite with its outcomes alone (one per repeat).

    Tests of the suite missing from an alone run count as "missing" (the file did
    not collect alone: a dependent if the suite passed them). Tests seen only alone
    are ignored: the suite run is the reference.
    """
    out: list[Finding] = []
    for nodeid in suite:
        s = suite[nodeid]
        runs = tuple(alone.get(nodeid, ()))
        if not runs:
            continue
        oks = {is_ok(o) for o in runs}
        if len(oks) > 1:
            out.append(Finding("flaky", nodeid, file_of(nodeid), s, runs))
        elif is_ok(s) and oks == {False}:
            out.append(Finding("dependent", nodeid, file_of(nodeid), s, runs))
        elif not is_ok(s) and oks == {True}:
            out.append(Finding("victim", nodeid, file_of(nodeid), s, runs))
    order = {"victim": 0, "dependent": 1, "flaky": 2}
    out.sort(key=lambda f: (order[f.kind], f.file, f.nodeid))
    return out


@dataclass
class SweepReport:
    suite_run: int
    suite_made: bool
    files: list[str]
    repeat: int
    jobs: int
    budget_mb: float
    findings: list[Finding] = field(default_factory=list)
    alone_runs: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"suite_run": self.suite_run, "suite_made": self.suite_made, "files": len(self.files),
                "repeat": self.repeat, "jobs": self.jobs, "budget_mb": self.budget_mb,
                "alone_runs": self.alone_runs, "wall_s": self.wall_s, "notes": self.notes,
                "findings": [f.to_json() for f in self.findings]}


def _suite_run(history: History, run_id: int | None) -> RunRecord | None:
    if run_id is not None:
        run = history.run(run_id)
        if not history.tests(run_id):
            raise SuitefitError(f"run {run_id} in history {history.path} recorded no tests")
        return run
    for run in history.runs(limit=200):
        if run.status == "running" or run.kind not in SUITE_KINDS:
            continue
        if history.tests(run.id):
            return run
    return None


def file_memory_mb(history: History, files: Iterable[str], default_mb: float) -> dict[str, float]:
    """Each file's measured absolute peak (the worst recorded), or the default."""
    est: dict[str, float] = {}
    for f in files:
        rows = history.execute("SELECT MAX(peak_abs_mb) FROM files WHERE path = ?", [f])
        v = rows[0][0] if rows else None
        est[f] = float(v) if v else default_mb
    return est


def _alone_args(file: str, pytest_args: Sequence[str], cwd: Path) -> list[str]:
    """The user's options without their path selections (the file replaces them)."""
    keep = [a for a in pytest_args
            if a.startswith("-") or not (cwd / a.split("::", 1)[0]).exists()]
    return [*keep, file]


def run_pool(tasks: Sequence[tuple[str, int]], run: Callable[[str, int], PytestResult], *,
             jobs: int, budget_mb: float, mem: Mapping[str, float]) -> dict[tuple[str, int], PytestResult]:
    """Run tasks at most ``jobs`` at a time, and only while their memory estimates fit the budget.

    A task larger than the whole budget runs alone rather than never.
    """
    results: dict[tuple[str, int], PytestResult] = {}
    errors: list[BaseException] = []
    cond = threading.Condition()
    running = {"n": 0, "mb": 0.0}
    pending = list(tasks)

    def worker() -> None:
        while True:
            with cond:
                while True:
                    if not pending or errors:
                        return
                    task = pending[0]
                    need = mem.get(task[0], DEFAULT_FILE_MB)
                    if running["n"] == 0 or (running["n"] < jobs and running["mb"] + need <= budget_mb):
                        pending.pop(0)
                        running["n"] += 1
                        running["mb"] += need
                        break
                    cond.wait()
            try:
                res = run(*task)
                with cond:
                    results[task] = res
            except BaseException as e:  # surfaced in the caller's thread
                with cond:
                    errors.append(e)
            finally:
                with cond:
                    running["n"] -= 1
                    running["mb"] -= need
                    cond.notify_all()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def sweep(history: History, *, cwd: Path, pytest_args: Sequence[str] = (), repeat: int = 1,
          jobs: int | None = None, budget_mb: float | None = None, run_id: int | None = None,
          fresh: bool = False, default_file_mb: float = DEFAULT_FILE_MB, memory_margin: float = 0.10,
          timeout_s: float | None = None,
          progress: Callable[[str], None] | None = None) -> SweepReport:
    """Run each file of the suite alone ``repeat`` times and classify what differs from the suite."""
    if repeat < 1:
        raise SuitefitError(f"--repeat must be at least 1, got {repeat}")
    t0 = timing.perf_counter()
    suite = None if fresh else _suite_run(history, run_id)
    made = suite is None
    if suite is None:
        if progress:
            progress("no full run in the history: running the suite once")
        sid, res = run_recorded(history, list(pytest_args), kind="pytest", cwd=cwd,
                                single_process=False, meta={"made_by": "sweep"}, timeout_s=timeout_s)
        if not res.tests:
            raise SuitefitError(f"the full run collected no tests in {cwd}"
                                + (f": {res.output_tail.splitlines()[-1]}" if res.output_tail else ""))
        suite = history.run(sid)
    suite_tests = history.tests(suite.id)
    suite_outcomes = {t.nodeid: t.outcome for t in suite_tests}
    files: list[str] = []
    for t in sorted(suite_tests, key=lambda t: (t.started, t.worker, t.seq)):
        if t.file not in files:
            files.append(t.file)
    n_cpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, min(jobs or n_cpu, len(files) * repeat))
    if budget_mb is None:
        budget_mb = psutil.virtual_memory().available / 2**20 * (1.0 - memory_margin)
    mem = file_memory_mb(history, files, default_file_mb)
    report = SweepReport(suite.id, made, files, repeat, jobs, budget_mb)
    missing_root = [f for f in files if not (cwd / f).exists()]
    if missing_root:
        raise SuitefitError(f"file {missing_root[0]} of run {suite.id} does not exist under {cwd}: "
                            "run the sweep from the suite's rootdir")

    run_ids: dict[tuple[str, int], int] = {}

    def one(file: str, rep: int) -> PytestResult:
        with History(history.path) as own:  # one connection per pool thread
            rid, res = run_recorded(own, _alone_args(file, pytest_args, cwd), kind="sweep", cwd=cwd,
                                    meta={"sweep_of": suite.id, "file": file, "repeat": rep},
                                    timeout_s=timeout_s)
        run_ids[(file, rep)] = rid
        if progress:
            bad = sum(1 for t in res.tests if not is_ok(t.outcome))
            progress(f"{file} alone (repeat {rep + 1}): {len(res.tests)} tests, {bad} not passing")
        return res

    tasks = [(f, r) for r in range(repeat) for f in files]
    results = run_pool(tasks, one, jobs=jobs, budget_mb=budget_mb, mem=mem)
    alone: dict[str, list[str]] = {}
    for (file, rep), res in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        report.alone_runs.append(run_ids[(file, rep)])
        seen = {t.nodeid for t in res.tests}
        for done in res.tests:
            alone.setdefault(done.nodeid, []).append(done.outcome)
        for nodeid in suite_outcomes:
            if nodeid.split("::", 1)[0] == file and nodeid not in seen:
                # The file did not run this test alone: a collection error makes that a failure.
                alone.setdefault(nodeid, []).append("error" if res.collect_errors else "missing")
    missing = sorted(n for n, outs in alone.items() if "missing" in outs and n in suite_outcomes)
    if missing:
        report.notes.append(f"{len(missing)} test(s) of the suite did not run alone (e.g. {missing[0]}); "
                            "not compared")
        for n in missing:
            alone.pop(n)
    report.findings = classify(suite_outcomes, alone)
    report.wall_s = timing.perf_counter() - t0
    return report
