"""Run pytest in a fresh process and read back each test's outcome, in the order it ran.

The single place the diagnose verbs start pytest. Every run disables pytest-randomly
(an order we did not choose would make a replay meaningless) and, where a run must
stay in one process (a file alone, a bisection step), turns xdist off with ``-n0``.
Outcomes come from ``outcomes_plugin`` through a JSON-lines file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suitefit import timing
from suitefit.diagnose.outcomes_plugin import ENV
from suitefit.diagnose.procs import run_measured
from suitefit.errors import SuitefitError
from suitefit.history import History, TestRecord

OK_OUTCOMES = frozenset({"passed", "skipped", "xfailed", "xpassed"})


def is_ok(outcome: str | None) -> bool:
    """Passed in the sense that matters for order dependence (skips and xfails are not failures)."""
    return outcome in OK_OUTCOMES


@dataclass(frozen=True)
class TestOutcome:
    nodeid: str
    file: str
    outcome: str
    worker: str
    seq: int
    started: float
    duration: float


@dataclass
class PytestResult:
    """One pytest process: exit code, what ran in which order, and how long it took."""

    argv: list[str]
    exit_code: int
    wall_s: float
    cpu_s: float
    started: float
    tests: list[TestOutcome] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)
    output_tail: str = ""

    def outcome_of(self, nodeid: str) -> str | None:
        for t in self.tests:
            if t.nodeid == nodeid:
                return t.outcome
        return None

    @property
    def order(self) -> list[str]:
        return [t.nodeid for t in self.tests]


def single_process_args() -> list[str]:
    """Arguments that keep pytest in one process, in the order given."""
    args = ["-p", "no:randomly"]
    if importlib.util.find_spec("xdist") is not None:
        args.append("-n0")
    return args


def reproducer(nodeids: Sequence[str], extra: Sequence[str] = ()) -> str:
    """The one-line command a user pastes: explicit node ids run in the order given."""
    return shlex.join(["pytest", *single_process_args(), *extra, *nodeids])


def run_pytest(args: Sequence[str], *, cwd: Path, single_process: bool = True,
               python: str | None = None, env: Mapping[str, str] | None = None,
               timeout_s: float | None = None) -> PytestResult:
    """Run ``python -m pytest ARGS`` in ``cwd``; a run pytest could not start or finish is an error."""
    fd, out_path = tempfile.mkstemp(prefix="suitefit-outcomes-", suffix=".jsonl")
    os.close(fd)
    try:
        argv = [python or sys.executable, "-m", "pytest", "-p", "suitefit.diagnose.outcomes_plugin",
                *(single_process_args() if single_process else ["-p", "no:randomly"]), *args]
        full_env = dict(os.environ if env is None else env)
        full_env[ENV] = out_path
        started = timing.wall()
        m = run_measured(argv, cwd=cwd, env=full_env, timeout_s=timeout_s)
        result = PytestResult(argv, m.exit_code, m.wall_s, m.cpu_s, started, output_tail=m.output_tail)
        with open(out_path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash
                if "collect_error" in rec:
                    result.collect_errors.append(str(rec["collect_error"]))
                else:
                    result.tests.append(TestOutcome(rec["nodeid"], rec["file"], rec["outcome"],
                                                    rec["worker"], int(rec["seq"]),
                                                    float(rec["started"]), float(rec["duration"])))
    finally:
        os.unlink(out_path)
    # 0 passed, 1 some failed, 5 none collected: all are answers. 2-4 and signals are not.
    if m.exit_code not in (0, 1, 5):
        what = f"killed by signal {-m.exit_code}" if m.exit_code < 0 else f"exited {m.exit_code}"
        tail = m.last_line
        raise SuitefitError(f"pytest {what} in {cwd} ({shlex.join(args)[:200]}){': ' + tail if tail else ''}", 3)
    return result


def record(history: History, result: PytestResult, *, kind: str, cwd: Path,
           meta: Mapping[str, object] | None = None) -> int:
    """Store a diagnose pytest run in the history (runs row + tests rows) and return its id."""
    run_id = history.new_run(kind, started=result.started, argv=result.argv, cwd=str(cwd),
                             rootdir=str(cwd), meta=dict(meta or {}))
    counts = {o: sum(1 for t in result.tests if t.outcome == o) for o in ("passed", "failed", "skipped", "error")}
    status = {0: "passed", 1: "failed", 5: "no-tests"}.get(result.exit_code, "error")
    history.update_run(run_id, status=status, exit_code=result.exit_code,
                       finished=result.started + result.wall_s, wall_s=result.wall_s,
                       cpu_s=result.cpu_s, collected=len(result.tests), passed=counts["passed"],
                       failed=counts["failed"], skipped=counts["skipped"], errors=counts["error"],
                       workers=len({t.worker for t in result.tests}))
    history.add_tests([
        TestRecord(run_id, t.nodeid, t.file, t.worker, t.seq, t.started, 0.0, t.duration, 0.0,
                   t.duration, 0.0, t.outcome)
        for t in result.tests
    ])
    if result.collect_errors:
        history.merge_run_meta(run_id, collect_errors=result.collect_errors)
    return run_id
