"""The reference sampler (benchmarks/tree_sampler.py) is trusted only because it is checked here,
on a real process tree whose memory we know."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

SAMPLER_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "tree_sampler.py"

# A parent holding 60 MiB starts two children holding 40 and 50 MiB. Each process, once its
# memory is touched, reports its own RSS (statm) to a file, then they all hold for HOLD_S.
TREE_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    HOLD_S = float(sys.argv[2])
    def touch(mb):
        b = bytearray(mb * 1024 * 1024)
        for i in range(0, len(b), 4096):
            b[i] = 1
        return b
    def report(out):
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        with open(out, "a") as f:
            f.write(f"{os.getpid()} {rss}\\n")
    if len(sys.argv) > 3:  # child: mb
        keep = touch(int(sys.argv[3]))
        report(sys.argv[1])
        print("ready", flush=True)
        time.sleep(HOLD_S)
        sys.exit(0)
    keep = touch(60)
    kids = [subprocess.Popen([sys.executable, __file__, sys.argv[1], str(HOLD_S), str(mb)],
                             stdout=subprocess.PIPE) for mb in (40, 50)]
    for k in kids:
        k.stdout.readline()
    report(sys.argv[1])
    time.sleep(HOLD_S)
    for k in kids:
        k.wait()
    sys.exit(3)
""")


@pytest.fixture(scope="module")
def ts() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tree_sampler", SAMPLER_PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tree_sampler"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def tree_script(tmp_path: Path) -> Path:
    p = tmp_path / "tree.py"
    p.write_text(TREE_SCRIPT)
    return p


def reported(out: Path) -> dict[int, float]:
    return {int(a): float(b) for a, b in (line.split() for line in out.read_text().splitlines())}


def test_measure_sums_the_whole_tree(ts: ModuleType, tree_script: Path, tmp_path: Path) -> None:
    out = tmp_path / "rss.txt"
    r = ts.measure([sys.executable, str(tree_script), str(out), "0.6"], stdout=subprocess.DEVNULL)
    own = reported(out)
    assert len(own) == 3
    # each process's own statm while all three hold: the sampler's peak must match their sum
    assert sum(own.values()) >= 60 + 40 + 50
    assert abs(r.peak_rss_mb - sum(own.values())) <= 0.03 * sum(own.values())
    assert r.peak_procs == 3
    assert r.exit_code == 3
    assert 0.6 <= r.wall_s < 30
    assert r.samples >= 10  # 0.05 s polls over at least 0.6 s
    assert r.cpu_s is not None and r.cpu_s > 0.05  # touching 150 MiB takes CPU
    assert not r.timed_out


def test_grandchildren_are_found_through_an_intermediate(ts: ModuleType, tmp_path: Path) -> None:
    # sh -> python (holding 80 MiB): the memory is two levels down
    hold = "b = bytearray(80 * 2**20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(0.5)"
    r = ts.measure(["sh", "-c", f"{sys.executable} -c \"{hold}\"; exit 0"], keep_timeline=True)
    assert r.exit_code == 0
    assert r.peak_procs == 2
    assert 80 <= r.peak_rss_mb < 80 + 60
    assert r.timeline and max(x[1] for x in r.timeline) == pytest.approx(r.peak_rss_mb, abs=0.01)


def test_timeout_kills_the_tree(ts: ModuleType) -> None:
    t0 = time.perf_counter()
    r = ts.measure(["sh", "-c", "sleep 30 & sleep 30; wait"], timeout=0.5)
    assert r.timed_out and r.exit_code == -9
    assert time.perf_counter() - t0 < 10


def test_cli_prints_json_and_passes_the_exit_code(tree_script: Path, tmp_path: Path) -> None:
    out = tmp_path / "rss.txt"
    p = subprocess.run([sys.executable, str(SAMPLER_PATH), "--interval", "0.05", "--",
                        sys.executable, str(tree_script), str(out), "0.4"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    d = json.loads(p.stdout)  # only the JSON on stdout
    assert d["peak_procs"] == 3 and d["exit_code"] == 3
    assert abs(d["peak_rss_mb"] - sum(reported(out).values())) <= 0.03 * sum(reported(out).values())
    assert set(d) >= {"peak_rss_mb", "peak_procs", "wall_s", "exit_code", "cpu_s", "samples"}


def test_cli_attaches_to_a_running_pid(tmp_path: Path) -> None:
    hold = "b = bytearray(70 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); import time; time.sleep(0.6)"
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()
        out = tmp_path / "r.json"
        p = subprocess.run([sys.executable, str(SAMPLER_PATH), "--pid", str(child.pid), "-o", str(out)],
                           capture_output=True, text=True, timeout=60)
    finally:
        child.wait()
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    assert d["exit_code"] is None and d["peak_procs"] == 1
    assert 70 <= d["peak_rss_mb"] < 70 + 40


def test_the_tree_is_scanned_again_only_after_a_process_was_created(
        ts: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine-wide scan is what cost the sampler its CPU; skipping it must not lose a
    process: a child started between polls is found at the poll after the machine's last
    PID moved, and at the latest after RESCAN_EVERY polls without that."""
    counter = {"pid": 1000}
    monkeypatch.setattr(ts, "last_pid", lambda: counter["pid"])
    root = subprocess.Popen(["sh", "-c", "read x; exec sleep 30"], stdin=subprocess.PIPE)
    try:
        poller = ts._Poller(root.pid, keep_timeline=False)
        for _ in range(3):
            poller.poll()
        assert poller.scans == 1 and poller.last_pids == [root.pid]
        assert root.stdin is not None
        root.stdin.write(b"go\n")  # the shell execs sleep: same PID, nothing created
        root.stdin.close()
        kid = subprocess.Popen(["sleep", "30"])  # not in the tree: only moves the machine's last PID
        try:
            poller.poll()
            assert poller.scans == 1
            counter["pid"] = kid.pid
            poller.poll()
            assert poller.scans == 2 and poller.last_pids == [root.pid]
            for _ in range(ts.RESCAN_EVERY):
                poller.poll()
            assert poller.scans == 3  # the scan is never older than RESCAN_EVERY polls
        finally:
            kid.kill()
            kid.wait()
    finally:
        root.kill()
        root.wait()


def test_a_child_started_after_the_first_poll_is_found(ts: ModuleType, tmp_path: Path) -> None:
    # the parent sleeps past several polls before it starts the child holding 60 MiB
    hold = "b = bytearray(60 * 2**20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(0.5)"
    r = ts.measure(["sh", "-c", f"sleep 0.4; {sys.executable} -c \"{hold}\"; exit 0"])
    assert r.exit_code == 0 and r.peak_procs == 2
    assert 60 <= r.peak_rss_mb < 60 + 60


@pytest.mark.parametrize("args", [[], ["--", "/nonexistent/cmd"], ["--pid", "999999999"],
                                  ["--interval", "0", "--", "true"]])
def test_cli_bad_input_is_one_line(args: list[str]) -> None:
    p = subprocess.run([sys.executable, str(SAMPLER_PATH), *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("tree_sampler.py: error:") and "Traceback" not in p.stderr


PARTS_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_overhead_parts.py"


def test_parts_sched_replays_both_schedulers_over_every_test(tmp_path: Path) -> None:
    # The controller's scheduler part: suitefit's xdist adapter and core, and xdist's own
    # LoadScheduling and LoadFileScheduling, each driven through a whole run of fake workers (the driver asserts
    # that every test was completed once).
    out = tmp_path / "parts.json"
    res = subprocess.run([sys.executable, str(PARTS_PATH), "--parts", "sched", "--reps", "1",
                          "--tests", "1650", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    d = json.loads(out.read_text())["sched"]
    assert d["tests"] == 1650
    assert 0 < d["suitefit_us"] < 1000 and 0 < d["xdist_us"] < 1000 and d["loadfile_us"] > 0
    assert "controller's scheduler per test" in res.stdout


def test_parts_workers_reads_every_xdist_process_on_both_sides(tmp_path: Path) -> None:
    # The per-process part: the controller and each worker write their own CPU; a probe
    # that xdist did not carry to the workers would leave only the controller's line.
    out = tmp_path / "parts.json"
    res = subprocess.run([sys.executable, str(PARTS_PATH), "--parts", "workers", "--reps", "1",
                          "--tests", "40", "--workers-n", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    d = json.loads(out.read_text())["workers"]
    assert d["tests"] == 40 and d["n"] == 2
    assert d["processes"] == 3  # the controller and two workers, in every run of both sides
    assert d["controller_plain_s"] > 0 and d["workers_plain_s"] > 0
    assert len(d["workers_pairs_us"]) == 1 and "under xdist -n 2" in res.stdout


PREDICT_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_predict.py"


def test_the_16_worker_replay_compares_serial_equivalent_times(tmp_path: Path) -> None:
    # bench_predict's 16-worker figure replays one run's file times through the plan made
    # from the other runs. A run with workers records contended times (numpy's: 1.27x its
    # serial ones); left as they are, the replay counted that contention as a prediction
    # error (-33% on numpy). Both sides are brought to the serial runs' times first.
    from suitefit.history import History
    from suitefit.model import CostModel, FileCost

    spec = importlib.util.spec_from_file_location("bench_predict", PREDICT_PATH)
    assert spec is not None and spec.loader is not None
    bp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bp)
    db = tmp_path / "history.sqlite"
    with History(db):
        pass
    with sqlite3.connect(db) as c:
        for run_id, workers in ((1, 0), (2, 1), (3, 2)):
            c.execute("INSERT INTO runs (id, kind, status, started, workers) VALUES (?, 'profile', 'passed', 0, ?)",
                      [run_id, workers])
        rows = [(1, "a.py", "main", 2.0), (2, "a.py", "main", 4.0), (1, "b.py", "main", 1.0),
                (2, "b.py", "main", 1.0), (3, "a.py", "gw0", 100.0)]  # a.py split over two rows of run 1:
        rows.append((1, "a.py", "gw9", 1.0))  # its serial time there is their sum, 3.0
        c.executemany("INSERT INTO files (run_id, path, worker, started, finished, wall_s, cpu_s, tests, "
                      "baseline_mb, peak_mb, peak_abs_mb) VALUES (?, ?, ?, 0, 0, ?, 0, 1, 0, 0, 0)", rows)
    ref = bp._serial_reference(db)
    assert ref == {"a.py": 3.5, "b.py": 1.0}  # medians over the serial runs; run 3 (2 workers) left out

    ref = {"a.py": 3.0, "b.py": 1.0, "c.py": 2.0, "d.py": 0.01}
    contended = CostModel(files=(FileCost("a.py", 3.6, 0), FileCost("b.py", 1.2, 0), FileCost("c.py", 2.4, 0),
                                 FileCost("d.py", 5.0, 0), FileCost("e.py", 7.0, 0)))
    model, factor = bp._serial_equivalent(contended, ref)
    assert factor == pytest.approx(1.2)  # d.py (reference under 0.05 s) and e.py (none) do not count
    assert [round(fc.wall_s, 6) for fc in model.files] == [3.0, 1.0, 2.0, round(5.0 / 1.2, 6), round(7.0 / 1.2, 6)]
    few = CostModel(files=(FileCost("a.py", 6.0, 0), FileCost("b.py", 2.0, 0)))
    assert bp._serial_equivalent(few, ref) == (few, 1.0)  # fewer than 3 files to compare: as recorded


FAULTS_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_faults.py"


def test_bench_faults_reports_the_three_cases_and_refuses_bad_input() -> None:
    p = subprocess.run([sys.executable, str(FAULTS_PATH), "--mb", "16", "--rounds", "1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for case in ("alone", "two at once", "beside a CPU burner"):
        assert case in p.stdout
    bad = subprocess.run([sys.executable, str(FAULTS_PATH), "--mb", "0"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("bench_faults.py: error:")


PLAN_AB_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_plan_ab.py"
REPO = Path(__file__).resolve().parent.parent


def _plan_ab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PLAN_AB_PATH), *args], capture_output=True, text=True, timeout=300)


def test_bench_plan_ab_tells_the_same_plans_from_different_ones(tmp_path: Path) -> None:
    # against itself: every plan the same; against a copy whose worker search asks an extra
    # worker to save half the wall: a different count, so a different plan, and exit 1
    small = ("--rounds", "1", "--files", "60", "--configs", "2:16384")
    same = _plan_ab("--against", str(REPO), *small)
    assert same.returncode == 0, same.stderr
    assert "| 2:16384 |" in same.stdout and "| same |" in same.stdout
    other = tmp_path / "other"
    shutil.copytree(REPO / "src", other / "src", ignore=shutil.ignore_patterns("__pycache__"))
    workers = other / "src" / "suitefit" / "plan" / "workers.py"
    text = workers.read_text()
    assert "PAYS_FRACTION = 0.02" in text
    workers.write_text(text.replace("PAYS_FRACTION = 0.02", "PAYS_FRACTION = 0.9"))
    differ = _plan_ab("--against", str(other), *small)
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert "| DIFFER |" in differ.stdout


@pytest.mark.parametrize("args", [["--against", "/"], ["--against", str(REPO), "--configs", "4:x"],
                                  ["--against", str(REPO), "--rounds", "0"]])
def test_bench_plan_ab_bad_input_is_one_line(args: list[str]) -> None:
    bad = _plan_ab(*args)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.startswith("bench_plan_ab: ")
