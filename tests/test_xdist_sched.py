"""The scheduler against xdist's protocol, driven event by event with stand-in workers.

The real-process tests (test_run_control.py) check where tests ran; this one pins a
sequence that real runs hit only sometimes: both workers end up holding a hog, and
xdist's end-of-run shutdown must not release them together.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from suitefit.model import Budget, Plan, Unit
from suitefit.xdist_sched import SuitefitScheduling

HOGS = [f"tests/test_h{i}.py" for i in (1, 2, 3)]
COLLECTION = [f"{f}::test_hog" for f in HOGS] + [f"tests/test_s.py::test_x[{i}]" for i in range(6)]


class Worker:
    """What the scheduler sees of an xdist WorkerController."""

    def __init__(self, wid: str) -> None:
        self.gateway = SimpleNamespace(id=wid)
        self.sent: list[int] = []
        self.down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.down = True


def test_held_hogs_are_released_one_at_a_time_at_the_end() -> None:
    plan = Plan(workers=2, units=(*(Unit(f, (f,), 1.0, 260.0) for f in HOGS),
                                  Unit("tests/test_s.py", ("tests/test_s.py",), 1.0, 5.0)),
                budget=Budget(600, 2), predicted_wall_s=1.0, predicted_peak_mb=0.0, reasons=())
    mem: dict[str, Any] = {"tree": 100.0, "workers": {"gw0": 30.0, "gw1": 30.0}}
    decisions: list[tuple[str, str, str]] = []
    sched = SuitefitScheduling(None, None, plan, numnodes=2, live=lambda: (mem["tree"], dict(mem["workers"])),
                               on_decision=lambda kind, w, unit, why: decisions.append((kind, w, unit)))
    gw0, gw1 = Worker("gw0"), Worker("gw1")
    for w in (gw0, gw1):
        sched.add_node(w)
        sched.add_node_collection(w, COLLECTION)
    sched.schedule()
    # gw0 takes h1 and queues h2 behind it (one test at a time); gw1 gets the small file
    assert gw0.sent == [0, 1] and gw1.sent == [3, 4, 5, 6, 7, 8]
    mem["tree"] = 350.0  # h1's memory still in the last sample
    sched.mark_test_complete(gw0, 0)  # gw0 now holds h2: it needs a next test to run it
    for i in (3, 4, 5, 6, 7):
        sched.mark_test_complete(gw1, i)
    # h3 went to gw1 to run alone (nothing was running); gw0 still holds h2
    assert 2 in gw1.sent and gw1.down and not gw0.down
    sched.mark_test_complete(gw1, 8)  # gw1 runs h3 now
    assert not gw0.down, "h2 released beside h3"
    assert not sched.tests_finished  # else xdist shuts gw0 down and releases h2 itself
    assert ("wait", "gw0", "tests/test_h2.py") in decisions
    mem["tree"] = 100.0
    sched.mark_test_complete(gw1, 2)  # h3 done: h2 may run now, alone
    assert gw0.down and sched.tests_finished
