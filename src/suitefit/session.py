"""A measured session: the controller's run row and timeline, each worker's recorder,
the shard filter and the terminal summary.

Imported only when ``--suitefit`` is given, so a plain ``pytest`` run pays nothing for
suitefit being installed (``plugin.py`` holds just the options).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from typing import TYPE_CHECKING, Any

import pytest

from suitefit import timing
from suitefit.errors import SuitefitError
from suitefit.history import History
from suitefit.measure.channel import Sender
from suitefit.measure.recorder import WorkerRecorder, file_of
from suitefit.units import fmt_mb, fmt_s, parse_size_mb

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

RUN_KEY = pytest.StashKey["RunSide"]()
WORKER_KEY = pytest.StashKey[WorkerRecorder]()

MAIN_WORKER = "main"


def _history_path(config: pytest.Config) -> str:
    path = config.getoption("suitefit_history")
    if path:
        return str(path)
    from suitefit.config import load_config

    return str(load_config(config.rootpath).history_path)


def _paths_given(config: pytest.Config) -> bool:
    """Did the command name what to collect (``pytest tests/unit``), other than what it
    collects without (``testpaths``)? (``args_source``: pytest 7.2 and later.)"""
    source = getattr(config, "args_source", None)
    if source is None or source != pytest.Config.ArgsSource.ARGS:
        return False
    here = str(config.invocation_params.dir)
    named = {os.path.normpath(os.path.join(here, a)) for a in config.args}
    default = {os.path.normpath(os.path.join(config.rootpath, p)) for p in config.getini("testpaths")}
    return named != (default or {os.path.normpath(here)})  # without testpaths: the invocation dir


_SELECTING = frozenset({"-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise",
                        "--sw-skip", "--stepwise-skip"})


def _selection_given(config: pytest.Config) -> bool:
    """Did the command line select tests (``-k``, ``-m``, ``--deselect``, ``--lf``,
    ``--sw``, a node id)? The configuration's ``addopts`` (``-m "not slow"``) select in every
    run, so they make no run one of part of the suite; pytest's invocation arguments hold
    the command's own words only."""
    for raw in config.invocation_params.args:
        a = str(raw)
        if "::" in a or a.split("=", 1)[0] in _SELECTING:
            return True
        if not a.startswith("--") and a[:2] in ("-k", "-m"):  # -kEXPR, -mMARK
            return True
    return False


def _versions() -> dict[str, str | None]:
    try:
        import xdist

        xv: str | None = xdist.__version__
    except Exception:
        xv = None
    return {"python": platform.python_version(), "pytest_version": pytest.__version__, "xdist_version": xv}


class RunSide:
    """The controller's part: owns the run row and the run's sampler process."""

    def __init__(self, config: pytest.Config, history: History, run_id: int, started: float,
                 threshold_mb: float | None, distributed: bool, grace_s: float) -> None:
        from suitefit.measure.reaper import SessionReaper
        from suitefit.measure.sampler import SamplerProcess  # here: an xdist worker needs none
        from suitefit.streams import original_stderr

        self.config = config
        self.history = history
        self.run_id = run_id
        self.started = started
        self.distributed = distributed
        self.cpu0 = timing.cpu_seconds()
        self.t0 = timing.perf_counter()
        self.wall0 = timing.wall()
        from suitefit.measure.proctree import cpu_ticks

        self.ticks0 = cpu_ticks()  # the machine's: how much of its CPU the host took during the run
        t = timing.times()
        self.own_cpu0 = t[0] + t[1]  # this process's own, its threads' included, without its children
        # xdist's controller's RSS once the first worker's collection is in, before any report:
        # what it grows by from there is per test (``costs._process_peaks``)
        self.controller_start_mb: float | None = None
        # Under xdist the controller runs no tests, so samples may stream back to callbacks
        # on a thread here; without xdist this process runs the tests and gets no thread.
        self.sampler = SamplerProcess(os.getpid(), history=history.path.as_posix(), run_id=run_id,
                                      started_wall=started, threshold_mb=threshold_mb,
                                      interval=config.getoption("suitefit_interval"), stream=distributed)
        self.finished = False
        self.local_worker: WorkerRecorder | None = None  # without xdist this process runs the tests
        self.control: Any = None  # RunControl, when running under a plan
        self.closing: Any = None  # RunClose, when `suitefit run` handed this process over
        self.exitstatus: int | None = None
        self.threshold_mb = threshold_mb
        self.progress: Any = None
        self._pytest_file: tuple[Any, Any] | None = None  # pytest's terminal writer and its own file
        self._mid_line_seen = ""  # pytest's unfinished line when a line of ours last ended it
        self.done = 0
        self.exact_hwm = True
        self._collect_errors: set[str] = set()
        self.sampler.subscribe(self._progress_tick)
        self.out = original_stderr(config)
        self.worker_pids: dict[str, int] = {}
        self.leftovers = SessionReaper(history, run_id, self.say, grace_s)

    def say(self, line: str) -> None:
        """One line of suitefit's own on stderr (a leftover, a dead worker, a heartbeat):
        above the live progress line on a terminal, never through it."""
        if self.progress is not None:
            self.progress.log(line)
            return
        try:
            self.out.write(("\n" if self._pytest_mid_line() else "") + line + "\n")
            self.out.flush()
        except (OSError, ValueError):  # a closed log must not fail the run
            pass

    def _start_progress(self, total: int) -> None:
        mode = self.config.getoption("suitefit_progress")
        if self.progress is not None or mode == "off":
            return
        from suitefit.report.progress import Progress

        stream = self.out
        tty = mode == "live" or (mode == "auto" and stream.isatty())
        # On a terminal pytest writes to the same screen: its output goes above the live line
        # (its unfinished line, e.g. xdist's "ready: 1/2 workers", taken over), or each
        # erases the other.
        tw = getattr(self.config.pluginmanager.get_plugin("terminalreporter"), "_tw", None)
        file = getattr(tw, "_file", None)
        take_over = tty and file is not None and _isatty(file)
        carry = str(getattr(tw, "_current_line", "")) if take_over else ""
        if carry:
            file.write("\r\x1b[2K")  # type: ignore[union-attr]  # the live area draws it from now on
            file.flush()  # type: ignore[union-attr]
        self.progress = Progress(total, self.threshold_mb, stream, tty, carry=carry, mid_line=self._pytest_mid_line)
        if take_over:
            tw._file = self.progress.above(file)  # type: ignore[union-attr]
            self._pytest_file = (tw, file)

    def _pytest_mid_line(self) -> bool:
        """Has pytest left a line unfinished (its dots) in the file this process's stderr
        also goes to (a CI log joining both)? Once per such line: after a line of ours
        the file is at a line start, whatever pytest believes."""
        tw = getattr(self.config.pluginmanager.get_plugin("terminalreporter"), "_tw", None)
        current = str(getattr(tw, "_current_line", ""))
        if not current or current == self._mid_line_seen or not _same_file(getattr(tw, "_file", None), self.out):
            return False
        self._mid_line_seen = current
        with contextlib.suppress(Exception):
            tw._file.flush()  # type: ignore[union-attr]  # its dots first, then our line
        return True

    def close_progress(self) -> None:
        """The final progress line, after pytest's own output (never glued to its last line)."""
        if self.progress is None:
            return
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            with contextlib.suppress(Exception):
                tr._tw.flush()  # what pytest wrote comes first in a log that joins both streams
        self.progress.close()
        if self._pytest_file is not None:
            tw, file = self._pytest_file
            tw._file = file
            self._pytest_file = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        _status_lines_once(self.config)

    def _progress_tick(self, s: Any) -> None:
        if self.progress is not None:
            self.progress.update(self.done, s.rss_mb)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.distributed:
            self._start_progress(len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.controller_start_mb is None:
            from suitefit.measure.proctree import rss_mb

            self.controller_start_mb = rss_mb(os.getpid()) or None
        self._start_progress(len(ids))

    def show_done(self, n: int) -> None:
        """``n`` tests of this process are done (without xdist; the recorder calls this at
        most 10 times a second, so that this side needs no per-test hook or call of its own)."""
        self.done = n
        if self.progress is not None:
            # No sampler callbacks in a process that runs tests: the progress line is
            # fed here, on the test's thread, from the sampler's shared page.
            last = self.sampler.last
            self.progress.update(n, last.rss_mb if last is not None else float("nan"))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A file that failed to collect is a failure too: keep it with its reason (once, not per worker)."""
        if report.failed and report.nodeid not in self._collect_errors:
            from suitefit.measure.recorder import short_reason

            self._collect_errors.add(report.nodeid)
            self.history.add_event(self.run_id, timing.wall(), "collect_error", nodeid=report.nodeid or ".",
                                   reason=short_reason(report))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["suitefit_run_id"] = self.run_id
        node.workerinput["suitefit_history"] = self.history.path.as_posix()
        node.workerinput["suitefit_grace"] = self.leftovers.grace_s
        node.workerinput["suitefit_channel"] = self.sampler.channel_path
        node.workerinput["suitefit_exact_hwm"] = self.exact_hwm

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        # a worker reaps its own tree: the session's reaper must leave it alone
        with contextlib.suppress(Exception):
            self.worker_pids[node.gateway.id] = int(node.gateway._io.popen.pid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error:
            wid = node.gateway.id
            self.history.add_event(self.run_id, timing.wall(), "worker_down",
                                   worker=wid, error=str(error))
            # the run control's row for it (tryfirst) may be waiting in memory, not readable yet
            named = self.control is not None and any(d["worker"] == wid for d in self.control.dead)
            if not named and not self.history.execute("SELECT 1 FROM workers WHERE run_id = ? AND worker = ?",
                                                      [self.run_id, wid]):
                from suitefit.history import WorkerRecord

                self.history.upsert_worker(WorkerRecord(self.run_id, wid, None, None, None, None, None,
                                                        None, 0, "died", str(error)))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """xdist names the test a dead worker was running: keep it as a failed test row."""
        from suitefit.history import TestRecord

        node = getattr(report, "node", None)
        wid = node.gateway.id if node is not None else "?"
        now = timing.wall()
        self.history.add_tests([TestRecord(self.run_id, crashitem, file_of(crashitem), wid, -1, now,
                                           0.0, 0.0, 0.0, 0.0, 0.0, "failed",
                                           f"the worker running it ({wid}) died")])
        self.history.add_event(self.run_id, now, "crash_item", worker=wid, nodeid=crashitem)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.finish(int(exitstatus))
        if self.closing is not None:
            self.closing.at_sessionfinish(session)
            if int(session.exitstatus) != self.exitstatus:
                self.exitstatus = int(session.exitstatus)
                self.history.update_run(self.run_id, exit_code=self.exitstatus)
        if self.control is not None:
            self.control.remove_files()

    def finish(self, exitstatus: int) -> None:
        if self.finished:
            return
        self.finished = True
        self.exitstatus = exitstatus
        if self.local_worker is not None:
            self.local_worker.finish()
        # Stop the sampler process before anything reaps leftovers: it is our child too.
        peaks = self.sampler.stop()
        if self.sampler.ended_early:  # its memory figures never came: say why they are missing
            _log_stream(self.config).write(
                f"suitefit: warning: the sampler process {self.sampler.ended_early}: this run's memory "
                f"and per-file peaks are not measured (times, outcomes and fixtures are)\n")
        if self.control is not None:
            self.control.finish()
        self.leftovers.finish(workers=self.worker_pids.values())
        wall = timing.perf_counter() - self.t0
        wall_clock_s = timing.wall() - self.wall0
        cpu = timing.cpu_seconds() - self.cpu0
        h = self.history
        counts: dict[str, int] = {}
        span = [float("inf"), float("-inf")]  # the tests' span: first start, last end
        for outcome, n, first, last in h.execute(
                "SELECT outcome, COUNT(*), MIN(started), MAX(started + wall_s) FROM tests WHERE run_id = ? "
                "GROUP BY outcome", [self.run_id]):
            counts[outcome] = n
            span = [min(span[0], first), max(span[1], last)]
        n_tests = sum(counts.values())
        n_workers, worker_peak = h.execute(
            "SELECT COUNT(*), MAX(peak_rss_mb) FROM workers WHERE run_id = ?", [self.run_id])[0]
        # A spike shorter than the sampling interval is still in a worker's exact (VmHWM) peak.
        peak = max(peaks.peak_rss_mb, worker_peak or 0.0)
        if self.local_worker is not None:
            self.done = self.local_worker.tests_done  # the count the rate limit held back
        if self.progress is not None:
            self.progress.update(self.done, float("nan"))
            self.progress.freeze(peak)  # its final line comes after pytest's output (close_progress)
        status = {0: "passed", 1: "failed", 2: "interrupted", 3: "internal-error", 4: "usage-error",
                  5: "no-tests"}.get(exitstatus, "error")
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        collect_errors = 0
        outcomes: dict[str, int] | None = None
        if tr is not None:
            from suitefit.summary import pytest_outcomes

            collect_errors = sum(1 for r in tr.stats.get("error", []) if getattr(r, "when", None) in (None, "collect"))
            outcomes = pytest_outcomes(tr.stats)
        if collect_errors and n_tests == 0:
            status = "collect-error"
        if outcomes is None:  # no terminal reporter (-p no:terminal): our own rows, one outcome per test
            outcomes = {k: v for k, v in counts.items() if v}
            outcomes["error"] = outcomes.get("error", 0) + collect_errors
        h.update_run(
            self.run_id,
            status=status,
            exit_code=exitstatus,
            finished=timing.wall(),
            wall_s=wall,
            cpu_s=cpu,
            workers=n_workers,
            collected=n_tests,
            passed=outcomes.get("passed", 0),
            failed=outcomes.get("failed", 0),
            skipped=outcomes.get("skipped", 0),
            errors=outcomes.get("error", 0),
            peak_rss_mb=peak or None,
            peak_pss_mb=peaks.peak_pss_mb,
            peak_procs=peaks.peak_procs or None,
            secs_above=peaks.secs_above,
        )
        # tests_s: what the next plans read of this run's tests as a whole, kept here so that
        # they need not scan its rows again (50,000 a run, 20 runs read per plan); tests_span:
        # its first start and last end, wall-clock stamps as every row's
        # xdist's controller grows with the run (pytest keeps every report: ~7 KiB a test,
        # 75 -> 435 MiB over 50,000 tests, as much without suitefit): its own peak, for the
        # next plans' fixed memory
        controller_mb = controller_cpu_s = None
        from suitefit.measure.proctree import cpu_ticks, hwm_mb, steal_share
        from suitefit.measure.pssgate import at_peak  # the run's peak may be a worker's exact one

        if self.distributed:
            controller_mb = hwm_mb()
            # xdist's controller takes in every test's reports on one interpreter (its execnet
            # threads and the main loop share one GIL): its CPU a test bounds how fast any
            # number of workers can run the suite (costs.controller_per_test)
            t = timing.times()
            controller_cpu_s = t[0] + t[1] - self.own_cpu0
        steal = steal_share(self.ticks0, cpu_ticks())
        early = {"sampler_ended_early": self.sampler.ended_early} if self.sampler.ended_early else {}
        h.merge_run_meta(self.run_id, **early, sampler_cpu_s=peaks.cpu_s, sampler_rss_mb=peaks.rss_mb,
                         samples=peaks.samples, outcomes=outcomes, pss_reads=peaks.pss_reads,
                         pss_at_peak_mb=None if (pss := at_peak(peaks.pss_at_peak, peak)) is None else round(pss, 1),
                         host_steal=None if steal is None else round(steal, 4),
                         tests_span=span if n_tests else None,
                         tests_s=self._tests_s(span[0], wall, wall_clock_s) if n_tests else None,
                         controller_mb=round(controller_mb, 1) if controller_mb else None,
                         controller_start_mb=round(self.controller_start_mb, 1) if self.controller_start_mb else None,
                         controller_cpu_s=None if controller_cpu_s is None else round(controller_cpu_s, 3))
        h.write_waiting()

    def _tests_s(self, first: float, monotonic_ref_s: float, wall_clock_ref_s: float) -> float:
        """From the first test's start to the last one's end, on the monotonic clock: the stamps'
        part brought to it (``monotonic_s``), the last test's own duration as it was timed."""
        started, took = self.history.execute(
            "SELECT started, wall_s FROM tests WHERE run_id = ? ORDER BY started + wall_s DESC LIMIT 1",
            [self.run_id])[0]
        return round(monotonic_s(started - first, monotonic_ref_s, wall_clock_ref_s) + took, 3)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write_summary(terminalreporter, self.history, self.run_id)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_unconfigure(self, config: pytest.Config) -> Generator[None, None, None]:
        """A serial run's unconfigure hooks (plugins', conftests', ours), timed: what xdist's
        controller runs again after its workers' ends, for the first plans with workers."""
        t0 = timing.perf_counter()
        yield
        if not self.distributed and self.finished:
            with contextlib.suppress(Exception):  # the run is recorded; this is one more figure
                self.history.merge_run_meta(self.run_id, unconfigure_s=round(timing.perf_counter() - t0, 3))
        self.history.write_waiting()  # what waited since finish


def write_summary(tr: Any, h: History, run_id: int, top: int = 5) -> None:
    from suitefit.summary import (
        SHOWN_FAILURES,
        failed_tests,
        file_summaries,
        fixture_summaries,
        outcome_words,
        pss_words,
        release_lines,
        run_outcomes,
    )

    run = h.run(run_id)
    tr.section(f"suitefit run {run_id}", sep="-")
    tr.write_line(
        f"session {fmt_s(run.wall_s)} (suitefit's start in pytest to the end of the last test), "
        f"tree peak RSS {fmt_mb(run.peak_rss_mb)}"
        + (f" (PSS {pss})" if (pss := pss_words(run.peak_pss_mb, run.meta_dict)) else "")
        + f", {run.peak_procs or 0} processes at most"
        + (f", {run.secs_above:.1f} s above {fmt_mb(run.threshold_mb)}" if run.threshold_mb else "")
    )
    from suitefit.steal import steal_words

    stolen = steal_words(run.meta_dict.get("host_steal"))
    if stolen:
        tr.write_line(stolen)
    for w in h.workers(run_id):
        tr.write_line(
            f"  worker {w.worker:<6} peak {fmt_mb(w.peak_rss_mb):>9}  baseline {fmt_mb(w.baseline_mb):>9}"
            f"  startup {fmt_s(w.startup_s):>7}  {w.tests} tests"
        )
    files = sorted(file_summaries(h, run_id), key=lambda f: f.peak_mb, reverse=True)[:top]
    if files:
        tr.write_line("top files by peak memory above their worker's baseline:")
        for f in files:
            tr.write_line(f"  {fmt_mb(f.peak_mb):>9}  {fmt_s(f.wall_s):>7}  {f.path}")
    fx = [f for f in fixture_summaries(h, run_id) if f.expensive][:top]
    if fx:
        tr.write_line("expensive fixtures (per setup) and the files that share them:")
        for x in fx:
            tr.write_line(
                f"  {x.name} ({x.scope}): setup {fmt_s(x.setup_s)}, {x.procs} processes, {fmt_mb(x.mb)},"
                f" set up by {x.setups} worker(s); used by {len(x.files)} file(s): {', '.join(x.files[:6])}"
                + (" ..." if len(x.files) > 6 else "")
            )
    for line in release_lines(h, run_id):
        tr.write_line(line)
    for e in h.events(run_id, "leftover"):
        d = e.detail_dict
        tr.write_line(f"leftover process {d.get('pid')} ({str(d.get('cmdline', ''))[:80]}) started by "
                      f"{e.nodeid}: {d.get('fate')}")
    for e in h.events(run_id, "worker_died"):
        d = e.detail_dict
        tr.write_line(f"worker {e.worker} died ({d.get('exit')}) while running {e.nodeid}; "
                      f"last measured memory {fmt_mb(d.get('mb'))}")
    failed = failed_tests(h, run_id, run.started)
    if failed:
        tr.write_line(f"failed ({len(failed)}):")
        for bad in failed[:SHOWN_FAILURES]:
            tr.write_line(f"  {bad.nodeid} [{bad.worker}] {bad.reason or bad.outcome}")
        if len(failed) > SHOWN_FAILURES:
            tr.write_line(f"  ... and {len(failed) - SHOWN_FAILURES} more (suitefit report {run_id})")
    over = h.events(run_id, "sched_over-budget")
    waits = h.events(run_id, "sched_wait")
    if over or waits:
        tr.write_line(f"memory admission: {len(waits)} wait(s); {len(over)} unit(s) ran alone over the budget"
                      + "".join(f"; {e.nodeid}" for e in over[:3]))
    for e in h.events(run_id, "sched_split")[:SHOWN_FAILURES]:
        why = str(e.detail_dict.get("reason", "")).removeprefix("nothing pending; ")
        tr.write_line(f"tail moved: {why}")
    said = run_outcomes(run)
    if said is not None:
        tr.write_line(f"recorded outcomes: {outcome_words(said)} (as pytest counts them: reports, not tests)")
    tr.write_line(f"history: {h.path} (suitefit history / suitefit report {run_id})")


def configure(config: pytest.Config) -> None:
    # No `suitefit_group` marker: groups are plan input, read before pytest collects anything,
    # so they are declared in one readable place, [tool.suitefit] groups (see config.py).
    workerinput = getattr(config, "workerinput", None)
    try:
        if workerinput is not None:
            _configure_worker(config, workerinput)
        else:
            _configure_controller(config)
    except SuitefitError as e:
        raise pytest.UsageError(f"suitefit: {e}") from None


def _configure_controller(config: pytest.Config) -> None:
    from suitefit.rootdir_guard import moved_rootdir

    moved = moved_rootdir(config)
    if moved:  # the suite pytest found is not the one asked for: nothing to measure
        raise SuitefitError(moved)
    grace = float(config.getoption("suitefit_grace"))
    if grace < 0:
        raise SuitefitError(f"--suitefit-grace must be >= 0 seconds, got {grace:g}")
    path = _history_path(config)
    history = History(path)
    started = timing.wall()
    run_id = config.getoption("suitefit_run_id")
    # part of the suite collected (paths), or selected (``costs._most_collected``): whether
    # the command's own words did it, not the configuration's, which every run has
    said: dict[str, bool] = {"selection_given": _selection_given(config)}
    if _paths_given(config):  # part of the suite collected: its start-up and end are not the suite's
        said["paths_given"] = True
    if run_id is None:
        from suitefit.measure.proctree import create_time

        run_id = history.new_run(config.getoption("suitefit_kind"), started=started,
                                 argv=sys.argv[1:], cwd=os.getcwd(), rootdir=str(config.rootpath),
                                 meta={"pid": os.getpid(), "pid_started": create_time(), **said})
    else:
        history.run(run_id)  # must exist
        history.merge_run_meta(run_id, **said)  # a verb's run, made before pytest's arguments were read
    threshold = config.getoption("suitefit_threshold")
    threshold_mb = parse_size_mb(threshold, "--suitefit-threshold") if threshold else _default_threshold(config)
    distributed = _is_distributed(config)
    history.update_run(run_id, started=started, threshold_mb=threshold_mb, host=platform.node(),
                       rootdir=str(config.rootpath), **_versions())
    history.defer_refused_writes(f"run {run_id}'s session")  # the run has begun: a refused write must not stop its tests
    side = RunSide(config, history, run_id, started, threshold_mb, distributed, grace)
    config.stash[RUN_KEY] = side
    config.pluginmanager.register(side, "suitefit-run")
    if distributed:  # the workers' reports count the tests done (without xdist the recorder does)
        config.pluginmanager.register(_DoneCounter(side), "suitefit-done")
    plan_path = config.getoption("suitefit_plan")
    plan = None
    if plan_path:
        from suitefit.run_control import load_plan

        plan = load_plan(plan_path)
    if distributed and (plan is not None or config.getoption("suitefit_run_id") is not None):  # planned, or a verb's
        _share_cpus(config, history, run_id, plan.budget.cpus if plan is not None else None)
    if plan is not None:
        from suitefit.run_control import RunControl

        side.control = RunControl(config, plan, history, run_id, side.sampler, side.leftovers, side.say)
        config.pluginmanager.register(side.control, "suitefit-control")
        from suitefit.run_close import RunClose

        side.closing = RunClose(history, run_id, side.control.plan, side.control.out, side.control.dead,
                                config.getoption("suitefit_shard_spec"), config.getoption("suitefit_shard_result"),
                                explain_max=int(config.getoption("suitefit_explain")),
                                explain_s=float(config.getoption("suitefit_explain_s")))
    proc_ok, side.exact_hwm = _check_proc(config)
    side.sampler.measure_memory = proc_ok
    if not distributed:
        if side.control is not None:  # no thread here: the sampler process keeps journal and heartbeat
            side.sampler.keep_journal(str(side.control.journal.path), side.control.budget_mb)
        _start_sampler(config, side)
        wr = WorkerRecorder(history, run_id, MAIN_WORKER, Sender(side.sampler.channel_path),
                            reap_grace_s=grace, announce_tests=side.control is not None,
                            exclude_pids=(side.sampler.pid,) if side.sampler.pid else (),
                            exact_hwm=side.exact_hwm, after_tests=side.show_done, final_writes=False)
        config.stash[WORKER_KEY] = wr
        config.pluginmanager.register(wr, "suitefit-worker")
        side.local_worker = wr
        _register_filters(config, path, run_id)
        if side.control is not None:
            _attach_release(config, MAIN_WORKER, history, run_id)
    else:
        _start_sampler(config, side)


def _share_cpus(config: pytest.Config, history: History, run_id: int, cpus: int | None) -> None:
    """Give the xdist workers of a planned run, or of one a verb started (a profile's
    calibration, `suitefit profile -n N`, a sweep's whole run), the thread pools a plan's
    workers get (``threads.py``): what a profile or a calibration measures is then what a
    plan's run does. Unpinned, scipy's conftest called threadpoolctl at every test's setup
    under xdist: a calibration read x1.44 (median of seven), x1.33 pinned, whole runs x1.09-1.18. Set
    in this process's environment before xdist starts the workers, which inherit it. A
    user's own `pytest --suitefit` is measured as it runs: left alone. ``cpus``: the plan's,
    else this machine's (``budget.detect_cpus``: a cgroup's quota included)."""
    from suitefit.threads import pin_threads, threads_per_worker

    n = _local_workers(config)
    if n < 2:
        return
    if cpus is None:
        from suitefit.budget import detect_cpus

        cpus = detect_cpus()[0]
    threads = threads_per_worker(cpus, n)
    history.merge_run_meta(run_id, pinned_threads=pin_threads(os.environ, threads), threads_per_worker=threads)


def _local_workers(config: pytest.Config) -> int:
    """How many workers xdist starts on this machine: its ``--tx`` specs, which it has made of
    ``-n`` (``auto`` counted, ``--maxprocesses`` applied) before any plugin's configure;
    ``2*popen`` is two. Only ``popen`` workers run here and inherit this environment: an
    ``ssh=`` or ``socket=`` worker, or a ``popen//via=`` one, runs on another machine's CPUs.
    (execnet's specs are ``//``-separated keys in any order.)"""
    n = 0
    for spec in config.getoption("tx", None) or ():
        head, star, rest = str(spec).partition("*")
        count, gateway = (int(head), rest) if star and head.isdigit() else (1, str(spec))
        keys = {part.split("=", 1)[0].strip() for part in gateway.split("//")}
        if "popen" in keys and "via" not in keys:
            n += count
    return n


def _start_sampler(config: pytest.Config, side: RunSide) -> None:
    log = _log_stream(config)
    side.sampler.start(log)
    if side.sampler.failed:
        log.write(f"suitefit: warning: the sampler process could not start "
                                  f"({side.sampler.failed}): memory and per-file peaks are not measured "
                                  f"(times, outcomes and fixtures are)\n")


class _DoneCounter:
    """Under xdist: the controller counts the tests done from the workers' reports.

    A test run again (pytest-rerunfailures: a "rerun" report, and in its versions a
    teardown report for each try or not) counts once, at its first teardown after it.
    """

    def __init__(self, side: RunSide) -> None:
        self.side = side
        self.rerun: dict[str, bool] = {}  # nodeid -> counted already

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.outcome == "rerun":
            self.rerun.setdefault(report.nodeid, False)
        elif report.when in ("teardown", "???"):
            if self.rerun and report.nodeid in self.rerun:
                if self.rerun[report.nodeid]:
                    return
                self.rerun[report.nodeid] = True
            self.side.done += 1


def _log_stream(config: pytest.Config) -> Any:
    from suitefit.streams import original_stderr

    return original_stderr(config)


def _check_proc(config: pytest.Config) -> tuple[bool, bool]:
    """Say in one line what cannot be measured here: (memory readable, exact per-file VmHWM)."""
    from suitefit.measure import proctree

    say = _log_stream(config)
    if os.environ.get("SUITEFIT_NO_PROC") or not proctree.proc_readable():
        say.write("suitefit: warning: /proc is not readable here: memory is not measured "
                  "(times, outcomes and fixtures are)\n")
        return False, False
    if os.environ.get("SUITEFIT_NO_CLEAR_REFS") or not proctree.reset_hwm():
        say.write("suitefit: warning: /proc/self/clear_refs is refused here: per-file peaks are "
                  "sampled every interval, not exact\n")
        return True, False
    return True, True


class ShardFilter:
    """Keeps this shard's files; records what the whole collection was (its fingerprint)."""

    def __init__(self, spec_path: str, history_path: str, run_id: int) -> None:
        from suitefit.shard_results import ShardSpec

        try:
            self.spec = ShardSpec.load(spec_path)
        except (OSError, ValueError, KeyError) as e:
            raise SuitefitError(f"cannot read shard spec {spec_path}: {e}") from None
        self.history_path = history_path
        self.run_id = run_id

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        from pathlib import Path

        from suitefit.shard_results import write_collected

        write_collected(Path(self.history_path), self.run_id, [i.nodeid for i in items])
        _keep_files(config, items, self.spec.keeps)


class OnlyFiles:
    """Keeps the tests of the listed files, in the listed order (a calibration's slice).

    Every xdist worker collects the whole suite and applies the same list, so their
    collections still agree, and the run's workers start as a full run's do.
    """

    def __init__(self, list_path: str) -> None:
        from pathlib import Path

        try:
            text = Path(list_path).read_text(encoding="utf-8")
        except OSError as e:
            raise SuitefitError(f"cannot read the file list {list_path}: {e.strerror}") from None
        self.rank = {p: i for i, p in enumerate(dict.fromkeys(ln.strip() for ln in text.splitlines() if ln.strip()))}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        rank = self.rank
        _keep_files(config, items, rank.__contains__)
        items.sort(key=lambda i: rank[file_of(i.nodeid)])  # stable: a file's own order stays


def _keep_files(config: pytest.Config, items: list[pytest.Item], keeps: Callable[[str], bool]) -> None:
    """Keep the items of the files ``keeps`` accepts; the rest are deselected, as ``-k`` does."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for i in items:
        (keep if keeps(file_of(i.nodeid)) else drop).append(i)
    if drop:
        items[:] = keep
        config.hook.pytest_deselected(items=drop)


def _register_filters(config: pytest.Config, history_path: str, run_id: int) -> None:
    """The filters a run's options ask for: a shard's files, a calibration's slice."""
    spec = config.getoption("suitefit_shard_spec")
    if spec:
        config.pluginmanager.register(ShardFilter(spec, history_path, run_id), "suitefit-shard")
    only = config.getoption("suitefit_only", None)
    if only:
        config.pluginmanager.register(OnlyFiles(only), "suitefit-only")


def _is_distributed(config: pytest.Config) -> bool:
    """xdist's own test (its ``_is_distribution_mode``), readable before its configure runs."""
    if config.getoption("collectonly", False):
        return False
    return config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))


def _configure_worker(config: pytest.Config, workerinput: dict[str, Any]) -> None:
    run_id = workerinput.get("suitefit_run_id")
    if run_id is None:
        return
    history = History(workerinput["suitefit_history"])
    history.defer_refused_writes(f"run {run_id}'s worker {workerinput['workerid']}")
    grace = workerinput.get("suitefit_grace")
    wr = WorkerRecorder(history, int(run_id), str(workerinput["workerid"]),
                        Sender(workerinput.get("suitefit_channel")),
                        reap_grace_s=float(grace) if grace is not None else None,
                        exact_hwm=bool(workerinput.get("suitefit_exact_hwm", True)))
    config.stash[WORKER_KEY] = wr
    config.pluginmanager.register(wr, "suitefit-worker")
    _register_filters(config, workerinput["suitefit_history"], int(run_id))
    if config.getoption("suitefit_plan"):  # xdist hands workers the controller's options
        _attach_release(config, str(workerinput["workerid"]), history, int(run_id))


def _attach_release(config: pytest.Config, worker: str, history: History, run_id: int) -> None:
    """Under a plan, the process that runs tests carries out the plan's early releases."""
    from suitefit.release import attach

    attach(config, worker, history, run_id)


def _same_file(a: Any, b: Any) -> bool:
    try:
        return os.path.sameopenfile(a.fileno(), b.fileno())
    except (AttributeError, ValueError, OSError):
        return False


def _isatty(file: Any) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _status_lines_once(config: pytest.Config) -> None:
    """xdist's worker status line, written once: without a terminal it writes it as a line
    when the workers start and again when they have collected, and under ``-q`` both are
    "bringing up nodes..." (xdist's ``TerminalDistReporter.ensure_show_status``)."""
    trdist = config.pluginmanager.get_plugin("terminaldistreporter")
    show = getattr(trdist, "ensure_show_status", None)
    status = getattr(trdist, "getstatus", None)
    if show is None or status is None:
        return
    shown: set[str] = set()

    def ensure_show_status() -> None:
        line = status()
        if line not in shown:
            shown.add(line)
            show()

    trdist.ensure_show_status = ensure_show_status  # type: ignore[union-attr]


def _default_threshold(config: pytest.Config) -> float | None:
    """The memory budget when one is configured, else None (no line drawn).

    A nearest pyproject.toml that does not mention suitefit (or none at all) configures
    none: told from its bytes, without the config module's import and a TOML parse
    (~14 ms of every plain `pytest --suitefit`; `suitefit run` passes its budget)."""
    from suitefit.pyproject import find_pyproject

    pp = find_pyproject(config.rootpath.resolve())
    try:
        if pp is None or b"suitefit" not in pp.read_bytes():
            return None
    except OSError:
        return None
    from suitefit.config import load_config

    try:
        return load_config(config.rootpath).memory_budget_mb
    except SuitefitError:
        return None


def unconfigure(config: pytest.Config) -> None:
    side = config.stash.get(RUN_KEY, None)
    if side is not None and not side.finished:  # e.g. a usage error before the session ran
        side.finish(4)
    if side is not None:
        side.close_progress()
    if side is not None and side.closing is not None:
        side.closing.say(side.exitstatus if side.exitstatus is not None else 4)


def monotonic_s(wall_clock_s: float, monotonic_ref_s: float, wall_clock_ref_s: float) -> float:
    """A duration between two of the history's wall-clock stamps, on the monotonic clock.

    Stamps are wall-clock time so that every process's rows line up, and that clock may be
    slewed or stepped while a run goes on (NTP; on the VM these benchmarks ran on it gained
    0.5-2.5% on the monotonic clock, 7 s over a 277 s profile, which made the profile's end
    after its last test -5.3 s). The run's own span on both clocks gives the rate; one under
    a second is left as it is.
    """
    if monotonic_ref_s < 1.0 or wall_clock_ref_s <= 0:
        return wall_clock_s
    return wall_clock_s * monotonic_ref_s / wall_clock_ref_s
