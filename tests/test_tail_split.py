"""A unit that runs long at the end moves its tail to a free worker (issue 12, item 5).

The core decides (``Split``) on how far the unit really is (``Core.progress``), the
simulation applies it at once, and the xdist adapter asks the worker for those tests back
(a steal, granted whole or not at all). Groups and units with an expensive session fixture
never split. The real run is watched in ``test_a_file_that_runs_long_in_the_run_*``.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from clihelp import suitefit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from venvs import OLDEST, make_venv

from suitefit.history import History
from suitefit.model import Budget, FixtureCost, Plan, Unit
from suitefit.plan.core import Core, Decision, Send, Shutdown, Split
from suitefit.plan.simulate import simulate
from suitefit.xdist_sched import SuitefitScheduling


def _file(name: str, wall: float, tests: int, **kw: object) -> Unit:
    return Unit(name, (name,), wall, 10.0, piece_setup_s=kw.pop("again", 0.0), tests=tests,  # type: ignore[arg-type]
                last_s=wall / tests, **kw)  # type: ignore[arg-type]


def _plan(units: list[Unit], workers: int = 2, fixtures: tuple[FixtureCost, ...] = ()) -> Plan:
    return Plan(workers=workers, units=tuple(units), budget=Budget(10_000, workers), predicted_wall_s=0,
                predicted_peak_mb=0, reasons=(), fixtures=fixtures)


def _start_both(core: Core, on_gw0: str, on_gw1: str) -> None:
    """Both workers up; each asks at 0 s and starts the unit it is expected to get."""
    for w in ("gw0", "gw1"):
        core.worker_up(w)
    for w, unit in (("gw0", on_gw0), ("gw1", on_gw1)):
        (d,) = core.want(w, 0.0)
        assert isinstance(d, Send) and d.unit.name == unit
        core.started(w, unit, 0.0)


def _gw1_free_beside_a_long_unit() -> tuple[Core, Decision]:
    """12 tests of 1 s on gw0, 2 s of work on gw1: gw1 asks at 2 s with nothing pending."""
    core = Core([_file("t/test_long.py", 12.0, 12), _file("t/test_a.py", 2.0, 4)], budget_mb=None,
                baseline_mb=0.0)
    _start_both(core, "t/test_long.py", "t/test_a.py")
    core.done("gw1", "t/test_a.py", 2.0)
    (d,) = core.want("gw1", 2.0)
    return core, d


# -- the core ------------------------------------------------------------------------------


def test_a_free_worker_takes_the_tail_of_a_long_unit_when_nothing_is_pending() -> None:
    core, d = _gw1_free_beside_a_long_unit()
    # 10 s of 1 s tests left on gw0: both end together at 7 s with 5 of them here
    assert isinstance(d, Split) and (d.source, d.unit, d.piece.tests) == ("gw0", "t/test_long.py", 5)
    assert d.piece.wall_s == pytest.approx(5.0) and "ends ~5.0 s sooner" in d.reason
    assert core.want("gw1", 2.1) == []  # it waits for the runner's answer
    (s,) = core.split_done(d, True, 2.1)
    assert isinstance(s, Send) and s.worker == "gw1" and s.unit.name == d.piece.name
    assert core._workers["gw0"].queue[0].end == pytest.approx(7.0)


def test_a_split_follows_how_far_the_unit_really_is_not_the_plan() -> None:
    # planned at 2 s, it has done 3 tests in 6 s and has 9 left: it runs long
    core = Core([_file("t/test_slow.py", 2.0, 12), _file("t/test_a.py", 1.0, 4)], budget_mb=None,
                baseline_mb=0.0)
    _start_both(core, "t/test_slow.py", "t/test_a.py")
    core.done("gw1", "t/test_a.py", 6.0)
    assert isinstance(core.want("gw1", 6.0)[0], Shutdown)  # the plan says it ended at 2 s
    core = Core([_file("t/test_slow.py", 2.0, 12), _file("t/test_a.py", 1.0, 4)], budget_mb=None,
                baseline_mb=0.0)
    _start_both(core, "t/test_slow.py", "t/test_a.py")
    core.done("gw1", "t/test_a.py", 6.0)
    core.progress("gw0", "t/test_slow.py", 3, 9, 6.0)
    (d,) = core.want("gw1", 6.0)
    assert isinstance(d, Split) and d.piece.tests == 4 and d.piece.wall_s == pytest.approx(8.0)


def test_a_unit_sent_to_a_worker_holding_its_last_test_can_still_split() -> None:
    # gw1 got test_s.py while it held test_b.py's last test; once test_s.py runs, gw1 is
    # not at a last test any more (the core took it for one, and never split what it ran)
    core = Core([_file("t/test_a.py", 3.0, 3), _file("t/test_b.py", 1.0, 3), _file("t/test_s.py", 0.5, 12)],
                budget_mb=None, baseline_mb=0.0)
    _start_both(core, "t/test_a.py", "t/test_b.py")
    (s,) = core.want("gw1", 0.9, holding=True)
    assert isinstance(s, Send) and s.unit.name == "t/test_s.py"
    core.done("gw1", "t/test_b.py", 1.0)
    core.done("gw0", "t/test_a.py", 3.0)
    core.progress("gw1", "t/test_s.py", 2, 10, 3.0)  # 1 s a test: 10 s left, not 0
    (d,) = core.want("gw0", 3.0)
    assert isinstance(d, Split) and d.source == "gw1" and d.piece.tests == 5


@pytest.mark.parametrize("budget, spread, splits", [(None, None, True), (1200.0, None, False),
                                                    (None, 1200.0, False)])
def test_a_hogs_tail_moves_only_where_two_of_it_fit(budget: float | None, spread: float | None,
                                                    splits: bool) -> None:
    # an 800 MiB file running on gw0: its tail on gw1 holds 800 MiB more at the same time
    hog = Unit("t/test_hog.py", ("t/test_hog.py",), 12.0, 800.0, piece_setup_s=0.0, tests=12, last_s=1.0)
    core = Core([hog, _file("t/test_a.py", 2.0, 4)], budget_mb=budget, baseline_mb=100.0, spread_mb=spread)
    _start_both(core, hog.name, "t/test_a.py")
    core.done("gw1", "t/test_a.py", 2.0)
    (d,) = core.want("gw1", 2.0)
    assert isinstance(d, Split if splits else Shutdown)


@pytest.mark.parametrize("unit", [
    Unit("group:pair", ("t/test_a.py", "t/test_b.py"), 12.0, 10.0, tests=12, last_s=1.0),  # a group
    Unit("fixture:pool", ("t/test_p.py",), 12.0, 10.0, ("pool",), tests=12, last_s=1.0),  # a pool's users
    Unit("t/test_p.py", ("t/test_p.py",), 12.0, 10.0, ("pool",), tests=12, last_s=1.0),  # no piece_setup_s
])
def test_groups_and_units_of_an_expensive_fixture_never_split(unit: Unit) -> None:
    pool = FixtureCost("pool", "session", 2.0, procs=3, mb=500.0)
    core = Core([unit, _file("t/test_c.py", 1.0, 4)], [pool], budget_mb=None, baseline_mb=0.0)
    _start_both(core, unit.name, "t/test_c.py")
    core.done("gw1", "t/test_c.py", 1.0)
    assert isinstance(core.want("gw1", 1.0)[0], Shutdown)


def test_a_tail_the_runner_could_not_take_is_not_asked_for_again() -> None:
    core, d = _gw1_free_beside_a_long_unit()
    assert isinstance(d, Split)
    (again,) = core.split_done(d, False, 2.0)
    assert isinstance(again, Shutdown)
    core.done("gw0", "t/test_long.py", 12.0)
    assert core.finished


# -- the simulation: the prediction makes the same split -----------------------------------


def test_the_prediction_splits_a_long_last_unit_as_the_run_would() -> None:
    units = [_file("t/test_a.py", 4.0, 4), _file("t/test_long.py", 6.0, 12), _file("t/test_b.py", 1.0, 4)]
    units.sort(key=lambda u: -u.wall_s)
    sim = simulate(_plan(units), startup_s=0.0, baseline_mb=0.0, budget_mb=None, slow=1.0, log=True)
    splits = [x.decision for x in sim.log if isinstance(x.decision, Split)]
    assert splits and splits[0].unit == "t/test_long.py"
    # 11 s of work on 2 workers: 5.5 s at best, the whole file alone on one worker 6 s
    assert sim.wall_s < 6.0
    assert sum(1 for w in sim.placement.values() for n in w if n.startswith("t/test_long.py")) >= 2
    # without tails that may move, it is the long pole
    whole = [Unit(u.name, u.files, u.wall_s, u.peak_mb, tests=u.tests, last_s=u.last_s) for u in units]
    assert simulate(_plan(whole), startup_s=0.0, baseline_mb=0.0, budget_mb=None, slow=1.0).wall_s \
        == pytest.approx(6.0)


# -- the real adapter, with stand-in xdist workers that grant steals as xdist's do --------


class StealingNode:
    """An xdist worker as the scheduler sees it: runs its first pending test once it knows
    the next; a steal is answered later, whole if every test asked is still queued behind
    the one it runs and the one it holds, else not at all (xdist 3.5+)."""

    def __init__(self, wid: str) -> None:
        self.gateway = SimpleNamespace(id=wid)
        self.sent: list[int] = []  # indices into its own collection
        self.queue: list[int] = []  # what it has still to run, in order
        self.collection: list[str] = []
        self.batches: list[list[int]] = []
        self.down = False
        self.steals: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.down, "tests sent after shutdown"
        self.sent.extend(indices)
        self.queue.extend(indices)
        self.batches.append(list(indices))

    def shutdown(self) -> None:
        self.down = True

    def send_steal(self, indices: list[int]) -> None:
        self.steals.append(list(indices))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 4), st.lists(st.tuples(st.floats(0.1, 20), st.integers(1, 15), st.booleans()),
                                    min_size=1, max_size=10), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_adapter_runs_every_test_once_with_tails_moving(workers: int, files: list[tuple[float, int, bool]],
                                                        class_size: int, seed: int) -> None:
    # Some files in test classes of ``class_size`` (chunks and tails are cut between them
    # where one is near: class_cuts), and every third file of 4 or more tests planned as two
    # chunks cut at a random share of its tests.
    rng = random.Random(seed)
    units = []
    for i, (wall, tests, divisible) in enumerate(files):
        name = f"t/test_{i}.py"
        if i % 3 == 2 and tests >= 4:
            f = rng.uniform(0.1, 0.9)
            for k, span in ((1, (0.0, f)), (2, (f, 1.0))):
                part = max(1, round((span[1] - span[0]) * tests))
                units.append(Unit(f"{name}[{k}/2]", (name,), wall / 2, 10.0, tests=part, last_s=wall / tests,
                                  chunk=(k, 2), span=span, piece_setup_s=0.0 if divisible else None))
            continue
        units.append(Unit(name, (name,), wall, 10.0, tests=tests, last_s=wall / tests,
                          piece_setup_s=0.0 if divisible else None))
    units.sort(key=lambda u: -u.wall_s)
    counts = {f"t/test_{i}.py": tests for i, (_, tests, _) in enumerate(files)}

    def nodeid(path: str, k: int) -> str:
        in_class = class_size and int(path[7:-3]) % 2
        return f"{path}::C{k // class_size}::t{k}" if in_class else f"{path}::t{k}"

    collection = [nodeid(path, k) for path in dict.fromkeys(u.files[0] for u in units) for k in range(counts[path])]
    sched = SuitefitScheduling(None, None, _plan(units, workers), numnodes=workers, live=lambda: (0.0, {}))
    nodes = [StealingNode(f"gw{i}") for i in range(workers)]
    shuffled: set[str] = set()
    for n in nodes:
        # some workers collect each file's tests the other way round, or all in any order (a
        # parametrisation over a set): they are sent, and give back, indices into their own
        n.collection = list(collection)
        kind = rng.random() if n is not nodes[0] else 1.0
        if kind < 0.3:
            n.collection = [t for path in counts for t in reversed([t for t in collection
                                                                     if t.startswith(path + "::")])]
        elif kind < 0.5:
            rng.shuffle(n.collection)
            shuffled.add(n.gateway.id)
        sched.add_node(n)
        sched.add_node_collection(n, n.collection)
    sched.schedule()
    ran: dict[str, str] = {}
    granted: Counter[str] = Counter()
    for _ in range(50_000):
        if sched.tests_finished:
            break
        for n in nodes:  # xdist removes a node that was shut down once it ran what it held
            if n.down and n in sched.node2pending and not sched.node2pending[n]:
                sched.remove_node(n)
        answers = [n for n in nodes if n.steals and n in sched.node2pending]
        if answers and rng.random() < 0.5:
            n = rng.choice(answers)
            asked = n.steals.pop(0)
            given_back = asked if set(asked) <= set(n.queue[2:]) else []
            n.queue = [k for k in n.queue if k not in given_back]
            granted.update(n.collection[k] for k in given_back)
            sched.remove_pending_tests_from_node(n, given_back)
            continue
        for n in nodes:
            assert n not in sched.node2pending or len(n.queue) == len(sched.node2pending[n])
        ready = [n for n in nodes if n in sched.node2pending and
                 (len(n.queue) >= 2 or (n.queue and n.down))]
        if not ready:
            assert answers, "deadlock: every node holds its last test, none shut down, no steal out"
            continue
        n = rng.choice(ready)
        k = n.queue.pop(0)
        assert n.collection[k] not in ran, f"{n.collection[k]} ran twice"
        ran[n.collection[k]] = n.gateway.id
        sched.mark_test_complete(n, k)
    assert sched.tests_finished
    for n in nodes:  # then xdist shuts every node down: each runs the test it held
        for k in list(n.queue):
            assert n.collection[k] not in ran, f"{n.collection[k]} ran twice"
            ran[n.collection[k]] = n.gateway.id
            sched.mark_test_complete(n, k)
    assert set(ran) == set(collection)
    sends = Counter(n.collection[k] for n in nodes for k in n.sent)
    assert all(sends[t] == 1 + granted[t] for t in sends)  # sent again only when given back
    by_file: dict[str, set[str]] = {}
    for t, w in ran.items():
        by_file.setdefault(t.split("::")[0], set()).add(w)
    for u in units:
        if u.piece_setup_s is None and u.chunk is None:
            assert len(by_file[u.files[0]]) == 1, f"{u.name} may not split: ran on {by_file[u.files[0]]}"
        # a file's tests go out in their worker's order, a tail as one contiguous run of them
        # (where no worker that ran part of it collected them in any order: its tail is
        # no run of anyone else's)
        if by_file[u.files[0]] & shuffled:
            continue
        for n in nodes:
            tests = [k for k, t in enumerate(n.collection) if t.startswith(u.files[0] + "::")]
            for b in n.batches:
                mine = [k for k in b if k in tests]
                assert mine == tests[tests.index(mine[0]):][:len(mine)] if mine else True


# -- a real run ------------------------------------------------------------------------------

SLOW = (
    "import os, time\n\nimport pytest\n\n\n"
    "@pytest.mark.parametrize('i', range(12))\n"
    "def test_slow(i):\n"
    "    time.sleep(float(os.environ.get('SLOW_S', '0.05')))\n"
)
SHORT = "import time\n\nimport pytest\n\n\n@pytest.mark.parametrize('i', range(3))\ndef test_s(i):\n    time.sleep(0.1)\n"


@pytest.mark.parametrize("versions", ["newest", "oldest"])
def test_a_file_that_runs_long_in_the_run_moves_its_tail_to_the_free_worker(tmp_path: Path, versions: str) -> None:
    # The profile has test_slow.py at 12 x 0.05 s; in the run each test takes 0.25 s (3 s).
    # The other worker runs the four short files (1.2 s), finds nothing pending, and takes
    # the last of test_slow.py's tests: xdist's steal, granted, run there; each test once.
    # On this venv's pytest and xdist, and on the oldest pair supported (xdist 3.5's steal).
    python = make_venv(OLDEST, with_suitefit=True) if versions == "oldest" else None
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "test_slow.py").write_text(SLOW)
    for k in range(4):
        (tmp_path / "tests" / f"test_short{k}.py").write_text(SHORT)
    assert suitefit("profile", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path, python=python).returncode == 0
    res = suitefit("run", "--workers", "2", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path,
                   env={"SLOW_S": "0.25"}, python=python)
    assert res.returncode == 0, res.stderr
    assert "24 passed" in res.stdout
    assert "tail moved: tests/test_slow.py runs ~" in res.stdout + res.stderr
    path = tmp_path / ".suitefit" / "history.sqlite"
    with History(path) as h:
        run = h.runs(limit=1)[0]
        rows = h.execute("SELECT worker, nodeid FROM tests WHERE run_id = ? AND file = 'tests/test_slow.py'",
                         [run.id])
        splits = h.events(run.id, "sched_split")
    assert len(rows) == 12 and len({n for _, n in rows}) == 12
    on = {w: sorted(int(n.split("[")[1].rstrip("]")) for w2, n in rows if w2 == w) for w in {w for w, _ in rows}}
    assert len(on) == 2, on  # it ran on both workers
    first, tail = sorted(on.values(), key=lambda v: v[0])
    assert first[0] == 0 and tail[0] > first[0]  # the tail, not its head
    assert splits and "tests/test_slow.py" in str(splits[0])
    if len(splits) == 1:  # one move: the file's last tests (on a loaded machine the worker
        assert tail[-1] == 11  # that ran the head may take the moved piece's own tail back)
