"""Property tests of the pure planner: placement, groups, order, budget, reasons, shards."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suitefit.costs import SHARE_POINTS
from suitefit.model import Budget, CostModel, FileCost, FixtureCost, WorkerCost
from suitefit.plan import hash_shard, make_plan, plan_shards, shard_split
from suitefit.plan.chunks import cut_points
from suitefit.plan.core import chunk_of, even_cuts
from suitefit.plan.grouping import find_groups

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def time_shares(draw: st.DrawFn) -> tuple[float, ...]:
    """Where a file's time lies along its tests: any non-decreasing 0 ... 1 (a test may hold it all)."""
    inner = sorted(draw(st.lists(st.floats(0, 1), min_size=SHARE_POINTS - 1, max_size=SHARE_POINTS - 1)))
    return (0.0, *inner, 1.0)


@st.composite
def piece_peaks(draw: st.DrawFn, peak_mb: float) -> tuple[tuple[tuple[float, float, float, float, int, float], ...], ...]:
    """Runs that split a file: each covers its tests with pieces (cut anywhere), each at a
    peak no higher than the file's."""
    runs = []
    for _ in range(draw(st.integers(1, 2))):
        cuts = sorted(set(draw(st.lists(st.floats(0.01, 0.99), max_size=4))))
        bounds = [0.0, *cuts, 1.0]
        workers = draw(st.integers(2, 3))
        peaks = [draw(st.floats(0, peak_mb)) for _ in range(workers)]
        on = [draw(st.integers(0, workers - 1)) for _ in bounds[1:]]
        runs.append(tuple((lo, hi, peaks[w], 0.0, 0, 0.0, w) for (lo, hi), w in zip(pairwise(bounds), on, strict=True)))
    return tuple(runs)


@st.composite
def cost_models(draw: st.DrawFn, measured: bool | None = None) -> CostModel:
    n = draw(st.integers(1, 30))
    fx_names = [f"fx{i}" for i in range(draw(st.integers(0, 4)))]
    fixtures = tuple(
        FixtureCost(name, draw(st.sampled_from(["session", "package", "module"])),
                    setup_s=draw(st.floats(0, 5)), procs=draw(st.integers(0, 3)),
                    mb=draw(st.floats(0, 600)))
        for name in fx_names
    )
    files = []
    for i in range(n):
        fx = tuple(sorted(draw(st.sets(st.sampled_from(fx_names), max_size=2)))) if fx_names else ()
        peak = draw(st.floats(0, 1500))
        files.append(FileCost(f"tests/d{i % 3}/test_{i}.py", wall_s=draw(st.floats(0, 20)),
                              peak_mb=peak, fixtures=fx, tests=draw(st.integers(0, 8)),
                              time_shares=draw(time_shares()) if draw(st.booleans()) else (),
                              piece_peaks=draw(piece_peaks(peak)) if draw(st.booleans()) else ()))
    paths = [f.path for f in files]
    groups: dict[str, tuple[str, ...]] = {}
    pool = draw(st.permutations(paths))
    for g in range(draw(st.integers(0, 3))):
        k = draw(st.integers(0, 4))
        members = list(pool[:k]) + ([f"tests/test_unmeasured_{g}.py"] if draw(st.booleans()) else [])
        pool = pool[k:]
        if members:
            groups[f"g{g}"] = tuple(members)
    runs = (1 if draw(st.booleans()) else 0) if measured is None else int(measured)
    worker = WorkerCost(startup_s=draw(st.floats(0, 5)), baseline_mb=draw(st.floats(10, 300)))
    return CostModel(tuple(files), fixtures, worker, runs_used=runs, declared_groups=groups)


@st.composite
def budgets(draw: st.DrawFn, costs: CostModel) -> Budget:
    cpus = draw(st.integers(1, 8))
    workers = draw(st.one_of(st.none(), st.integers(1, cpus)))
    floor = costs.worker.baseline_mb * (workers or 1)
    return Budget(memory_mb=floor + draw(st.floats(0, 6000)), cpus=cpus, workers=workers)


def _all_files(costs: CostModel) -> set[str]:
    return {f.path for f in costs.files} | {f for fs in costs.declared_groups.values() for f in fs}


@SETTINGS
@given(st.data())
def test_plan_invariants(data: st.DataObject) -> None:
    costs = data.draw(cost_models())
    budget = data.draw(budgets(costs))
    plan = make_plan(costs, budget)
    placed = Counter(f for u in plan.units for f in u.files if u.chunk is None)
    chunks: dict[str, list[tuple[int, int]]] = {}
    for u in plan.units:
        if u.chunk is not None:
            assert len(u.files) == 1
            chunks.setdefault(u.files[0], []).append(u.chunk)
    # every file placed exactly once: whole, or as chunks 1..m of m, each once
    assert set(placed) | set(chunks) == _all_files(costs) and set(placed.values()) <= {1}
    assert not set(placed) & set(chunks)
    for f, cs in chunks.items():
        m = cs[0][1]
        assert sorted(cs) == [(k, m) for k in range(1, m + 1)] and m >= 2, (f, cs)
    # a chunk's peak: never above its file's, never below the part of a worker whose tests
    # held all of the chunk in a run (both with its unit's persistent fixtures' memory)
    file_of = {fc.path: fc for fc in costs.files}
    for u in plan.units:
        fc = file_of.get(u.files[0]) if u.chunk is not None else None
        if fc is not None:
            held = sum(fx.mb for fx in costs.fixtures if fx.name in u.fixtures)
            if u.span is not None:
                lo, hi = u.span
            else:  # cut by count, as the run cuts it
                cuts = even_cuts(fc.tests, u.chunk[1])
                lo, hi = cuts[u.chunk[0] - 1] / fc.tests, cuts[u.chunk[0]] / fc.tests
            assert u.peak_mb <= fc.peak_mb + held + 1e-6
            for pieces in fc.piece_peaks:
                over = {p[6]: p[2] for p in pieces if p[0] < hi and p[1] > lo}
                if len(over) == 1:
                    assert u.peak_mb + 1e-6 >= min(over.values()) + held, (u, pieces)
    # declared groups: one unit each, files in declared order, units in declared order
    by = {u.name: u for u in plan.units}
    for name, files in costs.declared_groups.items():
        assert by[f"group:{name}"].files == files
    declared = [u.name for u in plan.units if u.name.startswith("group:")]
    assert declared == [f"group:{n}" for n in costs.declared_groups]
    # every unit runs once somewhere, on one of the plan's workers
    ran = Counter(n for us in plan.placement.values() for n in us)
    pieces = {n for n in ran if ":tail" in n}  # a file's tail the prediction moved at the end
    assert set(ran) - pieces == set(by) and set(ran.values()) <= {1}
    assert all(by[n.split(":tail", 1)[0]].piece_setup_s is not None for n in pieces)
    assert len(plan.placement) == plan.workers
    if budget.workers is not None:
        assert plan.workers == budget.workers
    # reasons: every unit has one; the worker count and each group are explained
    assert all(u.reason for u in plan.units)
    assert any(r.startswith("workers:") for r in plan.reasons)
    for u in plan.units:
        if u.name.startswith(("group:", "fixture:")):
            assert any(r.startswith(f"{u.name}:") for r in plan.reasons)
    # the budget is respected, or a warning names the unit that runs alone
    assert plan.predicted_peak_mb <= budget.memory_mb + 1e-6 or plan.warnings


@SETTINGS
@given(st.data())
def test_chunks_cut_by_time_cover_the_file_once_whatever_was_collected(data: st.DataObject) -> None:
    # the cut is made on the history's count of tests; the run cuts what it collected, which
    # may be more or fewer (tests added, -k): every test still runs in exactly one chunk
    tests = data.draw(st.integers(2, 400))
    m = data.draw(st.integers(2, min(tests, 16)))
    shares = data.draw(time_shares())
    cuts = cut_points(tests, m, shares)
    assert cuts[0] == 0 and cuts[-1] == tests and all(a < b for a, b in pairwise(cuts))
    spans = [(lo / tests, hi / tests) for lo, hi in pairwise(cuts)]
    collected = list(range(data.draw(st.integers(0, 500))))
    parts = [chunk_of(collected, (k, m), span) for k, span in enumerate(spans, start=1)]
    assert [i for p in parts for i in p] == collected
    if len(collected) == tests:
        assert [len(p) for p in parts] == [hi - lo for lo, hi in pairwise(cuts)]


@SETTINGS
@given(st.data())
def test_budget_respected_when_every_unit_fits(data: st.DataObject) -> None:
    costs = data.draw(cost_models())
    budget = data.draw(budgets(costs))
    plan = make_plan(costs, budget)
    # the most the tree can hold: every worker's baseline, every persistent fixture resident
    # on every worker (a fixture group split in parts lives on each worker that runs a part),
    # plus the largest unit's own peak
    all_fx = sum(f.mb for f in costs.fixtures if f.scope in ("session", "package"))
    n = plan.workers
    ctrl = 1 if n >= 2 else 0  # xdist's controller process, counted at a worker's baseline
    worst = (n + ctrl) * costs.worker.baseline_mb + n * all_fx + max(u.peak_mb for u in plan.units)
    admit = plan.admit_mb  # the budget less the plan's headroom for its own prediction error
    assert admit is not None and admit < budget.memory_mb
    if worst <= admit:
        assert not plan.warnings
        assert plan.predicted_peak_mb <= admit + 1e-6


@SETTINGS
@given(st.data())
def test_fixture_groups_never_split_beyond_their_parts(data: st.DataObject) -> None:
    costs = data.draw(cost_models())
    budget = data.draw(budgets(costs))
    plan = make_plan(costs, budget)
    for u in plan.units:
        if u.name.startswith("fixture:") and "[" in u.name:
            base, frac = u.name.split("[")
            i, m = map(int, frac.rstrip("]").split("/"))
            siblings = [v for v in plan.units if v.name.startswith(base + "[")]
            assert len(siblings) == m and 1 <= i <= m and m < plan.workers


@SETTINGS
@given(st.data())
def test_shards_place_every_file_once_and_keep_groups_whole(data: st.DataObject) -> None:
    costs = data.draw(cost_models())
    budget = data.draw(budgets(costs))
    n = data.draw(st.integers(1, 5))
    split, plans = plan_shards(costs, budget, n)
    placed = Counter(f for p in plans for u in p.units for f in u.files if not u.chunk or u.chunk[0] == 1)
    assert set(placed) == _all_files(costs) and set(placed.values()) == {1}
    for name, files in costs.declared_groups.items():
        homes = {split.shard_of(f) for f in files}
        assert len(homes) == 1, name
    fcs = {f.path: f for f in costs.files}
    for g in find_groups(costs, fcs).fixture_groups:  # a pool is never started on two machines
        assert len({split.shard_of(f) for f in g.files}) == 1, g.name
    for p in plans:
        assert p.shard is not None and p.shard[1] == n
        for u in p.units:
            assert all(split.shard_of(f) == p.shard[0] for f in u.files)
    # shard K planned alone equals shard K of the whole split
    k = data.draw(st.integers(1, n))
    assert make_plan(costs, budget, shards=n, shard=k) == plans[k - 1]


@SETTINGS
@given(st.data())
def test_hash_split_is_stable(data: st.DataObject) -> None:
    costs = data.draw(cost_models(measured=False))
    n = data.draw(st.integers(1, 6))
    a = shard_split(costs, n)
    assert a == shard_split(costs, n)
    assert not a.balanced
    # adding a file moves no other file
    more = CostModel((*costs.files, FileCost("tests/test_added.py", 1.0, 1.0)), costs.fixtures,
                     costs.worker, runs_used=0, declared_groups=costs.declared_groups)
    b = shard_split(more, n)
    assert all(b.assignment[f] == k for f, k in a.assignment.items())
    assert b.shard_of("tests/test_never_seen.py") == hash_shard("tests/test_never_seen.py", n)


def test_balanced_split_of_many_files_is_even() -> None:
    files = tuple(FileCost(f"tests/test_{i}.py", 0.5 + (i * 7919 % 97) / 10, 10.0) for i in range(240))
    split = shard_split(CostModel(files, runs_used=2), 4)
    assert split.balanced
    assert max(split.work_s) <= 1.02 * (sum(split.work_s) / 4)
