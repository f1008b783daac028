"""Measuring does not touch the test processes: no suitefit thread there, refcount-sensitive
tests pass, and where /proc or clear_refs is missing the run degrades with one line.

Real pytest runs (serial and ``-n 2``) of ``tests/fixtures/refcount_suite``, a suite that
fails when another Python thread runs in its process while a test runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from suitefit.history import History

SUITE = Path(__file__).parent / "fixtures" / "refcount_suite"
MODES = {"serial": [], "xdist": ["-n", "2"]}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    dst = tmp_path / "suite"
    shutil.copytree(SUITE, dst)
    return dst


def pytest_run(suite: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "SUITEFIT_", "REFCOUNT_"))}
    e.pop("PYTEST_ADDOPTS", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args], cwd=suite, env=e,
                          capture_output=True, text=True, timeout=300)


def measured(suite: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return pytest_run(suite, "--suitefit", f"--suitefit-history={suite / 'h.sqlite'}", *args, env=env)


def test_the_refcount_suite_fails_when_a_python_thread_runs_beside_its_tests(suite: Path) -> None:
    """The suite can fail: a thread that takes and drops small-int references breaks it."""
    r = pytest_run(suite, env={"REFCOUNT_SUITE_NOISY_THREAD": "1"})
    assert r.returncode == 1, r.stdout
    assert "test_small_int_refcount_is_unchanged_across_a_loop" in r.stdout


@pytest.mark.parametrize("mode", sorted(MODES))
def test_refcount_sensitive_tests_pass_while_measured(suite: Path, mode: str) -> None:
    assert pytest_run(suite, *MODES[mode]).returncode == 0  # without suitefit
    for _ in range(3):  # benchmarks/bench_refcount.py runs it 20 times in a row
        r = measured(suite, *MODES[mode])
        assert r.returncode == 0, r.stdout + r.stderr
        assert "19 passed" in r.stdout
    with History(suite / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        assert run.passed == 19 and (run.peak_rss_mb or 0) > 10  # it was measured all the same
        assert len({f.path for f in h.files(run.id)}) == 5 and len(h.samples(run.id)) >= 3


def census(suite: Path, measure: bool, args: list[str]) -> list[dict[str, object]]:
    out = suite / ("census-measured.jsonl" if measure else "census-plain.jsonl")
    env = {"THREAD_CENSUS": str(out)}
    r = measured(suite, *args, env=env) if measure else pytest_run(suite, *args, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_suitefit_starts_no_thread_in_a_process_that_runs_tests(suite: Path, mode: str) -> None:
    """While a test runs, its process has exactly the threads it has without suitefit.

    Threads pytest or execnet start are theirs: the same run without suitefit has them too.
    Native threads are counted from /proc/self/task, so a thread started from C shows as well.
    """
    plain = census(suite, False, MODES[mode])
    with_sf = census(suite, True, MODES[mode])
    assert len(plain) == len(with_sf) == 3

    def threads(recs: list[dict[str, object]]) -> Counter[tuple[str, ...]]:
        return Counter(tuple(r["python"]) for r in recs)  # type: ignore[arg-type]

    assert threads(with_sf) == threads(plain)
    assert sorted(r["native"] for r in with_sf) == sorted(r["native"] for r in plain)  # type: ignore[type-var]
    assert not any("suitefit" in name for r in with_sf for name in r["python"])  # type: ignore[attr-defined]
    if mode == "serial":
        assert with_sf[0]["python"] == ["MainThread"] and with_sf[0]["native"] == 1


def test_without_clear_refs_peaks_are_sampled_and_the_run_says_so(suite: Path, tmp_path: Path) -> None:
    hog = suite / "tests" / "test_hog.py"
    hog.write_text("import time\n\ndef test_hog():\n    b = bytearray(120 * 2**20)\n    b[::4096] = b'x' * len(b[::4096])\n"
                   "    time.sleep(0.5)\n")
    r = measured(suite, env={"SUITEFIT_NO_CLEAR_REFS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "clear_refs" in ln]
    assert len(lines) == 1 and "per-file peaks are sampled" in lines[0]
    with History(suite / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        files = {f.path: f for f in h.files(run.id)}
        assert 100 <= files["tests/test_hog.py"].peak_mb <= 140  # the samples saw it held for 0.5 s


def test_without_proc_memory_is_not_measured_and_the_run_goes_on(suite: Path) -> None:
    r = measured(suite, "-n", "2", env={"SUITEFIT_NO_PROC": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "/proc" in ln]
    assert len(lines) == 1 and "memory is not measured" in lines[0]
    with History(suite / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        assert run.passed == 19 and run.status == "passed"
        assert h.samples(run.id) == []
        assert len({f.path for f in h.files(run.id)}) == 5  # times per file are still recorded


def test_a_sampler_process_that_cannot_start_leaves_the_run_unmeasured_not_failed(suite: Path) -> None:
    """No process to spare, an interpreter gone: the run goes on, says so once, and keeps
    what the test process records itself (a conftest loaded before suitefit's configure
    points ``sys.executable``, which the sampler process is started with, at nothing)."""
    (suite / "conftest.py").write_text("import sys\n\nsys.executable = '/nonexistent/python3'\n")
    r = measured(suite)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "sampler process could not start" in ln]
    assert len(lines) == 1 and "/nonexistent/python3" in lines[0] and "not measured" in lines[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    with History(suite / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        assert run.passed == 19 and run.status == "passed" and len(h.tests(run.id)) == 19
        assert h.samples(run.id) == []


HOLDS = """
import time

def test_fast():
    pass

def test_holds_memory():
    b = bytearray(300 * 2**20)
    b[::4096] = b'x' * len(b[::4096])
    time.sleep(1.5)
"""


@pytest.mark.parametrize("mode", sorted(MODES))
def test_heartbeat_names_the_test_in_flight_in_the_job_log(tmp_path: Path, mode: str) -> None:
    """Serially the sampler process writes the heartbeat and journal; under xdist the controller."""
    from test_run_control import write_plan, write_suite

    write_suite(tmp_path, {"test_big.py": HOLDS})
    plan = write_plan(tmp_path, [("tests/test_big.py", ["tests/test_big.py"], 300.0)], budget_mb=420,
                      workers=1 if mode == "serial" else 2)
    r = pytest_run(tmp_path, "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}",
                   f"--suitefit-plan={plan}", *MODES[mode])
    assert r.returncode == 0, r.stdout + r.stderr
    beats = [ln for ln in r.stderr.splitlines() if "suitefit: heartbeat" in ln]
    assert beats, r.stderr
    assert "crossed 70% of the" in beats[0] and "tests/test_big.py::test_holds_memory" in beats[0], beats
    with History(tmp_path / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        (ev, *_) = h.events(run.id, "heartbeat")
        assert ev.detail_dict["inflight"][0]["nodeid"] == "tests/test_big.py::test_holds_memory"
    # the run ended: the journal (for a run killed mid-test) is removed; the history has it all
    assert not (tmp_path / f"inflight-{run.id}.json").exists()
    assert plan.exists()  # a plan named by hand is not the run's to remove


KILLS_THE_SAMPLER = '''
import time
import psutil

def test_kills_the_sampler():
    me = psutil.Process()  # serially the sampler is this process's child; under xdist, its parent's
    (sampler,) = [c for c in me.children() + me.parent().children()
                  if "suitefit.measure.watcher" in " ".join(c.cmdline())]
    sampler.kill()
    # not sampler.wait(): psutil would reap it, and the session could not see how it ended
    end = time.monotonic() + 10
    while sampler.status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
        time.sleep(0.01)

def test_after_it():
    time.sleep(0.3)
'''


@pytest.mark.parametrize("mode", ["serial", "xdist"])
def test_a_sampler_that_dies_is_said_in_one_line_and_no_memory_is_claimed(tmp_path: Path, mode: str) -> None:
    """The sampler process outside the tests can die (a signal, a bug): the run goes on, says
    in one line that its memory was not measured, and records no peak it did not see. Before,
    the run said nothing (and a crash at the sampler's start left only its traceback)."""
    (tmp_path / "test_kill_sampler.py").write_text(KILLS_THE_SAMPLER)
    r = pytest_run(tmp_path, "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}", "-p", "no:cacheprovider",
                   *(["-n", "1"] if mode == "xdist" else []))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "suitefit: warning: the sampler process ended early, killed by signal 9 SIGKILL: this run's " \
           "memory and per-file peaks are not measured" in r.stderr, out
    assert "Traceback" not in out
    with History(tmp_path / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
    assert run.peak_rss_mb is None or mode == "xdist"  # serially nothing else measured it
    assert run.meta_dict["sampler_ended_early"] == "ended early, killed by signal 9 SIGKILL"
