"""Synthetic runs written through the History API, for the report's tests and benchmark.

A made-up run is consistent with itself (files rows summarise their tests, samples
add up the files in flight, heartbeats sit where the samples cross the threshold),
so a report drawn from it can be checked against the history like a real one.
Deterministic for a given seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from suitefit.history import (
    FileRecord,
    FixtureRecord,
    History,
    SampleRecord,
    TestRecord,
    WorkerRecord,
)
from suitefit.model import Budget, Plan, Unit

T0 = 1_790_000_000.0  # a fixed epoch start, so reports of the same seed are identical


@dataclass(frozen=True)
class Shape:
    tests: int = 200
    files: int = 20
    workers: int = 4
    mean_test_s: float = 0.05
    interval_s: float = 0.1  # sampling interval
    pss_every: int = 10
    budget_mb: float | None = 6144.0
    threshold_mb: float | None = None  # default: 80% of the budget
    hogs: int = 2  # files that hold a lot of memory while they run
    planned: bool = False
    crash: bool = False
    failed: int = 1
    seed: int = 1


def make_run(history: History, shape: Shape = Shape(), *, kind: str = "profile", started: float = T0) -> int:
    """Write one synthetic run into ``history`` and return its id."""
    rnd = random.Random(shape.seed)
    rid = history.new_run(kind, started=started, argv=["pytest", "--suitefit", f"-n{shape.workers}"],
                          cwd="/src/project", rootdir="/src/project")
    names = [f"w{i}" for i in range(shape.workers)] if shape.workers > 1 else ["main"]
    if shape.workers > 1:
        names = [f"gw{i}" for i in range(shape.workers)]
    files = [f"tests/pkg{i % 7}/test_mod{i:04d}.py" for i in range(shape.files)]
    per_file = [1] * shape.files
    for _ in range(max(0, shape.tests - shape.files)):
        per_file[rnd.randrange(shape.files)] += 1
    hog_mb = {f: rnd.uniform(900, 2400) for f in rnd.sample(files, min(shape.hogs, len(files)))}
    pool_files = set(rnd.sample(files, max(1, len(files) // 4)))

    startup = {w: rnd.uniform(0.8, 1.6) for w in names}
    clock = dict(startup)
    base = {w: rnd.uniform(180, 260) for w in names}
    order = sorted(range(shape.files), key=lambda i: -per_file[i])  # longest first, like a planner
    tests: list[TestRecord] = []
    frows: list[FileRecord] = []
    seq = dict.fromkeys(names, 0)
    failures = set(rnd.sample(range(shape.tests), min(shape.failed, shape.tests)))
    n = 0
    placed: dict[str, str] = {}
    for i in order:
        w = min(names, key=lambda x: clock[x])
        path = files[i]
        placed[path] = w
        f_start = clock[w]
        cpu = 0.0
        for k in range(per_file[i]):
            wall = rnd.expovariate(1 / shape.mean_test_s)
            if path in hog_mb and k == 0:
                wall += 1.5  # the hog allocates for a while
            setup = wall * 0.1
            outcome = "failed" if n in failures else ("skipped" if rnd.random() < 0.02 else "passed")
            tests.append(TestRecord(rid, f"{path}::test_case_{k:03d}", path, w, seq[w], started + clock[w],
                                    setup, wall * 0.85, wall * 0.05, wall, wall * 0.9, outcome))
            seq[w] += 1
            cpu += wall * 0.9
            clock[w] += wall
            n += 1
        f_peak = hog_mb.get(path, rnd.uniform(2, 60))
        frows.append(FileRecord(rid, path, w, started + f_start, started + clock[w], clock[w] - f_start, cpu,
                                per_file[i], base[w], f_peak, base[w] + f_peak))
    duration = max(clock.values()) + 0.3

    # samples: every worker's baseline plus the file it is running, the controller, the pools
    pool_mb = 700.0
    pool_workers = {placed[f] for f in pool_files}
    spans = sorted((fr.started - started, fr.finished - started, fr.worker, fr.peak_mb) for fr in frows)
    samples: list[SampleRecord] = []
    t = 0.0
    k = 0
    while t <= duration:
        rss = 90.0
        procs = 1
        for w in names:
            if t >= startup[w] * 0.5:
                rss += base[w] * min(1.0, t / startup[w])
                procs += 1
            if w in pool_workers and t >= startup[w]:
                rss += pool_mb
                procs += 2
        for s0, s1, _w, pk in spans:
            if s0 <= t <= s1:
                rss += pk * min(1.0, (t - s0) / 0.4 + 0.2)
        rss += rnd.uniform(-4, 4)
        pss = rss * 0.78 if shape.pss_every and k % shape.pss_every == 0 else None
        samples.append(SampleRecord(rid, round(t, 3), rss, pss, procs))
        t += shape.interval_s
        k += 1
    peak = max(samples, key=lambda s: s.rss_mb)

    threshold = shape.threshold_mb
    if threshold is None and shape.budget_mb is not None:
        threshold = 0.8 * shape.budget_mb
    if threshold is None:
        threshold = peak.rss_mb * 0.9
    tests_by_time = sorted(tests, key=lambda x: x.started)
    above = False
    secs_above = 0.0
    for s in samples:
        now_above = s.rss_mb >= threshold if not above else s.rss_mb >= threshold * 0.95  # hysteresis
        if now_above:
            secs_above += shape.interval_s
        if now_above != above:
            inflight = [x.nodeid for x in tests_by_time if x.started - started <= s.t <= x.started - started + x.wall_s]
            history.add_event(rid, s.t, "heartbeat", tree_mb=round(s.rss_mb, 1),
                              direction="up" if now_above else "down", threshold_mb=threshold, tests=inflight)
            above = now_above

    fixtures = []
    for w in sorted(pool_workers):
        fixtures.append(FixtureRecord(rid, w, "cpu_dist_workers", "session", "", rnd.uniform(2.0, 3.5), 0.4, 2, pool_mb))
    for w in names:
        fixtures.append(FixtureRecord(rid, w, "tmp_db", "session", "", rnd.uniform(0.1, 0.3), 0.05, 0, 12.0))
    fixtures.append(FixtureRecord(rid, names[0], "big_model", "module", files[0], 1.2, 0.1, 0, 300.0))
    history.add_fixtures(fixtures)
    history.add_fixture_files(rid, [("cpu_dist_workers", f) for f in sorted(pool_files)])
    history.add_fixture_files(rid, [("tmp_db", f) for f in files[: max(1, len(files) // 2)]])
    history.add_fixture_files(rid, [("big_model", files[0])])

    died: str | None = None
    if shape.crash:
        died = names[-1]
        victim = max((x for x in tests if x.worker == died), key=lambda x: x.seq)
        history.add_event(rid, victim.started - started + victim.wall_s * 0.5, "inflight", worker=died,
                          tests=[victim.nodeid], tree_mb=round(peak.rss_mb, 1))
        history.add_event(rid, victim.started - started + victim.wall_s, "worker_died", worker=died,
                          nodeid=victim.nodeid, signal="SIGKILL", exitcode=-9)
        tests = [x for x in tests if x is not victim]  # its report never came

    history.add_tests(tests)
    history.add_files(frows)
    history.add_samples(samples)
    for w in names:
        mine = [x for x in tests if x.worker == w]
        history.upsert_worker(WorkerRecord(
            rid, w, 1000 + names.index(w), started + 0.05, started + startup[w], startup[w] - 0.05, base[w],
            max((fr.peak_abs_mb for fr in frows if fr.worker == w), default=base[w]), len(mine),
            "died" if w == died else "ok",
            "killed by SIGKILL (signal 9) while running a test" if w == died else None,
        ))

    counts = {o: sum(1 for x in tests if x.outcome == o) for o in ("passed", "failed", "skipped")}
    values: dict[str, object] = dict(
        status="crashed" if shape.crash else ("failed" if counts["failed"] else "passed"),
        exit_code=1 if (shape.crash or counts["failed"]) else 0,
        finished=started + duration, wall_s=duration, cpu_s=sum(x.cpu_s for x in tests),
        workers=shape.workers if shape.workers > 1 else 0, collected=shape.tests,
        passed=counts["passed"], failed=counts["failed"], skipped=counts["skipped"], errors=0,
        peak_rss_mb=peak.rss_mb, peak_pss_mb=max((s.pss_mb or 0.0) for s in samples) or None,
        peak_procs=max(s.procs for s in samples), threshold_mb=threshold, secs_above=round(secs_above, 1),
        budget_mb=shape.budget_mb, python="3.11.7", pytest_version="9.0.3", xdist_version="3.8.0",
        host="synthetic",
    )
    if shape.planned:
        units = tuple(
            Unit(f"file:{fr.path}", (fr.path,), fr.wall_s * rnd.uniform(0.8, 1.25), fr.peak_mb * rnd.uniform(0.9, 1.3),
                 ("cpu_dist_workers",) if fr.path in pool_files else (), "one file")
            for fr in sorted(frows, key=lambda fr: fr.started)
        )
        placement: dict[str, list[str]] = {}
        for fr in frows:
            placement.setdefault(fr.worker, []).append(f"file:{fr.path}")
        plan = Plan(
            workers=shape.workers, units=units,
            budget=Budget(shape.budget_mb or 8192.0, shape.workers, None, "synthetic budget", "synthetic cpus"),
            predicted_wall_s=duration * 0.92, predicted_peak_mb=peak.rss_mb * 1.1,
            reasons=(f"{shape.workers} workers: the cores allow it and the peak fits the budget",
                     "cpu_dist_workers files kept apart from the hogs"),
            placement={k: tuple(v) for k, v in placement.items()},
        )
        values["plan"] = plan.to_json()
        values["kind"] = "run"
    history.update_run(rid, **values)
    return rid
