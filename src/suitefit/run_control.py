"""What `suitefit run` adds to a measured session: the plan's scheduler, thread pinning,
the in-flight journal and heartbeat, dead-worker handling, and reaping leftovers.

Registered by the plugin only when a plan is given (``--suitefit-plan``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from suitefit import timing
from suitefit.exits import describe_exit
from suitefit.history import History, WorkerRecord, remove_run_files
from suitefit.measure import reaper
from suitefit.measure.journal import LEVELS, Heartbeat, Journal
from suitefit.measure.sampler import Sample, SamplerProcess
from suitefit.model import Plan
from suitefit.streams import original_stderr
from suitefit.units import fmt_mb

if TYPE_CHECKING:
    from suitefit.release import ReleaseBoard


class RunControl:
    def __init__(self, config: pytest.Config, plan: Plan, history: History, run_id: int,
                 sampler: SamplerProcess, leftovers: reaper.SessionReaper, say: Callable[[str], None]) -> None:
        self.config = config
        self.plan = plan
        self.history = history
        self.run_id = run_id
        self.sampler = sampler
        self.leftovers = leftovers  # the session's reaper: a dead worker's children go through it too
        self.budget_mb = plan.budget.memory_mb or None
        near = LEVELS[0] * self.budget_mb if self.budget_mb else float("inf")  # the first heartbeat
        self.journal = Journal(history.path.parent / f"inflight-{run_id}.json", run_id, at_once_from_mb=near)
        self.out = original_stderr(config)
        self.say = say  # above the live progress line on a terminal
        self.worker_pids: dict[str, int] = {}
        self.worker_kids: dict[str, tuple[int, ...]] = {}  # the processes under each worker, last seen
        self.worker_mb: dict[str, float] = {}
        self.sched: Any = None
        self.gateways: list[str] = []  # the workers xdist started before the scheduler was made
        self.dead: list[dict[str, Any]] = []
        self._release_board: ReleaseBoard | None = None
        sampler.subscribe(self._on_sample)
        if self.budget_mb:
            sampler.subscribe(Heartbeat(self.budget_mb, self.journal, self._heartbeat))
        history.merge_run_meta(run_id, subreaper=leftovers.subreaper, journal=str(self.journal.path))

    # -- memory per worker -----------------------------------------------------------------

    def _on_sample(self, s: Sample) -> None:
        if self.worker_pids:
            # Each worker's tree as the sampler process read it for this very sample (one read
            # of the tree, not one more walk of /proc per worker here, ten times a second). A
            # worker gone keeps what was last seen of it: its children are reaped on its death.
            self.worker_mb.update(s.workers)
            self.worker_kids.update(s.kids)
        else:  # single process: it is the worker
            self.worker_mb["main"] = s.rss_mb
        self.journal.update_memory(dict(self.worker_mb), s.rss_mb)

    def live(self) -> tuple[float, dict[str, float]]:
        """The tree's MiB and each worker's, as the latest sample read them: a worker whose
        process has exited is not in it (the core waits on that: ``Core.leaving``)."""
        last = self.sampler.last
        if last is None or timing.monotonic() - last.t > 0.2:
            last = self.sampler.sample_now(self.worker_pids)
            self._on_sample(last)
        if not self.worker_pids:  # single process: it is the worker
            return last.rss_mb, dict(self.worker_mb)
        return last.rss_mb, dict(last.workers)

    def _heartbeat(self, line: str, level: float, tree_mb: float) -> None:
        self.say(line)
        self.history.add_event(self.run_id, timing.wall(), "heartbeat", level=level, tree_mb=tree_mb,
                               budget_mb=self.budget_mb,
                               inflight=[x.as_dict() for x in self.journal.snapshot()])

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """One process (a 1-worker plan runs without xdist): the order the core decides.

        The same core that schedules xdist workers, run on the plan's predicted clock for
        one worker and matched to what was collected; tests keep their order in a file.
        """
        if len(config.getoption("tx", None) or ()) > 0:
            return
        from suitefit.plan.core import chunk_of
        from suitefit.plan.simulate import simulate

        by_file: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(i)
        plan = self.plan
        sim = simulate(plan, startup_s=0.0, baseline_mb=plan.baseline_mb, budget_mb=plan.admit_mb,
                       limit_mb=plan.budget.memory_mb,
                       fixed_mb=plan.fixed_mb, slow=1.0, releasable=plan.releasable, names=["main"],
                       collected=list(by_file))
        order: list[int] = []
        last_of: dict[str, int] = {}
        for name in sim.placement.get("main", ()):
            u = sim.units[name]
            idx = chunk_of(by_file.get(u.files[0], []), u.chunk, u.span) if u.chunk is not None else \
                [i for f in u.files for i in by_file.get(f, [])]
            order += idx
            if idx:
                last_of[name] = idx[-1]
        seen = set(order)
        order += [i for i in range(len(items)) if i not in seen]  # (none: the core places every file)
        # fixtures the core releases after their last user: static instructions in one process
        self.static_releases: dict[str, list[str]] = {}
        for r in sim.releases:
            if r.after in last_of:
                self.static_releases.setdefault(items[last_of[r.after]].nodeid, []).append(r.fixture)
        items[:] = [items[i] for i in order]
        if self.static_releases:
            self.release_locally(self.static_releases)

    # -- xdist hooks ---------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from suitefit.xdist_sched import SuitefitScheduling

        numnodes = len(config.getoption("tx") or ())
        self.sched = SuitefitScheduling(config, log, self.plan, numnodes=numnodes, live=self.live,
                                        journal=self.journal, on_decision=self._decision,
                                        releases=self.release_board() if self.plan.releasable else None,
                                        names=self.gateways)
        _no_status_over_tests(config, self.sched)
        return self.sched

    def _decision(self, kind: str, worker: str, unit: str, reason: str) -> None:
        if kind == "done":
            return
        self.history.add_event(self.run_id, timing.wall(), f"sched_{kind}", worker=worker, nodeid=unit,
                               reason=reason)
        if kind == "over-budget":
            self.say(f"suitefit: warning: {unit} {reason}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        if self.sched is None:
            self.gateways.append(gateway.id)
        else:
            self.sched.coming(gateway.id)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        with contextlib.suppress(Exception):
            self.worker_pids[node.gateway.id] = int(node.gateway._io.popen.pid)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if self.sched is not None:
            self.sched.node_down(node, died=bool(error))
        if not error:
            return
        wid = node.gateway.id
        code = self._exit_code(node)
        how = describe_exit(code)
        inflight = [x for x in self.journal.snapshot() if x.worker == wid]
        test = inflight[0].nodeid if inflight else "no test (between tests)"
        mb = self.worker_mb.get(wid)
        line = (f"suitefit: worker {wid} died ({how}) while running {test}; "
                f"its last measured memory: {fmt_mb(mb)}")
        self.say(line)
        self.dead.append({"worker": wid, "test": test, "exit": how, "mb": mb})
        self.history.add_event(self.run_id, timing.wall(), "worker_died", worker=wid, nodeid=test,
                               exit=how, code=code, mb=mb, error=str(error))
        self.history.upsert_worker(WorkerRecord(self.run_id, wid, self.worker_pids.get(wid), None, None,
                                                None, None, mb, 0, "died", line))
        if self.config.getoption("maxworkerrestart", None) in ("0", 0) and self.sched is not None:
            self._stop_others(node)
        self.leftovers.reap([p for p in self.worker_kids.get(wid, ()) if reaper.pid_alive(p)], origin=f"worker {wid}")

    def _exit_code(self, node: Any) -> int | None:
        try:
            popen = node.gateway._io.popen
            deadline = timing.monotonic() + 2
            while popen.poll() is None and timing.monotonic() < deadline:
                timing.sleep(0.05)
            return popen.poll()
        except Exception:
            return None

    def _stop_others(self, dead: Any) -> None:
        """No restart, no hang: drop what was not started and let the others finish their test."""
        for node in list(self.sched.node2pending):
            if node is not dead:
                self.sched.withdraw(node)

    # -- early release of fixtures (suitefit.release) -----------------------------------------

    def release_board(self) -> ReleaseBoard:
        """Where the scheduler posts "release F on worker W after test T" (a ``ReleaseBoard``)."""
        from suitefit.release import ReleaseBoard, board_folder

        if self._release_board is None:
            self._release_board = ReleaseBoard(board_folder(self.history.path, self.run_id))
        return self._release_board

    def release_locally(self, after: Mapping[str, Sequence[str]]) -> None:
        """One process (no xdist): release these fixtures after these tests (node id -> names)."""
        from suitefit.release import PLUGIN_NAME

        plugin = self.config.pluginmanager.get_plugin(PLUGIN_NAME)
        assert plugin is not None, "registered by session.py in a one-process run under a plan"
        for nodeid, names in after.items():
            plugin.add(nodeid, names)

    def _remove_release_board(self) -> None:
        from suitefit.release import ReleaseBoard, board_folder

        folder = board_folder(self.history.path, self.run_id)
        if folder.exists():
            ReleaseBoard(folder).remove()

    # -- the end ---------------------------------------------------------------------------

    def finish(self) -> None:
        self.journal.maybe_write(force=True)
        self._remove_release_board()
        self.journal.close()

    def remove_files(self) -> None:
        """Once the run's end is recorded (its shard result written from the spec): the journal
        (for a run killed mid-test), the plan `suitefit run` handed over and the shard spec are
        in the history. Left beside it, each run added them for good (a 5,000-file plan is
        megabytes); a plan named by hand is not ours to remove."""
        remove_run_files(self.history.path, self.run_id, self.config.getoption("suitefit_plan", None))


def _no_status_over_tests(config: pytest.Config, sched: Any) -> None:
    """On a terminal xdist rewrites its status line (a carriage return) as each worker
    collects: a worker that collects after the first has started its tests (the scheduler
    starts each worker once it has collected) would be written over their progress."""
    trdist = config.pluginmanager.get_plugin("terminaldistreporter")
    setstatus = getattr(trdist, "setstatus", None)
    if setstatus is None:
        return

    def quiet_once_running(spec: Any, status: Any, *, tests_collected: int, show: bool = True) -> None:
        setstatus(spec, status, tests_collected=tests_collected, show=show and not sched.started)

    trdist.setstatus = quiet_once_running  # type: ignore[union-attr]


def load_plan(path: str) -> Plan:
    import json

    from suitefit.errors import SuitefitError

    try:
        return Plan.from_json(json.loads(Path(path).read_text()))
    except OSError as e:
        raise SuitefitError(f"cannot read plan {path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise SuitefitError(f"plan {path} is not a suitefit plan: {e}") from None
