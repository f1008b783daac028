"""The checks: each reads the gathered facts and returns findings with evidence and a fix.

A check that cannot run (no history, no -n given, a probe that could not tell) adds a
note saying so instead of guessing; every number in a finding comes from the target
interpreter, the kernel, the probe or the history.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from suitefit.costs import DEFAULT_WORKER, build_cost_model
from suitefit.doctor.config_reader import FailUnder, SourceScan, TargetFacts
from suitefit.doctor.findings import Finding
from suitefit.doctor.machine import CpuFacts
from suitefit.doctor.probe import ProbeResult
from suitefit.history import History
from suitefit.model import CostModel
from suitefit.units import fmt_mb, fmt_s

RECENT_RUNS = 5  # how many recent runs the history checks look at
BLAS_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_SHOWN = 8  # evidence lines per finding before "... and N more"


@dataclass
class Context:
    project: Path
    facts: TargetFacts
    cpus: CpuFacts
    scan: SourceScan
    fail_under: FailUnder | None
    history: History | None
    history_path: Path
    budget_mb: float
    budget_source: str
    run_probe: Callable[[], ProbeResult]
    notes: list[str] = field(default_factory=list)
    probe: ProbeResult | None = None
    cost_model: CostModel | None = None


def _n_text(ctx: Context) -> str:
    f = ctx.facts
    given = " ".join(f.tokens("-n", "--numprocesses")) or f"-n {f.get('numprocesses')}"
    return f"{given} ({f.origin('-n', '--numprocesses')}) starts {f.workers} workers"


def _more(lines: list[str]) -> tuple[str, ...]:
    if len(lines) <= _SHOWN:
        return tuple(lines)
    return (*lines[:_SHOWN], f"... and {len(lines) - _SHOWN} more")


# -- configuration checks -------------------------------------------------------------------


def check_loadgroup(ctx: Context) -> list[Finding]:
    f = ctx.facts
    marks = ctx.scan.files_with_group_marks
    uses_loadgroup = f.dist == "loadgroup"
    if not f.has_xdist or not (uses_loadgroup or (marks and not f.workers)):
        return []
    ctx.probe = res = ctx.run_probe()
    if res.honoured is None:
        ctx.notes.append(f"loadgroup-ignored: not checked: {res.detail}")
        return []
    if res.honoured:
        return []
    evidence = [f"probe ({'cached result from an earlier doctor run' if res.cached else 'run now'}, "
                f"pytest {res.pytest}, pytest-xdist {res.xdist}): {res.detail}"]
    if uses_loadgroup:
        evidence.append(f"{' '.join(f.tokens('--dist')) or '--dist loadgroup'} from {f.origin('--dist')}")
    if marks:
        evidence.append(f"xdist_group in {len(marks)} file(s): {', '.join(marks[:5])}"
                        + (" ..." if len(marks) > 5 else ""))
    return [Finding(
        "loadgroup-ignored",
        f"--dist loadgroup does not keep an xdist_group on one worker with pytest {res.pytest} + "
        f"pytest-xdist {res.xdist}: grouped tests spread over workers",
        tuple(evidence),
        "Pin a pytest/pytest-xdist pair that the probe shows grouping (pytest 9.2 broke it: "
        "pytest-xdist issue #1386), or run through `suitefit run`, which keeps each xdist_group's "
        "files on one worker itself (it reads the marks) and checks where tests ran.",
    )]


def check_group_marks_mode(ctx: Context) -> list[Finding]:
    f = ctx.facts
    marks = ctx.scan.files_with_group_marks
    if not marks or not f.workers or f.workers < 2 or f.dist == "loadgroup":
        return []
    return [Finding(
        "group-marks-without-loadgroup",
        f"xdist_group marks are ignored: the run distributes with --dist {f.dist}, not loadgroup",
        (f"{_n_text(ctx)}, --dist {f.dist} ({f.origin('--dist') if f.tokens('--dist') else 'the default'})",
         f"xdist_group in {len(marks)} file(s): {', '.join(marks[:5])}" + (" ..." if len(marks) > 5 else "")),
        "Add --dist loadgroup to addopts (and check with `suitefit doctor` that this pytest/xdist "
        "pair honours it), or run through `suitefit run`, which keeps each xdist_group's files "
        "on one worker itself.",
    )]


def check_n_auto(ctx: Context) -> list[Finding]:
    f = ctx.facts
    mode = f.get("numprocesses")
    if mode not in ("auto", "logical"):
        return []
    auto = f.get("auto_workers")
    if not isinstance(auto, int):
        ctx.notes.append("n-auto-miscount: not checked: xdist did not say how many workers -n auto starts")
        return []
    c = f.get("cpus") or {}
    if f"{mode}" == "auto" and c.get("psutil"):
        how = f"psutil physical cores ({c.get('psutil_physical')})"
    elif c.get("psutil"):
        how = f"psutil logical CPUs ({c.get('psutil_logical')})"
    else:
        how = f"CPU affinity ({c.get('affinity')}, psutil not installed in the target interpreter)"
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        how = f"PYTEST_XDIST_AUTO_NUM_WORKERS={os.environ['PYTEST_XDIST_AUTO_NUM_WORKERS']}"
    usable = ctx.cpus.usable
    if auto == usable:
        return []
    fewer = auto < usable
    return [Finding(
        "n-auto-miscount",
        f"-n {mode} starts {auto} worker{'s' * (auto != 1)} on a machine that gives this run "
        f"{usable} CPU{'s' * (usable != 1)}: "
        + ("half-idle runner" if fewer and auto * 2 <= usable else "idle CPUs" if fewer
           else "workers compete for CPUs and each pays the startup"),
        (f"-n {mode} from {f.origin('-n', '--numprocesses')}: xdist counts {how}",
         f"this machine: {ctx.cpus.logical} logical CPUs, {ctx.cpus.physical or '?'} physical cores, "
         f"{usable} usable by this run: {ctx.cpus.source}"),
        f"Pin the width: -n {usable} (or take the count from `suitefit plan`, which weighs the "
        "measured per-worker startup); a fixed -n behaves the same on every machine.",
    )]


def check_blas(ctx: Context) -> list[Finding]:
    f = ctx.facts
    w = f.workers
    if not w or w < 2:
        return []
    env = f.get("blas_env") or {}
    ini_env = " ".join(f.get("env_ini") or [])
    values = {v: env.get(v) or _ini_env_value(ini_env, v) for v in BLAS_VARS}
    state = ", ".join(f"{v}={values[v]}" if values[v] else f"{v} unset" for v in BLAS_VARS)
    omp = values["OMP_NUM_THREADS"]
    unpinned = not omp and not (values["MKL_NUM_THREADS"] and values["OPENBLAS_NUM_THREADS"])
    threads = max((_int(x) for x in values.values() if x), default=0)
    over = threads > 1 and threads * w > ctx.cpus.usable
    if not unpinned and not over:
        return []
    where = "in this environment, after the conftest files were imported"
    if unpinned:
        title = (f"{w} workers without OMP/MKL/OpenBLAS threads pinned: each worker's pools size "
                 f"themselves to all {ctx.cpus.usable} CPUs")
    else:
        title = f"{w} workers × {threads} BLAS/OpenMP threads on {ctx.cpus.usable} CPUs"
    return [Finding(
        "blas-threads-unpinned",
        title,
        (_n_text(ctx), f"{state} ({where})"),
        "Set OMP_NUM_THREADS=1, MKL_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 in the CI job's env "
        "(or at the top of the root conftest.py); `suitefit run` pins them for its workers.",
    )]


def _ini_env_value(ini_env: str, var: str) -> str | None:
    """A value set by pytest-env's ``env`` ini key ("VAR=1", "D:VAR=1", "R:VAR=1")."""
    m = re.search(rf"(?:^|\s)(?:[DR]:)*{var}=(\S+)", ini_env)
    return m.group(1) if m else None


def _int(x: str | None) -> int:
    try:
        return int(str(x))
    except ValueError:
        return 0


def check_worker_restarts(ctx: Context) -> list[Finding]:
    f = ctx.facts
    w = f.workers
    if not w or w < 1:
        return []
    given = f.get("maxworkerrestart")
    if given is not None and _int(given) == 0:
        return []
    if given is None:
        limit = 4 * w
        ev = f"--max-worker-restart not given: xdist replaces a crashed worker up to {limit} times (4 × -n)"
    else:
        limit = _int(given)
        ev = f"{' '.join(f.tokens('--max-worker-restart', '--maxworkerrestart'))} from {f.origin('--max-worker-restart', '--maxworkerrestart')}"
    return [Finding(
        "worker-restarts-masked",
        f"a crashed worker is replaced (up to {limit} times) and the run goes on, so an OOM-killed "
        "worker shows up as a failed test among others, not as a stopped run",
        (_n_text(ctx), ev),
        "Add --max-worker-restart=0 to addopts: the first dead worker fails the run and names its test.",
    )]


def check_coverage(ctx: Context) -> list[Finding]:
    f = ctx.facts
    out: list[Finding] = []
    if f.coverage_on or f.get("no_cov"):
        return out
    reports = f.tokens("--cov-report")
    if f.get("cov_report") and reports:
        out.append(Finding(
            "cov-report-without-cov",
            "--cov-report is given but --cov is not: coverage never runs and no report is written",
            (f"{' '.join(reports)} from {f.origin('--cov-report')}",
             "--cov is not in the ini addopts, PYTEST_ADDOPTS or the command line"),
            "Add --cov=YOUR_PACKAGE next to --cov-report, or drop the --cov-report flags.",
        ))
    fail_under = ctx.fail_under
    opt = f.get("cov_fail_under")
    if fail_under is not None or opt:
        src = (f"{' '.join(f.tokens('--cov-fail-under'))} from {f.origin('--cov-fail-under')}" if opt
               else f"fail_under = {fail_under.value:g} in {fail_under.source}" if fail_under else "")
        out.append(Finding(
            "fail-under-inert",
            "a coverage fail_under threshold is set but coverage is not enabled in pytest: the "
            "threshold can never fail the run",
            (src, "--cov is not in the ini addopts, PYTEST_ADDOPTS or the command line"),
            "Enable coverage (--cov=YOUR_PACKAGE) in the run that should be held to the threshold, "
            "or silence this finding if CI checks it with a separate `coverage report`.",
        ))
    return out


# -- history checks -------------------------------------------------------------------------


def _recent_runs(h: History, table: str, n: int = RECENT_RUNS) -> list[int]:
    rows = h.execute(
        f"SELECT id FROM runs WHERE status != 'running' AND id IN (SELECT DISTINCT run_id FROM {table}) "
        "ORDER BY id DESC LIMIT ?", [n])
    return [int(r[0]) for r in rows]


def _costs(ctx: Context) -> CostModel | None:
    """The planner's cost model of this history (the same numbers `suitefit plan` uses)."""
    if ctx.history is None:
        return None
    if ctx.cost_model is None:
        ctx.cost_model = build_cost_model(ctx.history)
    return ctx.cost_model


def check_payoff(ctx: Context) -> list[Finding]:
    f = ctx.facts
    w = f.workers
    cm = _costs(ctx)
    if cm is None or not w or w < 2:
        return []
    if cm.worker is DEFAULT_WORKER or not cm.files:
        ctx.notes.append("workers-exceed-payoff: not checked: no run in the history measured worker startup")
        return []
    startup = cm.worker.startup_s
    work = sum(fc.wall_s for fc in cm.files if fc.measured)
    if startup <= 0:
        return []
    pays = max(1, int(work / startup))
    if w <= pays:
        return []
    wnote = next((n for n in cm.notes if n.startswith("worker startup")), "")
    return [Finding(
        "workers-exceed-payoff",
        f"{w} workers, but the measured startup pays for at most {pays}: beyond that each worker "
        "spends longer starting than on the tests it takes over",
        (_n_text(ctx),
         f"a worker takes {fmt_s(startup)} to start (interpreter, imports, collection): {wnote}",
         f"the files' tests take {fmt_s(work)} in all ({len(cm.files)} files, median of their last "
         f"runs), {fmt_s(work / w)} per worker at -n {w}"),
        f"Use -n {pays} or fewer (`suitefit plan` predicts the wall time for each count).",
    )]


def check_pool_spread(ctx: Context) -> list[Finding]:
    h = ctx.history
    if h is None:
        return []
    rows = h.execute(
        "SELECT f.run_id FROM files f JOIN runs r ON r.id = f.run_id WHERE r.status != 'running' "
        "GROUP BY f.run_id HAVING COUNT(DISTINCT f.worker) > 1 ORDER BY f.run_id DESC LIMIT 1")
    if not rows:
        ctx.notes.append("session-pool-spread: not checked: no xdist run in the history")
        return []
    run_id = int(rows[0][0])
    procs: dict[str, dict[str, int]] = defaultdict(dict)
    mb: dict[str, list[float]] = defaultdict(list)
    for fx in h.fixtures(run_id):
        if fx.procs > 0 and fx.scope in ("session", "package"):
            procs[fx.name][fx.worker] = fx.procs
            mb[fx.name].append(fx.mb)
    if not procs:
        return []
    file_workers: dict[str, set[str]] = defaultdict(set)
    for fr in h.files(run_id):
        file_workers[fr.path].add(fr.worker)
    users = h.fixture_files(run_id)
    evidence: list[str] = []
    names: list[str] = []
    for name, by_worker in sorted(procs.items()):
        files = users.get(name, [])
        workers = set(by_worker) | {w for p in files for w in file_workers.get(p, ())}
        if len(workers) < 2:
            continue
        names.append(name)
        started = ", ".join(f"{w} ({n})" for w, n in sorted(by_worker.items()))
        copies = len(by_worker)
        evidence.append(f"run {run_id}: fixture {name} started processes on {started}, "
                        f"{fmt_mb(max(mb[name]))} per copy, {copies} copies; its {len(files)} file(s) "
                        f"ran on {len(workers)} workers: {', '.join(sorted(workers))}")
    if not names:
        return []
    return [Finding(
        "session-pool-spread",
        f"session fixture(s) {', '.join(names)} start processes once per worker: the pool exists "
        "on every worker that runs one of its files",
        _more(evidence),
        "Keep each such fixture's files on one worker: list them in [tool.suitefit] groups and run "
        "through `suitefit run` (or xdist_group + --dist loadgroup where doctor's probe says groups hold).",
    )]


def check_file_budget(ctx: Context) -> list[Finding]:
    cm = _costs(ctx)
    if cm is None:
        return []
    measured = [fc for fc in cm.files if fc.measured]
    if not measured:
        ctx.notes.append("file-exceeds-budget: not checked: no file measurements in the history")
        return []
    base = cm.worker.planned_mb if cm.worker is not DEFAULT_WORKER else 0.0
    over = sorted((fc for fc in measured if fc.peak_mb + base > ctx.budget_mb), key=lambda fc: -fc.peak_mb)
    if not over:
        return []
    lines = [f"{fc.path}: {fmt_mb(fc.peak_mb)} above its worker's baseline (largest of its recent runs) "
             f"+ {fmt_mb(base)} worker baseline{' and warm-up' if cm.worker.warmup_mb >= 0.5 else ''} = "
             f"{fmt_mb(fc.peak_mb + base)}" for fc in over]
    return [Finding(
        "file-exceeds-budget",
        f"{len(over)} test file(s) need more memory alone than the budget of {fmt_mb(ctx.budget_mb)}: "
        "no worker count or order can make the run fit",
        (*_more(lines), f"budget: {ctx.budget_source}"),
        "Shrink what those files allocate (small tensors/arrays where only names, dtypes and shapes are "
        "asserted), or set [tool.suitefit] memory_budget if the runner has more than this machine.",
    )]


_PASS = {"passed", "xpassed"}
_FAIL = {"failed", "error"}


def check_outcomes(ctx: Context) -> list[Finding]:
    h = ctx.history
    if h is None:
        return []
    runs = _recent_runs(h, "tests")
    if len(runs) < 2:
        ctx.notes.append("outcome-differs: not checked: fewer than 2 runs with tests in the history")
        return []
    marks = ",".join("?" * len(runs))
    seen: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for nodeid, run_id, outcome in h.execute(
            f"SELECT nodeid, run_id, outcome FROM tests WHERE run_id IN ({marks}) ORDER BY run_id", runs):
        kind = "passed" if outcome in _PASS else "failed" if outcome in _FAIL else None
        if kind:
            seen[nodeid][kind].append(int(run_id))
    kinds = {int(r[0]): r[1] for r in h.execute(f"SELECT id, kind FROM runs WHERE id IN ({marks})", runs)}
    lines = []
    for nodeid, by in sorted(seen.items()):
        if len(by) > 1:
            parts = "; ".join(f"{k} in run(s) {', '.join(f'{r} ({kinds.get(r)})' for r in ids)}"
                              for k, ids in sorted(by.items()))
            lines.append(f"{nodeid}: {parts}")
    if not lines:
        return []
    return [Finding(
        "outcome-differs",
        f"{len(lines)} test(s) passed in one of the last {len(runs)} runs and failed in another: "
        "flaky, or dependent on order or timing",
        _more(lines),
        "Run `suitefit sweep` (each file alone vs. the full run) and `suitefit bisect TEST` to find "
        "the file it depends on; make timing assertions use CPU time or an injected clock.",
    )]


CHECKS: tuple[Callable[[Context], list[Finding]], ...] = (
    check_loadgroup, check_group_marks_mode, check_n_auto, check_payoff, check_blas,
    check_worker_restarts, check_coverage, check_pool_spread, check_file_budget, check_outcomes,
)
