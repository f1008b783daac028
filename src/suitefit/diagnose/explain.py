"""New failures of a run: explained from the history, then (if asked) diagnosed and remembered.

A *new failure* is a test that failed in this run and passed in a recorded one. The
history knows, for both, the worker it ran on and what ran before it there
(``tests.worker``, ``tests.seq``); ``explain_lines`` says that in one line each.

``diagnose`` replays those orders in fresh pytest processes (``bisect.Replayer``):
TEST alone first; if it passes alone, the culprit is a *polluter* among what ran
before it in the failing order, else a *provider* among what ran before it in the
passing order. Tests that ran before it on its worker in a run where it passed
cannot be its polluter (and tests before it now cannot be its provider), so they
are left out before halving (``find_culprit``). At most ``ceil(log2 n) + 2`` pytest
runs for a prefix of n tests: one alone, the halvings, one confirmation; a run left
over repeats TEST alone, so an outcome that changes under one order is called flaky
and never becomes a constraint. A culprit found becomes an order constraint in the
history, honoured as a group by the next plan (``costs.learned_constraints``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suitefit import timing
from suitefit.diagnose.bisect import Replayer, find_culprit
from suitefit.diagnose.pytest_runs import OK_OUTCOMES, is_ok, reproducer
from suitefit.errors import SuitefitError
from suitefit.history import ConstraintRecord, History

REFERENCE_KINDS_EXCLUDED = ("sweep", "compare")  # one file alone, or another configuration
MAX_INLINE_IDS = 20  # a longer reproducer is `suitefit bisect`, which replays it exactly
FLAKY_REPEATS = 5  # runs of TEST alone when nothing before it is left to blame
MAX_EXPLAINED = 20  # failed tests examined at the end of a run (a broken import fails them all)
CLEARING_RUNS = 5  # recent passing runs whose prefixes clear tests of being the polluter


@dataclass
class NewFailure:
    """A test that failed here and passed in recorded runs, with the orders of both."""

    nodeid: str
    outcome: str
    run_id: int
    worker: str
    prefix: list[str]  # what ran before it on its worker, in order
    passed_in: list[int]  # run ids, newest first
    pass_worker: str
    pass_prefix: list[str]  # the same in the newest run it passed in
    cleared: set[str] = field(default_factory=set)  # ran before it in some run where it passed
    # the workers its file's tests ran on in this run, when more than one: suitefit split it
    split_across: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Failed:
    nodeid: str
    outcome: str
    worker: str
    seq: int


def _prefix(history: History, run_id: int, worker: str, seq: int) -> list[str]:
    rows = history.execute("SELECT nodeid FROM tests WHERE run_id = ? AND worker = ? AND seq >= 0 "
                           "AND seq < ? ORDER BY seq", [run_id, worker, seq])
    return [str(r[0]) for r in rows]


def new_failures(history: History, run_id: int, limit: int = MAX_EXPLAINED) -> tuple[list[NewFailure], int]:
    """This run's failed tests that passed in another finished, recorded suite run (the first
    ``limit`` in run order), and how many failed tests were left unexamined past that."""
    # seq < 0: the test a dead worker was running; the dead-worker line names it, and a
    # worker killed for memory is not an order dependency.
    ok = ",".join(f"'{o}'" for o in sorted(OK_OUTCOMES))
    failed = [_Failed(str(n), str(o), str(w), int(q)) for n, o, w, q in history.execute(
        f"SELECT nodeid, outcome, worker, seq FROM tests WHERE run_id = ? AND seq >= 0 "
        f"AND outcome NOT IN ({ok}) ORDER BY started, worker, seq", [run_id])]
    examined, skipped = failed[:limit], max(0, len(failed) - limit)
    if not examined:
        return [], skipped
    kinds = ",".join("?" * len(REFERENCE_KINDS_EXCLUDED))
    ids = ",".join("?" * len(examined))
    passes: dict[str, list[tuple[int, str, int]]] = {}
    # One query for all of them: the tests table has no index by node id alone.
    for nodeid, rid, worker, seq in history.execute(
            f"SELECT t.nodeid, t.run_id, t.worker, t.seq FROM tests t JOIN runs r ON r.id = t.run_id "
            f"WHERE t.nodeid IN ({ids}) AND t.run_id != ? AND r.status != 'running' "
            f"AND r.kind NOT IN ({kinds}) AND t.outcome IN ({ok}) "
            f"ORDER BY t.run_id DESC",
            [*(t.nodeid for t in examined), run_id, *REFERENCE_KINDS_EXCLUDED]):
        passes.setdefault(str(nodeid), []).append((int(rid), str(worker), int(seq)))
    out: list[NewFailure] = []
    for t in examined:
        rows = passes.get(t.nodeid)
        if not rows:
            continue
        cleared: set[str] = set()
        pass_prefix: list[str] = []
        for i, (rid, worker, seq) in enumerate(rows[:CLEARING_RUNS]):
            p = _prefix(history, rid, worker, seq)
            cleared.update(p)
            if i == 0:
                pass_prefix = p
        out.append(NewFailure(t.nodeid, t.outcome, run_id, t.worker, _prefix(history, run_id, t.worker, t.seq),
                              [r[0] for r in rows], rows[0][1], pass_prefix, cleared,
                              _workers_of_file(history, run_id, t.nodeid.split("::", 1)[0])))
    return out, skipped


def _workers_of_file(history: History, run_id: int, file: str) -> list[str]:
    """The workers that ran ``file``'s tests in the run, if more than one (a chunk, a moved tail)."""
    rows = history.execute("SELECT DISTINCT worker FROM tests WHERE run_id = ? AND file = ? AND seq >= 0 "
                           "ORDER BY worker", [run_id, file])
    workers = [str(r[0]) for r in rows]
    return workers if len(workers) > 1 else []


def _files_in_order(nodeids: Sequence[str], limit: int = 4) -> str:
    files = list(dict.fromkeys(n.split("::", 1)[0] for n in nodeids))
    shown = ", ".join(files[:limit]) + (f", +{len(files) - limit} more" if len(files) > limit else "")
    return f"{len(nodeids)} test(s) of {len(files)} file(s)" + (f" ({shown})" if files else "")


def explain_line(nf: NewFailure) -> str:
    """One line: where it failed and after what, where it passed and after what, how to reproduce."""
    runs = ", ".join(str(r) for r in nf.passed_in[:5]) + (" ..." if len(nf.passed_in) > 5 else "")
    now = _files_in_order(nf.prefix) if nf.prefix else "nothing (first on its worker)"
    last = f"; last {nf.prefix[-1]}" if nf.prefix else ""
    then = _files_in_order(nf.pass_prefix) if nf.pass_prefix else "nothing"
    if len(nf.prefix) <= MAX_INLINE_IDS:
        repro = reproducer([*nf.prefix, nf.nodeid])
    else:
        repro = f"suitefit bisect {nf.nodeid} --run-id {nf.run_id}"
    split = (f"; this run split its file across {', '.join(nf.split_across)}: if it needs a test of its "
             "file that ran elsewhere, --explain-failures finds that test and keeps the file whole"
             if nf.split_across else "")
    return (f"suitefit: new failure: {nf.nodeid} {nf.outcome} on {nf.worker} after {now}{last}; "
            f"it passed in run(s) {runs} (newest: on {nf.pass_worker} after {then}){split}; "
            f"reproduce: {repro}")


def run_budget(n: int) -> int:
    """Pytest runs one diagnosis may take for a prefix of ``n`` tests: ceil(log2 n) + 2."""
    return (math.ceil(math.log2(n)) if n > 1 else 0) + 2


@dataclass
class Diagnosis:
    test: str
    verdict: str  # "polluter", "provider", "flaky", "unexplained", "unfinished"
    culprit: str | None
    confidence: str  # what was observed, e.g. "passes alone, fails after X"
    pytest_runs: int
    budget: int  # ceil(log2 n) + 2 for the prefix it replayed
    prefix_len: int
    command: str = ""
    stored: str = ""  # the constraint it stored, said in words

    def line(self) -> str:
        head = f"suitefit: diagnosis: {self.test}: "
        runs = f" ({self.pytest_runs} pytest run(s), at most {self.budget})"
        if self.verdict in ("polluter", "provider"):
            return (head + f"{self.verdict} {self.culprit}: {self.confidence}{runs}; "
                    + (f"remembered: {self.stored}" if self.stored else "not remembered")
                    + f"; reproduce: {self.command}")
        if self.verdict == "flaky":
            return head + f"flaky: {self.confidence}{runs}; not an order constraint"
        return head + f"{self.verdict}: {self.confidence}{runs}"

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in ("test", "verdict", "culprit", "confidence", "pytest_runs",
                                              "budget", "prefix_len", "command", "stored")}


class OutOfTime(Exception):
    pass


def diagnose(nf: NewFailure, *, cwd: Path, deadline: float, pytest_args: Sequence[str] = (),
             env: Mapping[str, str] | None = None,
             progress: Callable[[str], None] | None = None) -> Diagnosis:
    """Bisect one new failure in fresh processes, within ``run_budget`` runs and ``deadline``."""

    class TimedReplayer(Replayer):
        def outcome(self, subset: Sequence[str]) -> str:
            left = deadline - timing.monotonic()
            if left <= 0:
                raise OutOfTime
            self.timeout_s = left
            try:
                return super().outcome(subset)
            except SuitefitError:
                if timing.monotonic() >= deadline:  # killed by the time box, not a failure of its own
                    raise OutOfTime from None
                raise

    rep = TimedReplayer(nf.nodeid, cwd, pytest_args, None, progress, env)
    n = max(len(nf.prefix), len(nf.pass_prefix))
    try:
        alone = rep.outcome([])
        provider = not is_ok(alone)
        order = nf.pass_prefix if provider else nf.prefix
        n = len(order)
        budget = run_budget(n)
        if provider:  # a provider ran before it when it passed, and not before it now
            now = set(nf.prefix)
            cands = [x for x in order if x not in now]
        else:  # a polluter ran before it now, and never before it on a worker where it passed
            cands = [x for x in order if x not in nf.cleared]

        def say(verdict: str, culprit: str | None, confidence: str, command: str) -> Diagnosis:
            return Diagnosis(nf.nodeid, verdict, culprit, confidence, rep.runs, budget, n, command)

        if not cands:
            return _without_culprit(rep, alone, budget, say, provider)

        def flips(subset: Sequence[str]) -> bool:
            return is_ok(rep.outcome(subset)) == provider

        search = find_culprit(cands, flips)
        culprit = search.culprit
        assert culprit is not None
        if not search.confirmed and not flips([culprit]):
            return say("unexplained", None, f"the search ended at {culprit}, which alone does not flip "
                       "it: it needs several earlier tests together, or it is flaky",
                       reproducer([*order, nf.nodeid]))
        times = "1 of 1"
        if rep.runs < budget:  # a run left: the same order again, to tell a flaky test apart
            again = rep.outcome([])
            times = "2 of 2"
            if is_ok(again) != is_ok(alone):
                return say("flaky", None, f"{alone} then {again} alone, under the same order",
                           reproducer([nf.nodeid]))
        confidence = (f"fails alone ({times}), passes after {culprit}" if provider else
                      f"passes alone ({times}), fails after {culprit}")
        return say("provider" if provider else "polluter", culprit, confidence,
                   reproducer([culprit, nf.nodeid]))
    except OutOfTime:
        return Diagnosis(nf.nodeid, "unfinished", None, "the time box ran out before an answer",
                         rep.runs, run_budget(n), n, reproducer([*nf.prefix, nf.nodeid]))


def _without_culprit(rep: Replayer, alone: str, budget: int,
                     say: Callable[[str, str | None, str, str], Diagnosis], provider: bool) -> Diagnosis:
    """Nothing before it is left to blame: repeat it alone; differing outcomes mean flaky."""
    outcomes = [alone]
    while len(outcomes) < min(FLAKY_REPEATS, budget):
        outcomes.append(rep.outcome([]))
    ok = sum(1 for o in outcomes if is_ok(o))
    if 0 < ok < len(outcomes):
        return say("flaky", None, f"passes {ok} of {len(outcomes)} alone, under the same order",
                   reproducer([rep.nodeid]))
    why = (f"fails alone ({len(outcomes)} of {len(outcomes)}) and nothing that ran before it when "
           "it passed is missing now" if provider else
           f"passes alone ({ok} of {len(outcomes)}) and passed after each test that ran before it now")
    return say("unexplained", None, why + ": the cause is outside its process (another worker, "
               "files) or needs several tests together", reproducer([rep.nodeid]))


def constraint_of(verdict: str, test: str, culprit: str) -> tuple[str, str]:
    """(first file, second file) the next plan must keep in order on one worker. One file
    twice when both tests are in it: its order is pytest's as long as it runs whole on one
    worker, which only a split (a chunk, a moved tail) breaks, so the plan keeps it whole."""
    tf, cf = test.split("::", 1)[0], culprit.split("::", 1)[0]
    return (cf, tf) if verdict == "provider" else (tf, cf)


def remember(history: History, verdict: str, test: str, culprit: str | None, evidence: str, *,
             source: str, run_id: int | None, rootdir: str) -> str:
    """Store a found polluter/provider as an order constraint; the words for it ('' when none)."""
    if verdict not in ("provider", "polluter") or culprit is None:
        return ""
    files = constraint_of(verdict, test, culprit)
    history.add_constraint(ConstraintRecord(test, culprit, verdict, files[0], files[1], evidence, source,
                                            run_id, rootdir, timing.wall()))
    if files[0] == files[1]:
        return f"{files[0]} runs whole on one worker, never split"
    return f"{files[0]} runs before {files[1]} on one worker"


def explain_run(history: History, run_id: int, *, say: Callable[[str], None], diagnose_max: int = 0,
                time_box_s: float = 300.0, pytest_args: Sequence[str] = (),
                env: Mapping[str, str] | None = None) -> list[Diagnosis]:
    """The end-of-run lines for new failures; with ``diagnose_max``, diagnose that many and remember.

    ``env`` is the environment the run started with: after a one-process run, this
    process's own holds whatever its tests left in it (the very pollution diagnosed).
    """
    failures, unexamined = new_failures(history, run_id)
    for nf in failures:
        say(explain_line(nf))
    if unexamined:
        say(f"suitefit: {unexamined} more failed test(s) not compared with the history "
            f"(the first {MAX_EXPLAINED} were)")
    if not failures or diagnose_max <= 0:
        return []
    run = history.run(run_id)
    cwd = Path(run.rootdir or run.cwd or ".")
    deadline = timing.monotonic() + time_box_s
    out: list[Diagnosis] = []
    for nf in failures[:diagnose_max]:
        try:
            d = diagnose(nf, cwd=cwd, deadline=deadline, pytest_args=pytest_args, env=env)
        except SuitefitError as e:
            say(f"suitefit: diagnosis: {nf.nodeid}: could not replay: {e}")
            continue
        d.stored = remember(history, d.verdict, d.test, d.culprit, d.confidence,
                            source=f"run {run_id} --explain-failures", run_id=run_id, rootdir=str(cwd))
        history.add_event(run_id, timing.wall(), "diagnosis", nodeid=nf.nodeid, diagnosis=d.to_json())
        say(d.line())
        out.append(d)
    if len(failures) > diagnose_max:
        say(f"suitefit: diagnosis: {len(failures) - diagnose_max} more new failure(s) not diagnosed "
            f"(at most {diagnose_max}; --explain-limit)")
    return out
