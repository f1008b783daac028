"""A history that refuses writes during a run (another process holds it, its disk fails)
must not stop the tests: the writes wait in memory, are made once it is free, and what
cannot be made by the end is named in one line. Before, the first refused write raised in a
hook: a passing run ended at 37 of 116 tests with pytest's internal error (exit 3).

Real SQLite files, and a real lock held by another connection.
"""

from __future__ import annotations

import sqlite3
import textwrap
import threading
import time
from pathlib import Path

import pytest
from clihelp import suitefit

from suitefit import historydb
from suitefit.errors import SuitefitError
from suitefit.history import History


def _hold(path: Path) -> sqlite3.Connection:
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("BEGIN EXCLUSIVE")
    return c


def _kinds(path: Path, run_id: int) -> list[str]:
    c = sqlite3.connect(path)
    try:
        return [k for (k,) in c.execute("SELECT kind FROM events WHERE run_id = ? ORDER BY id", (run_id,))]
    finally:
        c.close()


def _run(path: Path, monkeypatch: pytest.MonkeyPatch, *, defer: bool = True) -> tuple[History, int]:
    """A history with a run begun (``defer``: its refused writes waiting, as a run's process
    has them), its waits shortened (a lock is waited for 50 ms in the run, 0.3 s outside it
    and at its end; a refused write is tried again after 0.2 s)."""
    monkeypatch.setattr(historydb, "RETRY_S", 0.2)
    monkeypatch.setattr(historydb, "RUN_BUSY_MS", 50)
    monkeypatch.setattr(historydb, "BUSY_TIMEOUT_S", 0.3)
    h = History(str(path))
    run_id = h.new_run("profile", started=time.time())
    if defer:
        h.defer_refused_writes("run 1's test")
    return h, run_id


def test_a_refused_write_waits_and_is_made_in_order_once_the_history_is_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.sqlite"
    h, run_id = _run(path, monkeypatch)
    holder = _hold(path)
    h.add_event(run_id, time.time(), "first")  # refused: waits, says so once
    h.update_run(run_id, status="passed")
    h.add_event(run_id, time.time(), "second")
    err = capfd.readouterr().err
    assert err.count("suitefit: warning:") == 1 and "locked by another process" in err, err
    assert "run 1's test keeps its records in memory and tries again every" in err
    assert _kinds(path, run_id) == []  # (a reader sees nothing of it yet)
    holder.execute("COMMIT")
    holder.close()
    time.sleep(0.25)
    h.add_event(run_id, time.time(), "third")  # the retry is due: all of it, in order
    assert _kinds(path, run_id) == ["first", "second", "third"]
    assert h.run(run_id).status == "passed"
    assert h.write_waiting() == 0
    assert capfd.readouterr().err == ""
    # outside a run (a verb's own writes) a refused write is still one error, at once
    other = History(str(path))
    holder = _hold(path)
    try:
        with pytest.raises(SuitefitError, match="locked by another process"):
            other.add_event(run_id, time.time(), "refused")
    finally:
        holder.close()


def test_writes_still_refused_at_the_end_are_named_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.sqlite"
    h, run_id = _run(path, monkeypatch, defer=False)
    h.add_event(run_id, time.time(), "before")
    h.defer_refused_writes("run 1's test")
    holder = _hold(path)
    try:
        h.add_event(run_id, time.time(), "lost")
        h.merge_run_meta(run_id, lost=True)
        assert h.write_waiting() == 2
        # the last attempt failed: what comes after is not tried (no wait of 1 s), only counted
        monkeypatch.setattr(historydb, "RUN_BUSY_MS", 1000)
        h._busy_ms(1000)
        t0 = time.monotonic()
        h.add_event(run_id, time.time(), "later")
        assert time.monotonic() - t0 < 0.5
    finally:
        holder.close()
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[1].startswith("suitefit: error: history ") and "waited 0.3 s" in err[1]
    assert "2 write(s) of run 1's test were not made" in err[1]
    assert _kinds(path, run_id) == ["before"]  # what was written before stays
    assert h.write_waiting() == 1  # said once more, for what came after
    assert h.write_waiting() == 0


def test_a_write_refused_for_good_is_dropped_and_the_others_are_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.sqlite"
    h, run_id = _run(path, monkeypatch)
    holder = _hold(path)
    h.add_event(run_id, time.time(), "first")  # waits
    h.insert_rows("events", ("run_id", "no_such_column"), [(run_id, 1)])  # never can be made
    h.add_event(run_id, time.time(), "second")
    holder.close()
    time.sleep(0.25)
    h.add_event(run_id, time.time(), "third")
    assert _kinds(path, run_id) == ["first", "second", "third"]
    err = capfd.readouterr().err
    assert "no_such_column" in err and "a write of run 1's test is dropped" in err, err
    assert h.write_waiting() == 1  # the dropped one, counted at the end
    # a caller's own mistake is raised to it, and does not stay first in line
    with pytest.raises(ValueError, match="unknown run fields"):
        h.update_run(run_id, bogus=1)
    h.add_event(run_id, time.time(), "fourth")
    assert _kinds(path, run_id)[-1] == "fourth"
    # made while refused, it is queued: raised later, it would reach another caller (a pytest
    # hook, the sampler's reader thread). It is dropped and said instead
    holder = _hold(path)
    h.add_event(run_id, time.time(), "fifth")
    h.update_run(run_id, bogus=2)
    holder.close()
    time.sleep(0.25)
    capfd.readouterr()
    h.add_event(run_id, time.time(), "sixth")  # does not raise
    assert _kinds(path, run_id)[-2:] == ["fifth", "sixth"]
    assert h.write_waiting() == 1


def test_two_threads_writing_while_refused_each_write_is_made_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the controller's main loop and the sampler's reader thread (its heartbeat) share one history
    path = tmp_path / "h.sqlite"
    h, run_id = _run(path, monkeypatch)
    holder = _hold(path)
    stop = time.monotonic() + 1.0

    def write(tag: str) -> None:
        i = 0
        while time.monotonic() < stop:
            h.add_event(run_id, time.time(), f"{tag}{i}")
            i += 1
            time.sleep(0.003)

    threads = [threading.Thread(target=write, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    time.sleep(0.5)
    holder.close()  # freed while both write
    for t in threads:
        t.join()
    assert h.write_waiting() == 0
    kinds = _kinds(path, run_id)
    assert len(kinds) == len(set(kinds)), "a write made twice"
    for tag in "ab":
        mine = [int(k[1:]) for k in kinds if k[0] == tag]
        assert mine == list(range(len(mine))) and mine, f"{tag}: lost or out of order"


SUITE = {
    # the history is held by another connection from the first test to the last: the run's
    # processes (the controller's decisions, each worker's rows, the sampler's samples) are
    # refused meanwhile
    "conftest.py": """
        import os, sqlite3
        HELD = []
        def hold():
            c = sqlite3.connect(os.environ["HISTORY"], isolation_level=None, timeout=30)
            c.execute("BEGIN EXCLUSIVE")
            HELD.append(c)
        def release():
            while HELD:
                HELD.pop().execute("COMMIT")
        """,
    "test_0_hold.py": """
        import time
        from conftest import hold, release
        def test_hold():
            hold()
        def test_wait():  # longer than a write waits for a lock outside a run (10 s)
            time.sleep(11)
        def test_release():
            release()
        """,
    **{f"test_{i}_other.py": """
        import time, pytest
        @pytest.mark.parametrize("i", range(4))
        def test_other(i):
            time.sleep(0.2)
        """ for i in range(1, 4)},
}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_whose_history_is_held_mid_run_passes_and_records_everything(tmp_path: Path, workers: int) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
                                             'pythonpath = ["tests"]\n')
    for name, body in SUITE.items():
        (tmp_path / "tests" / name).write_text(textwrap.dedent(body))
    history = tmp_path / ".suitefit" / "history.sqlite"
    res = suitefit("run", "--workers", str(workers), "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path,
                   timeout=180, env={"HISTORY": str(history)})
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "15 passed" in out and "INTERNALERROR" not in out and "Traceback" not in out, out
    for who in ["sampler process", *(["worker gw0", "worker gw1"] if workers == 2 else ["session"])]:
        assert f"{who} keeps its records in memory" in out, (who, out)
    assert "were not made" not in out and "dropped" not in out, out  # every write is made once it is free
    with History(str(history)) as h:
        run = h.runs(limit=1)[0]
        assert (run.status, run.passed) == ("passed", 15)
        assert len(h.tests(run.id)) == 15
        assert h.samples(run.id)
        if workers == 2:  # the controller's decisions, refused while held, are there too
            assert h.events(run.id, "sched_send")



def test_a_full_disk_is_waited_for_at_the_end_as_a_lock_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    # SQLite's own limit on the file's pages gives the error a full disk gives (SQLITE_FULL),
    # at once rather than after a wait: the end's last attempt tries again until its time is up
    path = tmp_path / "h.sqlite"
    h, run_id = _run(path, monkeypatch)
    monkeypatch.setattr(historydb, "BUSY_TIMEOUT_S", 3.0)
    pages = h._db.execute("PRAGMA page_count").fetchone()[0]
    h._db.execute(f"PRAGMA max_page_count = {pages}")
    rows = [(run_id, f"tests/test_a.py::test_{i}", "tests/test_a.py", "main", i, 0.0, 0.0, 0.001, 0.0,
             0.001, 0.001, "passed", None) for i in range(2000)]
    h.add_test_rows(rows)
    assert "database or disk is full" in capfd.readouterr().err

    class Clock:  # the disk is freed while the end's last attempt waits to try again
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(s: float) -> None:
            h._db.execute("PRAGMA max_page_count = 1000000")
            time.sleep(s)

    monkeypatch.setattr(historydb, "time", Clock)
    assert h.write_waiting() == 0
    assert len(h.tests(run_id)) == 2000


def test_a_run_whose_rows_were_lost_does_not_read_as_part_of_its_plan(tmp_path: Path) -> None:
    # with the history held past the run's end, a worker's test rows were lost: the closing
    # line said "0 of the plan's 20 files ran", and the run was kept out of the predictions
    import io

    from suitefit.model import Budget, Plan, Unit
    from suitefit.run_close import RunClose

    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    plan = Plan(workers=1, units=(Unit("a.py", ("a.py",), 1.0, 10.0), Unit("b.py", ("b.py",), 1.0, 10.0)),
                budget=Budget(2048.0, 2), predicted_wall_s=2.0, predicted_peak_mb=100.0, reasons=())
    with History(str(tmp_path / "h.sqlite")) as h:
        rid = h.new_run("run", started=time.time(), rootdir=str(tmp_path))
        h.add_test_rows([(rid, "a.py::test_a", "a.py", "main", 0, 0.0, 0.0, 0.1, 0.0, 0.1, 0.1, "passed", None)])
        h.update_run(rid, status="passed", exit_code=0, wall_s=2.0, passed=1)
        close = RunClose(h, rid, plan, io.StringIO(), [], None, None)
        assert close.part_of_plan(h.run(rid)) == "1 of the plan's 2 files ran"  # b.py was not run
        h.update_run(rid, passed=2)  # pytest reported two: b.py's row was lost
        assert close.part_of_plan(h.run(rid)) == ""
