"""``make_plan``: costs and a budget in, a Plan with its reasons out.

Steps: fill defaults for files never measured, find fixture groups, then for each
worker count worth trying build the units (groups split only to stay off the
critical path), order them longest first and simulate the dispatcher; keep the
fewest workers that reach the best predicted wall inside the budget.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from suitefit.errors import SuitefitError
from suitefit.median import median
from suitefit.model import (
    FAULT_MIN_MB,
    Budget,
    CostModel,
    FileCost,
    FixtureCost,
    Plan,
    Unit,
    release_verdict,
)
from suitefit.plan.chunks import Divisible, split_long_files
from suitefit.plan.core import Shutdown, Split
from suitefit.plan.grouping import (
    DEFAULT_RULES,
    PERSISTENT_SCOPES,
    GroupingRules,
    build_units,
    find_groups,
    order_units,
    single_units,
)
from suitefit.plan.shards import ShardSplit, check_shard, costs_for_shard, split_shards
from suitefit.plan.simulate import Simulation, simulate
from suitefit.plan.workers import CALIBRATION_DOUBT, PAYS_FRACTION, Candidate, choose_workers
from suitefit.units import fmt_mb, fmt_s

DEFAULT_FILE_S = 1.0
DEFAULT_FILE_MB = 50.0
MAX_HOG_LINES = 20


def default_file_cost(measured: Sequence[FileCost], default_s: float | None = None,
                      default_mb: float | None = None) -> tuple[float, float, str]:
    """The stated cost of a file never measured: configured, else the median measured file."""
    if default_s is not None or default_mb is not None:
        return (default_s if default_s is not None else DEFAULT_FILE_S,
                default_mb if default_mb is not None else DEFAULT_FILE_MB,
                "[tool.suitefit] default_file_s/default_file_mb")
    if measured:
        return (median(fc.wall_s for fc in measured),
                median(fc.peak_mb for fc in measured), "the median of measured files")
    return DEFAULT_FILE_S, DEFAULT_FILE_MB, "nothing measured yet"


def _file_costs(costs: CostModel) -> tuple[dict[str, FileCost], list[str]]:
    """Every file the plan must place, with a stated default for declared-but-unmeasured ones."""
    fcs = {fc.path: fc for fc in costs.files}
    missing = [f for fs in costs.declared_groups.values() for f in fs if f not in fcs]
    notes: list[str] = []
    if missing:
        s, mb, src = default_file_cost([fc for fc in costs.files if fc.measured])
        for f in dict.fromkeys(missing):
            fcs[f] = FileCost(path=f, wall_s=s, peak_mb=mb, measured=False)
        notes.append(f"{len(set(missing))} declared file(s) never measured: default "
                     f"{fmt_s(s)} / {fmt_mb(mb)} each ({src})")
    return fcs, notes


def slowdown_for(w: int, cpus: int, measured: Mapping[int, float]) -> float:
    """How much longer each file takes on ``w`` workers than alone: measured for that count;
    else, per busy CPU, interpolated between alone (1.0) and the measured counts and held at
    the largest measured count's beyond it; else only the sharing of CPUs (``w / cpus`` past
    one worker per CPU).

    Held, not grown per busy CPU: on this 2-CPU machine the step from one busy CPU to two
    is two vCPUs sharing one core and xdist's controller sharing the CPUs with its workers,
    and neither grows with more CPUs. Grown linearly, pandas' 1.48x at 2 workers became
    8.2x a file at 16 (16 workers predicted slower than 4) and the 50k suite's 2.02x became
    16.4x. What more busy CPUs than were measured cost (memory bandwidth) is not known
    here: the plan says when it holds a figure (``slowdown_held_from``).
    """
    share = max(1.0, w / cpus)
    if w in measured:
        return measured[w]
    if w <= 1:
        return 1.0
    points = _cpu_counts(measured, cpus)
    if not points:
        return share
    busy = min(w, cpus)
    lo_n, lo_f = 1, 1.0
    for n in points:
        f = measured[n]
        if busy <= n:
            return (lo_f + (f - lo_f) * (busy - lo_n) / (n - lo_n)) * share
        lo_n, lo_f = n, f
    return lo_f * share


def _cpu_counts(measured: Mapping[int, float], cpus: int) -> list[int]:
    """The measured worker counts that say how busy CPUs slow each other: 2 up to one a CPU."""
    return sorted(n for n in measured if 2 <= n <= cpus)


def slowdown_held_from(w: int, cpus: int, measured: Mapping[int, float]) -> int | None:
    """The largest measured count whose slowdown ``slowdown_for`` holds for ``w`` workers
    (more busy CPUs than any run measured), else None."""
    known = _cpu_counts(measured, cpus)
    if w in measured or not known or min(w, cpus) <= known[-1]:
        return None
    return known[-1]


def releasable_fixtures(fixtures: Sequence[FixtureCost], rules: GroupingRules,
                        setting: bool | tuple[str, ...]) -> frozenset[str]:
    """Fixtures the core may tear down after their last user on a worker (``release_verdict``)."""
    return frozenset(f.name for f in fixtures if release_verdict(f, setting, rules).release)


def _validate(budget: Budget) -> None:
    if not budget.memory_mb > 0:
        raise SuitefitError(f"memory budget must be positive, got {budget.memory_mb} MiB")
    if budget.cpus < 1:
        raise SuitefitError(f"CPU count must be at least 1, got {budget.cpus}")
    if budget.workers is not None and budget.workers < 1:
        raise SuitefitError(f"worker count must be at least 1, got {budget.workers}")


def _hog_reasons(units: tuple[Unit, ...], sim: Simulation, budget: Budget, workers: int,
                 baseline_mb: float) -> list[str]:
    share = (budget.memory_mb - workers * baseline_mb) / workers
    hogs = [u for u in units if u.peak_mb > 0 and u.peak_mb > share]
    out = []
    for u in hogs[:MAX_HOG_LINES]:
        waited = sim.waited_s.get(u.name)
        if any(u.name in w for w in sim.warnings):
            out.append(f"hog {u.name} (peak {fmt_mb(u.peak_mb)}): over the budget even alone; "
                       f"runs alone, with a warning")
        elif waited:
            out.append(f"hog {u.name} (peak {fmt_mb(u.peak_mb)}, more than a worker's share "
                       f"{fmt_mb(max(share, 0))}): serialised - waits about {fmt_s(waited)} "
                       f"until the tree has room for it")
        else:
            out.append(f"hog {u.name} (peak {fmt_mb(u.peak_mb)}, more than a worker's share "
                       f"{fmt_mb(max(share, 0))}): admitted when it comes up - what runs beside "
                       f"it is predicted to fit")
    if len(hogs) > MAX_HOG_LINES:
        n_wait = sum(1 for u in hogs[MAX_HOG_LINES:] if sim.waited_s.get(u.name))
        out.append(f"... and {len(hogs) - MAX_HOG_LINES} more hogs ({n_wait} of them serialised)")
    if not hogs:
        out.append(f"memory: no unit needs more than a worker's share ({fmt_mb(max(share, 0))}); "
                   f"admission stays on at run time against the live measurement")
    return out


DEFAULT_HEADROOM = 0.05  # the floor, and all there is until a planned run has been measured


def headroom(costs: CostModel, budget_mb: float) -> tuple[float, str]:
    """MiB to keep free under the budget, and why: the plan's peak is a prediction.

    A run whose tree reaches the budget is killed, so the core admits against the budget
    less the error its predictions have shown: the largest excess of a measured peak over
    its plan's prediction in the last planned runs (a run killed for memory included), and
    never less than 5% (one run's error is a small sample). Configured: used as given.
    """
    if costs.headroom is not None:
        frac, why = costs.headroom, "[tool.suitefit] memory_headroom"
        return budget_mb * frac, f"{frac:.0%} of it ({why})"
    worst = max(costs.peak_errors, default=None)
    if worst is None:
        frac = DEFAULT_HEADROOM
        why = f"{frac:.0%} of it: the default until a planned run compares its predicted and measured peak"
    elif worst <= DEFAULT_HEADROOM:
        frac = DEFAULT_HEADROOM
        why = (f"{frac:.0%} of it, the floor: the last {len(costs.peak_errors)} planned run(s) measured "
               f"at most {worst:+.0%} against their predicted peaks")
    else:
        frac = worst
        why = (f"{frac:.0%} of it: a run among the last {len(costs.peak_errors)} planned ones measured "
               f"a peak {worst:.0%} above its prediction")
    # the measured peak may reach predicted * (1 + frac): admit up to budget / (1 + frac)
    return budget_mb * frac / (1.0 + frac), why


def _plan_one(costs: CostModel, budget: Budget, rules: GroupingRules,
              shard: tuple[int, int] | None, pre_reasons: list[str]) -> Plan:
    room_mb, room_why = headroom(costs, budget.memory_mb)
    outer, budget = budget, replace(budget, memory_mb=budget.memory_mb - room_mb)
    fcs, notes = _file_costs(costs)
    fixtures = {fx.name: fx for fx in costs.fixtures if fx.scope in PERSISTENT_SCOPES}
    groups = find_groups(costs, fcs, rules)
    used = {n for fc in fcs.values() for n in fc.fixtures if n in fixtures}
    plan_fixtures: tuple[FixtureCost, ...] = tuple(fixtures[n] for n in sorted(used))
    total = sum(fc.wall_s for fc in fcs.values()) + sum(
        fixtures[n].setup_s for g in groups.fixture_groups for n in g.fixtures)
    declared_names = [f"group:{n}" for n, _ in groups.declared]
    # each worker warms up (``costs._warm_up``): planned from its start, as if its baseline
    worker = replace(costs.worker, baseline_mb=costs.worker.planned_mb, warmup_mb=0.0)

    singles = single_units(groups, fcs, fixtures)

    def slow_for(w: int) -> float:
        return slowdown_for(w, budget.cpus, costs.slowdown)

    # xdist's controller starts like a serial pytest but collects nothing before its workers
    # start: measured as a serial run's startup less its collection, else a whole startup
    controller_start_s = (costs.controller_s if costs.controller_s is not None
                          else costs.startup_by_workers.get(1, worker.startup_s))

    # A run of part of the suite (``costs.selected_share`` < 1: paths given) collects only its
    # files, and its processes end having torn down only what they collected: the measured
    # collection (its share of a start-up) and end (less the plugins' unconfigure, which every
    # pytest process runs whatever it collected) scale with its share of the suite's tests.
    share = costs.selected_share
    start_scale = 1.0 - (costs.collect_fraction or 0.0) * (1.0 - share)
    hooks = costs.controller_end_s or 0.0

    def whole_startup_for(w: int) -> float:
        return costs.startup_by_workers.get(w, worker.startup_s * slow_for(w))

    def startup_for(w: int) -> float:
        return whole_startup_for(w) * start_scale

    def head_for(w: int, whole: bool = False) -> float:
        # what the model puts before the first test: the controller's start (with workers), a worker's
        return ((whole_startup_for if whole else startup_for)(w)
                + (controller_start_s if w >= 2 else 0.0))

    def end_share(end: float, w: int) -> float:
        """``end`` (measured on whole runs) as a run of ``share`` of the tests ends."""
        fixed = min(end, hooks * (2 if w >= 2 else 1))
        return end if share >= 1.0 or end <= 0 else fixed + (end - fixed) * share

    outside, serial_end = costs.outside_by_workers, costs.serial_end_s
    # what the controller adds after its workers' ends (a serial run's unconfigure hooks), or,
    # where no run recorded those, the whole serial end again
    again = costs.controller_end_s if costs.controller_end_s is not None else serial_end

    def overhead_for(w: int) -> tuple[float, bool]:
        """What commands take beyond the model, and whether it is derived from serial runs.

        Measured: what past commands took outside their tests' span at this worker count (or
        the nearest measured one), less what the model already puts before the first test.
        Before any command with workers: xdist ends each worker's session as a serial pytest
        ends, before its controller's end, which repeats the plugins' unconfigure.
        """
        if outside:
            m = w if w in outside else min(outside, key=lambda n: (abs(n - w), n))
            beyond = outside[m] - head_for(m, whole=True)  # measured with whole start-ups
            derived = m == 1 and w >= 2
            if derived:
                beyond += again if again is not None else max(0.0, beyond)
            return max(end_share(beyond, w), -head_for(w)), derived
        if serial_end is not None:
            return end_share(serial_end + ((again or 0.0) if w >= 2 else 0.0), w), w >= 2
        return 0.0, False

    # a worker ended to make room is gone only after its session's end and its exit: as
    # long as a measured serial command's end after its last test
    exit_s = end_share(serial_end, 1) if serial_end is not None else max(0.0, overhead_for(1)[0])
    releasable = releasable_fixtures(plan_fixtures, rules, costs.release)
    def fixed_for(w: int) -> float:
        """Memory outside the workers: xdist's controller (with workers) and the sampler."""
        return (costs.controller_peak_mb if w >= 2 else 0.0) + costs.sampler_mb

    n_tests = sum(fc.tests for fc in fcs.values())
    per_test = costs.controller_per_test_s

    def controller_floor(w: int) -> float:
        """With workers, xdist's controller takes in every test's reports on one interpreter:
        no schedule ends its tests sooner than its measured CPU a test times the tests."""
        if w < 2 or not per_test:
            return 0.0
        return head_for(w) + per_test * n_tests + overhead_for(w)[0]

    divisible = Divisible(costs.fixtures, rules)

    def evaluate(w: int, give_up_s: float | None = None, split: bool = True,
                 spread_mb: float | None = None) -> Candidate:
        """``w`` workers' best units, simulated; given ``give_up_s`` (a wall that cannot be
        chosen, ``choose_workers``), stopped once past it or at a warning: a starved count
        can simulate for long."""
        units, greasons = build_units(groups, fcs, fixtures, workers=w, lane_s=total / w,
                                      singles=singles, split=split)
        chunked, creasons = split_long_files(units, fcs, costs.fixtures, workers=w, lane_s=total / w)
        chunked = [divisible(u) for u in chunked]
        cand = simulated(w, chunked, [*greasons, *creasons], give_up_s, spread_mb)
        if creasons:
            # equal chunks can leave a lane short where chunks that fill the ideal lane, the
            # rest beside another unit, do not (136 s of one file and 76 s of another on two
            # workers: 68 + 68 against 76, or 106 against 76 + 30): the simulation decides
            filled, freasons = split_long_files(units, fcs, costs.fixtures, workers=w, lane_s=total / w,
                                                fill=True)
            filled = [divisible(u) for u in filled]
            if filled != chunked:
                other = simulated(w, filled, [*greasons, *freasons], give_up_s, spread_mb)
                if other.sim.complete and other.sim.fits >= cand.sim.fits and (
                        not cand.sim.complete or other.sim.wall_s < cand.sim.wall_s * (1 - 1e-9)):
                    cand = other
        if split and not cand.sim.fits and groups.fixture_groups:
            # Splitting a group for time puts its fixtures on several workers at once: if
            # that breaks the budget, keeping every group whole may not.
            whole = evaluate(w, give_up_s, split=False, spread_mb=spread_mb)
            if whole.sim.fits:
                return whole
        return cand

    def simulated(w: int, units: list[Unit], greasons: list[str], give_up_s: float | None,
                  spread_mb: float | None) -> Candidate:
        ordered = tuple(order_units(units, declared_names))
        tmp = Plan(workers=w, units=ordered, budget=budget, predicted_wall_s=0.0,
                   predicted_peak_mb=0.0, reasons=(), fixtures=plan_fixtures, spread_mb=spread_mb,
                   fault_s_per_mb=costs.fault_s_per_mb)
        # With workers, xdist's controller is one more process: it imports the conftest before
        # it starts any worker and holds that memory throughout, so it is counted at one more
        # worker's startup (in series) and at its measured peak (one more baseline until a
        # run with workers measured it).
        # the sampler process is in the tree a runner's limit counts, whatever the count
        controller_s = controller_start_s if w >= 2 else 0.0
        beyond = controller_s + overhead_for(w)[0]  # added to the simulated wall, below
        sim = simulate(tmp, startup_s=startup_for(w), baseline_mb=worker.baseline_mb,
                       budget_mb=budget.memory_mb, limit_mb=outer.memory_mb, fixed_mb=fixed_for(w),
                       slow=slow_for(w), log=True,
                       exit_s=exit_s,
                       releasable=releasable, stop_on_warning=give_up_s is not None,
                       give_up_after_s=None if give_up_s is None else give_up_s - beyond)
        sim = replace(sim, wall_s=max(sim.wall_s + beyond, controller_floor(w)))
        return Candidate(w, ordered, sim, tuple(greasons), spread_mb)

    n_units_max = len(groups.declared) + len(groups.singles) + sum(
        len(g.files) for g in groups.fixture_groups)
    # a long file may run as chunks of its tests: each chunk is one more unit to place
    n_units_max += sum(min(fc.tests, budget.cpus) - 1 for fc in fcs.values() if fc.tests >= 2)
    file_work = sum(fc.wall_s for fc in fcs.values())

    @functools.cache  # (asked again and again per count by the search; each a pass over every file)
    def lower_bound(w: int) -> float:
        # no schedule beats the startup plus the larger of an even share and the longest
        # file (as its chunks, when it has tests enough to split), nor the controller's floor
        # (which evaluate's wall never goes below)
        longest = max((fc.wall_s / max(1, min(fc.tests, w)) for fc in fcs.values()), default=0.0)
        return max(startup_for(w) + max(file_work / w, longest) * slow_for(w), controller_floor(w))

    mem_work = sum(fc.wall_s * fc.peak_mb for fc in fcs.values())

    @functools.cache
    def estimate(w: int) -> float:
        """The order counts are tried in: the lower bound, or, where the budget leaves the
        files too little room beside the workers' floor, the wall their memory alone needs
        (each file's time times its peak, over that room). A guess, not a bound: at 64 CPUs
        in 16 GiB, 64 workers leave room for two hogs at a time, and simulated first (by the
        bound alone) they took 16 of 23 s of planning before a better count could cut them."""
        room = budget.memory_mb - fixed_for(w) - w * worker.baseline_mb
        area = mem_work * slow_for(w) / room if room > 0 else math.inf
        return max(lower_bound(w), startup_for(w) + area)

    # while only a calibration measured contention, a count it rules out is tried once
    only_calibrated = bool(costs.slowdown_unconfirmed) and set(costs.slowdown) <= costs.slowdown_unconfirmed
    why = ("only a profile's calibration has measured how much workers slow each other here ("
           + ", ".join(f"x{costs.slowdown[n]:.2f} at {n} workers" for n in sorted(costs.slowdown))
           + "), and a slice of short files in fresh workers can read high") if only_calibrated else ""
    chosen, wreasons, _ = choose_workers(evaluate, outer, worker, n_units_max, lower_bound,
                                         doubt=CALIBRATION_DOUBT if only_calibrated else 0.0, doubt_why=why,
                                         estimate=estimate)
    apart = _keep_hogs_apart(chosen, evaluate, worker.baseline_mb,
                             worker.baseline_mb + costs.sampler_mb, costs.wall_errors)
    if apart is not None:
        chosen, line = apart
        wreasons.append(line)
    sim = chosen.sim
    reasons = list(pre_reasons)
    reasons += list(costs.notes) + notes
    beyond, derived = overhead_for(chosen.workers)
    if derived:
        reasons.append(f"predicted wall includes {fmt_s(beyond)} for the run's end, from serial runs (no "
                       f"planned run with workers measured yet): the workers end as a one-process "
                       f"command ends after its last test, then the controller runs the plugins' "
                       + (f"unconfigure again ({fmt_s(again)} measured)" if costs.controller_end_s is not None
                          else "unconfigure again (not recorded: counted as that whole end)"))
    elif outside and abs(beyond) >= 0.005:
        reasons.append(f"predicted wall {'includes' if beyond > 0 else 'is'} {fmt_s(abs(beyond))} "
                       f"{'' if beyond > 0 else 'less '}for what past commands at about this worker "
                       f"count took outside their tests (suitefit's and pytest's start and end) beyond "
                       f"the model's start-up, as measured")
    elif beyond > 0:
        reasons.append(f"predicted wall includes {fmt_s(beyond)}: a serial profile's end after its "
                       f"last test, as measured")
    if chosen.workers >= 2 and not costs.contention_measured and costs.times_from_workers:
        reasons.append("contention: no serial run recorded, so how much workers slow each other cannot be "
                       "told apart from the files' own time: each file counts as runs with workers measured "
                       "it, their contention included; a serial `suitefit profile` separates the two")
    elif chosen.workers >= 2 and not costs.contention_measured:
        reasons.append(f"contention: no run with workers measured yet, so {chosen.workers} busy workers are "
                       f"assumed to run each file as fast as a serial run did; the first run with workers "
                       f"measures how much slower they are on this machine and the next plans use it")
    if costs.fault_s_per_mb is not None and chosen.workers >= 2:
        reasons.append(_faults_line(costs, sim))
    held = slowdown_held_from(chosen.workers, budget.cpus, costs.slowdown)
    if held is not None:
        reasons.append(f"contention: measured up to {held} busy workers (each file x{costs.slowdown[held]:.2f} "
                       f"against a serial run); {min(chosen.workers, budget.cpus)} busy CPUs are assumed "
                       f"to slow each file no more than that (what more busy CPUs cost is not measured "
                       f"on this machine)")
    if per_test and chosen.workers >= 2 and sim.wall_s <= controller_floor(chosen.workers) * (1 + 1e-9):
        reasons.append(f"xdist's controller takes in every test's reports on one interpreter: "
                       f"{per_test * 1000:.2f} ms of its CPU a test (measured), {fmt_s(per_test * n_tests)} "
                       f"for {n_tests:,} tests; no count of workers runs them faster, and this "
                       f"prediction is that floor")
    for flag, runs, then in (
            ("trusted", "where some of their tests failed, timed out or crashed",
             "those tests count at their file's passing average, not their recorded time"),
            ("whole", "that selected some of their tests (-k, -m, --deselect, --lf or a node id)",
             "planned at what those tests took; a run of the whole file measures it")):
        paths = sorted(fc.path for fc in fcs.values() if not getattr(fc, flag))
        if paths:
            reasons.append(f"{len(paths)} file(s) measured only in runs {runs} ({', '.join(paths[:3])}"
                           f"{', ...' if len(paths) > 3 else ''}): {then}")
    if not costs.runs_used:
        reasons.append("no history: every file gets a default cost; run `suitefit profile` "
                       "to plan from measurements")
    reasons.append(f"budget: {fmt_mb(outer.memory_mb)} ({outer.memory_source or 'given'}), "
                   f"{outer.cpus} CPUs ({outer.cpus_source or 'given'})")
    reasons.append(f"headroom: {fmt_mb(room_mb)} kept free, {room_why}; units are admitted "
                   f"against {fmt_mb(budget.memory_mb)}")
    collection = (f"of which its collection {costs.collect_fraction:.0%} scaled to the {share:.0%} of the "
                  f"tests selected" if costs.collect_fraction is not None else
                  "its collection not recorded, so not scaled")
    scaled = (f" ({fmt_s(worker.startup_s)} for the whole suite, {collection}; the end after the tests "
              f"scaled to that share, less the plugins' unconfigure {fmt_s(hooks)})" if share < 1.0 else "")
    reasons.append(f"each worker: {fmt_s(worker.startup_s * start_scale)} startup{scaled}, "
                   f"{fmt_mb(costs.worker.baseline_mb)} baseline"
                   + (f" and {fmt_mb(costs.worker.warmup_mb)} it keeps as it warms up, whatever it runs"
                      if costs.worker.warmup_mb >= 0.5 else "")
                   + (f"; xdist's controller process counted at {fmt_mb(costs.controller_peak_mb)} ("
                      + ("one more baseline: none measured yet" if costs.controller_mb is None else
                         "a part's growth a test, for the tests planned" if costs.controller_scaled else
                         "its measured peak")
                      + ") and "
                                  f"{fmt_s(controller_start_s)} before the workers start ("
                                  + ("a serial run's startup less its collection: the controller "
                                     "collects nothing" if costs.controller_s is not None else
                                     "a whole startup: no run recorded its collection yet") + ")"
                                  if chosen.workers >= 2 else ""))
    if costs.serial_peak_mb is not None:
        reasons.append(f"a serial run peaked at {fmt_mb(costs.serial_peak_mb)}: the floor of what "
                       f"running at all costs" + (" - above this budget" if
                                                  costs.serial_peak_mb > outer.memory_mb else ""))
    keepers = sorted((fc for fc in fcs.values() if fc.kept_mb >= 1.0), key=lambda fc: -fc.kept_mb)
    if keepers:
        kept_total = sum(max(0.0, fc.kept_mb) for fc in fcs.values())
        reasons.append(f"kept memory: {len(keepers)} file(s) leave memory in their worker after they end, "
                       f"{fmt_mb(kept_total)} in all (the most: {keepers[0].path}, "
                       f"{fmt_mb(keepers[0].kept_mb)}); each worker carries what its own files kept")
    forking = sorted((fc for fc in fcs.values() if fc.forks > 0), key=lambda fc: -fc.fork_mb)
    if forking:
        f = forking[0]
        reasons.append(f"forks: {len(forking)} file(s) fork their worker (a multiprocessing pool) at their peak "
                       f"(the largest: {f.path}, {f.forks} fork(s), {fmt_mb(f.fork_mb)}, begun on a "
                       f"{fmt_mb(f.fork_of_mb)} worker); each fork maps its worker's heap, so each is "
                       f"predicted larger by what its worker has kept by then")
    reasons += wreasons
    for u in chosen.units:
        if u.name.startswith(("fixture:", "group:")):
            reasons.append(f"{u.name}: {u.reason}")
    reasons += list(chosen.group_reasons)
    for n, g in ((g.name, g) for g in groups.fixture_groups):
        if len(g.files) < 2:
            reasons.append(f"{n}: one file, no grouping needed")
    reasons += _hog_reasons(chosen.units, sim, budget, chosen.workers, worker.baseline_mb)
    for d in sim.log:
        if isinstance(d.decision, Shutdown) and "make room" in d.decision.reason:
            reasons.append(f"at ~{fmt_s(d.t)}: {d.decision.worker} {d.decision.reason}")
    for r in sim.releases:
        reasons.append(f"release {r.fixture} on {r.worker} after {r.after}: {r.reason}")
    for d in sim.log:
        if isinstance(d.decision, Split):
            reasons.append(f"at ~{fmt_s(d.t)}: {d.decision.worker} takes the tail of {d.decision.unit} "
                           f"from {d.decision.source}: {d.decision.reason}; the run decides it again "
                           f"on what it finds then")
    reasons.append(f"order: {len(chosen.units)} units, longest predicted first"
                   + ("; declared groups keep their declared order" if declared_names else ""))
    return Plan(
        workers=chosen.workers,
        units=chosen.units,
        budget=outer,
        headroom_mb=room_mb,
        predicted_wall_s=sim.wall_s,
        predicted_peak_mb=sim.peak_mb,
        reasons=tuple(reasons),
        placement=dict(sim.placement),
        shard=shard,
        warnings=sim.warnings,
        fixtures=plan_fixtures,
        baseline_mb=worker.baseline_mb,
        fixed_mb=fixed_for(chosen.workers),
        slow=slow_for(chosen.workers),
        overhead_s=overhead_for(chosen.workers)[0],
        releasable=tuple(sorted(releasable)),
        spread_mb=chosen.spread_mb,
        fault_s_per_mb=costs.fault_s_per_mb,
    )


def _faults_line(costs: CostModel, sim: Simulation) -> str:
    waits, rate = sim.fault_waits, costs.fault_s_per_mb or 0.0
    head = (f"page faults: {rate * 1000:.2f} ms of CPU a MiB of new memory (the least "
            f"measured: {costs.fault_source}); the machine faults in one unit's memory at a time, so a "
            f"unit that touches {FAULT_MIN_MB:.0f} MiB or more while another's faults go on waits for them")
    if not waits:
        return head + ": no unit waits in this plan"
    name, most = max(waits.items(), key=lambda kv: kv[1])
    return head + (f": {len(waits)} unit(s) wait {fmt_s(sum(waits.values()))} in this plan "
                   f"(the most, {fmt_s(most)}: {name})")


APART_WALL = PAYS_FRACTION  # keeping hogs apart may cost at most this much predicted wall (noise)
APART_WALL_MAX = 0.05  # ... or as much as recent predictions missed the wall by, up to this
APART_PEAK = 0.05  # and must lower the predicted peak by at least this much


def apart_tolerance(wall_errors: Sequence[float]) -> tuple[float, str]:
    """How much predicted wall keeping hogs apart may cost, and why: what the prediction
    cannot tell from nothing. 2% with no planned run measured; else the median miss of the
    recent planned runs' walls (either way), at least 2% and at most 5%."""
    if not wall_errors:
        return APART_WALL, f"{APART_WALL:.0%}, the noise floor (no planned run measured yet)"
    miss = median([abs(e) for e in wall_errors])
    tol = min(APART_WALL_MAX, max(APART_WALL, miss))
    return tol, (f"{tol:.1%}: the last {len(wall_errors)} planned run(s) missed their predicted wall "
                 f"by {miss:.1%} (median, either way)" + (f", capped at {APART_WALL_MAX:.0%}"
                                                          if miss > APART_WALL_MAX else ""))


def _keep_hogs_apart(chosen: Candidate, evaluate: Callable[..., Candidate], baseline_mb: float,
                     fixed_mb: float, wall_errors: Sequence[float] = ()) -> tuple[Candidate, str] | None:
    """The chosen count again with a soft ceiling on the tree, if that lowers the predicted
    peak at no cost in wall that the prediction could tell (``apart_tolerance``): large
    units that the order would run at the same time on different workers then run one after
    another, beside small ones.

    Without it, whether two hogs overlap depends on which of two near-equal units ends
    first: the prediction says they overlap and the run, a few ms off, may not (or may).
    The ceiling tried first is what running at all costs: every baseline, the largest unit
    and a median unit on each other worker, plus a slack; then higher ones, in sixths up to
    two thirds of the way to the peak without it (the lowest within the tolerance is kept).
    """
    w, sim = chosen.workers, chosen.sim
    if w < 2 or not (sim.fits and sim.complete) or len(chosen.units) < 2:
        return None
    tol, tol_why = apart_tolerance(wall_errors)
    peaks = [u.peak_mb for u in chosen.units]
    # (a slack of 5% of the largest: a median unit is only the median; those above it fit too)
    floor = fixed_mb + w * baseline_mb + 1.05 * max(peaks) + (w - 1) * median(peaks)
    # sixths, not thirds, of the way: a ceiling keeps a never-released pool (processes tests
    # left running) to one worker only in a window (scikit-learn: 1225-1300 MiB of a 1191 floor
    # and a 1548 free peak, peak 1206 at +1% wall; below it the waits end with hogs together)
    steps = (floor + k * (sim.peak_mb - floor) / 6 for k in (1, 2, 3, 4))
    for ceiling in sorted({floor, floor * 1.1, *steps}):
        if ceiling >= sim.peak_mb * (1 - APART_PEAK):
            break
        # (stopped as soon as it cannot be kept: over the wall kept, or over the budget)
        c = evaluate(w, sim.wall_s * (1 + tol), spread_mb=ceiling)
        s = c.sim
        if (s.fits and s.complete and s.wall_s <= sim.wall_s * (1 + tol)
                and s.peak_mb <= sim.peak_mb * (1 - APART_PEAK)):
            return c, (f"hogs apart: the run keeps the tree under {fmt_mb(ceiling)} where a later unit "
                       f"in order can go first; predicted peak {fmt_mb(s.peak_mb)} instead of "
                       f"{fmt_mb(sim.peak_mb)}, wall {fmt_s(s.wall_s)} instead of {fmt_s(sim.wall_s)} "
                       f"(it may cost {tol_why})")
    return None


def shard_split(costs: CostModel, shards: int,
                rules: GroupingRules = DEFAULT_RULES) -> ShardSplit:
    """The split every shard agrees on (same history in, same split out)."""
    fcs, _ = _file_costs(costs)
    fixtures = {fx.name: fx for fx in costs.fixtures if fx.scope in PERSISTENT_SCOPES}
    return split_shards(costs, shards, fcs, fixtures, rules)


def shard_costs(costs: CostModel, split: ShardSplit, k: int) -> CostModel:
    """The model of shard ``k`` of ``split``: its files, fixtures and groups."""
    fcs, _ = _file_costs(costs)
    full = replace(costs, files=tuple(fcs.values()))
    return costs_for_shard(full, split, k)


def make_plan(costs: CostModel, budget: Budget, *, shards: int | None = None,
              shard: int | None = None, rules: GroupingRules = DEFAULT_RULES) -> Plan:
    """Plan the suite (or shard ``shard`` of ``shards``) for ``budget``."""
    _validate(budget)
    if shards is None:
        if shard is not None:
            raise SuitefitError("a shard number needs a shard count (K/N)")
        return _plan_one(costs, budget, rules, None, [])
    if shard is None:
        raise SuitefitError("planning one shard needs its number K of the N shards")
    check_shard(shard, shards)
    split = shard_split(costs, shards, rules)
    return _plan_shard(costs, budget, rules, split, shard)


def _plan_shard(costs: CostModel, budget: Budget, rules: GroupingRules, split: ShardSplit,
                k: int) -> Plan:
    sub = shard_costs(costs, split, k)
    pre = list(split.reasons)
    pre.append(f"shard {k}/{split.shards}: {len(split.files(k))} files, predicted work "
               f"{fmt_s(split.work_s[k - 1])}")
    return _plan_one(replace(sub, notes=()), budget, rules, (k, split.shards),
                     pre + list(costs.notes))


def plan_shards(costs: CostModel, budget: Budget, shards: int,
                rules: GroupingRules = DEFAULT_RULES) -> tuple[ShardSplit, list[Plan]]:
    """All N shard plans from one split (what `suitefit plan --shards N` prints)."""
    _validate(budget)
    check_shard(None, shards)
    split = shard_split(costs, shards, rules)
    return split, [_plan_shard(costs, budget, rules, split, k) for k in range(1, shards + 1)]
