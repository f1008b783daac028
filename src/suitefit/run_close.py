"""The end of a `suitefit run`, said by pytest's own process.

`suitefit run` plans and then hands its process over to pytest (``cli.handover.Handover``) instead of
waiting beside it: a waiting CLI would hold 25-35 MiB for the whole run, memory the
budget would have to keep for a process that does nothing. So the controller says
what the CLI used to: the run against its prediction, the shard's result file, a
dead worker, an exit that is neither pass nor fail. A pytest killed outright cannot
say anything; the next suitefit command marks its run crashed
(``History.settle_abandoned``).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from suitefit import timing
from suitefit.errors import SuitefitError
from suitefit.exits import EXIT_FAILED, EXIT_OK, explain_exit
from suitefit.history import History, RunRecord
from suitefit.model import CONTENTION_UNKNOWN, Plan
from suitefit.steal import notable
from suitefit.units import fmt_mb, fmt_s


class RunClose:
    def __init__(self, history: History, run_id: int, plan: Plan, out: TextIO, dead: Sequence[Mapping[str, Any]],
                 shard_spec: str | None, shard_result: str | None, explain_max: int = 0,
                 explain_s: float = 300.0) -> None:
        self.history = history
        # the workers that died, as the run control names them (``RunControl.dead``, the same
        # list): read here, not from the history, where its rows may still wait in memory
        self.dead = dead
        self.run_id = run_id
        self.plan = plan
        self.out = out
        self.shard_spec = shard_spec
        self.shard_result = shard_result
        self.lines: list[str] = []
        self.explain_max = explain_max  # new failures to diagnose (--explain-failures), 0: none
        self.explain_s = explain_s
        # Made at configure time, before any test ran: a one-process run's tests change this
        # process's environment, and a replay must start from what the run started from.
        self.env = dict(os.environ)
        self.explained_s = 0.0  # the failures' explanation and diagnosis: after the run, not of it
        # The command's wall is what a user waits for: up to this process's exit, after
        # pytest's own end (its terminal summary, plugins' unconfigure) that the closing
        # line comes before. The next plans learn what the model leaves out from it.
        atexit.register(self._record_exit, history.path)

    def _record_exit(self, path: Path) -> None:
        command_s = self.command_wall_s()
        if command_s is None:
            return
        # A diagnosis's pytest runs (seconds each) are not the run's end: counted in, every
        # next plan would predict them as time spent outside the tests (``costs._outside``).
        meta: dict[str, float] = {"command_wall_s": round(command_s - self.explained_s, 3)}
        if self.explained_s:
            meta["explained_s"] = round(self.explained_s, 3)
        try:
            with History(path, create=False) as h:
                h.merge_run_meta(self.run_id, **meta)
        except (SuitefitError, OSError):  # the history went away or is locked: the run's lines stand
            pass

    def at_sessionfinish(self, session: Any) -> None:
        """What can still change the exit status: the shard's result file, a dead worker."""
        if self.shard_spec and self.shard_result:
            from suitefit.shard_results import ShardSpec, write_result

            spec = ShardSpec.load(self.shard_spec)
            out = Path(self.shard_result)
            try:
                data = write_result(self.history, self.run_id, spec.k, spec.n, out)
            except SuitefitError as e:
                self.lines.append(f"suitefit: error: {e}")
                session.exitstatus = max(int(session.exitstatus), 1)
            else:
                self.lines.append(f"suitefit: shard {spec.k}/{spec.n}: {len(data['tests'])} of "
                                  f"{len(data['collected'])} collected tests ran here; result in {out}")
        if self.dead and int(session.exitstatus) == EXIT_OK:
            session.exitstatus = 1

    @staticmethod
    def command_wall_s() -> float | None:
        """Since this process started, i.e. since `suitefit run` did (exec keeps the pid).

        The span the plan predicts: its wall includes starting the processes (Python,
        pytest, the conftest import, collection), which pytest's session time leaves out.
        """
        from suitefit.measure.proctree import age_s

        return age_s()

    def say(self, exitstatus: int) -> None:
        """The closing lines, after pytest's own output; an error line when the run did not plainly pass or fail."""
        h, p = self.history, self.plan
        run = h.run(self.run_id)
        write = self.out.write
        m = p.measured
        command_s = self.command_wall_s()
        command, session = fmt_s(command_s), fmt_s(run.wall_s)
        if command_s is not None:  # until the exit replaces it (a run killed at its end keeps this)
            h.merge_run_meta(self.run_id, command_wall_s=round(command_s, 3))
        if m is not None and m.nothing:
            write(f"suitefit: run {self.run_id}: command {command} from `suitefit run` to now, session {session}, "
                  f"peak {fmt_mb(run.peak_rss_mb)} (budget {fmt_mb(p.budget.memory_mb)}); the plan "
                  f"guessed wall {fmt_s(p.predicted_wall_s)} and peak {fmt_mb(p.predicted_peak_mb)} "
                  f"(nothing measured yet)\n")
        else:
            basis = "" if m is None or m.complete else f"; {m.words()}"
            part = self.part_of_plan(run)
            if part:  # its errors are not the predictions' (costs._wall_errors)
                h.merge_run_meta(self.run_id, part_of_plan=True)
                basis += f"; {part}: the plan predicted it all"
            contention = f" {CONTENTION_UNKNOWN}" if m is not None and m.contention_unknown else ""
            stolen = run.meta_dict.get("host_steal")
            if notable(stolen):
                basis += f"; the host took {stolen:.0%} of the CPU time (steal)"
            write(f"suitefit: run {self.run_id}: command {command} from `suitefit run` to now "
                  f"(predicted {fmt_s(p.predicted_wall_s)}{contention}), session {session}, "
                  f"peak {fmt_mb(run.peak_rss_mb)} (predicted {fmt_mb(p.predicted_peak_mb)}, "
                  f"budget {fmt_mb(p.budget.memory_mb)}){basis}\n")
        for line in self.lines:
            write(line + "\n")
        if self.dead:
            d = self.dead[0]
            write(f"suitefit: error: run {self.run_id}: worker {d['worker']} died ({d['exit']}) "
                  f"while running {d['test']}; last measured memory {fmt_mb(d['mb'])}\n")
        else:
            problem = explain_exit(exitstatus, run.status)
            if problem:
                write(f"suitefit: error: run {self.run_id}: {problem}\n")
        # Diagnose only a run that plainly failed: not one the user interrupted, nor one
        # whose worker died (that line says what happened).
        self.explain_failures(diagnose=exitstatus == EXIT_FAILED and not self.dead)
        self.out.flush()

    def part_of_plan(self, run: RunRecord) -> str:
        """What the run left out of the plan's files (a path argument, ``-k``, a node id), in
        words; "" when it ran them all. Such a run's predictions are not compared with what
        it measured (``costs._wall_errors``), and its partial files' times not read. A file
        the plan had measured only in part (a suite always run with ``-m "not slow"``) is
        predicted as such: selected in part again, it is no part of the plan left out."""
        h = self.history
        per_file = h.execute("SELECT file, COUNT(*) FROM tests WHERE run_id = ? GROUP BY file", [self.run_id])
        if sum(n for _, n in per_file) < (run.passed or 0) + (run.failed or 0) + (run.skipped or 0):
            # fewer rows than pytest reported tests: writes the history refused were lost
            # (``HistoryDB.write_waiting`` said so), and what ran is not known from it
            return ""
        planned = {f for u in self.plan.units for f in u.files}
        ran = {str(f) for f, _ in per_file}
        as_measured = set(self.plan.measured.partial) if self.plan.measured is not None else set()
        narrowed = len({p for _, p in h.partial_files([self.run_id])} - as_measured)
        root = Path(run.rootdir or ".")
        left = sum(1 for f in planned - ran if (root / f).exists())  # a deleted file is no choice of the run's
        if not left and not narrowed:
            return ""
        words = [f"{len(planned) - left} of the plan's {len(planned)} files ran"] if left else []
        if narrowed:
            words.append(f"{narrowed} of them only in part")
        return ", ".join(words) if left else f"{narrowed} file(s) ran only in part"

    def explain_failures(self, diagnose: bool = True) -> None:
        """A line per new failure; with --explain-failures, their diagnosis, remembered.

        The diagnosis runs here, in pytest's own process after its session, rather than in a
        `suitefit run` that stays alive instead of exec'ing: the workers are gone by now, so
        the fresh pytest processes it starts have the machine, while a waiting CLI would hold
        its memory beside the whole run only to be useful after it. The exit status is
        pytest's already; a diagnosis never changes it.
        """
        run = self.history.run(self.run_id)
        if not (run.failed or run.errors):  # nothing failed: nothing to compare (nor to import)
            return
        from suitefit.diagnose.explain import explain_run

        def say(line: str) -> None:
            self.out.write(line + "\n")
            self.out.flush()

        started = timing.monotonic()
        try:
            explain_run(self.history, self.run_id, say=say, diagnose_max=self.explain_max if diagnose else 0,
                        time_box_s=self.explain_s, env=self.env)
        except SuitefitError as e:
            say(f"suitefit: error: run {self.run_id}: explaining its failures: {e}")
        finally:
            self.explained_s += timing.monotonic() - started
