"""Bisection to the one earlier test that flips TEST's outcome: its polluter or provider.

The prefix is what ran before TEST in the same worker process of a recorded run
(tests.worker, tests.seq). ``find_culprit`` is pure: it is handed an oracle
("does TEST flip after these tests, run in this order?") and halves the candidates
until one is left, preferring splits at file boundaries (file level first, then
test level) whenever that costs no extra step. Its step count never exceeds
ceil(log2 n); with the run of TEST alone and at most one confirming run, a
bisection takes at most ceil(log2 n) + 2 pytest runs.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suitefit.diagnose.procs import run_measured
from suitefit.diagnose.pytest_runs import (
    TestOutcome,
    is_ok,
    reproducer,
    run_pytest,
    single_process_args,
)
from suitefit.errors import SuitefitError
from suitefit.history import History

SKIP_KINDS = ("sweep",)  # runs of one file alone have no prefix worth replaying


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def choose_split(cands: Sequence[str], steps_left: int, file_of: Callable[[str], str] = _file) -> int:
    """Where to cut ``cands`` in two: the file boundary nearest the middle whose larger side
    still fits in ``2 ** (steps_left - 1)``, else the exact middle."""
    n = len(cands)
    cap = 2 ** max(0, steps_left - 1)
    best: int | None = None
    for k in range(1, n):
        at_boundary = file_of(cands[k - 1]) != file_of(cands[k]) and max(k, n - k) <= cap
        if at_boundary and (best is None or abs(2 * k - n) < abs(2 * best - n)):
            best = k
    return best if best is not None else (n + 1) // 2


@dataclass
class Search:
    """The trace of one bisection."""

    culprit: str | None
    confirmed: bool  # the oracle saw the culprit alone flip TEST
    steps: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)  # (subset run, flipped)


def find_culprit(prefix: Sequence[str], flips: Callable[[Sequence[str]], bool],
                 file_of: Callable[[str], str] = _file) -> Search:
    """Halve ``prefix`` (kept in order) until one test is left that, run before TEST, flips it.

    Assumes one culprit; the caller confirms the answer when the last step did not
    already observe it.
    """
    cands = list(prefix)
    if not cands:
        return Search(None, False)
    steps_left = math.ceil(math.log2(len(cands))) if len(cands) > 1 else 0
    search = Search(None, False)
    confirmed = False
    while len(cands) > 1:
        k = choose_split(cands, steps_left, file_of)
        left, right = cands[:k], cands[k:]
        flipped = flips(left)
        search.steps.append((tuple(left), flipped))
        steps_left -= 1
        cands, confirmed = (left, True) if flipped else (right, False)
    search.culprit = cands[0]
    search.confirmed = confirmed
    return search


@dataclass
class BisectResult:
    test: str
    run_id: int
    worker: str
    suite_outcome: str
    alone_outcome: str
    prefix_len: int
    culprit: str | None
    role: str  # "polluter" or "provider"
    pytest_runs: int
    command: str
    message: str
    trace: list[tuple[int, bool]] = field(default_factory=list)  # (subset size, flipped) per step

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in (
            "test", "run_id", "worker", "suite_outcome", "alone_outcome", "prefix_len", "culprit",
            "role", "pytest_runs", "command", "message", "trace")}


def collects(nodeid: str, cwd: Path, pytest_args: Sequence[str]) -> bool:
    """Does pytest know this test id? (Asked only on the error path.)"""
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", *single_process_args(),
            *pytest_args, nodeid]
    return run_measured(argv, cwd=cwd).exit_code == 0


def _candidate_runs(history: History, nodeid: str, run_id: int | None, cwd: Path,
                    pytest_args: Sequence[str]) -> list[tuple[int, str]]:
    """(run id, TEST's outcome there) of the recorded runs to replay, newest first."""
    if run_id is not None:
        history.run(run_id)  # a clear error when the history lacks it
        rows = history.execute("SELECT run_id, outcome FROM tests WHERE run_id = ? AND nodeid = ?",
                               [run_id, nodeid])
        if not rows:
            raise SuitefitError(f"test {nodeid} did not run in run {run_id} of history {history.path}")
        return [(int(rows[0][0]), str(rows[0][1]))]
    kinds = ", ".join("?" * len(SKIP_KINDS))
    rows = history.execute(
        f"SELECT t.run_id, t.outcome FROM tests t JOIN runs r ON r.id = t.run_id WHERE t.nodeid = ? "
        f"AND r.kind NOT IN ({kinds}) AND r.status != 'running' ORDER BY t.run_id DESC",
        [nodeid, *SKIP_KINDS])
    if not rows:
        if not collects(nodeid, cwd, pytest_args):
            raise SuitefitError(f"unknown test {nodeid}: pytest collects no such test in {cwd}")
        raise SuitefitError(f"test {nodeid} never ran in a recorded suite run of {history.path}: "
                            "record one with `suitefit profile` or `suitefit sweep`")
    return [(int(r), str(o)) for r, o in rows]


def check_known(nodeid: str, cwd: Path, pytest_args: Sequence[str]) -> None:
    """An unknown test id is a clear error, not a bisection of nothing."""
    if "::" not in nodeid:
        raise SuitefitError(f"{nodeid!r} is not a test id (expected path/to/test_file.py::test_name)")
    if not (cwd / _file(nodeid)).exists():
        raise SuitefitError(f"unknown test {nodeid}: no file {_file(nodeid)} under {cwd}")


class Replayer:
    """Runs TEST after a given list of tests in one fresh pytest, counting every run.

    Shared by ``suitefit bisect`` and the diagnosis of ``suitefit run --explain-failures``.
    A run that did not keep the given order is an error: its answer would mean nothing.
    """

    def __init__(self, nodeid: str, cwd: Path, pytest_args: Sequence[str] = (),
                 timeout_s: float | None = None, progress: Callable[[str], None] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.nodeid = nodeid
        self.env = env
        self.cwd = cwd
        self.pytest_args = list(pytest_args)
        self.timeout_s = timeout_s
        self.progress = progress
        self.runs = 0

    def outcome(self, subset: Sequence[str]) -> str:
        nodeid = self.nodeid
        self.runs += 1
        res = run_pytest([*self.pytest_args, *subset, nodeid], cwd=self.cwd, timeout_s=self.timeout_s,
                         env=self.env)
        got = res.outcome_of(nodeid)
        if got is None and any(_file(nodeid).startswith(c.split("::", 1)[0]) for c in res.collect_errors):
            got = "error"  # its file did not import in this order: a failure like any other
            res.tests.append(TestOutcome(nodeid, _file(nodeid), got, "main", len(res.tests), 0.0, 0.0))
        if got is None:
            if res.collect_errors or res.exit_code == 5:
                raise SuitefitError(f"unknown test {nodeid}: pytest does not collect it in {self.cwd}")
            raise SuitefitError(f"pytest did not report {nodeid} (exit {res.exit_code})", 3)
        expected = [*subset, nodeid]
        if res.order != expected:
            raise SuitefitError(f"pytest ran the tests in another order than given ({res.order[:3]}...): "
                                "a plugin reorders them; disable it in PYTEST ARGS", 3)
        if self.progress:
            self.progress(f"run {self.runs}: {len(subset)} test(s) before it -> {got}")
        return got


def bisect(history: History, nodeid: str, *, cwd: Path, run_id: int | None = None,
           pytest_args: Sequence[str] = (), timeout_s: float | None = None,
           progress: Callable[[str], None] | None = None) -> BisectResult:
    """Find the earlier test that flips ``nodeid``'s outcome, counting every pytest run."""
    check_known(nodeid, cwd, pytest_args)
    candidates = _candidate_runs(history, nodeid, run_id, cwd, pytest_args)
    replay = Replayer(nodeid, cwd, pytest_args, timeout_s, progress)

    def outcome(subset: Sequence[str]) -> str:
        return replay.outcome(subset)

    alone = outcome([])
    # Replay the newest recorded run in which TEST's outcome differs from its outcome alone.
    differs = [(rid, o) for rid, o in candidates if is_ok(o) != is_ok(alone)]
    if not differs:
        where = f"run {candidates[0][0]}" if run_id is not None else f"all {len(candidates)} recorded run(s)"
        raise SuitefitError(f"{nodeid} is {alone} alone and {candidates[0][1]} in {where} that ran it: "
                            "no order to blame; nothing to bisect", 1)
    run = history.run(differs[0][0])
    test = next(t for t in history.tests(run.id) if t.nodeid == nodeid)
    prefix_rows = [t for t in history.tests(run.id) if t.worker == test.worker and t.seq < test.seq]
    prefix_rows.sort(key=lambda t: t.seq)
    prefix = [t.nodeid for t in prefix_rows]
    suite = test.outcome
    if not prefix:
        raise SuitefitError(f"{nodeid} is {suite} in run {run.id} but ran first in its worker "
                            f"({test.worker}): nothing ran before it to bisect", 1)
    role = "polluter" if not is_ok(suite) else "provider"
    base = dict(test=nodeid, run_id=run.id, worker=test.worker, suite_outcome=suite,
                alone_outcome=alone, prefix_len=len(prefix), role=role)

    def flips(subset: Sequence[str]) -> bool:
        return is_ok(outcome(subset)) == is_ok(suite)

    search = find_culprit(prefix, flips)
    trace = [(len(s), f) for s, f in search.steps]
    culprit = search.culprit
    assert culprit is not None
    if not search.confirmed and not flips([culprit]):
        if not flips(prefix):
            return BisectResult(**base, culprit=None, pytest_runs=replay.runs, trace=trace,  # type: ignore[arg-type]
                                command=reproducer([*prefix, nodeid], pytest_args),
                                message=f"the {len(prefix)} tests before it in {test.worker} do not "
                                        f"make it {suite} again: the cause is outside that process "
                                        "(another worker, files, network) or it is flaky")
        return BisectResult(**base, culprit=None, pytest_runs=replay.runs, trace=trace,  # type: ignore[arg-type]
                            command=reproducer([*prefix, nodeid], pytest_args),
                            message="no single earlier test flips it; it needs several together "
                                    "(the full prefix reproduces it)")
    verb = "pollutes it" if role == "polluter" else "provides the state it needs"
    return BisectResult(**base, culprit=culprit, pytest_runs=replay.runs, trace=trace,  # type: ignore[arg-type]
                        command=reproducer([culprit, nodeid], pytest_args),
                        message=f"{culprit} {verb}: {nodeid} is {alone} alone and {suite} after it")
