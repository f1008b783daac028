"""A file's chunks and moved tails are cut between test classes, not inside one.

The pure cuts (``plan/class_cuts.py``), then the real xdist adapter with stand-in workers:
the chunks it sends and the tails it asks back. A real run is in ``test_chunks_run.py``.
"""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from suitefit.model import Budget, Plan, Unit
from suitefit.plan.class_cuts import (
    class_of,
    class_runs,
    inside_class,
    inside_runs,
    snap_cuts,
    tail_start,
)
from suitefit.plan.core import Split
from suitefit.xdist_sched import SuitefitScheduling


def test_the_class_of_a_test_is_read_from_its_node_id() -> None:
    assert class_of("t/test_a.py::TestA::test_x") == "t/test_a.py::TestA"
    assert class_of("t/test_a.py::TestA::TestInner::test_x[1]") == "t/test_a.py::TestA"  # the outermost
    assert class_of("t/test_a.py::test_x") is None
    assert class_of("t/test_a.py::test_x[a::b::c]") is None  # a parameter's id is not a class
    assert class_of("t/test_a.py::TestA::test_x[a::b]") == "t/test_a.py::TestA"
    assert class_of("t/test_[x].py::TestA::test_y") == "t/test_[x].py::TestA"  # brackets in a name
    assert class_of("t/test_[x].py::test_y") is None
    assert class_of("t/mod.py::mod.func") is None  # a doctest


def _layout(sizes: list[int]) -> list[str]:
    """Node ids: a class of each size, a size of 1 a module-level test."""
    out = []
    for c, size in enumerate(sizes):
        out += [f"t.py::test_{c}"] if size == 1 else [f"t.py::TestC{c}::test_{k}" for k in range(size)]
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 16), min_size=1, max_size=12), st.data())
def test_snapped_cuts_stay_in_order_and_snapping_them_again_moves_none(sizes: list[int],
                                                                      data: st.DataObject) -> None:
    # The plan snaps its cuts and the run snaps the plan's cuts again: the second must find
    # them in place (a fixed point), or the run would send other chunks than the plan priced.
    ids = _layout(sizes)
    n = len(ids)
    inside = inside_class(ids)
    inner = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    cuts = [0, *inner, n]
    out = snap_cuts(cuts, inside)
    assert out[0] == 0 and out[-1] == n and len(out) == len(cuts)
    assert all(a <= b for a, b in pairwise(out))  # the parts cover the file once
    if all(a < b for a, b in pairwise(cuts)):
        assert all(a < b for a, b in pairwise(out))  # and none that had tests is emptied
    assert snap_cuts(out, inside) == out
    for c, o in zip(cuts, out, strict=True):
        assert o == c or not inside(o)  # a cut moves only onto a boundary between classes
        if not inside(c):
            assert o == c


def test_a_cut_that_a_neighbours_move_lets_go_moves_in_the_same_snap() -> None:
    # Classes of 11, 16, 16, 4, 1 (a module-level test), 10, 13 and 11 tests. The cut at 25
    # moves to 27; that widens the part before it, and the cut at 14 (inside the second
    # class, 11-26), which could not reach 11 before, now can. One pass stopped at
    # [0, 14, 27, ...], and the run, snapping again, cut at 11: chunks other than the plan's.
    inside = inside_class(_layout([11, 16, 16, 4, 1, 10, 13, 11]))
    assert snap_cuts([0, 14, 25, 33, 34, 82], inside) == [0, 11, 27, 33, 34, 82]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 16), min_size=1, max_size=12), st.data())
def test_one_cut_moves_to_the_nearest_boundary_within_a_quarter_of_the_smaller_part(
        sizes: list[int], data: st.DataObject) -> None:
    ids = _layout(sizes)
    n = len(ids)
    if n < 2:
        return
    inside = inside_class(ids)
    c = data.draw(st.integers(1, n - 1))
    (out,) = snap_cuts([0, c, n], inside)[1:2]
    reach = max(1, min(c, n - c) // 4)
    near = [p for p in range(max(1, c - reach), min(n - 1, c + reach) + 1) if not inside(p)]
    if not inside(c):
        assert out == c
    elif near:  # the nearest clean position, the earlier among equals
        assert out == min(near, key=lambda p: (abs(p - c), p))
    else:
        assert out == c


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=12), st.data())
def test_a_moved_tail_starts_between_classes_where_one_is_near(sizes: list[int], data: st.DataObject) -> None:
    ids = _layout(sizes)
    inside = inside_class(ids)
    length = len(ids)
    asked = data.draw(st.integers(1, length))
    start = tail_start(asked, length, inside)
    assert 0 <= start < length  # at least one test moves
    asked_at = length - asked
    reach = max(1, asked // 4)
    near = [p for p in range(max(0, asked_at - reach), min(length - 1, asked_at + reach) + 1) if not inside(p)]
    if not inside(asked_at):
        assert start == asked_at
    elif near:
        assert not inside(start) and start == min(near, key=lambda p: (abs(p - asked_at), -p))
    else:
        assert start == asked_at


def test_a_cut_inside_a_class_too_long_to_go_around_stays() -> None:
    ids = _layout([40])  # one class: nowhere to move to
    assert snap_cuts([0, 20, 40], inside_class(ids)) == [0, 20, 40]
    ids = _layout([4, 4, 4, 4, 4])  # the first cut falls in the third class (8-11)
    assert snap_cuts([0, 10, 20], inside_class(ids)) == [0, 8, 20]


def test_a_files_classes_are_kept_as_runs_and_read_back_as_the_same_cuts() -> None:
    ids = [*_layout([1, 3, 1, 1, 4]), "t.py::TestOne::test_only"]  # a class of one test cuts nowhere
    assert class_runs(ids) == [(1, 4), (6, 10)]
    inside = inside_class(ids)
    runs = inside_runs([(a / len(ids), b / len(ids)) for a, b in class_runs(ids)], len(ids))
    assert [runs(p) for p in range(len(ids) + 1)] == [inside(p) for p in range(len(ids) + 1)]
    assert class_runs(_layout([2] * 600)) == []  # too many to keep: the run still snaps


# -- the real adapter ----------------------------------------------------------------------


class Node:
    def __init__(self, wid: str) -> None:
        self.gateway = SimpleNamespace(id=wid)
        self.sent: list[int] = []
        self.steals: list[list[int]] = []
        self.down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.down = True

    def send_steal(self, indices: list[int]) -> None:
        self.steals.append(list(indices))


def _plan(units: list[Unit]) -> Plan:
    return Plan(workers=2, units=tuple(units), budget=Budget(10_000, 2), predicted_wall_s=0,
                predicted_peak_mb=0, reasons=(), fixtures=())


def _adapter(units: list[Unit], collection: list[str]) -> tuple[SuitefitScheduling, list[Node]]:
    sched = SuitefitScheduling(None, None, _plan(units), numnodes=2, live=lambda: (0.0, {}))
    nodes = [Node("gw0"), Node("gw1")]
    for n in nodes:
        sched.add_node(n)
        sched.add_node_collection(n, collection)
    sched.schedule()
    return sched, nodes


def test_the_adapter_sends_a_files_chunks_cut_between_its_classes() -> None:
    # 5 classes of 4 tests, planned as two chunks at half their time: test 10 of 20 is inside
    # the third class; the chunks go out cut at 8, the nearest class boundary, and between
    # them they hold every test once. Cut by count alone, the third class would run on both.
    path = "t/test_long.py"
    ids = [f"{path}::TestC{c}::test_{k}" for c in range(5) for k in range(4)]
    chunks = [Unit(f"{path}[{k}/2]", (path,), 5.0, 10.0, chunk=(k, 2), span=span, tests=10)
              for k, span in ((1, (0.0, 0.5)), (2, (0.5, 1.0)))]
    _, nodes = _adapter(chunks, ids)
    held = {n.gateway.id: sorted(n.sent) for n in nodes}
    assert sorted(held.values()) == [list(range(0, 8)), list(range(8, 20))]


def test_the_adapter_asks_back_a_tail_that_starts_at_a_class_boundary() -> None:
    # One worker runs test_long.py and has 18 of its tests queued behind the two it runs and
    # holds; the core asks for the last 5 (test 15 of 20 is inside the fourth class, 12-15):
    # the steal asks for the last 4, the fifth class whole.
    path = "t/test_long.py"
    ids = [f"{path}::TestC{c}::test_{k}" for c in range(5) for k in range(4)]
    long = Unit(path, (path,), 20.0, 10.0, tests=20, last_s=1.0)  # the core splits it not by itself
    sched, nodes = _adapter([long], ids)
    src = next(n for n in nodes if n.sent)
    piece = Unit(f"{path}:tail1", (path,), 5.0, 10.0, tests=5, last_s=1.0)
    sched._steal_tail(Split("gw1" if src.gateway.id == "gw0" else "gw0", src.gateway.id, path, piece, "test"))
    assert src.steals == [[16, 17, 18, 19]]
