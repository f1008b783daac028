"""The sampler process against real processes: samples, per-file peaks from the FIFO, its end."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from suitefit.history import History, WorkerRecord
from suitefit.measure import proctree
from suitefit.measure.channel import Sender, decode, encode
from suitefit.measure.sampler import READER_THREAD, Sample, SamplerProcess

HOLD = "b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096])"


def new_history(tmp_path: Path) -> tuple[History, int]:
    h = History(tmp_path / "h.sqlite")
    return h, h.new_run("pytest", started=time.time())


def holder(mb: int) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD.format(mb=mb) + "; print('ok', flush=True); import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    p.stdout.readline()
    return p


def test_messages_round_trip_and_stay_atomic() -> None:
    m = decode(encode("B", "gw0", 1.5, 2.5, 30.0, 0.0, "tests/a\tb.py"))
    assert m is not None and m.kind == "B" and m.worker == "gw0"
    assert m.fields == ("1.5", "2.5", "30.0", "0.0", "tests/a b.py")  # a tab in a path cannot split a field
    assert len(encode("B", "gw0", "x" * 10_000)) < 4096  # one write of < PIPE_BUF never interleaves
    assert decode(b"") is None
    assert not Sender(None).connected and not Sender("/nonexistent/fifo").connected


def test_streams_samples_to_callbacks_and_stops(tmp_path: Path) -> None:
    h, run_id = new_history(tmp_path)
    p = holder(80)
    try:
        got: list[Sample] = []
        others: list[Sample] = []

        def broken(s: Sample) -> None:
            raise RuntimeError("a consumer bug must not stop the others")

        sp = SamplerProcess(os.getpid(), history=str(h.path), run_id=run_id, started_wall=time.time(),
                            threshold_mb=1.0, interval=0.05, stream=True, pss_every=4, pss_budget=0)
        sp.subscribe(broken)
        sp.subscribe(got.append)
        sp.subscribe(others.append)
        sp.start()
        time.sleep(0.8)
        assert sp.pid is not None and sp.pid not in sp.sample_now().pids  # it leaves itself out
        peaks = sp.stop()
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    n = len(got)
    assert 6 <= n <= 25 and len(others) == n  # about 16 at 0.05 s; generous on a loaded machine
    assert all(s.rss_mb >= 80 for s in got)
    assert [s.pss_mb is not None for s in got[:5]] == [True, False, False, False, True]
    assert all(b.t > a.t for a, b in itertools.pairwise(got))
    assert peaks.samples >= n and peaks.peak_rss_mb >= max(s.rss_mb for s in got) - 0.01
    assert peaks.secs_above > 0.3  # above a 1 MiB threshold the whole time
    assert peaks.cpu_s is not None and 0 < peaks.cpu_s < 5
    assert not any(t.name == READER_THREAD for t in threading.enumerate())
    rows = h.samples(run_id)
    assert len(rows) == peaks.samples  # every sample reached the history, in batches
    time.sleep(0.2)
    assert len(got) == n  # nothing after stop


def test_without_a_stream_last_comes_from_the_shared_page(tmp_path: Path) -> None:
    h, run_id = new_history(tmp_path)
    p = holder(60)
    try:
        sp = SamplerProcess(os.getpid(), history=str(h.path), run_id=run_id, started_wall=time.time(),
                            threshold_mb=None, interval=0.05)
        sp.start()
        time.sleep(0.6)
        a = sp.last
        time.sleep(0.3)
        b = sp.last
        before = {t.ident for t in threading.enumerate()}
        peaks = sp.stop()
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    assert a is not None and b is not None and b.t > a.t  # the page moves on
    assert a.rss_mb >= 60 and a.procs >= 2
    assert before == {t.ident for t in threading.enumerate()}  # no thread came or went for it
    assert peaks.samples >= 8


WORKER = textwrap.dedent("""
    import os, subprocess, sys, time
    from suitefit.measure import proctree
    from suitefit.measure.channel import Sender

    s = Sender(sys.argv[1])
    s.send("H", "w1", os.getpid())

    def begin(path):
        ok = proctree.reset_hwm()
        s.send("B", "w1", time.monotonic(), time.time(), proctree.rss_mb(os.getpid()) if ok else -1.0, 0.0, path)
        return ok

    def end(ok, tests):
        s.send("E", "w1", time.monotonic(), time.time(), proctree.hwm_mb() if ok else -1.0, 0.1, tests)

    time.sleep(0.3)
    ok = begin("tests/test_spike.py")   # 100 MiB for a few ms: no sample sees it, VmHWM does
    b = bytearray(100 * 2**20); b[::4096] = b'x' * len(b[::4096]); del b
    end(ok, 1)
    time.sleep(0.3)
    ok = begin("tests/test_child.py")   # a child holding 150 MiB for 0.8 s: the samples see it
    c = subprocess.Popen([sys.executable, "-c", {child!r}]); c.wait()
    end(ok, 2)
    time.sleep(0.3)
    ok = begin("tests/test_small.py")
    time.sleep(0.3)
    end(ok, 3)
    ok = begin("tests/test_spike.py")   # the same file again later: one row, times summed
    end(ok, 1)
    s.send("D", "w1")
    print("done", flush=True)
    sys.stdin.read()
""").format(child=HOLD.format(mb=150) + "; import time; time.sleep(0.8)")


def test_per_file_peaks_from_the_workers_messages(tmp_path: Path) -> None:
    h, run_id = new_history(tmp_path)
    sp = SamplerProcess(os.getpid(), history=str(h.path), run_id=run_id, started_wall=time.time(),
                        threshold_mb=None, interval=0.05)
    sp.start()
    w = subprocess.Popen([sys.executable, "-c", WORKER, sp.channel_path], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert w.stdout is not None
    assert w.stdout.readline().strip() == "done"
    h.upsert_worker(WorkerRecord(run_id, "w1", w.pid, None, None, None, None, None, 4))
    time.sleep(0.2)
    sp.stop()
    w.stdin.close()  # type: ignore[union-attr]
    w.wait()
    files = {f.path: f for f in h.files(run_id)}
    assert set(files) == {"tests/test_spike.py", "tests/test_child.py", "tests/test_small.py"}
    assert all(f.worker == "w1" for f in files.values())
    assert 95 <= files["tests/test_spike.py"].peak_mb <= 115, files
    assert files["tests/test_spike.py"].tests == 2
    assert 150 <= files["tests/test_child.py"].peak_mb <= 185, files
    assert files["tests/test_small.py"].peak_mb < 15
    assert 0.28 <= files["tests/test_small.py"].wall_s < 1.5
    (worker,) = h.workers(run_id)
    assert worker.baseline_mb is not None and 5 < worker.baseline_mb < 60
    assert worker.peak_rss_mb is not None and worker.peak_rss_mb >= worker.baseline_mb + 150


DIES = textwrap.dedent("""
    import os, sys, time
    from suitefit.measure.sampler import SamplerProcess
    sp = SamplerProcess(os.getpid(), history=sys.argv[1], run_id=int(sys.argv[2]), started_wall=time.time(),
                        threshold_mb=None, interval=0.05)
    sp.start()
    print(sp.pid, flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("forked", [False, True], ids=["stdin ends", "a fork holds stdin"])
def test_ends_with_the_session_process_and_keeps_what_it_flushed(tmp_path: Path, forked: bool) -> None:
    """And says so at once, in one line. With a child forked from the session's process (a
    test's pool) holding the sampler's stdin open, no EOF comes: being orphaned says it."""
    h, run_id = new_history(tmp_path)
    fork = "c = os.fork()\nif c == 0:\n    time.sleep(30)\n    os._exit(0)\nprint(c, flush=True)\n"
    script = DIES.replace("time.sleep(60)", fork + "time.sleep(60)") if forked else DIES
    parent = subprocess.Popen([sys.executable, "-c", script, str(h.path), str(run_id)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert parent.stdout is not None and parent.stderr is not None
    pid = int(parent.stdout.readline())
    child = int(parent.stdout.readline()) if forked else None
    try:
        time.sleep(2.6)  # past one flush (every 2 s)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        got = b""
        deadline = time.monotonic() + 5  # at once, not when the fork ends
        while b"\n" not in got.partition(b"ended before its session did")[2] and time.monotonic() < deadline:
            if select.select([parent.stderr], [], [], 0.1)[0]:  # the sampler's, as it inherited it
                chunk = os.read(parent.stderr.fileno(), 4096)
                if not chunk:
                    break
                got += chunk
    finally:
        if child is not None:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
    said = [line for line in got.decode().splitlines() if "ended before its session did" in line]
    assert len(said) == 1 and f"run {run_id}: pytest's process (pid {parent.pid})" in said[0], got
    assert re.search(r"the tree held \d+ MiB at the last reading, \d+ MiB at its highest", said[0]), said
    deadline = time.monotonic() + 5
    while proctree.create_time(pid) is not None and time.monotonic() < deadline:
        # it is our grandchild turned orphan: nobody here reaps it, so a zombie counts as gone
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.05)
    assert time.monotonic() < deadline, "the sampler process outlived the session's process"
    assert len(h.samples(run_id)) >= 20  # the last flushed samples survive a SIGKILL of the run


def test_stdin_closed_by_another_hand_is_not_read_as_the_sessions_death(tmp_path: Path) -> None:
    """A test that closes every inherited descriptor closes the sampler's stdin: the sampler
    ends (as before), but the session's process lives on, so nothing is said of its death."""
    h, run_id = new_history(tmp_path)
    # ... and the descriptor number goes to a file opened next: the session's end writes
    # nothing into it, nor closes it
    other = tmp_path / "other.txt"
    script = DIES.replace("time.sleep(60)", f"""fd = sp._proc.stdin.fileno()
os.close(fd)
time.sleep(1.5)
new = os.open({str(other)!r}, os.O_WRONLY | os.O_CREAT)
os.dup2(new, fd)
os.close(new)
sp.stop()
os.write(fd, b"mine")
os.close(fd)""")
    res = subprocess.run([sys.executable, "-c", script, str(h.path), str(run_id)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "ended before its session did" not in res.stderr
    assert other.read_bytes() == b"mine"


def test_sigterm_flushes_and_ctrl_c_is_ignored(tmp_path: Path) -> None:
    h, run_id = new_history(tmp_path)
    sp = SamplerProcess(os.getpid(), history=str(h.path), run_id=run_id, started_wall=time.time(),
                        threshold_mb=None, interval=0.05)
    sp.start()
    assert sp.pid is not None
    time.sleep(0.5)
    os.kill(sp.pid, signal.SIGINT)
    time.sleep(0.3)
    assert proctree.create_time(sp.pid) is not None  # Ctrl-C is for the run, not for its sampler
    os.kill(sp.pid, signal.SIGTERM)
    peaks = sp.stop()
    assert peaks.samples >= 5
    assert len(h.samples(run_id)) == peaks.samples  # written before it went, not lost with it


def test_the_history_is_open_before_the_session_ends(tmp_path: Path) -> None:
    """The sampler opens the history after its first sample, while the session starts up,
    long before its first flush (2 s): the session's end waits for the sampler, and then only
    its writes are left (a short run's end paid sqlite3's import and the open too)."""
    h, run_id = new_history(tmp_path)
    sp = SamplerProcess(os.getpid(), history=str(h.path), run_id=run_id, started_wall=time.time(),
                        threshold_mb=None, interval=0.05)
    sp.start()
    try:
        assert sp.pid is not None
        deadline = time.monotonic() + 1.0
        opened = False
        while not opened and time.monotonic() < deadline:
            time.sleep(0.05)
            with contextlib.suppress(OSError):  # a descriptor closed between list and read
                opened = any(os.readlink(f"/proc/{sp.pid}/fd/{fd}") == str(h.path)
                             for fd in os.listdir(f"/proc/{sp.pid}/fd"))
        assert opened, "the sampler had not opened the history 1 s after its start"
    finally:
        peaks = sp.stop()
    assert peaks.samples >= 1 and len(h.samples(run_id)) == peaks.samples


def test_a_broken_history_does_not_hang_the_session(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_text("garbage" * 100)
    sp = SamplerProcess(os.getpid(), history=str(bad), run_id=1, started_wall=time.time(),
                        threshold_mb=None, interval=0.05)
    sp.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    sp.stop()
    assert time.monotonic() - t0 < 10
    assert not Path(sp.channel_path).exists()  # its FIFO and page are cleaned up


@pytest.mark.parametrize("budget", [0.0, 0.01])
def test_expensive_pss_reads_are_spaced_out(tmp_path: Path, budget: float) -> None:
    """A big process makes smaps_rollup slow; under a 1% budget most samples skip PSS."""
    h, run_id = new_history(tmp_path)
    p = holder(300)
    try:
        got: list[Sample] = []
        # the holder alone: this test process's own tree may be big and slow to read
        sp = SamplerProcess(p.pid, history=str(h.path), run_id=run_id, started_wall=time.time(),
                            threshold_mb=None, interval=0.02, stream=True, pss_every=1, pss_budget=budget)
        sp.subscribe(got.append)
        sp.start()
        time.sleep(1.5)
        sp.stop()
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    with_pss = sum(s.pss_mb is not None for s in got)
    if budget == 0:
        assert with_pss == len(got) >= 5  # unbudgeted: every sample
    else:
        assert 1 <= with_pss < len(got) / 2
    assert json.dumps([s.rss_mb for s in got])  # plain numbers, as the stream carries them


SPIKE = textwrap.dedent("""
    import sys, time
    print("ok", flush=True)
    time.sleep(1.0)
    b = bytearray(250 * 2**20); b[::4096] = b"x" * len(b[::4096])
    time.sleep(0.6)
    del b
    sys.stdin.read()
""")


def test_pss_is_read_at_the_trees_high_not_only_on_its_cadence(tmp_path: Path) -> None:
    """A 250 MiB high held for 0.6 s, between two cadence reads 2.5 s apart: PSS is read at it
    (on a cadence alone, the largest PSS read was the process before its high)."""
    h, run_id = new_history(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", SPIKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        p.stdout.readline()
        got: list[Sample] = []
        sp = SamplerProcess(p.pid, history=str(h.path), run_id=run_id, started_wall=time.time(),
                            threshold_mb=None, interval=0.05, stream=True, pss_every=50)
        sp.subscribe(got.append)
        sp.start()
        time.sleep(2.2)
        peaks = sp.stop()
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    top = max(got, key=lambda s: s.rss_mb)
    assert top.rss_mb > 250
    near = [s for s in got if s.rss_mb >= 0.95 * top.rss_mb]
    assert any(s.pss_mb is not None and s.pss_mb > 0.8 * s.rss_mb for s in near), \
        [(round(s.rss_mb), s.pss_mb) for s in got]
    assert peaks.pss_at_peak is not None and peaks.pss_at_peak[1] > 0.8 * peaks.peak_rss_mb
    assert 2 <= peaks.pss_reads <= 5  # the first sample, the high; not every sample


def test_the_sampler_records_its_own_memory_not_the_process_it_was_started_from(tmp_path: Path) -> None:
    # Plans count the sampler process in the tree (a runner's limit does). Its own peak must
    # be its own: Linux carries ru_maxrss over exec from the parent, here holding 150 MiB.
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text("BALLAST = b'x' * (150 << 20)\n")
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    hist = tmp_path / "h.sqlite"
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                          f"--suitefit-history={hist}", "-n", "0"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    with History(hist) as h:
        run = h.runs(limit=1)[0]
    own = run.meta_dict.get("sampler_rss_mb")
    assert own is not None and 5 < own < 100, own  # a Python with sqlite: tens of MiB, not the ballast
    assert run.peak_rss_mb is not None and run.peak_rss_mb > 150  # the ballast is in the measured tree


def test_the_sampler_process_starts_without_site_and_imports_what_this_process_can() -> None:
    """``-S`` skips site's .pth files, not this process's path: suitefit and psutil (the
    tree reader's fallback where /proc has no children files) import there as here."""
    from suitefit.measure.sampler import watcher_argv

    show = ("import psutil, suitefit, suitefit.measure.watcher; "
            "print(sys.flags.no_site, 'site' in sys.modules, suitefit.__file__, psutil.__file__)")
    res = subprocess.run(watcher_argv({"x": 1}, main=show), capture_output=True, text=True, timeout=60, check=True)
    no_site, has_site, sf, ps = res.stdout.split()
    import psutil

    import suitefit

    assert (no_site, has_site) == ("1", "False")
    assert (sf, ps) == (suitefit.__file__, psutil.__file__)


def test_a_path_too_long_for_one_argument_is_cut_to_what_the_sampler_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """An argument may be at most 128 KiB: a session whose path is longer still starts its
    sampler process, which still finds suitefit and psutil."""
    from suitefit.measure.sampler import MAX_PATH_ARG, watcher_argv

    monkeypatch.setattr(sys, "path", [*sys.path, *(f"/nowhere/{'x' * 60}/{i}" for i in range(3000))])
    show = "import psutil, suitefit.measure.watcher; print(len(sys.path))"
    argv = watcher_argv({"x": 1}, main=show)
    assert len(argv[4]) <= MAX_PATH_ARG
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout) < 50


def test_a_sampler_record_survives_its_line_and_a_broken_line_is_refused() -> None:
    from suitefit.measure import wire

    rec = {"t": 1.5, "pss": None, "procs": 3, "workers": {"gw0": 12.5}, "kids": {"gw0": [4, 5]}, "s": "a\nb"}
    line = wire.encode(rec)
    assert "\n" not in line and wire.decode(line + "\n") == rec and wire.decode(line.encode()) == rec
    for bad in ("", "zz", line[:-4], wire.encode({"a": 1})[:2], "00", marshal_hex_of_a_list()):
        with pytest.raises(ValueError):
            wire.decode(bad)


def marshal_hex_of_a_list() -> str:
    import marshal

    return marshal.dumps([1, 2]).hex()


SPIKE_SUITE = {
    # run by both workers (--dist each). gw0 holds 300 MiB from its collection on, until gw1
    # has spiked (xdist ends a worker of --dist each once it has run its tests); gw1 starts
    # its spike file only once a sample or two has seen that memory
    "test_a_hold.py": "import os, time\n\n"
                      "WORKER = os.environ.get('PYTEST_XDIST_WORKER')\n"
                      "if WORKER == 'gw0':\n"
                      "    HELD = bytearray(300 * 1024 * 1024)\n"
                      "    for i in range(0, len(HELD), 4096):\n        HELD[i] = 1\n"
                      "    open('held', 'w').close()\n\n"
                      "def wait_for(flag):\n"
                      "    end = time.monotonic() + 60\n"
                      "    while not os.path.exists(flag) and time.monotonic() < end:\n"
                      "        time.sleep(0.01)\n\n"
                      "def test_hold():\n"
                      "    if WORKER == 'gw0':\n        wait_for('spiked')\n        time.sleep(1.5)\n"
                      "    elif WORKER == 'gw1':\n        wait_for('held')\n        time.sleep(0.7)\n",
    # gw1: 300 MiB for a few tens of ms (the kernel faults it in at once), which samples
    # every 0.5 s almost never meet
    "test_b_spike.py": "import mmap, os, time\n\n"
                       "def test_spike():\n"
                       "    if os.environ.get('PYTEST_XDIST_WORKER') != 'gw1':\n        return\n"
                       "    time.sleep(1.0)\n"
                       "    m = mmap.mmap(-1, 300 * 1024 * 1024, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)\n"
                       "    m.close()\n    time.sleep(1.0)\n"
                       "    open('spiked', 'w').close()\n",
}


@pytest.mark.skipif(not proctree.reset_hwm(), reason="no clear_refs here: no exact per-file peaks")
def test_a_spike_between_samples_counts_in_the_runs_peak_beside_what_the_other_worker_held(tmp_path: Path) -> None:
    """The run's peak was the highest sampled total, or one worker's exact peak alone: a hog
    shorter than the interval on one worker, while the other held its own, was summed with
    nothing (the bundled example under -n 2: 0.897 of an independent sampler every 0.01 s).
    A worker's exact peak (VmHWM) now counts beside the least each other part of the tree
    held around that file."""
    for name, text in SPIKE_SUITE.items():
        (tmp_path / name).write_text(text)
    hist = tmp_path / "h.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "each", "--suitefit", f"--suitefit-history={hist}", "--suitefit-interval=0.5"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    with History(hist) as h:
        run = h.runs(limit=1)[0]
        rows = {(p, w): (base, abs_) for p, w, base, abs_ in h.execute(
            "SELECT path, worker, baseline_mb, peak_abs_mb FROM files WHERE run_id = ?", [run.id])}
    spike, held = rows[("test_b_spike.py", "gw1")], rows[("test_b_spike.py", "gw0")]
    assert spike[1] - spike[0] >= 290, rows  # gw1's exact peak of the file
    assert held[0] >= 300, rows  # gw0 held its 300 MiB throughout
    # at the spike gw0 held its 300 MiB and its interpreter, beside gw1's spike
    assert run.peak_rss_mb is not None and run.peak_rss_mb >= spike[1] + held[0], (run.peak_rss_mb, rows)


def test_two_workers_spikes_that_never_met_are_not_summed() -> None:
    """What the rest held around a file is the least of each part over the samples from the
    last before it to the first after it: another worker's spike caught by one sample is not
    what it held at this worker's exact peak."""
    from suitefit.measure.watcher import _Beside

    b = _Beside("gw0", {"gw0": 50.0, "gw1": 50.0, "": 40.0})  # before gw0's file
    b.add({"gw0": 60.0, "gw1": 1050.0, "": 40.0})  # the one sample inside it: gw1 at its spike
    b.peak_mb = 1050.0  # gw0's exact peak of the file, at another moment
    b.add({"gw0": 50.0, "gw1": 50.0, "": 41.0})  # after it
    assert b.total() == 1050.0 + 50.0 + 40.0
    held = _Beside("gw0", {"gw0": 50.0, "gw1": 350.0, "": 40.0})
    held.add({"gw0": 60.0, "gw1": 350.0, "": 40.0})
    held.peak_mb = 350.0
    assert held.total() == 350.0 + 350.0 + 40.0
    gone = _Beside("gw0", {"gw0": 50.0, "gw1": 350.0, "": 40.0})  # gw1 ended during the file
    gone.add({"gw0": 60.0, "": 40.0})
    gone.peak_mb = 350.0
    assert gone.total() == 350.0 + 40.0
    one = _Beside("gw0", None)  # a single sample around a file: nothing to tell a floor by
    one.add({"gw0": 60.0, "gw1": 350.0, "": 40.0})
    one.peak_mb = 350.0
    assert one.total() is None
