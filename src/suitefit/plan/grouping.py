"""Fixture groups: which files must share a worker, and why.

A session (or package) fixture runs once per worker that uses it, so a pool used
by files spread over k workers costs k times its setup, processes and memory.
Files that share an *expensive* fixture therefore form one unit, or - when that
unit alone would set the wall time - the smallest number of parts that keeps it
off the critical path. User-declared groups are units exactly as declared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from suitefit import kept
from suitefit.errors import SuitefitError
from suitefit.model import DEFAULT_RULES, CostModel, FileCost, FixtureCost, GroupingRules, Unit
from suitefit.plan.constraints import LEARNED_PREFIX, XDIST_PREFIX
from suitefit.units import fmt_mb, fmt_s

# Fixtures that live until the worker ends (module/class scopes repeat per file anyway): the
# ones grouped by, and the processes tests leave running (suitefit.kept), resident but never
# grouped by.
GROUPED_SCOPES = frozenset({"session", "package"})
PERSISTENT_SCOPES = GROUPED_SCOPES | {kept.SCOPE}


# A group is split only when that saves more than this share of its predicted finish
# (like an extra worker in plan.workers): below run-to-run noise it only duplicates the pool.
SPLIT_PAYS_FRACTION = 0.02


@dataclass(frozen=True)
class FixtureGroup:
    """Files joined by expensive fixtures (connected: a file using two joins both)."""

    name: str
    files: tuple[str, ...]
    fixtures: tuple[str, ...]  # the expensive fixtures that joined them
    why: str


@dataclass(frozen=True)
class Groups:
    """The part of grouping that does not depend on the worker count."""

    declared: tuple[tuple[str, tuple[str, ...]], ...]  # (name, files) in declared order
    fixture_groups: tuple[FixtureGroup, ...]
    singles: tuple[str, ...]  # files in no group
    released: tuple[str, ...] = ()  # reasons for expensive fixtures not worth grouping


def expensive_why(fx: FixtureCost, rules: GroupingRules) -> str | None:
    """Why a fixture counts as expensive, or None when it does not."""
    if fx.scope not in GROUPED_SCOPES:
        return None
    parts = []
    if fx.procs >= rules.procs:
        parts.append(f"starts {fx.procs} process{'es' if fx.procs != 1 else ''}")
    if fx.mb >= rules.mb:
        parts.append(f"holds {fmt_mb(fx.mb)}")
    if fx.setup_s >= rules.setup_s:
        parts.append(f"{fmt_s(fx.setup_s)} setup")
    return ", ".join(parts) or None


def find_groups(costs: CostModel, file_costs: Mapping[str, FileCost],
                rules: GroupingRules = DEFAULT_RULES) -> Groups:
    """Declared groups first (as declared), then expensive-fixture components."""
    declared: list[tuple[str, tuple[str, ...]]] = []
    owner: dict[str, str] = {}
    for name, files in costs.declared_groups.items():
        seen: list[str] = []
        for f in files:
            if f in owner:
                raise SuitefitError(
                    f"[tool.suitefit] groups: {f} is in both group {owner[f]!r} and {name!r}"
                )
            owner[f] = name
            seen.append(f)
        if seen:
            declared.append((name, tuple(seen)))

    fixtures = {fx.name: fx for fx in costs.fixtures}
    why = {n: w for n, fx in fixtures.items() if (w := expensive_why(fx, rules))}
    # union-find over files joined by an expensive fixture
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    users: dict[str, list[str]] = {}
    for fc in file_costs.values():
        if fc.path in owner:
            continue
        for name in fc.fixtures:
            if name in why:
                users.setdefault(name, []).append(fc.path)
    for name in sorted(users):
        fx_users = users[name]
        if len(fx_users) < 2:
            continue
        for f in fx_users:
            parent.setdefault(f, f)
        r0 = root(fx_users[0])
        for f in fx_users[1:]:
            rf = root(f)
            if rf != r0:
                parent[rf] = r0
    comps: dict[str, list[str]] = {}
    for f in parent:
        comps.setdefault(root(f), []).append(f)
    groups: list[FixtureGroup] = []
    grouped: set[str] = set()
    for comp in comps.values():
        comp.sort()
        fset = set(comp)
        names = sorted(n for n, us in users.items() if len(us) >= 2 and fset.issuperset(us))
        groups.append(FixtureGroup(
            name="fixture:" + "+".join(names),
            files=tuple(comp),
            fixtures=tuple(names),
            why="; ".join(f"{n} ({why[n]})" for n in names),
        ))
        grouped.update(comp)
    groups.sort(key=lambda g: g.name)
    singles = tuple(sorted(f for f in file_costs if f not in owner and f not in grouped))
    return Groups(tuple(declared), tuple(groups), singles)


def make_unit(name: str, files: Sequence[str], file_costs: Mapping[str, FileCost],
              fixtures: Mapping[str, FixtureCost], reason: str) -> Unit:
    """A unit's predicted cost on a fresh worker: its files plus each persistent fixture once."""
    fx_names: set[str] = set()
    wall = 0.0
    own_peak = 0.0
    kept = 0.0
    tests = 0
    top: FileCost | None = None  # the file whose peak is the unit's
    forking: FileCost | None = None  # the file with the largest forks
    for f in files:
        fc = file_costs[f]
        wall += fc.wall_s
        tests += fc.tests
        kept += fc.kept_mb
        if top is None or fc.peak_mb > own_peak:
            own_peak, top = fc.peak_mb, fc
        if fc.forks > 0 and (forking is None or fc.fork_mb > forking.fork_mb):
            forking = fc
        fx_names.update(n for n in fc.fixtures if n in fixtures)
    names = tuple(sorted(fx_names))
    wall += sum(fixtures[n].setup_s for n in names)
    peak = own_peak + sum(fixtures[n].mb for n in names)
    last = file_costs[files[-1]] if files else None
    return Unit(name=name, files=tuple(files), wall_s=wall, peak_mb=peak, fixtures=names,
                reason=reason, last_s=_last_test_s(last) if last else 0.0, kept_mb=kept, tests=tests,
                # the forks grow with the worker; where another file holds the unit's peak, never
                # below it (no fork MiB to take off the floor)
                fork_mb=forking.fork_mb if forking is not None and forking is top else 0.0,
                forks=forking.forks if forking else 0, fork_of_mb=forking.fork_of_mb if forking else 0.0)


def _last_test_s(fc: FileCost) -> float:
    """How long a file's last test holds its worker: measured, else an even share."""
    if fc.last_s > 0:
        return min(fc.last_s, fc.wall_s)
    return fc.wall_s / fc.tests if fc.tests > 0 else 0.0


def lpt_parts(files: Sequence[str], walls: Mapping[str, float], m: int) -> list[list[str]]:
    """Longest-processing-time split of files into m parts (deterministic)."""
    parts: list[list[str]] = [[] for _ in range(m)]
    load = [0.0] * m
    for f in sorted(files, key=lambda f: (-walls[f], f)):
        i = min(range(m), key=lambda i: (load[i], i))
        parts[i].append(f)
        load[i] += walls[f]
    return [p for p in parts if p]


def best_parts(work: float, longest: float, setup: float, n_files: int, workers: int,
               lane_s: float) -> int:
    """How many parts a fixture group of ``work`` seconds should run as on ``workers`` workers.

    m parts finish no sooner than ``setup + max(work / m, longest)``; every part past the
    first adds ``setup`` to the suite's total work, spread over the workers. The smallest
    m whose predicted finish is within ``SPLIT_PAYS_FRACTION`` of the best keeps the group
    off the critical path cheapest: each extra part starts the fixture's processes and
    memory once more, which a saving below run-to-run noise does not pay for.
    """
    if workers <= 1 or setup + work <= lane_s:
        return 1
    finish = {m: max(setup + max(work / m, longest), lane_s + (m - 1) * setup / workers)
              for m in range(1, min(workers, n_files) + 1)}
    best_t = min(finish.values())
    return min(m for m, t in finish.items() if t <= best_t * (1 + SPLIT_PAYS_FRACTION) + 1e-9)


def build_units(groups: Groups, file_costs: Mapping[str, FileCost],
                fixtures: Mapping[str, FixtureCost], *, workers: int,
                lane_s: float, singles: list[Unit] | None = None,
                split: bool = True) -> tuple[list[Unit], list[str]]:
    """Units for ``workers`` workers whose ideal lane is ``lane_s``; returns units and reasons.

    A fixture group longer than the lane is split into the fewest parts (each paying
    the fixture again) that fit it; if that takes as many parts as there are workers,
    grouping saves nothing and its files run as single-file units. With ``split`` False
    every group stays whole (when the copies a split adds would not fit the memory budget).
    """
    units: list[Unit] = []
    reasons: list[str] = []
    walls = {f: fc.wall_s for f, fc in file_costs.items()}
    for name, files in groups.declared:
        if name.startswith(XDIST_PREFIX):
            why = (f"their tests are marked xdist_group({name.removeprefix(XDIST_PREFIX)!r}) "
                   f"({len(files)} file(s)): kept on one worker, as --dist loadgroup keeps them")
        else:
            what = "learned order group" if name.startswith(LEARNED_PREFIX) else "declared group"
            why = (f"{what} {name!r} ({files[0]}): kept whole on one worker, never split" if len(files) == 1
                   else f"{what} {name!r} ({len(files)} files): kept whole, in declared order")
        u = make_unit(f"group:{name}", files, file_costs, fixtures, why)
        if u.wall_s > lane_s and workers > 1:
            u = replace(u, reason=u.reason + f"; at {fmt_s(u.wall_s)} it is longer than the ideal lane "
                        f"{fmt_s(lane_s)} and sets the wall time")
        units.append(u)
    for g in groups.fixture_groups:
        setup = sum(fixtures[n].setup_s for n in g.fixtures)
        work = sum(walls[f] for f in g.files)
        m = best_parts(work, max(walls[f] for f in g.files), setup, len(g.files), workers, lane_s) if split else 1
        if m > 1 and (m >= workers or m >= len(g.files)):
            reasons.append(
                f"{g.name}: not grouped - its {len(g.files)} files ({fmt_s(work)}) would need "
                f"{m} of {workers} workers to stay off the critical path, which saves no "
                f"setup of {', '.join(g.fixtures)}"
            )
            for f in g.files:
                units.append(make_unit(f, (f,), file_costs, fixtures,
                                       f"single file (its group {g.name} spans every worker)"))
            continue
        if m == 1:
            units.append(make_unit(
                g.name, tuple(sorted(g.files, key=lambda f: (-walls[f], f))), file_costs, fixtures,
                f"fixture group: {len(g.files)} files share {g.why}; one worker sets it up once "
                f"instead of once per worker" + ("" if split else "; kept whole although it is longer "
                f"than the ideal lane {fmt_s(lane_s)}: split, its fixtures' copies would not fit the "
                f"memory budget"),
            ))
        else:
            parts = lpt_parts(g.files, walls, m)
            for i, p in enumerate(parts, 1):
                units.append(make_unit(
                    f"{g.name}[{i}/{len(parts)}]", tuple(p), file_costs, fixtures,
                    f"part {i}/{len(parts)} of fixture group ({len(g.files)} files share {g.why}): "
                    f"whole it would take {fmt_s(setup + work)} > ideal lane {fmt_s(lane_s)}, "
                    f"so {len(parts)} workers each set it up once",
                ))
    if singles is None:  # the same for every worker count: callers may pass them built once
        singles = single_units(groups, file_costs, fixtures)
    units.extend(singles)
    return units, reasons


def single_units(groups: Groups, file_costs: Mapping[str, FileCost],
                 fixtures: Mapping[str, FixtureCost]) -> list[Unit]:
    return [make_unit(f, (f,), file_costs, fixtures, "single file") for f in groups.singles]


def order_units(units: Iterable[Unit], declared_names: Sequence[str]) -> list[Unit]:
    """Longest first; declared groups keep their declared order among themselves."""
    ordered = sorted(units, key=lambda u: (-u.wall_s, u.name))
    if not declared_names:
        return ordered
    declared = set(declared_names)
    slots = [i for i, u in enumerate(ordered) if u.name in declared]
    by_name = {u.name: u for u in ordered if u.name in declared}
    in_order = [by_name[n] for n in declared_names if n in by_name]
    for i, u in zip(slots, in_order, strict=False):
        ordered[i] = u
    return ordered
