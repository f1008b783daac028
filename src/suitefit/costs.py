"""The cost model: what the history says each file, worker and fixture costs.

This is the I/O edge in front of the pure planner. Per file: the median, over the
last ``last`` runs that include it, of its wall time in that run (summed across
workers when xdist split it), and the largest peak memory above baseline in those
runs (memory is not averaged: a runner dies at the peak). A persistent fixture's
setup time and memory are charged to the fixture, not to the file that happened
to set it up first on its worker, so the planner can count them once per worker.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from suitefit.config import Config
from suitefit.history import History, meta_of
from suitefit.median import median
from suitefit.model import (
    FAULT_MIN_MB,
    CostModel,
    FileCost,
    FixtureCost,
    Measured,
    OrderConstraint,
    PiecePeak,
    WorkerCost,
)
from suitefit.plan.constraints import join_marked_groups, merge_constraints
from suitefit.plan.grouping import PERSISTENT_SCOPES
from suitefit.plan.planner import default_file_cost
from suitefit.units import fmt_mb, fmt_s

LAST_RUNS = 5  # runs per file the median is taken over
WINDOW_RUNS = 20  # most recent runs read at all
DEFAULT_WORKER = WorkerCost(startup_s=1.0, baseline_mb=100.0)
# A/B runs of other configurations say nothing about this one; a shard's own run covers part
# of the suite and would change the split the other shards computed, until `merge` folds it in.
IGNORED_KINDS = ("compare", "shard-run")
CALIBRATION = "calibrate"  # a profile's slice run side by side: its slowdown and start-up only


def _q(ids: Sequence[int]) -> str:
    return ",".join(str(int(i)) for i in ids)


def build_cost_model(history: History | None, *, files: Sequence[str] = (),
                     groups: Mapping[str, Sequence[str]] | None = None, last: int = LAST_RUNS,
                     window: int = WINDOW_RUNS, default_s: float | None = None,
                     default_mb: float | None = None, root: Path | None = None) -> CostModel:
    """A CostModel from ``history``; ``files`` never seen (and declared ones) get a stated default."""
    declared, dropped = _declared_present({str(k): tuple(v) for k, v in (groups or {}).items()}, root)
    learned, stale = learned_constraints(history, root) if history is not None else ([], [])
    dropped += stale
    declared, honoured, contradicted = merge_constraints(declared, learned)
    dropped += contradicted
    notes: list[str] = []
    run_ids: list[int] = []
    most = _most_collected(history) if history is not None else 0
    if history is not None:
        marks = ",".join("?" * len(IGNORED_KINDS))
        rows = history.execute(
            f"SELECT id FROM runs WHERE status != 'running' AND kind NOT IN ({marks}) "
            f"AND id IN (SELECT DISTINCT run_id FROM files) ORDER BY id DESC LIMIT ?",
            [*IGNORED_KINDS, int(window)],
        )
        run_ids = _with_whole_runs(history, [int(r[0]) for r in rows], int(last), most)
    fcosts: dict[str, FileCost] = {}
    slowdown: dict[int, float] = {}
    run_slowdown: dict[int, float] = {}
    unconfirmed: frozenset[int] = frozenset()
    first_uses: dict[int, tuple[float, int]] = {}
    stalled: dict[int, tuple[float, int]] = {}
    startups: dict[int, float] = {}
    fixtures: tuple[FixtureCost, ...] = ()
    worker = DEFAULT_WORKER
    controller_s: float | None = None
    collect_fraction: float | None = None
    collect_mb: float | None = None
    serial_peak: float | None = None
    times_from_workers = False
    used_runs: set[int] = set()
    fault: tuple[float, str] | None = None
    part: set[int] = set()  # runs of part of the suite (``_part_runs``)
    if history is not None and run_ids:
        fixtures, fx_rows, fx_files = _fixtures(history, run_ids)
        partial = history.partial_files(run_ids)
        part = _part_runs(history, run_ids, partial, most)
        fcosts, used_runs, (slowdown, run_slowdown, unconfirmed, first_uses, stalled), fault, warmup = _files(
            history, run_ids, last, fx_rows, fx_files, partial, part)
        gone = gone_files(fcosts, root)
        for path in gone:
            del fcosts[path]
        if gone:
            notes.append(f"{len(gone)} file(s) measured before no longer exist under {root}: not planned "
                         f"({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''})")
        marked = history.xdist_groups(run_ids)
        declared = join_marked_groups(declared, {n: [f for f in fs if f not in gone] for n, fs in marked.items()})
        whole = _without(sorted(used_runs), part)
        worker, wnote, startups, collect_fraction, collect_mb = _worker(history, whole)
        controller_s = _controller_start(history, whole)
        notes.append(wnote)
        if warmup >= 0.5:
            worker = replace(worker, warmup_mb=warmup)
            notes.append(f"warm-up: a worker keeps {fmt_mb(warmup)} over its first files, whatever they "
                         f"are (runs with workers against the serial run): each worker starts with it, "
                         f"and the files that ran first keep that much less")
        if slowdown:
            notes.append("measured slowdown against a serial run: " + ", ".join(
                f"{n} workers x{f:.2f}" for n, f in sorted(slowdown.items())))
        row = history.execute(
            "SELECT peak_rss_mb FROM runs WHERE status != 'running' AND workers <= 1 "
            "AND peak_rss_mb IS NOT NULL ORDER BY id DESC LIMIT 1")
        serial_peak = float(row[0][0]) if row else None
        times_from_workers = bool(used_runs) and not history.execute(
            f"SELECT 1 FROM runs WHERE id IN ({_q(sorted(used_runs))}) AND COALESCE(workers, 0) <= 1 "
            f"AND kind != ? LIMIT 1", [CALIBRATION])
        notes.insert(0, f"costs from {len(used_runs)} recorded run(s) (ids {min(used_runs)}.."
                        f"{max(used_runs)}): per file the median time of its last {last} runs "
                        f"and the largest peak")
    else:
        notes.append(f"no worker measured: assumed {fmt_s(worker.startup_s)} startup and "
                     f"{fmt_mb(worker.baseline_mb)} baseline per worker")
    # defaults for files never measured
    want = list(dict.fromkeys([*files, *(f for fs in declared.values() for f in fs)]))
    missing = [f for f in want if f not in fcosts]
    if missing:
        s, mb, src = default_file_cost(list(fcosts.values()), default_s, default_mb)
        for f in missing:
            fcosts[f] = FileCost(path=f, wall_s=s, peak_mb=mb, measured=False)
        notes.append(f"{len(missing)} file(s) never measured: default {fmt_s(s)} / {fmt_mb(mb)} "
                     f"each ({src})")
    whole_ids = _without(run_ids, part) if history is not None and run_ids else []
    outside = _outside(history, whole_ids) if history is not None and whole_ids else {}
    peaks, growth, ctl_note = (_process_peaks(history, run_ids, most) if history is not None and run_ids
                               else ({}, None, None))
    if ctl_note:
        notes.append(ctl_note)
    ends, hooks = _serial_overhead(history, whole_ids) if history is not None and whole_ids else ([], [])
    return CostModel(
        files=tuple(fcosts[f] for f in sorted(fcosts)),
        fixtures=fixtures,
        worker=worker,
        slowdown=slowdown,
        run_slowdown=run_slowdown,
        slowdown_unconfirmed=unconfirmed,
        first_uses=first_uses,
        reference_stalls=stalled,
        startup_by_workers=startups,
        collect_fraction=collect_fraction,
        collect_mb=collect_mb,
        controller_s=controller_s,
        outside_by_workers=outside,
        serial_end_s=median(ends) if ends else None,
        controller_end_s=median(hooks) if hooks else None,
        sampler_mb=peaks.get("sampler_rss_mb") or 0.0,
        controller_mb=peaks.get("controller_mb"),
        controller_growth=growth,
        controller_per_test_s=_controller_per_test(history, run_ids) if history is not None and run_ids else None,
        fault_s_per_mb=fault[0] if fault else None,
        fault_source=fault[1] if fault else "",
        peak_errors=_peak_errors(history) if history is not None else (),
        wall_errors=_wall_errors(history, most) if history is not None else (),
        serial_peak_mb=serial_peak,
        times_from_workers=times_from_workers,
        runs_used=len(used_runs),
        declared_groups=declared,
        notes=tuple(notes) + tuple(f"learned order: {c.explain()}" for c in honoured),
        constraints=tuple(honoured),
        left_out=tuple(dropped),
    )


def restrict(costs: CostModel, keep: Callable[[str], bool], why: str) -> CostModel:
    """The model of the files ``keep`` accepts: what a run of part of the suite plans (its
    fixtures' users, groups and order constraints cut to match); ``why`` says what chose them."""
    files = tuple(f for f in costs.files if keep(f.path))
    groups = {g: kept for g, fs in costs.declared_groups.items() if (kept := tuple(f for f in fs if keep(f)))}
    tests, of = sum(f.tests for f in files), sum(f.tests for f in costs.files)
    rel = tests / of if of else len(files) / len(costs.files) if costs.files else 1.0  # of this model's
    share = rel * costs.selected_share
    counted = f" ({tests:,} of {of:,} tests, {share:.0%})" if of else ""
    # a worker's baseline holds what it collected: it keeps that share of it, as of its start-up
    gone_mb = (costs.collect_mb or 0.0) * (1.0 - rel)
    baseline = max(0.0, costs.worker.baseline_mb - gone_mb)
    said = (f"; a worker's baseline {fmt_mb(baseline)}, less {fmt_mb(gone_mb)} of what collecting the "
            f"whole suite grew it by" if gone_mb >= 0.5 else "")
    return replace(
        costs, files=files,
        worker=replace(costs.worker, baseline_mb=baseline),
        collect_mb=costs.collect_mb * rel if costs.collect_mb is not None else None,
        fixtures=tuple(replace(fx, files=tuple(f for f in fx.files if keep(f))) for fx in costs.fixtures),
        declared_groups=groups,
        constraints=tuple(c for c in costs.constraints if keep(c.first) and keep(c.second)),
        selected_share=share,
        notes=(*costs.notes, f"{why} select {len(files)} of the {len(costs.files)} files{counted}: "
                             f"the plan is theirs{said}"))


def _declared_present(groups: dict[str, tuple[str, ...]], root: Path | None
                      ) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """``[tool.suitefit] groups`` less the files not under ``root`` (a typo, a file deleted
    since), judged as ``gone_files`` judges; a line for each. Such a file would be planned
    at a default cost, a unit's worth of time that never runs, in every prediction."""
    gone = set(gone_files(dict.fromkeys(f for fs in groups.values() for f in fs), root))
    if not gone:
        return groups, []
    lines = [f"[tool.suitefit] groups: {name!r} names {f}, which is not under {root}: left out of the plan"
             for name, fs in groups.items() for f in fs if f in gone]
    return {n: kept for n, fs in groups.items() if (kept := tuple(f for f in fs if f not in gone))}, lines


def gone_files(paths: Iterable[str], root: Path | None) -> list[str]:
    """The measured files (rootdir-relative, as in node ids) no longer under ``root``: a
    test file deleted or moved since. Each would be planned as a unit that never runs, with
    its time in every prediction, until it left the history's window. Where none of them is
    there (a history carried to another checkout path, a root above the rootdir), nothing
    can be judged and none is gone."""
    if root is None or not root.is_dir():
        return []
    paths = list(paths)
    missing = [p for p in paths if not (root / p).exists()]
    return sorted(missing) if len(missing) < len(paths) else []


def learned_constraints(history: History, root: Path | None = None
                        ) -> tuple[list[OrderConstraint], list[str]]:
    """The history's order constraints, minus stale ones (one line each for those).

    Stale: a file no longer under ``root`` (the suite's folder now) nor the rootdir it was
    found in, or a test function no longer defined in its file (renamed or deleted). Read
    from the files, not from the newest run: a run with ``-k`` or ``--deselect`` would
    otherwise make constraints vanish. Where neither folder exists (a history carried to
    another checkout path), nothing can be judged and the constraint stays.
    """
    out: list[OrderConstraint] = []
    dropped: list[str] = []
    for c in history.constraints():
        roots = [d for d in dict.fromkeys(str(x) for x in (root, c.rootdir) if x) if Path(d).is_dir()]
        gone = next((n for n in (c.culprit, c.test) if roots and not any(_defined(d, n) for d in roots)),
                    None)
        if gone is not None:
            dropped.append(f"constraint dropped: {gone} no longer exists "
                           f"({c.kind} {c.culprit} -> {c.test}, found by {c.source})")
            continue
        out.append(OrderConstraint(first=c.first_file, second=c.second_file, kind=c.kind, test=c.test,
                                   culprit=c.culprit, evidence=f"{c.evidence}; found by {c.source}"))
    return out, dropped


def _defined(folder: str, nodeid: str) -> bool:
    """Does ``nodeid``'s file exist under ``folder`` and define its test function?"""
    file, _, rest = nodeid.partition("::")
    try:
        text = (Path(folder) / file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    name = rest.split("::")[-1].split("[", 1)[0]
    return not name or re.search(rf"\bdef {re.escape(name)}\b", text) is not None


def _fixtures(history: History, run_ids: Sequence[int]) -> tuple[
        tuple[FixtureCost, ...], dict[tuple[int, str], dict[str, tuple[float, float]]],
        dict[int, dict[str, set[str]]]]:
    """Fixture costs, per (run, worker) the persistent fixtures set up there, and their users."""
    ids = _q(run_ids)
    rows = history.execute(
        f"SELECT run_id, worker, name, scope, setup_s, teardown_s, procs, mb, autouse FROM fixtures "
        f"WHERE run_id IN ({ids}) ORDER BY run_id DESC")
    users: dict[int, dict[str, set[str]]] = {}
    for run_id, name, file in history.execute(
            f"SELECT run_id, name, file FROM fixture_files WHERE run_id IN ({ids})"):
        users.setdefault(int(run_id), {}).setdefault(str(name), set()).add(str(file))
    per_name: dict[str, list[tuple[int, str, float, float | None, int, float, int]]] = {}
    on_worker: dict[tuple[int, str], dict[str, tuple[float, float]]] = {}
    scope_of: dict[str, str] = {}
    for run_id, worker, name, scope, setup_s, teardown_s, procs, mb, autouse in rows:
        scope_of.setdefault(name, scope)  # newest first
        per_name.setdefault(name, []).append((run_id, worker, setup_s, teardown_s, procs, mb, autouse))
        if scope in PERSISTENT_SCOPES:
            d = on_worker.setdefault((int(run_id), str(worker)), {})
            old = d.get(name, (0.0, 0.0))
            d[name] = (max(old[0], float(setup_s)), max(old[1], float(mb or 0.0)))
    out = []
    for name, rs in sorted(per_name.items()):
        files = sorted({f for r in run_ids for f in users.get(r, {}).get(name, ())})
        tds = [float(r[3]) for r in rs if r[3] is not None]
        out.append(FixtureCost(
            name=name, scope=scope_of[name],
            setup_s=median(float(r[2]) for r in rs),
            teardown_s=median(tds) if tds else 0.0,
            procs=max(int(r[4] or 0) for r in rs),
            mb=max(float(r[5] or 0.0) for r in rs),
            files=tuple(files),
            autouse=any(r[6] for r in rs),  # autouse anywhere, ever: never release it
        ))
    return tuple(out), on_worker, users


def _files(history: History, run_ids: Sequence[int], last: int,
           fx_on_worker: Mapping[tuple[int, str], Mapping[str, tuple[float, float]]],
           fx_users: Mapping[int, Mapping[str, set[str]]], partial: Collection[tuple[int, str]] = (),
           part: Collection[int] = ()) -> tuple[dict[str, FileCost], set[int],
                      tuple[dict[int, float], dict[int, float], frozenset[int], dict[int, tuple[float, int]],
                            dict[int, tuple[float, int]]],
                      tuple[float, str] | None, float]:
    rows = history.execute(
        f"SELECT run_id, worker, path, started, wall_s, cpu_s, tests, peak_mb, fork_mb, forks, fork_of_mb, baseline_mb "
        f"FROM files WHERE run_id IN ({_q(run_ids)}) ORDER BY run_id, worker, started")
    doubt = _doubtful(history, run_ids)
    # per (run, path): [wall, cpu, tests, peak, doubtful, partial, and of that peak: its forks'
    # MiB, how many, its worker's own MiB]
    per: dict[tuple[int, str], list[float]] = {}
    # (run, path) -> worker -> its peak of the file there, with that peak's forks (as ``per``'s)
    row_peaks: dict[tuple[int, str], dict[str, tuple[float, float, int, float]]] = {}
    set_up = _set_up_here(rows, fx_on_worker, fx_users)
    n_of: dict[int, int] = {}
    calibrations: set[int] = set()
    for run_id, workers, kind in history.execute(
            f"SELECT id, workers, kind FROM runs WHERE id IN ({_q(run_ids)})"):
        n_of[int(run_id)] = int(workers or 0)
        if kind == CALIBRATION:
            calibrations.add(int(run_id))
    # the newest serial run: the reference of a calibration's times; of the warm-up, the
    # newest whose files' kept memory was read (the whole suite, no fixture released early)
    serials = [r for r in run_ids if n_of.get(r, 0) <= 1 and r not in calibrations]
    serial = serials[:1]
    released = _runs_with_releases(history, run_ids)
    # (and none that selected tests of a file: its kept memory there is not the file's)
    selected = {r for r, _ in partial}
    reference = next((r for r in serials if r not in part and r not in released and r not in selected), None)
    warmup, kept, warmed = _warm_up(rows, _kept(rows, set_up, released), n_of, reference)
    fx_left: dict[tuple[int, str], float] = {}  # (run, path) -> fixture setup left out of its time
    for (run_id, w, path, _started, wall_s, cpu_s, tests, peak_mb, fork_mb, forks, fork_of, _baseline), (fx_s, fx_mb) \
            in zip(rows, set_up, strict=True):
        if fx_s and serial and run_id == serial[0]:  # read for that run's stalls only
            fx_left[(int(run_id), str(path))] = fx_left.get((int(run_id), str(path)), 0.0) + fx_s
        # the fixtures' setup and memory are the fixtures', not the first file's that used them
        # and the warm-up, where it happened, its worker's (every planned worker starts with it)
        wall = max(0.0, float(wall_s) - fx_s)
        peak = max(0.0, float(peak_mb) - fx_mb - warmed.get((run_id, w, path), 0.0))
        acc = per.setdefault((run_id, path), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
        if (int(run_id), str(path)) in partial:  # some of its tests only: not the file's time
            acc[5] = 1.0
        d = doubt.get((int(run_id), str(path)))
        if d is not None:  # its failed tests count at its passing tests' average, not their time
            wall = max(0.0, wall - d[0] + d[1])
            acc[4] = 1.0
        acc[0] += wall
        acc[1] += float(cpu_s)
        acc[2] += int(tests)
        of_peak = (min(float(fork_mb or 0.0), peak), int(forks or 0), float(fork_of or 0.0))  # its forks
        row_peaks.setdefault((int(run_id), str(path)), {})[str(w)] = (peak, *of_peak)
        if peak >= acc[3]:
            acc[3] = peak
            acc[6:9] = of_peak
    fault = fault_cost(per, _system_cpu(history, run_ids), _fault_probes(history))
    # a calibration's one-off stalls are no contention: out of its files' times before the
    # slowdown, while its figure is the one plans use (no whole run measured its count); its
    # reference, the newest serial run (its profile): a passing run's test rows are otherwise
    # never read, and a 50,000-test history holds a million of them
    measured = {n_of[r] for r in run_ids if r not in calibrations and n_of.get(r, 0) >= 2}
    first_uses, stalled = _first_uses(history, sorted(r for r in calibrations if n_of.get(r, 0) not in measured),
                                      serial)
    first_by_run: dict[int, tuple[float, int]] = {}
    for key, (excess, n) in first_uses.items():
        a = per.get(key)
        if a is not None:
            a[0] = max(0.0, a[0] - excess)
            s, k = first_by_run.get(key[0], (0.0, 0))
            first_by_run[key[0]] = (s + excess, k + n)
    serial_times = _serial_times(per, n_of)
    ref_for, stalled_by_run = _without_stalls(per, serial_times, stalled, serial, fx_left, heavy=fault is not None)
    # with faults modelled, files that touch much memory are priced apart from CPU sharing
    slowdown, by_run = _slowdown(n_of, per, heavy_apart=fault is not None, priors=calibrations, part=part,
                                 ref_for=ref_for, serial_times=serial_times)
    by_path: dict[str, list[tuple[int, list[float]]]] = {}
    used: set[int] = set(calibrations)  # read for their workers' start-up, not their files' times
    for (run_id, path), acc in per.items():
        if run_id in calibrations:  # a slice run side by side: its files were timed alone already
            continue
        # each run's times in a serial run's terms: the planner stretches them per worker count
        acc[0] /= slowdown.get(n_of.get(run_id, 0), 1.0)
        by_path.setdefault(path, []).append((run_id, acc))
    fx_of: dict[str, set[str]] = {}
    for run_users in fx_users.values():
        for name, fs in run_users.items():
            for f in fs:
                fx_of.setdefault(f, set()).add(name)
    out: dict[str, FileCost] = {}

    def clean_missing(rs: list[tuple[int, list[float]]]) -> bool:
        return all(r[1][4] for r in rs)

    timed: dict[str, list[tuple[int, list[float]]]] = {}  # the runs a file's time is taken from
    for path, rs in by_path.items():
        rs.sort(key=lambda r: -r[0])
        entire = [r for r in rs if not r[1][5]]
        rs = entire or rs  # runs that selected some of its tests only: only if no other
        clean = [r for r in rs if not r[1][4]]
        by_path[path] = (clean or rs)[:last]  # runs where it failed, timed out or crashed: only if no other
        timed[path] = by_path[path]
        if fault is not None and max(r[1][3] for r in rs) >= FAULT_MIN_MB:
            # a file that touches much memory took as long as the faults of what ran beside it
            # made it (``fault_cost``); the plan models those, so its time is its time alone
            # (its peak and what it keeps are still every recent run's)
            alone = [r for r in (clean or rs) if n_of.get(r[0], 0) <= 1][:last]
            timed[path] = alone or by_path[path]
    # a file's last test is read from its newest run used only (usually one run for every file)
    last_test = _last_tests(history, sorted({rs[0][0] for rs in by_path.values()}))
    for path, rs in by_path.items():
        used.update(r[0] for r in rs)
        used.update(r[0] for r in timed[path])
        wall = median(r[1][0] for r in timed[path])
        top = max(rs, key=lambda r: r[1][3])[1]  # its peak, and its forks in that peak
        out[path] = FileCost(
            path=path,
            wall_s=wall,
            peak_mb=top[3],
            fork_mb=top[6],
            forks=int(top[7]),
            fork_of_mb=top[8],
            tests=int(rs[0][1][2]),
            cpu_s=median(r[1][1] for r in timed[path]),
            fixtures=tuple(sorted(fx_of.get(path, ()))),
            measured=True,
            last_s=min(last_test.get((rs[0][0], path), 0.0), wall),
            trusted=not clean_missing(rs),
            whole=not all(r[1][5] for r in rs),
            kept_mb=median(ks) if (ks := [kept[(r[0], path)] for r in rs if (r[0], path) in kept]) else 0.0,
        )
    work = sum(f.wall_s for f in out.values())
    long = {path for path, fc in out.items() if fc.tests >= 2 and fc.wall_s >= work / SHAPED_SHARE}
    shapes = _time_shares(history, _shape_runs(history, {path: [r[0] for r in by_path[path]] for path in long}))
    # runs that split a file over workers, all its tests, none failed, timed out or crashed
    # (a worker stopped mid-file would lend its peak to tests it never ran); and the order
    # their pieces are placed by only where it has the newest run's count of tests
    split = {path: [r[0] for r in by_path[path]
                    if not r[1][5] and not r[1][4] and len(row_peaks.get((r[0], path), ())) > 1]
             for path, shape in shapes.items() if len(shape[2]) == out[path].tests}
    pieces = _piece_peaks(history, {p: rs for p, rs in split.items() if rs},
                          {p: shape[2] for p, shape in shapes.items()}, row_peaks)
    for path, (sh, classes, _order) in shapes.items():
        out[path] = replace(out[path], time_shares=sh, classes=classes, piece_peaks=pieces.get(path, ()))
    # counts only a calibration measured: its slice of short files in fresh workers reads high
    whole = {n_of[r] for r in by_run if r not in calibrations}
    unconfirmed = frozenset(n_of[r] for r in by_run if r in calibrations) - whole
    return out, used, (slowdown, by_run, unconfirmed, first_by_run, stalled_by_run), fault, warmup


# A calibration runs short files in fresh workers. A test that ran warm in the serial profile
# (an import inside a function, a cache an earlier file had filled) pays that first use there
# again, in each worker: on networkx's five packages 7 of 478 tests held 1.2 s of the slice's
# 3.0 s, and counted as contention they made it x1.45 where whole runs then measured x0.99
# (the plan: 20.1 s predicted for 14.5 s). A test over FIRST_USE_X times the run's own
# contention (its tests' time-weighted median ratio, at least 1) plus FIRST_USE_S is counted
# at its serial time: a file slowed evenly, however much, is contention and stays.
FIRST_USE_X = 2.0
FIRST_USE_S = 0.005
_PASSING = "('passed', 'skipped', 'xfailed', 'xpassed')"  # a test's time that is its own


def _serial_times(per: Mapping[tuple[int, str], list[float]], n_of: Mapping[int, int]
                  ) -> dict[str, dict[int, float]]:
    """path -> serial run -> its time there: the runs a file's serial reference is the median
    of (one process, the whole file, none of its tests failed)."""
    out: dict[str, dict[int, float]] = {}
    for (r, path), acc in per.items():
        if n_of.get(r, 0) <= 1 and not acc[4] and not acc[5]:
            out.setdefault(path, {})[r] = acc[0]
    return out


def _without_stalls(per: Mapping[tuple[int, str], list[float]], refs: Mapping[str, Mapping[int, float]],
                    stalled: Mapping[tuple[int, str], tuple[float, int, float]], serial: Sequence[int],
                    fx_left: Mapping[tuple[int, str], float], heavy: bool
                    ) -> tuple[dict[tuple[int, str], float], dict[int, tuple[float, int]]]:
    """(calibration run, file) -> the serial reference ``_slowdown`` reads that file against,
    where the newest serial run's stalls (``_first_uses``) lowered it; and calibration run ->
    (seconds taken off, tests) for its line.

    The reference is the median over the serial runs (``_slowdown``'s): the newest one's time
    is replaced by itself less its stalls, and the median taken again, so a stall the other
    runs outvote is not taken off twice. A stall's part that could be a fixture's setup (up
    to the setup that test had there, and that run left out of the file's time) was already
    taken off."""
    out: dict[tuple[int, str], float] = {}
    said: dict[int, tuple[float, int]] = {}
    if not serial or not stalled:
        return out, said
    newest = serial[0]
    for (run_id, path), (excess, n, setup) in stalled.items():
        a, there = per.get((run_id, path)), refs.get(path, {})
        if a is None or a[4] or a[5] or newest not in there or (heavy and a[3] >= FAULT_MIN_MB):
            continue  # not read for the slowdown, or not against that run
        took = max(0.0, excess - min(setup, fx_left.get((newest, path), 0.0)))
        was = median(there.values())
        now = median({**there, newest: max(0.0, there[newest] - took)}.values())
        if now < was:
            out[(run_id, path)] = now
            s, k = said.get(run_id, (0.0, 0))
            said[run_id] = (s + was - now, k + n)
    return out, said


def _first_uses(history: History, calibrations: Sequence[int], serial: Sequence[int]
                ) -> tuple[dict[tuple[int, str], tuple[float, int]], dict[tuple[int, str], tuple[float, int, float]]]:
    """One-off stalls on either side of a calibration's comparison, test by test against
    ``serial`` (the runs whose per-test times are the reference): (calibration run, file) ->
    (seconds its tests' first uses took over their serial time, how many tests); and the same
    key -> (seconds the reference's own stalls took over what those tests took in the
    calibration, at its contention; how many tests; their setup time in the reference).

    The second is the first turned round. A test that stalled in the serial run (most likely a
    full garbage collection of a heap that holds 50,000 items: one test of 166 took 618 ms
    there, 6 ms in the calibration) makes its file look long, and the calibration runs the longest files
    first: two such files read x0.44 and x0.58, the slice x1.28 for a whole run's x2.11, and
    the first plan chose two workers (72.4 s; one took 65.2 s in the next run)."""
    if not calibrations or not serial:
        return {}, {}
    rows = history.execute(
        f"SELECT run_id, nodeid, file, wall_s FROM tests WHERE run_id IN ({_q(calibrations)}) "
        f"AND outcome IN {_PASSING}")
    files = sorted({str(r[2]) for r in rows})
    ref: dict[str, list[tuple[float, float]]] = {}
    for i in range(0, len(files), 500):  # SQLite's bound on the variables of one statement
        part = files[i:i + 500]
        for nodeid, wall, setup in history.execute(
                f"SELECT nodeid, wall_s, setup_s FROM tests WHERE run_id IN ({_q(serial)}) "
                f"AND file IN ({','.join('?' * len(part))}) AND outcome IN {_PASSING}", part):
            ref.setdefault(str(nodeid), []).append((float(wall), float(setup or 0.0)))
    by_run: dict[int, list[tuple[str, float, float, float]]] = {}
    for run_id, nodeid, file, wall in rows:
        r = ref.get(str(nodeid))
        if r:
            by_run.setdefault(int(run_id), []).append((str(file), float(wall), median(w for w, _ in r),
                                                       median(su for _, su in r)))
    out: dict[tuple[int, str], tuple[float, int]] = {}
    back: dict[tuple[int, str], tuple[float, int, float]] = {}
    for run_id, tests in by_run.items():
        ratio = max(1.0, _weighted_median_ratio([(t, s) for _, t, s, _ in tests]) or 1.0)
        limit = FIRST_USE_X * ratio
        for file, t, s, setup in tests:
            if t > limit * s + FIRST_USE_S:
                e, n = out.get((run_id, file), (0.0, 0))
                out[(run_id, file)] = (e + t - s, n + 1)
            elif s > FIRST_USE_X * t / ratio + FIRST_USE_S:
                e, n, su = back.get((run_id, file), (0.0, 0, 0.0))
                back[(run_id, file)] = (e + s - t / ratio, n + 1, su + setup)
    return out, back


def _weighted_median_ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    """The ratio t/s that half the serial time ``s`` lies below: robust to a few tests far off."""
    xs = sorted((t / s, s) for t, s in pairs if s > 0)
    total = sum(s for _, s in xs)
    acc = 0.0
    for ratio, s in xs:
        acc += s
        if acc >= total / 2:
            return ratio
    return None


SHAPED_SHARE = 128  # files holding 1/128 of the work or more: what a chunk could be cut from
SHARE_POINTS = 64  # a file's time shares at this many count fractions (and 0)


def _shape_runs(history: History, preferred: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """path -> the run its time shape is read from: one that ran it whole on one worker, not
    cut into chunks by its plan (``chunked_in``); the first such of ``preferred`` (its recent
    runs, clean ones first), else the newest finished one in the history (a file the recent
    plans chunked)."""
    if not preferred:
        return {}
    paths = list(preferred)
    found = [(str(p), int(r), str(st)) for p, r, st in history.execute(
        f"SELECT f.path, f.run_id, r.status FROM files f JOIN runs r ON r.id = f.run_id "
        f"WHERE f.path IN ({','.join('?' * len(paths))}) "
        f"GROUP BY f.path, f.run_id HAVING COUNT(DISTINCT f.worker) = 1", paths)]
    chunked = chunked_in(history, sorted({r for _, r, _ in found}))
    whole: dict[str, dict[int, str]] = {}
    for path, run_id, status in found:
        if (run_id, path) not in chunked:
            whole.setdefault(path, {})[run_id] = status
    out: dict[str, int] = {}
    for path, runs in whole.items():
        first = next((r for r in preferred[path] if r in runs), None)
        finished = [r for r, st in runs.items() if st in ("passed", "failed")]
        if first is not None or finished:
            out[path] = first if first is not None else max(finished)
    return out


def chunked_in(history: History, run_ids: Sequence[int]) -> set[tuple[int, str]]:
    """(run, file) where the run's plan cut the file into chunks: its tests' order there is
    the order the chunks ran in, not their collection order, even where one worker ran them
    all (scipy.sparse's test_64bit.py, its second chunk first: a shape read from that run
    put 98% of its time in a first chunk planned at 77%)."""
    import json

    out: set[tuple[int, str]] = set()
    if not run_ids:
        return out
    for run_id, plan_text in history.execute(
            f"SELECT id, plan FROM runs WHERE id IN ({_q(run_ids)}) AND plan IS NOT NULL"):
        try:
            units = json.loads(plan_text).get("units", ())
        except (ValueError, TypeError, AttributeError):
            continue
        for u in units:
            if isinstance(u, dict) and u.get("chunk") and u.get("files"):
                out.add((int(run_id), str(u["files"][0])))
    return out


def _time_shares(history: History, run_of: Mapping[str, int]
                 ) -> dict[str, tuple[tuple[float, ...], tuple[tuple[float, float], ...], list[str]]]:
    """file -> (the share of its time spent by each count fraction i/SHARE_POINTS of its
    tests, its test classes as count fractions: ``FileCost.classes``, its tests' node ids in
    the order they ran), from the run given for it (``_shape_runs``, which ran it whole on one
    worker): where a chunk is cut (``plan.chunks``). One read of those files' tests per run."""
    from suitefit.plan.class_cuts import class_runs

    by_run: dict[int, list[str]] = {}
    for path, run_id in run_of.items():
        by_run.setdefault(run_id, []).append(path)
    times: dict[str, list[float]] = {}
    ids: dict[str, list[str]] = {}
    for run_id, paths in by_run.items():
        for file, nodeid, wall in history.execute(
                f"SELECT file, nodeid, wall_s FROM tests WHERE run_id = ? AND file IN ({','.join('?' * len(paths))}) "
                f"ORDER BY seq", [run_id, *paths]):
            times.setdefault(str(file), []).append(max(0.0, float(wall or 0.0)))
            ids.setdefault(str(file), []).append(str(nodeid))
    out: dict[str, tuple[tuple[float, ...], tuple[tuple[float, float], ...], list[str]]] = {}
    for path, ts in times.items():
        total, n = sum(ts), len(ts)
        if n < 2 or total <= 0:
            continue
        prefix = [0.0]
        for t in ts:
            prefix.append(prefix[-1] + t)
        shares = []
        for i in range(SHARE_POINTS + 1):
            p = i * n / SHARE_POINTS
            j = min(int(p), n - 1)
            shares.append(min(1.0, (prefix[j] + (p - j) * ts[j]) / total))
        out[path] = (tuple(shares), tuple((a / n, b / n) for a, b in class_runs(ids[path])), ids[path])
    return out


def _piece_peaks(history: History, runs_of: Mapping[str, Sequence[int]], order: Mapping[str, Sequence[str]],
                 row_peaks: Mapping[tuple[int, str], Mapping[str, tuple[float, float, int, float]]]
                 ) -> dict[str, tuple[tuple[PiecePeak, ...], ...]]:
    """file -> for each of its ``runs_of`` (runs that ran it on several workers: its chunks),
    each worker's peak of it over the stretches of its tests that worker ran, as count
    fractions of ``order`` (its tests in collection order): ``FileCost.piece_peaks``. A
    file's peak is one figure, and each chunk of a long file was planned at all of it
    (joblib's ``test_parallel.py``, two chunks: the plan's peak 77-92% over the run's); the
    run measured each worker's part exactly (VmHWM, reset at each file). A run whose tests of
    the file are not the ones ``order`` has (another selection, other parameters) is left out."""
    by_run: dict[int, list[str]] = {}
    for path, rs in runs_of.items():
        for r in rs:
            by_run.setdefault(r, []).append(path)
    ran: dict[tuple[int, str], dict[str, set[str]]] = {}
    for run_id, paths in sorted(by_run.items()):
        for file, worker, nodeid in history.execute(
                f"SELECT file, worker, nodeid FROM tests WHERE run_id = ? AND file IN ({','.join('?' * len(paths))})",
                [run_id, *paths]):
            ran.setdefault((run_id, str(file)), {}).setdefault(str(worker), set()).add(str(nodeid))
    out: dict[str, list[tuple[PiecePeak, ...]]] = {}
    for (run_id, path), by_worker in sorted(ran.items()):
        index = {nodeid: i for i, nodeid in enumerate(order[path])}
        n = len(index)
        peaks = row_peaks.get((run_id, path), {})
        taken = [sorted(index[x] for x in ids if x in index) for ids in by_worker.values()]
        if (n == 0 or any(len(t) != len(ids) for t, ids in zip(taken, by_worker.values(), strict=True))
                or sum(map(len, taken)) != n or len(set().union(*taken)) != n or set(by_worker) - set(peaks)):
            continue  # not the tests the order has, some ran twice, or a worker without its row
        pieces: list[PiecePeak] = []
        for k, (w, idx) in enumerate(zip(by_worker, taken, strict=True)):
            peak, fork_mb, forks, fork_of = peaks[w]
            for lo, hi in _stretches(idx):
                pieces.append((lo / n, hi / n, peak, fork_mb, forks, fork_of, k))
        out.setdefault(path, []).append(tuple(sorted(pieces)))
    return {path: tuple(runs) for path, runs in out.items()}


def _stretches(idx: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted indices as (first, last + 1) runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for i in idx:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def fault_cost(per: Mapping[tuple[int, str], Sequence[float]],
               system: Mapping[tuple[int, str], tuple[float, float]],
               probes: Sequence[tuple[float, str]] = ()) -> tuple[float, str] | None:
    """Seconds of the kernel's work a MiB of new memory costs on this machine, and where that
    was measured: a profile's own probe, or the least system CPU a MiB any file cost that grew
    its worker's own process by ``FAULT_MIN_MB`` or more (faulting memory in is system time:
    touching 800 MiB here took 0.63 s of it and 0.09 s of user time; the least bounds it from
    above, other kernel work only adds). Its own memory, not its children's: their faults are not in the worker's
    system CPU until they are reaped (scikit-learn's loky pools gave 0.07 ms a MiB). None
    where no such file recorded both.

    Why the plan needs it: on the KVM guests suitefit is developed on, two processes touching
    800 MiB at once took 1.97x as long each as one alone (the host faults a guest's memory one
    fault at a time), while one beside a CPU-bound process was not slowed
    (benchmarks/bench_faults.py). A worker's CPU sharing (``_slowdown``) does not describe
    that; ``simulate`` charges it where units that touch much memory overlap.
    ``per``: (run, file) -> [wall, cpu, tests, peak MiB, doubtful]; ``system``: (run, file) ->
    (system CPU, own growth MiB), where every row of it recorded both. ``probes``: the rate a
    profile measured directly (``measure/faultprobe.py``), and where: the least of all counts,
    so a history whose files spent their system time on other things (starting processes)
    does not price faults at hundreds of times what they cost.
    """
    best: tuple[float, str] | None = min(probes, default=None)
    for key, acc in per.items():
        sys_s, own_mb = system.get(key, (0.0, 0.0))
        if own_mb >= FAULT_MIN_MB and sys_s > 0 and not acc[4]:
            rate = sys_s / own_mb
            if best is None or rate < best[0]:
                best = (rate, f"{key[1]} in run {key[0]}: {fmt_s(sys_s)} of system CPU for {fmt_mb(own_mb)}")
    return best


def _fault_probes(history: History, newest: int = 3) -> list[tuple[float, str]]:
    """The fault rates the ``newest`` profiles that measured one measured
    (``measure/faultprobe.py``), whatever the window: runs record the files' system time
    again and again, and only a profile the probe, which 20 runs later would be out of it."""
    out = []
    for run_id, meta in history.execute("SELECT id, meta FROM runs WHERE meta LIKE '%fault_probe_s_per_mb%' "
                                        "ORDER BY id DESC LIMIT ?", [newest]):
        rate = meta_of(meta).get("fault_probe_s_per_mb")
        if isinstance(rate, (int, float)) and rate > 0:
            out.append((float(rate), f"a probe by profile run {run_id}"))
    return out


def _system_cpu(history: History, run_ids: Sequence[int]) -> dict[tuple[int, str], tuple[float, float]]:
    """(run, file) -> (its system CPU, its worker's own growth), for files whose every row
    recorded both."""
    return {(int(r), str(p)): (float(s), float(o)) for r, p, s, o, n, k, m in history.execute(
        f"SELECT run_id, path, SUM(sys_s), MAX(own_mb), COUNT(sys_s), COUNT(own_mb), COUNT(*) FROM files "
        f"WHERE run_id IN ({_q(run_ids)}) GROUP BY run_id, path") if n == m == k and s is not None}


def _runs_with_releases(history: History, run_ids: Sequence[int]) -> set[int]:
    """Runs whose plan released fixtures early: a released fixture's memory returning would
    read as a file keeping less than it does."""
    import json

    out: set[int] = set()
    for run_id, plan_text in history.execute(
            f"SELECT id, plan FROM runs WHERE id IN ({_q(run_ids)}) AND plan IS NOT NULL"):
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            if json.loads(plan_text).get("releasable"):
                out.add(int(run_id))
    return out


def _set_up_here(rows: Sequence[Sequence[Any]],
                 fx_on_worker: Mapping[tuple[int, str], Mapping[str, tuple[float, float]]],
                 fx_users: Mapping[int, Mapping[str, set[str]]]) -> list[tuple[float, float]]:
    """Per files row (by run, worker and start): the setup seconds and MiB of the persistent
    fixtures first used there on its worker, i.e. set up while that file ran."""
    out: list[tuple[float, float]] = []
    seen: set[tuple[int, str, str]] = set()
    for run_id, worker, path, *_ in rows:
        setup_s = mb = 0.0
        held = fx_on_worker.get((run_id, worker))
        if held:
            users = fx_users.get(run_id, {})
            for name, (s, m) in held.items():
                if path in users.get(name, ()) and (run_id, worker, name) not in seen:
                    seen.add((run_id, worker, name))
                    setup_s, mb = setup_s + s, mb + m
        out.append((setup_s, mb))
    return out


def _kept(rows: Sequence[Sequence[Any]], set_up: Sequence[tuple[float, float]],
          skip_runs: Collection[int]) -> dict[tuple[int, str], float]:
    """(run, file) -> what its worker still held after it, for good: how far the lowest of
    the worker's later baselines (at each later file's start, less the persistent fixtures
    set up since: those count as fixtures) rose over the lowest from its own on.

    Memory a worker gave back later (garbage collected a few files on, a cache cleared) was
    not kept. Read from one baseline to the next, a worker's garbage made files keep +57
    MiB and -57 MiB by turns (pytest's own suite: +683 MiB over its positive files for 74
    MiB of growth), and a worker whose queue drew the negative ones was planned to shrink
    by 121 MiB. The sum over a worker's files is still its measured growth (its last
    baseline over its lowest), and no file keeps less than nothing. The last file on a
    worker has no next file: not measured. ``rows``: the files query, by run, worker and
    start; ``set_up``: ``_set_up_here`` of them."""
    out: dict[tuple[int, str], float] = {}
    seq: list[tuple[int, str, float]] = []  # one worker's files in order: run, path, adjusted baseline

    def fold() -> None:
        low = math.inf
        lows = []
        for _, _, b in reversed(seq):  # the lowest baseline from each file on
            low = min(low, b)
            lows.append(low)
        lows.reverse()
        for (run_id, path, _), here, after in zip(seq, lows, lows[1:], strict=False):
            key = (run_id, path)
            out[key] = out.get(key, 0.0) + after - here
        seq.clear()

    on: tuple[int, str] | None = None  # the (run, worker) of ``seq``
    fixtures = 0.0  # the persistent fixtures' memory set up there so far
    for (run_id, worker, path, *_, baseline), (_fx_s, fx_mb) in zip(rows, set_up, strict=True):
        if on != (run_id, worker) or baseline is None or int(run_id) in skip_runs:
            fold()
            on, fixtures = (run_id, worker), 0.0
            if baseline is None or int(run_id) in skip_runs:
                on = None
                continue
        seq.append((run_id, path, float(baseline) - fixtures))
        fixtures += fx_mb
    fold()
    return out


def _warm_up(rows: Sequence[Sequence[Any]], kept: Mapping[tuple[int, str], float],
             n_of: Mapping[int, int], serial: int | None
             ) -> tuple[float, dict[tuple[int, str], float], dict[tuple[int, str, str], float]]:
    """(what a fresh worker keeps over its first files whatever they are, ``kept`` less it,
    how much of it each (run, worker, file) took: its peak held that too).

    Every worker warms up: caches and lazy imports that any mix of files fills. A serial run
    pays that once and puts it on its first files; each worker of a run pays it again, on
    its own first files. Read from the serial run alone, it is planned once in all, and a
    file planned late on a worker is planned on a worker that kept too little: pytest's own
    suite, after its profile, was planned at 456 MiB and peaked at 569-581 MiB, most of it a
    file whose forks map their worker. A run with ``n`` workers keeps ``n`` warm-ups and its
    files' own memory; measured against what the serial run's files kept there (less the
    serial run's own warm-up, on its first files), each such run tells the warm-up: the
    median of those. It is then taken off every worker's first files, in order, and every
    planned worker starts with it. None without a serial run and a run with workers (``rows``:
    the files query, by run, worker and start; ``kept``: ``_kept`` of them; ``serial``: a
    serial run of the whole suite whose kept memory was read). A worker's first file with no
    kept memory read (its only file, or a run that released fixtures early) took the warm-up
    in its peak, as far as that goes."""
    seqs: dict[tuple[int, str], list[str]] = {}
    for run_id, worker, path, *_ in rows:
        seqs.setdefault((int(run_id), str(worker)), []).append(str(path))
    ref = [p for (r, _), ps in seqs.items() if r == serial for p in ps]
    sides: dict[int, set[str]] = {}  # run with workers -> its files that kept, in the serial run too
    workers: dict[int, int] = {}
    for (r, _), ps in seqs.items():
        # a worker counts with its first file read in the serial run too: that file took the
        # warm-up, and with no serial figure to set it against (the serial run's last file,
        # whose kept memory no next file read) the worker's warm-up would count as nothing
        if n_of.get(r, 0) >= 2 and (r, ps[0]) in kept and (serial, ps[0]) in kept:
            workers[r] = workers.get(r, 0) + 1
            sides.setdefault(r, set()).update(p for p in ps if (r, p) in kept and (serial, p) in kept)
    kept_there = {r: (sum(kept[(r, p)] for p in ps), ps) for r, ps in sides.items() if ps}
    if serial is None or not ref or not kept_there:
        return 0.0, dict(kept), {}
    alone = {key: k for key, k in kept.items() if key[0] == serial}  # the serial run's
    grew = sum(alone.values())

    def less(seq: Sequence[str], run: int, w: float, out: dict[tuple[int, str], float]) -> list[tuple[str, float]]:
        """Take ``w`` off ``seq``'s kept memory in ``out``, first files first: what each gave."""
        took = []
        for p in seq:
            if w <= 0.0:
                break
            k = out.get((run, p))
            if k is not None:
                take = min(w, max(0.0, k))
                out[(run, p)] = k - take
                w -= take
                took.append((p, take))
        return took

    warm = 0.0
    for _ in range(20):  # each side's figure moves by 1/n of the last step: a few rounds settle it
        net = dict(alone)
        less(ref, serial, warm, net)
        said = [(there - sum(net[(serial, p)] for p in ps)) / workers[r] for r, (there, ps) in kept_there.items()]
        now, warm = warm, min(max(0.0, median(said)), grew)
        if abs(now - warm) < 0.05:
            break
    out = dict(kept)
    taken: dict[tuple[int, str, str], float] = {}
    for (r, w), ps in seqs.items():
        if (r, ps[0]) not in kept:  # its peak is all that was read of it
            taken[(r, w, ps[0])] = warm
            continue
        for p, mb in less(ps, r, warm, out):
            taken[(r, w, p)] = taken.get((r, w, p), 0.0) + mb
    return warm, out, taken


def _slowdown(n_of: Mapping[int, int], per: Mapping[tuple[int, str], list[float]],
              heavy_apart: bool = False, priors: Collection[int] = (), part: Collection[int] = (),
              ref_for: Mapping[tuple[int, str], float] | None = None,
              serial_times: Mapping[str, Mapping[int, float]] | None = None
              ) -> tuple[dict[int, float], dict[int, float]]:
    """Worker count -> how much longer a file takes than in a serial run on this machine; and
    run -> that run's own figure (what a calibration says it measured).

    Measured, not assumed: per run with n workers, the files' time against the same files'
    median serial time, weighted by time (the sum of one over the sum of the other: the
    plan's lanes are sums of file times, and on networkx the long files ran 0.8x their
    serial time in workers while the median file ran 1.07x); per n, the median over such
    runs. A file more than 3x faster or slower than serially is left out (a hang, a cache
    the serial run had warm). Needs a serial run and at least 3 files seen in both.
    ``n_of``: run -> its workers. ``priors``: calibration runs (a profile's slice of short
    files side by side, ``plan/calibration.py``), read for a count only until a whole run
    measured it: on scipy.sparse the slice said 1.77x where whole runs measured 1.55x.
    ``part``: runs of part of the suite (``_part_runs``), read for a count only while a run of
    the whole suite measured it: their files are not the suite's mix side by side (numpy's
    ``random`` alone read 1.60x, the whole suite 1.33x). ``ref_for``: (calibration run, file) ->
    the serial reference without its stalls (``_without_stalls``), where they lowered it;
    ``serial_times``: ``_serial_times(per, n_of)``, where the caller has it.
    """
    serial = _serial_times(per, n_of) if serial_times is None else serial_times
    tests = {p: max(per[(r, p)][2] for r in runs) for p, runs in serial.items()}
    ref = {p: median(v.values()) for p, v in serial.items()}
    work = sum(ref.values())
    suite_rate = sum(tests.values()) / work if work > 0 else 0.0  # tests a serial second
    # n -> run -> (time there, serial time, tests)
    pairs: dict[int, dict[int, list[tuple[float, float, float]]]] = {}
    for (run_id, path), acc in per.items():
        n = n_of.get(run_id, 0)
        # files touching much memory, where faults are modelled: their slowdown is the faults
        # beside them (``fault_cost``), not CPU sharing
        if n >= 2 and path in ref and not acc[4] and not acc[5] and not (heavy_apart and acc[3] >= FAULT_MIN_MB):
            s = ref_for.get((run_id, path), ref[path]) if ref_for else ref[path]
            pairs.setdefault(n, {}).setdefault(run_id, []).append((acc[0], s, acc[2]))
    out: dict[int, float] = {}
    by_run: dict[int, float] = {}
    for n, runs in pairs.items():
        for r, ps in runs.items():
            f = (slice_factor(ps, suite_rate) if r in priors
                 else slowdown_factor([(t, s) for t, s, _ in ps]))
            if f is not None:
                by_run[r] = f
        # whole runs first, then runs of part of the suite, then calibrations
        kinds: tuple[list[float], list[float], list[float]] = ([], [], [])
        for r in runs:
            if r in by_run:
                kinds[2 if r in priors else 1 if r in part else 0].append(by_run[r])
        best = next((k for k in kinds if k), None)
        if best:
            out[n] = max(0.5, median(best))
    return out, by_run


def slice_factor(triples: Sequence[tuple[float, float, float]], suite_rate: float) -> float | None:
    """A calibration's slowdown for the whole suite, from its slice's (time, serial time, tests).

    With workers every test costs a share of xdist's reporting (the worker sends three reports,
    the controller takes them in on the same CPUs): whole runs here measured 1.3-1.7 ms a test
    on networkx, numpy and the 50,000-test suite alike. A slice's rate of tests is not the
    suite's (numpy's lib and linalg tests: 538 a serial second against 72, and the slice read
    x1.89 where whole runs then measured x1.07-1.30), so its files are fitted as ``a * serial +
    b * tests`` (least squares weighted by one over the serial time, which keeps the slice's own
    total exact) and read at the suite's rate, held within the rates the slice's files had.
    Where no positive per-test cost fits (files of one rate), the time-weighted figure; the
    files kept are ``slowdown_factor``'s.
    """
    kept = [(t, s, k) for t, s, k in triples if _readable(t, s)]
    if len(kept) < 3:
        return None
    ss = sum(s for _, s, _ in kept)
    sk = sum(k for _, _, k in kept)
    skk = sum(k * k / s for _, s, k in kept)
    st = sum(t for t, _, _ in kept)
    stk = sum(t * k / s for t, s, k in kept)
    det = ss * skk - sk * sk
    single = st / ss
    if det <= 1e-9 * ss * skk:  # one rate throughout: nothing to tell a per-test cost by
        return single
    a = (st * skk - stk * sk) / det
    b = (ss * stk - sk * st) / det
    if a <= 0 or b <= 0:
        return single
    rates = [k / s for _, s, k in kept]  # no further than the slice's own rates reach
    return a + b * min(max(suite_rate, min(rates)), max(rates))


def slowdown_factor(pairs: Sequence[tuple[float, float]]) -> float | None:
    """How much longer one run's files took than their serial reference, from (time, serial
    time) pairs: time-weighted (the sum of one over the sum of the other), files with a
    reference under 0.05 s or more than 3x off it left out (a hang, a cache the serial run had
    warm); None with fewer than 3 files left."""
    kept = [(t, s) for t, s in pairs if _readable(t, s)]
    if len(kept) < 3:
        return None
    return sum(t for t, _ in kept) / sum(s for _, s in kept)


def _readable(t: float, s: float) -> bool:
    """Whether a file's time ``t`` against its serial time ``s`` says anything of contention:
    ``s`` of 0.05 s or more, and ``t`` no more than 3x off it either way."""
    return s >= 0.05 and 1 / 3 <= t / s <= 3


# a part run's controller is read a test only from this many tests, and at most this much a
# test (pytest's own suite: 8-10 KiB a test; a passing report is a few KiB)
CONTROLLER_MIN_TESTS = 200
CONTROLLER_MAX_MB_A_TEST = 64 / 1024


def _process_peaks(history: History, run_ids: Sequence[int], most: int = 0
                   ) -> tuple[dict[str, float], tuple[float, float] | None, str | None]:
    """The largest own peak recorded in the runs' meta of suitefit's sampler process
    (``sampler_rss_mb``) and of xdist's controller (``controller_mb``): memory is not
    averaged. A figure no run recorded is absent. Then the controller's growth a test, and
    what is said of it.

    xdist's controller keeps every test's reports (~7-9 KiB a test on pytest's own suite):
    a run of part of the suite (a profile's calibration, 297 of pytest's 4,231 tests, 43.5
    MiB) measures it far under a whole run (73.6 MiB; scipy's four subpackages: 109 against
    423 MiB). Until a run of the whole suite (``most`` tests) with workers measured it, the
    part run of the most tests gives (its MiB at its first worker's collection, what it grew
    by a test from there), and plans count that for the tests they plan
    (``CostModel.controller_peak_mb``)."""
    out: dict[str, float] = {}
    whole = False  # a run of the whole suite with workers measured it
    part: list[tuple[int, float, float]] = []  # (tests, peak, start)
    for meta_text, collected in history.execute(f"SELECT meta, collected FROM runs WHERE id IN ({_q(run_ids)})"):
        meta = meta_of(meta_text)
        with contextlib.suppress(ValueError, TypeError):
            v = meta.get("sampler_rss_mb")
            if v is not None:
                out["sampler_rss_mb"] = max(out.get("sampler_rss_mb", 0.0), float(v))
        with contextlib.suppress(ValueError, TypeError):
            v = meta.get("controller_mb")
            if v is None:
                continue
            peak, n = float(v), int(collected or 0)
            out["controller_mb"] = max(out.get("controller_mb", 0.0), peak)
            if not most or n >= WHOLE_SHARE * most:
                whole = True
                continue
            start = meta.get("controller_start_mb")
            # enough tests that what grows a test outweighs what grows once (the other
            # workers' collections, the allocator's steps), and no run of failures (their
            # reports hold tracebacks)
            if (start is not None and n >= CONTROLLER_MIN_TESTS and peak > float(start)
                    and (peak - float(start)) / n <= CONTROLLER_MAX_MB_A_TEST):
                part.append((n, peak, float(start)))
    if whole or not part:  # the largest measured peak, as it was
        return out, None, None
    n, peak, start = max(part)
    per_test = (peak - start) / n
    return out, (start, per_test), (
        f"xdist's controller: it keeps every test's reports, and no run of the whole suite with "
        f"workers measured it yet: a run of {n:,} of the suite's {most:,} tests grew it from "
        f"{fmt_mb(start)} at its first worker's collection to {fmt_mb(peak)}, {per_test * 1024:.1f} KiB "
        f"a test; planned at that for the tests planned ({fmt_mb(start + per_test * most)} for the whole suite)")


def _controller_per_test(history: History, run_ids: Sequence[int]) -> float | None:
    """xdist's controller's own CPU seconds a test: the median over runs with workers that
    recorded it (``controller_cpu_s`` in their meta, over the tests they ran); None if none did.

    CPU time, not wall: it holds whether the controller shared its CPU with workers (here, 2
    CPUs) or had one to itself (a 16-CPU runner), and its threads share one interpreter lock,
    so a test's reports cost it this much at any worker count.
    """
    per: list[float] = []
    for meta_text, collected in history.execute(
            f"SELECT meta, collected FROM runs WHERE id IN ({_q(run_ids)}) AND workers >= 2"):
        cpu = meta_of(meta_text).get("controller_cpu_s")
        if isinstance(cpu, (int, float)) and cpu > 0 and collected:
            per.append(float(cpu) / int(collected))
    return median(per) if per else None


PEAK_ERROR_RUNS = 10
# A plan that rested on fewer measurements than this share of its predicted work (a suite's
# first run, every file at a default cost; many new files) missed by how far the defaults
# were off, not by how far the model is: its misses are not learned. A first run's guess,
# 400 MiB for a 1.72 GiB run, otherwise set the next plans' headroom to 77% of the budget.
MEASURED_SHARE = 0.9


def _learned_from(plan: Mapping[str, Any]) -> bool:
    """Whether a recorded plan's misses say how far this cost model is off."""
    measured = plan.get("measured")
    if not measured:  # recorded before plans said what they rested on: as it was
        return True
    try:
        return Measured.from_json(measured).share >= MEASURED_SHARE
    except (KeyError, TypeError, ValueError):
        return True


def _peak_errors(history: History, limit: int = PEAK_ERROR_RUNS) -> tuple[float, ...]:
    """How far recent planned runs' measured peaks came above their plans' predictions
    (newest first; > 0: under-predicted). A run killed for memory counts with the peak it
    reached: it is the strongest evidence there is. The sampler process is in the plan's
    prediction and in a runner's count, but not in the recorded tree peak: it is added."""
    import json

    out: list[float] = []
    for plan_text, peak, meta_text in history.execute(
            "SELECT plan, peak_rss_mb, meta FROM runs WHERE kind IN ('run', 'shard-run') AND plan IS NOT NULL "
            "AND status != 'running' AND peak_rss_mb IS NOT NULL ORDER BY id DESC LIMIT ?", [limit]):
        try:
            plan = json.loads(plan_text)
            predicted = float(plan["predicted_peak_mb"])
            meta = meta_of(meta_text)
            sampler = float(meta.get("sampler_rss_mb") or 0.0)
        except (ValueError, KeyError, TypeError):
            continue
        if predicted > 0 and _learned_from(plan) and not meta.get("part_of_plan"):
            out.append((float(peak) + sampler) / predicted - 1.0)
    return tuple(out)


def _wall_errors(history: History, most: int, limit: int = PEAK_ERROR_RUNS) -> tuple[float, ...]:
    """How far recent planned runs' commands took longer than their plans predicted (newest
    first; > 0: longer): the command's wall from `suitefit run` to its end, as it closed."""
    import json

    out: list[float] = []
    for plan_text, meta_text, collected in history.execute(
            "SELECT plan, meta, collected FROM runs WHERE kind = 'run' AND plan IS NOT NULL "
            "AND status IN ('passed', 'failed') ORDER BY id DESC LIMIT ?", [limit]):
        try:
            plan = json.loads(plan_text)
            predicted = float(plan["predicted_wall_s"])
            meta = meta_of(meta_text)
            took = meta.get("command_wall_s")
        except (ValueError, KeyError, TypeError):
            continue
        if (predicted > 0 and isinstance(took, (int, float)) and took > 0 and _learned_from(plan)
                and not meta.get("part_of_plan") and not _named_part(meta, collected, most)):
            out.append(float(took) / predicted - 1.0)
    return tuple(out)


def _outside(history: History, run_ids: Sequence[int]) -> dict[int, float]:
    """Worker count -> the median of what recorded `suitefit run` commands took outside their
    tests' span (from the first test's start to the last one's end): suitefit's own start,
    the processes' start-up, pytest's and xdist's end, the exit.

    Measured on the run alone, not against the plan it ran under: a residual taken against
    that plan's prediction would count twice what the model has since learned from the same
    run (its start-up, its slowdown), and the next prediction would be too long by that much.

    At a worker count no planned run has measured yet, `suitefit profile -n N` commands
    stand in: the same start, xdist and end, plus the one interpreter start that a profile's
    pytest child pays and a run's handover does not (the bundled example, with no bytecode
    written: 4.73 s outside a profile's tests, 4.52 s outside the run's after it; the serial
    estimate before had that run at 6.2 s for 7.6 s).
    """
    import json

    by_n: dict[int, list[float]] = {}
    profiled: dict[int, list[float]] = {}
    rows = history.execute(
        f"SELECT r.id, r.kind, r.plan, r.workers, r.meta FROM runs r WHERE r.id IN ({_q(run_ids)}) "
        f"AND ((r.kind = 'run' AND r.plan IS NOT NULL) OR (r.kind = 'profile' AND r.plan IS NULL "
        f"AND r.workers >= 2)) AND r.status IN ('passed', 'failed')")
    metas = {int(r[0]): meta_of(r[4]) for r in rows}
    spans = _tests_spans(history, metas)
    for run_id, kind, plan_text, workers, _ in rows:
        span = spans.get(int(run_id))
        if span is None:
            continue
        try:
            command = float(metas[int(run_id)]["command_wall_s"])
            n = int(json.loads(plan_text)["workers"]) if kind == "run" else int(workers)
        except (ValueError, KeyError, TypeError):
            continue
        (by_n if kind == "run" else profiled).setdefault(n, []).append(command - span)
    for n, v in profiled.items():
        by_n.setdefault(n, v)
    return {n: median(v) for n, v in by_n.items() if v}


def _serial_overhead(history: History, run_ids: Sequence[int]) -> tuple[list[float], list[float]]:
    """Before any planned run: what a measured serial command (a profile) took beyond its
    startup and its tests, i.e. its end after the last test (pytest's summary, plugins'
    unconfigure, the exit), and of that end its unconfigure hooks (``unconfigure_s``, where
    recorded). Every xdist worker ends as the serial command does, but for the summary, which
    its controller writes after them; the controller then runs the unconfigure hooks again.
    The rest of a serial end (pytest's collections of the collected heap at its cleanup, the
    interpreter's teardown of it: 2-3 s of networkx's 3.2-3.6 s) the controller, which collects
    nothing, does not repeat."""
    out: list[float] = []
    hooks: list[float] = []
    rows = history.execute(
        f"SELECT r.id, r.meta, (SELECT MIN(w.startup_s) FROM workers w WHERE w.run_id = r.id) "
        f"FROM runs r WHERE r.id IN ({_q(run_ids)}) AND r.plan IS NULL AND r.workers <= 1 "
        f"AND r.status IN ('passed', 'failed')")
    metas = {int(r[0]): meta_of(r[1]) for r in rows}
    spans = _tests_spans(history, metas)
    for run_id, _, startup in rows:
        try:
            command = float(metas[int(run_id)]["command_wall_s"])
        except (ValueError, KeyError, TypeError):
            continue
        span = spans.get(int(run_id))
        if startup is None or span is None:
            continue
        out.append(max(0.0, command - float(startup) - span))
        took = metas[int(run_id)].get("unconfigure_s")
        if isinstance(took, (int, float)):
            hooks.append(float(took))
    return out, hooks


def _tests_spans(history: History, metas: Mapping[int, Mapping[str, Any]]) -> dict[int, float]:
    """run -> seconds from its first test's start to its last test's end: on the monotonic
    clock as its session kept it (``tests_s``: a duration across wall-clock stamps is off by
    however the wall clock was slewed or stepped meanwhile, ``session.monotonic_s``), else,
    for a run recorded before it did, its stamps' span (``tests_span``, else its test rows)."""
    out: dict[int, float] = {}
    scan: list[int] = []
    for run_id, meta in metas.items():
        try:
            out[run_id] = float(meta["tests_s"])
            continue
        except (ValueError, TypeError, KeyError):
            pass
        try:
            first, last = meta["tests_span"]
            out[run_id] = float(last) - float(first)
        except (ValueError, TypeError, KeyError):  # not kept (older runs, none run): read the rows
            scan.append(run_id)
    if scan:
        for run_id, first, last in history.execute(
                f"SELECT run_id, MIN(started), MAX(started + wall_s) FROM tests WHERE run_id IN ({_q(scan)}) "
                f"GROUP BY run_id"):
            if first is not None and last is not None:
                out[int(run_id)] = float(last) - float(first)
    return out


def _doubtful(history: History, run_ids: Sequence[int]) -> dict[tuple[int, str], tuple[float, float]]:
    """(run, file) -> (time of its failed tests, what they would take at its passing tests'
    average): a test that failed, hung to a timeout or was cut by a crash says little about
    the file's normal cost. Runs that crashed or were interrupted count as failed throughout."""
    # only runs where something failed (or that did not count): a passing run's rows say nothing
    # here, and reading them all was most of a plan's time on a 50,000-test history
    runs = history.execute(
        f"SELECT id, status IN ('crashed', 'interrupted') FROM runs WHERE id IN ({_q(run_ids)}) "
        f"AND (status NOT IN ('passed', 'no-tests') OR failed IS NULL OR errors IS NULL "
        f"OR failed > 0 OR errors > 0)")
    bad_runs = {int(run_id) for run_id, bad in runs if bad}
    out: dict[tuple[int, str], tuple[float, float]] = {}
    if not runs:
        return out
    ids = _q([int(r[0]) for r in runs])
    for run_id, file, bad_s, n_bad, ok_s, n_ok in history.execute(
            f"SELECT run_id, file, "
            f"SUM(CASE WHEN outcome IN ('failed', 'error') THEN wall_s ELSE 0 END), "
            f"SUM(CASE WHEN outcome IN ('failed', 'error') THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN outcome IN ('failed', 'error') THEN 0 ELSE wall_s END), "
            f"SUM(CASE WHEN outcome IN ('failed', 'error') THEN 0 ELSE 1 END) "
            f"FROM tests WHERE run_id IN ({ids}) GROUP BY run_id, file"):
        if n_bad or int(run_id) in bad_runs:
            avg = float(ok_s) / n_ok if n_ok else 0.0
            out[(int(run_id), str(file))] = (float(bad_s), n_bad * avg)
    return out


def _last_tests(history: History, run_ids: Sequence[int]) -> dict[tuple[int, str], float]:
    """(run, file) -> the time of the file's last test in run order (xdist holds that test
    until its worker gets a next one)."""
    out: dict[tuple[int, str], float] = {}
    # One pass over the runs' rows: with a lone MAX(), SQLite takes a bare column (wall_s)
    # from the row that holds the maximum. The tests table is indexed by run only, so a join
    # back to it on (run, file, seq) searched a run's rows once per file: 1.5 s of every
    # plan on a 50,000-test history, paid before `suitefit run` could start its workers.
    for run_id, file, wall, _seq in history.execute(
            f"SELECT run_id, file, wall_s, MAX(seq) FROM tests WHERE run_id IN ({_q(run_ids)}) "
            f"GROUP BY run_id, file, worker"):
        out[(int(run_id), str(file))] = float(wall)
    return out


def _part_runs(history: History, run_ids: Sequence[int], partial: Collection[tuple[int, str]],
               most: int) -> set[int]:
    """The runs of part of the suite: a command that named paths (``pytest tests/unit``)
    collected part of it, and one that selected some tests (``-k``, ``--lf``: ``partial``)
    or left planned files out ran part of it. Their start-up (collection) and end (the
    teardown of what ran) would make the whole suite's look shorter: three ``-k`` runs of
    networkx took 1.1 s off its prediction. ``most``: ``_most_collected``.

    A run that selected some tests still ran the whole suite if it ran as many as the suite
    runs (``WHOLE_SHARE``): a configuration's own ``addopts = -m "not slow"`` deselects in
    every run, and numpy's lib and linalg tests under it never had a whole run, so their
    plans took the workers' start-up from the calibration alone and the controller's at a
    whole worker's (17.6 s predicted for 15.8 s). Its partial files' times stay out."""
    selected = {r for r, _ in partial}
    part: set[int] = set()
    for run_id, meta_text, collected in history.execute(
            f"SELECT id, meta, collected FROM runs WHERE id IN ({_q(run_ids)})"):
        meta = meta_of(meta_text)
        if (meta.get("part_of_plan") or _named_part(meta, collected, most)
                or (int(run_id) in selected and not _as_many(collected, most))):
            part.add(int(run_id))
    return part


def _as_many(collected: int | None, most: int) -> bool:
    """Did a run collect (after its selection) about as many tests as the suite runs?"""
    return bool(collected and most and collected >= WHOLE_SHARE * most)


# of the most tests a recent run collected: a command that named paths and collected this
# share of them ran the whole suite
WHOLE_SHARE = 0.9


def _most_collected(history: History) -> int:
    """The suite's size, as near as the history knows it: the most tests any of the recent
    finished runs collected, or the newest run of the suite as configured did (no paths named,
    no test selected on its command line, no planned file left out), however far back: twenty
    runs of one file, or of ``-k foo``, must not make that the suite."""
    ignored = ",".join("?" * len(IGNORED_KINDS))  # other configurations (a compare's side) are not the suite
    row = history.execute(
        f"SELECT MAX(collected) FROM (SELECT collected FROM runs WHERE status != 'running' "
        f"AND kind NOT IN ({ignored}) ORDER BY id DESC LIMIT {int(WINDOW_RUNS)})", list(IGNORED_KINDS))
    most = int(row[0][0] or 0) if row else 0
    marks = ",".join("?" * (len(IGNORED_KINDS) + 1))
    rows = history.execute(
        f"SELECT id, meta, collected FROM runs WHERE status != 'running' AND kind NOT IN ({marks}) "
        f"AND collected IS NOT NULL ORDER BY id DESC LIMIT {WHOLE_SEARCH}", [*IGNORED_KINDS, CALIBRATION])
    partial = {r for r, _ in history.partial_files([int(r[0]) for r in rows])}
    for rid, meta_text, collected in rows:
        meta = meta_of(meta_text)
        # a run whose selection was its configuration's (every run makes it) is the suite as
        # configured; one recorded before that was told apart counts as having selected
        selected = int(rid) in partial and meta.get("selection_given", True)
        if not (meta.get("paths_given") or meta.get("part_of_plan") or selected):
            return max(most, int(collected or 0))
    return most


# how far back a history is searched for runs of the whole suite (a run row and its meta each)
WHOLE_SEARCH = 500


def _with_whole_runs(history: History, run_ids: list[int], last: int, most: int) -> list[int]:
    """``run_ids`` (the newest runs), and the newest older runs of the whole suite while fewer
    than ``last`` of them are among those: the files only they measured stay in the plan.
    ``most``: the suite's size (``_most_collected``); a run is whole unless ``_part_runs``
    says it is part, or it is a calibration. Searched ``WHOLE_SEARCH`` runs back.

    A developer who runs one file twenty times (``pytest --suitefit tests/test_x.py``) fills
    the window with it; the suite's other files were then no longer planned. On pytest's own
    suite (75 files), 22 runs of part of it after one profile left a plan of 10 of them that
    predicted 20.9 s for a run of the whole suite (131 s)."""
    if not run_ids:
        return run_ids
    marks = ",".join("?" * len(IGNORED_KINDS))

    def wholes(ids: Sequence[int]) -> set[int]:  # a calibration's slice, or ``_part_runs``', is none
        part = _part_runs(history, ids, history.partial_files(ids), most)
        kinds = dict(history.execute(f"SELECT id, kind FROM runs WHERE id IN ({_q(ids)})"))
        return {r for r in ids if r not in part and kinds.get(r) != CALIBRATION}

    have = len(wholes(run_ids))
    if have >= last:
        return run_ids
    older = [(int(r), str(k)) for r, k in history.execute(
        f"SELECT id, kind FROM runs WHERE status != 'running' AND kind NOT IN ({marks}) "
        f"AND id < ? AND id IN (SELECT DISTINCT run_id FROM files) ORDER BY id DESC LIMIT {WHOLE_SEARCH}",
        [*IGNORED_KINDS, min(run_ids)])]
    whole_old = wholes([r for r, _ in older]) if older else set()
    more: list[int] = []
    need = last - have
    calibrations = 0  # the calibrations between: what workers cost side by side, till a run measures it
    for rid, kind in older:
        if need <= 0:
            break
        if kind == CALIBRATION:
            more.append(rid)
            calibrations += 1
        elif rid in whole_old:
            more.append(rid)
            calibrations = 0
            need -= 1
    return run_ids + more[:len(more) - calibrations]  # none older than the last run added


def _named_part(meta: Mapping[str, Any], collected: int | None, most: int) -> bool:
    """Did a command that named paths collect part of the suite? ``pytest numpy`` names the
    whole of a suite that has no ``testpaths``: a run that collected as many tests as the
    largest recent one (less ``WHOLE_SHARE``'s slack for tests added or removed) is whole."""
    if not meta.get("paths_given"):
        return False
    return not _as_many(collected, most)


def _without(run_ids: Sequence[int], part: Collection[int]) -> list[int]:
    """``run_ids`` less the runs of part of the suite, while any other is there."""
    return [r for r in run_ids if r not in part] or list(run_ids)


def _worker(history: History, run_ids: Sequence[int]
            ) -> tuple[WorkerCost, str, dict[int, float], float | None, float | None]:
    """One worker's startup and baseline (medians), the startup per worker count (workers
    that start together compete for the CPUs, and that is measured, not assumed), the share
    of a startup its collection took and the memory it grew by (medians; None where none
    recorded it)."""
    rows = history.execute(
        f"SELECT w.startup_s, w.baseline_mb, r.workers, w.collect_s, w.collect_mb FROM workers w "
        f"JOIN runs r ON r.id = w.run_id "
        f"WHERE w.run_id IN ({_q(run_ids)}) AND w.startup_s IS NOT NULL AND w.baseline_mb IS NOT NULL")
    if not rows:
        w = DEFAULT_WORKER
        return w, (f"no worker startup recorded: assumed {fmt_s(w.startup_s)} startup and "
                   f"{fmt_mb(w.baseline_mb)} baseline per worker"), {}, None, None
    w = WorkerCost(startup_s=median(float(r[0]) for r in rows),
                   baseline_mb=median(float(r[1]) for r in rows))
    by_n: dict[int, list[float]] = {}
    for startup, _, n, _, _ in rows:
        by_n.setdefault(max(1, int(n or 0)), []).append(float(startup))
    startups = {n: median(v) for n, v in by_n.items()}
    shares = [min(1.0, max(0.0, float(c) / float(s))) for s, _, _, c, _ in rows if c is not None and float(s) > 0]
    grew = [float(m) for *_, m in rows if m is not None]
    return (w, f"worker startup {fmt_s(w.startup_s)} and baseline {fmt_mb(w.baseline_mb)}: "
               f"medians of {len(rows)} recorded worker(s)", startups, median(shares) if shares else None,
            median(grew) if grew else None)


def _controller_start(history: History, run_ids: Sequence[int]) -> float | None:
    """What xdist's controller takes before it starts its workers: a one-process run's
    startup less its collection (the controller imports the same conftest and plugins but
    collects nothing). None when no such run recorded its collection."""
    rows = history.execute(
        f"SELECT w.startup_s - w.collect_s FROM workers w JOIN runs r ON r.id = w.run_id "
        f"WHERE w.run_id IN ({_q(run_ids)}) AND r.workers <= 1 AND w.startup_s IS NOT NULL "
        f"AND w.collect_s IS NOT NULL")
    return max(0.0, median(float(r[0]) for r in rows)) if rows else None


def load_cost_model(cfg: Config, history_path: Path | None = None,
                    files: Sequence[str] = (), history: History | None = None) -> tuple[CostModel, bool]:
    """The cost model for ``cfg`` (history path from config unless given); True if history existed.

    ``history``: one already open, read as it is (not closed here)."""
    default_s, default_mb = cfg.get("default_file_s"), cfg.get("default_file_mb")
    if history is not None:
        return build_cost_model(history, files=files, groups=cfg.groups, default_s=default_s,
                                default_mb=default_mb, root=cfg.root), True
    path = history_path or cfg.history_path
    if not Path(path).exists():
        return build_cost_model(None, files=files, groups=cfg.groups, default_s=default_s,
                                default_mb=default_mb, root=cfg.root), False
    with History(path, create=False) as h:
        return build_cost_model(h, files=files, groups=cfg.groups, default_s=default_s,
                                default_mb=default_mb, root=cfg.root), True


def marked_in_source(root: Path, files: Sequence[str]) -> dict[str, list[str]]:
    """Group name -> the files whose source marks tests ``xdist_group(NAME)``: what a first
    plan, before any run recorded the marks pytest saw (``History.xdist_groups``), keeps on
    one worker. A mark whose name is not a plain string here joins the group "?", with every
    other such file: a group too large costs balance, a group split costs the tests."""
    from suitefit.marks import group_names

    out: dict[str, list[str]] = {}
    for f in files:
        try:
            text = (root / f).read_bytes()
        except OSError:
            continue
        for n in sorted(group_names(text)):
            out.setdefault(n, []).append(f)
    return out


SKIP_DIRS = {".git", ".venv", "venv", ".tox", ".nox", "node_modules", "__pycache__", ".suitefit",
             "site-packages", "build", "dist", ".venvs"}


def discover_test_files(cfg: Config) -> list[str]:
    """Test files by pytest's default names under ``testpaths`` (no history: nothing collected yet)."""
    roots = [cfg.root]
    if cfg.pyproject is not None:
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        try:
            data = tomllib.loads(cfg.pyproject.read_text(encoding="utf-8"))
            tp = data.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("testpaths")
            if isinstance(tp, list) and tp:
                roots = [cfg.root / str(p) for p in tp]
        except (OSError, ValueError):
            pass
    out: set[str] = set()
    for root in roots:
        if root.is_file():
            out.add(root.relative_to(cfg.root).as_posix())
            continue
        stack = [root]
        while stack:
            d = stack.pop()
            try:
                entries = list(d.iterdir())
            except OSError:
                continue
            for e in entries:
                if e.is_dir():
                    if e.name not in SKIP_DIRS and not e.name.startswith("."):
                        stack.append(e)
                elif e.suffix == ".py" and (e.name.startswith("test_") or e.name.endswith("_test.py")):
                    out.add(e.relative_to(cfg.root).as_posix())
    return sorted(out)


def load_costs_or_discover(cfg: Config, history_path: Path | None = None, history: History | None = None
                           ) -> tuple[CostModel, bool, list[str]]:
    """The cost model; with no measured run, the test files found by name at a default cost.

    Only then: a name is not a collection (a folder of fixture projects, ``--ignore``,
    ``collect_ignore`` hold ``test_*.py`` files pytest never runs), and once a run is
    measured, planning such files would add units that never run to every prediction.
    """
    release = cfg.release_fixtures  # read first: a bad value is an error before any work
    costs, found = load_cost_model(cfg, history_path, history=history)
    discovered: list[str] = []
    if not costs.runs_used:
        discovered = discover_test_files(cfg)
        costs, found = load_cost_model(cfg, history_path, files=discovered, history=history)
        marked = marked_in_source(cfg.root, discovered)
        if marked:
            costs = replace(costs, declared_groups=join_marked_groups(costs.declared_groups, marked))
    return replace(costs, release=release, headroom=cfg.memory_headroom), found, discovered
