"""The one data model every verb shares: measured costs, budgets, and plans.

Plain frozen dataclasses with JSON round-trips. Nothing here touches processes,
files or pytest, so ``plan/`` can import it and stay pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# The fixture grouping rule lives in rules.py (a measured run's summary reads it without
# loading this module); re-exported here with the rest of the model.
from suitefit import kept
from suitefit.rules import DEFAULT_RULES as DEFAULT_RULES
from suitefit.rules import GroupingRules as GroupingRules

# A unit (or file) whose memory rises this far above its worker's baseline is one whose page
# faults the plan models: below it, faults are noise beside its other work.
FAULT_MIN_MB = 64.0


@dataclass(frozen=True)
class FileCost:
    """What one test file costs on one worker, as measured (or defaulted)."""

    path: str  # rootdir-relative, as in node ids: "tests/test_a.py"
    wall_s: float  # wall time of its tests on one worker (robust over recent runs)
    peak_mb: float  # peak of the worker's process tree above its baseline while it ran
    tests: int = 0
    cpu_s: float = 0.0
    fixtures: tuple[str, ...] = ()  # session/package-scoped fixtures it uses, directly or not
    measured: bool = True  # False: never seen, a stated default
    last_s: float = 0.0  # its last test's time (an xdist worker holds that test until a next unit)
    trusted: bool = True  # False: measured only in runs where its tests timed out, crashed or stopped
    whole: bool = True  # False: measured only in runs that selected some of its tests (-k, a node id)
    # memory its worker still holds after it, for good (caches, imported modules, globals):
    # how far the worker's lowest baseline after it rose over the lowest from it on, less the
    # persistent fixtures set up (``costs._kept``); >= 0 as measured, signed in the core
    kept_mb: float = 0.0
    # where its time lies along its tests, in collection order: the share of its time spent by
    # each count fraction i/(len-1) of its tests (0.0 ... 1.0); () where not known (even)
    time_shares: tuple[float, ...] = ()
    # its test classes of two tests or more, as count fractions (start, end) of its tests in
    # the run its time shares come from: where a chunk's cut would fall inside one
    # (``plan/class_cuts.py``); () where it has none, or too many to keep
    classes: tuple[tuple[float, float], ...] = ()
    # of peak_mb, the forks it started (a multiprocessing pool's, ``measure/treereader.Forks``),
    # how many, and its worker's own RSS when it began: a fork maps its parent's heap, so on a
    # worker grown larger each is larger (``Unit.peak_at``)
    fork_mb: float = 0.0
    forks: int = 0
    fork_of_mb: float = 0.0
    # where along its tests its peak lies, from recent runs that ran it in pieces on several
    # workers (chunks): for each such run, each worker's own peak of the file over the count
    # fractions of the tests it ran there (``PiecePeak``); () where no run split it
    piece_peaks: tuple[tuple[PiecePeak, ...], ...] = ()

    def peak_between(self, lo: float, hi: float) -> tuple[float, float, int, float] | None:
        """The peak of its tests from count fraction ``lo`` to ``hi`` (a chunk), and of it its
        forks' MiB, how many, and their worker's MiB (as the file's), where runs that split it
        measured one: in each run where the chunk lies within one worker's tests, that
        worker's exact peak of all it ran of the file; the highest over those runs. A run
        where the chunk spans several workers' tests bounds it by none of them (a peak in one
        worker's tests outside the chunk is not the chunk's; summed, what one worker's tests
        left behind and another's added, a part of a few tests beyond a cut reaches the
        file's peak: joblib's runs cut at tests 596 and 603 of 647). None where no run bounds
        it, or where that reaches the file's own peak: the chunk carries the file's peak."""
        best: tuple[float, float, int, float] | None = None
        for pieces in self.piece_peaks:
            over = {p[6]: p for p in pieces if p[0] < hi and p[1] > lo}
            if len(over) != 1:
                continue
            (p,) = over.values()
            if best is None or p[2] > best[0]:
                best = (p[2], p[3], p[4], p[5])
        if best is None or best[0] >= self.peak_mb:
            return None
        return best


# One worker's share of a file in a run that split it: (from, to) count fractions of the
# file's tests it ran there, its peak above its baseline over them, and of that peak its
# forks' MiB, how many, and its own MiB when the file began (as ``FileCost``'s); and which of
# the run's workers it was (its pieces share the one peak).
PiecePeak = tuple[float, float, float, float, int, float, int]


@dataclass(frozen=True)
class FixtureCost:
    """A session/package/module-scoped fixture: what it costs each worker that sets it up."""

    name: str
    scope: str
    setup_s: float
    teardown_s: float = 0.0
    procs: int = 0  # processes it started (still alive after its setup)
    mb: float = 0.0  # summed RSS of those processes plus the growth of the worker itself
    files: tuple[str, ...] = ()
    autouse: bool = False  # seen as autouse by some test: never released early (see release_verdict)


# `[tool.suitefit] release_fixtures`: True (any eligible fixture), False (none), or only these names.
ReleaseSetting = bool | tuple[str, ...]
RELEASABLE_SCOPES = ("session", "package")  # module/class fixtures end with their file anyway


@dataclass(frozen=True)
class ReleaseVerdict:
    """Whether a fixture may be torn down on a worker after its last user there, and why."""

    fixture: str
    release: bool
    reason: str


def release_verdict(fx: FixtureCost, setting: ReleaseSetting = True,
                    rules: GroupingRules = DEFAULT_RULES) -> ReleaseVerdict:
    """May ``fx`` be released early? Pure: the history's numbers and the setting decide.

    Only what holds something worth returning: processes, or memory at the grouping
    rule's threshold (a slow setup alone gains nothing from a teardown). Never an
    autouse fixture: pytest declined early teardown as a default (pytest PR #10771)
    because autouse session fixtures (pytest-qt's ``app``) and fixtures that change
    global state must live until the session ends; autouse is the one such sign the
    history can see. Whether a later unit on the worker still needs it is the
    scheduler's question, not this one.
    """
    def no(why: str) -> ReleaseVerdict:
        return ReleaseVerdict(fx.name, False, why)

    if setting is False:
        return no("release_fixtures = false")
    if setting is not True and fx.name not in setting:
        return no("not named in release_fixtures")
    if fx.scope == kept.SCOPE:
        return no("processes tests started and left running: no fixture's teardown ends them")
    if fx.scope not in RELEASABLE_SCOPES:
        return no(f"{fx.scope} scope: pytest ends it with its {fx.scope} anyway")
    if fx.autouse:
        return no("autouse: it may set up state every test relies on (pytest PR #10771)")
    held = []
    if fx.procs >= rules.procs:
        held.append(f"{fx.procs} process{'es' if fx.procs != 1 else ''}")
    if fx.mb >= rules.mb:
        held.append(f"{fx.mb:.0f} MiB")
    if not held:
        return no(f"cheap: {fx.procs} processes, {fx.mb:.0f} MiB (below {rules.procs} / {rules.mb:.0f} MiB)")
    return ReleaseVerdict(fx.name, True, "holds " + " and ".join(held))


def release_verdicts(costs: CostModel, rules: GroupingRules = DEFAULT_RULES) -> dict[str, ReleaseVerdict]:
    """``release_verdict`` for every fixture of a cost model, under its own setting."""
    return {fx.name: release_verdict(fx, costs.release, rules) for fx in costs.fixtures}


@dataclass(frozen=True)
class WorkerCost:
    """Fixed cost of one more xdist worker: interpreter start, conftest import, collection."""

    startup_s: float
    baseline_mb: float
    # what it keeps over its first files whatever they are (caches, lazy imports): every
    # worker pays it again (``costs._warm_up``)
    warmup_mb: float = 0.0

    @property
    def planned_mb(self) -> float:
        """A worker as plans count it before its files' own memory: its baseline, warmed up."""
        return self.baseline_mb + self.warmup_mb


@dataclass(frozen=True)
class OrderConstraint:
    """Learned, not declared: ``first`` must run before ``second`` on the same worker.

    A provider's file comes before its consumer's; a victim's file before its polluter's
    (the polluter's state then never reaches it). Honoured exactly as a declared group.
    Both tests in one file: ``first == second``, the file kept whole (a group of one).
    """

    first: str  # file
    second: str  # file
    kind: str  # "provider" or "polluter"
    test: str  # the test whose outcome the order flips
    culprit: str
    evidence: str = ""

    def explain(self) -> str:
        what = ("provides the state it needs" if self.kind == "provider" else "pollutes it")
        if self.first == self.second:
            return (f"{self.first} whole on one worker, never split: {self.culprit} {what} "
                    f"({self.test}: {self.evidence})")
        return (f"{self.first} before {self.second}, one worker: {self.culprit} {what} "
                f"({self.test}: {self.evidence})")


@dataclass(frozen=True)
class CostModel:
    """Everything the planner knows, derived from the history (see ``plan.costs``)."""

    files: tuple[FileCost, ...]
    fixtures: tuple[FixtureCost, ...] = ()
    worker: WorkerCost = WorkerCost(startup_s=1.0, baseline_mb=100.0)
    serial_peak_mb: float | None = None  # peak of the whole tree in a serial run, if one was measured
    # no serial run among the runs used: each file's time is as runs with workers measured it,
    # their contention included and not to be told apart (a plan's wall is no floor then)
    times_from_workers: bool = False
    runs_used: int = 0  # how many recorded runs fed this model (0: defaults only)
    # measured on this machine: worker count -> a file's time against a serial run, and
    # worker count -> one worker's startup when that many start together
    slowdown: Mapping[int, float] = field(default_factory=dict)
    run_slowdown: Mapping[int, float] = field(default_factory=dict)  # each run's own figure
    # counts in ``slowdown`` that only a profile's calibration measured (no whole run yet)
    slowdown_unconfirmed: frozenset[int] = frozenset()
    # calibration run -> (seconds, tests): its tests' first uses, left out of its slowdown
    first_uses: Mapping[int, tuple[float, int]] = field(default_factory=dict)
    # calibration run -> (seconds, tests): its serial reference's stalls (of the same tests),
    # left out of the reference
    reference_stalls: Mapping[int, tuple[float, int]] = field(default_factory=dict)
    startup_by_workers: Mapping[int, float] = field(default_factory=dict)
    # of a worker's start-up, the share its collection takes (median over recorded workers);
    # None: not recorded
    collect_fraction: float | None = None
    # what a worker's own memory grew by while it collected (median MiB; None: not recorded):
    # part of its baseline
    collect_mb: float | None = None
    # a run of part of the suite (``costs.restrict``): its files' share of the suite's tests.
    # It collects only those and ends after tearing down only those: the planner scales the
    # measured collection and end by it
    selected_share: float = 1.0
    # xdist's controller before it starts its workers: a serial startup less its collection
    controller_s: float | None = None
    # worker count -> what past `suitefit run` commands took outside their tests' span
    # (suitefit's own start, the processes' start-up, pytest's and xdist's end): measured
    outside_by_workers: Mapping[int, float] = field(default_factory=dict)
    # a serial command's end after its last test (summary, plugins' unconfigure, the exit)
    serial_end_s: float | None = None
    # what xdist's controller repeats of that end after its workers' ends: a serial run's
    # unconfigure hooks (plugins', conftests'), which every pytest process runs; the rest (the
    # collected heap's collections and teardown) is its workers' alone. None: not recorded
    # (runs before 2026-12): the whole serial end again
    controller_end_s: float | None = None
    sampler_mb: float = 0.0  # suitefit's sampler process, measured: a runner's limit counts it too
    # xdist's controller at its peak (it keeps every report), measured; None: not yet
    controller_mb: float | None = None
    # until a run of the whole suite with workers measured it: from a run of part of the suite,
    # the controller's MiB at its first worker's collection and what it grew by a test since
    # (``costs._process_peaks``); its peak is planned at that for the tests planned
    controller_growth: tuple[float, float] | None = None
    # xdist's controller's own CPU seconds a test (it takes in every report on one interpreter),
    # measured in runs with workers; None: not yet. No count of workers runs the suite faster
    # than this times its tests
    controller_per_test_s: float | None = None
    # page faulting: the least system CPU a MiB of its worker's own growth cost any file in a
    # recorded run (``costs.fault_cost``); None: no file grew its worker enough, or none recorded it
    fault_s_per_mb: float | None = None
    fault_source: str = ""  # the file and run it was measured on
    # recent planned runs, newest first: measured peak / predicted peak - 1 (> 0: under-predicted)
    peak_errors: tuple[float, ...] = ()
    # the same for the whole command's wall: measured / predicted - 1 (> 0: it took longer)
    wall_errors: tuple[float, ...] = ()
    headroom: float | None = None  # [tool.suitefit] memory_headroom; None: from peak_errors
    declared_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # [tool.suitefit] groups
    release: bool | tuple[str, ...] = False  # early fixture release: off, on, or these names
    notes: tuple[str, ...] = ()  # defaults taken and why
    # Learned order constraints, already merged into ``declared_groups`` (kept for display)
    constraints: tuple[OrderConstraint, ...] = ()
    # one line each: what of the declared groups (a file not there) and the learned constraints
    # (stale, contradicting) the plan leaves out
    left_out: tuple[str, ...] = ()

    @property
    def controller_peak_mb(self) -> float:
        """xdist's controller as plans count it: its largest measured peak in a run of the whole
        suite; from a run of part of it, its growth a test times the tests planned; else one
        worker's baseline."""
        if self.controller_growth is not None:
            start, per_test = self.controller_growth
            measured = [f.tests for f in self.files if f.measured]
            mean = sum(measured) / len(measured) if measured else 0.0  # a file never run: as the others
            return start + per_test * sum(f.tests if f.measured else mean for f in self.files)
        return self.worker.baseline_mb if self.controller_mb is None else self.controller_mb

    @property
    def controller_scaled(self) -> bool:
        """Whether the controller is planned from a run of part of the suite, per test."""
        return self.controller_growth is not None

    @property
    def contention_measured(self) -> bool:
        """Whether a run with workers measured how much they slow each other here."""
        return any(n >= 2 for n in self.slowdown)

@dataclass(frozen=True)
class Budget:
    """What the runner can give: memory in MiB and CPUs; ``workers`` pins the count."""

    memory_mb: float
    cpus: int
    workers: int | None = None
    memory_source: str = ""  # e.g. "cgroup v2 memory.max 8.00 GiB minus 10% margin"
    cpus_source: str = ""


@dataclass(frozen=True)
class Unit:
    """Files that go to one worker together, in this order. A group is never split; a plain
    file's tail may move to a free worker at the run's end (``piece_setup_s``)."""

    name: str
    files: tuple[str, ...]
    wall_s: float  # predicted
    peak_mb: float  # predicted peak above the worker baseline, fixture memory included
    fixtures: tuple[str, ...] = ()
    reason: str = ""
    last_s: float = 0.0  # predicted duration of its last test (xdist holds it until a next unit)
    chunk: tuple[int, int] | None = None  # (k, n): only the k-th of n slices of its one file's tests
    kept_mb: float = 0.0  # what its worker still holds after it (its files' kept_mb; signed)
    # a chunk's slice as fractions of its file's collected tests, cut where the history puts
    # equal shares of the file's time; None: the k-th of n slices of equal count
    span: tuple[float, float] | None = None
    # None: never split at run time (a group, a fixture's users, tests given back); else a
    # plain file (or a chunk of one) whose tail may move to a free worker, paying this much
    # again there (its module/class fixtures' setup, as measured)
    piece_setup_s: float | None = None
    tests: int = 0  # its tests, as the history counted them (0: not known)
    # of peak_mb, the forks its file started when measured, how many, and its worker's own RSS
    # when the file began (``FileCost.forks``): on a larger worker each is larger (``peak_at``)
    fork_mb: float = 0.0
    forks: int = 0
    fork_of_mb: float = 0.0

    def peak_at(self, worker_mb: float) -> float:
        """Its peak above the baseline on a worker whose own process holds ``worker_mb``: each
        fork maps what the worker has grown since (pytest's ``test_local.py``, two forks,
        read +182 MiB on a 94 MiB worker, +271 on a 146 MiB one); never less than the peak
        without its forks."""
        if self.forks <= 0:
            return self.peak_mb
        return max(self.peak_mb - self.fork_mb, self.peak_mb + self.forks * (worker_mb - self.fork_of_mb))


@dataclass(frozen=True)
class Plan:
    """A decision: how many workers, which units in which order, what to expect, and why."""

    workers: int
    units: tuple[Unit, ...]  # dispatch order
    budget: Budget
    predicted_wall_s: float
    predicted_peak_mb: float
    reasons: tuple[str, ...]
    placement: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # predicted worker -> unit names
    shard: tuple[int, int] | None = None  # (k, n), 1-based k
    warnings: tuple[str, ...] = ()
    # session/package fixtures the units name: what stays resident on a worker once set up
    fixtures: tuple[FixtureCost, ...] = ()
    # what the scheduling core was given when it made the prediction; `suitefit run` gives
    # it the same, so the run decides with the plan's own inputs
    baseline_mb: float = 0.0  # one worker's baseline
    fixed_mb: float = 0.0  # memory outside the workers (xdist's controller)
    slow: float = 1.0  # every duration's stretch on this many workers
    releasable: tuple[str, ...] = ()  # fixtures the core may release after their last user
    overhead_s: float = 0.0  # the measured fixed overhead included in predicted_wall_s
    measured: Measured | None = None  # how much of it rests on measurements (None: not said)
    headroom_mb: float = 0.0  # kept free under the budget for the peak's prediction error
    # a soft ceiling: the core prefers an order that keeps the tree under it (never waits for
    # it); set when the prediction shows it lowers the peak at no cost in wall time
    spread_mb: float | None = None
    # seconds of page faulting a MiB of new memory costs on this machine (measured): units
    # that touch much memory at once on different workers wait for each other's faults
    # (``simulate``); None: not measured, not modelled
    fault_s_per_mb: float | None = None

    @property
    def admit_mb(self) -> float | None:
        """What the scheduling core admits units against: the budget less the headroom."""
        return self.budget.memory_mb - self.headroom_mb if self.budget.memory_mb else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["units"] = [asdict(u) for u in self.units]
        d["placement"] = {k: list(v) for k, v in self.placement.items()}
        d["fixtures"] = [asdict(f) for f in self.fixtures]
        d["measured"] = asdict(self.measured) if self.measured is not None else None
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Plan:
        units = tuple(
            Unit(
                name=u["name"],
                files=tuple(u["files"]),
                wall_s=float(u["wall_s"]),
                peak_mb=float(u["peak_mb"]),
                fixtures=tuple(u.get("fixtures", ())),
                reason=u.get("reason", ""),
                last_s=float(u.get("last_s", 0.0)),
                chunk=(int(u["chunk"][0]), int(u["chunk"][1])) if u.get("chunk") else None,
                kept_mb=float(u.get("kept_mb", 0.0)),
                span=(float(u["span"][0]), float(u["span"][1])) if u.get("span") else None,
                piece_setup_s=None if u.get("piece_setup_s") is None else float(u["piece_setup_s"]),
                tests=int(u.get("tests", 0)),
                fork_mb=float(u.get("fork_mb", 0.0)),
                forks=int(u.get("forks", 0)),
                fork_of_mb=float(u.get("fork_of_mb", 0.0)),
            )
            for u in d["units"]
        )
        b = d["budget"]
        budget = Budget(
            memory_mb=float(b["memory_mb"]),
            cpus=int(b["cpus"]),
            workers=b.get("workers"),
            memory_source=b.get("memory_source", ""),
            cpus_source=b.get("cpus_source", ""),
        )
        shard = d.get("shard")
        return cls(
            workers=int(d["workers"]),
            units=units,
            budget=budget,
            predicted_wall_s=float(d["predicted_wall_s"]),
            predicted_peak_mb=float(d["predicted_peak_mb"]),
            reasons=tuple(d.get("reasons", ())),
            placement={k: tuple(v) for k, v in d.get("placement", {}).items()},
            shard=(int(shard[0]), int(shard[1])) if shard else None,
            warnings=tuple(d.get("warnings", ())),
            baseline_mb=float(d.get("baseline_mb", 0.0)),
            fixed_mb=float(d.get("fixed_mb", 0.0)),
            slow=float(d.get("slow", 1.0)),
            releasable=tuple(d.get("releasable", ())),
            overhead_s=float(d.get("overhead_s", 0.0)),
            headroom_mb=float(d.get("headroom_mb", 0.0)),
            spread_mb=float(d["spread_mb"]) if d.get("spread_mb") is not None else None,
            fault_s_per_mb=float(d["fault_s_per_mb"]) if d.get("fault_s_per_mb") is not None else None,
            fixtures=tuple(
                FixtureCost(
                    name=f["name"],
                    scope=f["scope"],
                    setup_s=float(f["setup_s"]),
                    teardown_s=float(f.get("teardown_s", 0.0)),
                    procs=int(f.get("procs", 0)),
                    mb=float(f.get("mb", 0.0)),
                    files=tuple(f.get("files", ())),
                    autouse=bool(f.get("autouse", False)),
                )
                for f in d.get("fixtures", ())
            ),
            measured=Measured.from_json(d["measured"]) if d.get("measured") else None,
        )


@dataclass(frozen=True)
class Measured:
    """How much of a plan rests on measurements; the rest is files at a stated default cost.

    Said wherever a prediction is shown, so a first plan's guess is never read as a
    forecast. ``work`` is the plan's predicted file time (the sum of its files' walls).
    """

    files: int  # planned files with a measured cost
    planned: int  # planned files
    measured_s: float  # predicted work of the measured files
    work_s: float  # predicted work of all planned files
    runs: int = 0  # recorded runs the measurements come from
    # the plan runs workers side by side and no run with workers has measured how much they
    # slow each other on this machine: its wall is a floor (scipy.sparse: 138 s for 213 s)
    contention_unknown: bool = False
    # planned files measured only in runs that selected some of their tests (``-k``, ``-m``):
    # a run that selects part of them alike runs what the plan predicted
    partial: tuple[str, ...] = ()

    @classmethod
    def of(cls, plan: Plan, costs: CostModel) -> Measured:
        by_path = {fc.path: fc for fc in costs.files}
        files = list(dict.fromkeys(f for u in plan.units for f in u.files))  # a chunked file once
        known = [by_path[f] for f in files if f in by_path and by_path[f].measured]
        work = sum(by_path[f].wall_s for f in files if f in by_path)
        return cls(files=len(known), planned=len(files), measured_s=sum(fc.wall_s for fc in known),
                   work_s=work, runs=costs.runs_used,
                   contention_unknown=(plan.workers >= 2 and not costs.contention_measured
                                       and not costs.times_from_workers),
                   partial=tuple(fc.path for fc in known if not fc.whole))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Measured:
        return cls(files=int(d["files"]), planned=int(d["planned"]), measured_s=float(d["measured_s"]),
                   work_s=float(d["work_s"]), runs=int(d.get("runs", 0)),
                   contention_unknown=bool(d.get("contention_unknown", False)),
                   partial=tuple(str(f) for f in d.get("partial", ())))

    @property
    def share(self) -> float:
        """The measured share of the predicted work (by files when there is no work at all)."""
        if self.work_s > 0:
            return self.measured_s / self.work_s
        return self.files / self.planned if self.planned else 0.0

    @property
    def nothing(self) -> bool:
        return self.files == 0

    @property
    def complete(self) -> bool:
        return self.files == self.planned

    def words(self) -> str:
        """E.g. "nothing measured yet: every file at a default cost", "12/40 files measured, 63% of the work"."""
        if self.nothing:
            return f"nothing measured yet: all {self.planned} file(s) at a default cost"
        if self.complete:
            return f"all {self.planned} file(s) measured"
        return (f"{self.files}/{self.planned} files measured, {self.share:.0%} of the predicted work; "
                f"the rest at a default cost")


def predicted(plan: Plan, what: str, value: str) -> str:
    """A prediction as the user should read it: "predicted wall 29.0 s", or "guessed ..." without
    measurements, or a wall that assumes workers do not slow each other where none was measured."""
    m = plan.measured
    if m is not None and m.nothing:
        return f"guessed {what} {value} (nothing measured yet)"
    if m is not None and m.contention_unknown and what == "wall":
        return f"predicted {what} {value} ({CONTENTION_UNKNOWN})"
    return f"predicted {what} {value}"


CONTENTION_UNKNOWN = "if workers do not slow each other: no run with workers measured yet"
