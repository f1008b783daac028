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
from suitefit.history import History

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
    # 0 passed, 1 some failed, 5 none collected, and 2 or 4 after a collection error (a file
    # that does not import in this order; 4 when it was named by node id): all are answers.
    # Other interruptions, internal and usage errors, and signals are not.
    if m.exit_code not in (0, 1, 5) and not (m.exit_code in (2, 4) and result.collect_errors):
        what = f"killed by signal {-m.exit_code}" if m.exit_code < 0 else f"exited {m.exit_code}"
        tail = m.last_line
        raise SuitefitError(f"pytest {what} in {cwd} ({shlex.join(args)[:200]}){': ' + tail if tail else ''}", 3)
    return result


def run_recorded(history: History, args: Sequence[str], *, kind: str, cwd: Path,
                 single_process: bool = True, meta: Mapping[str, object] | None = None,
                 timeout_s: float | None = None) -> tuple[int, PytestResult]:
    """Run pytest measured by the suitefit plugin into a run row made first (so its id is known)."""
    run_id = history.new_run(kind, started=timing.wall(), cwd=str(cwd), rootdir=str(cwd),
                             meta=dict(meta or {}))
    # "--opt=VALUE": pytest reads its rootdir before plugin options exist (rootdir_guard.py)
    plugin_args = ["--suitefit", f"--suitefit-history={history.path.resolve()}",
                   f"--suitefit-run-id={run_id}", f"--suitefit-kind={kind}"]
    try:
        result = run_pytest([*plugin_args, *args], cwd=cwd, single_process=single_process,
                            timeout_s=timeout_s)
    except SuitefitError:
        history.update_run(run_id, status="error")
        raise
    if history.run(run_id).status == "running":  # the process died before the plugin closed the run
        history.update_run(run_id, status="crashed", exit_code=result.exit_code,
                           finished=result.started + result.wall_s, wall_s=result.wall_s)
    return run_id, result
