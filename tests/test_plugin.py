"""The plugin measures what really happened: real pytest runs in subprocesses, with and without xdist."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suitefit.history import History
from suitefit.summary import run_summary
from suitefit.units import fmt_mb

pytest_plugins = ["pytester"]

POOL_CONFTEST = """
import subprocess, sys, time
import pytest

HELPER = "import sys; b = bytearray(30 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); sys.stdin.read()"

@pytest.fixture(scope="session")
def pool():
    ps = [subprocess.Popen([sys.executable, "-c", HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(3)]
    for p in ps:
        p.stdout.readline()
    yield ps
    for p in ps:
        p.stdin.close(); p.wait()

@pytest.fixture(scope="session")
def uses_pool(pool):
    return len(pool)
"""


def make_suite(pytester: pytest.Pytester, hog_mb: int = 150) -> None:
    pytester.makeconftest(POOL_CONFTEST)
    pytester.makepyfile(
        test_direct="def test_a(pool):\n    assert len(pool) == 3\n",
        test_indirect="def test_b(uses_pool):\n    assert uses_pool == 3\n",
        test_plain="import pytest\n@pytest.mark.parametrize('i', range(5))\ndef test_c(i):\n    pass\n",
        test_hog=textwrap.dedent(f"""
            def test_hog():
                b = bytearray({hog_mb} * 1024 * 1024)
                for i in range(0, len(b), 4096):
                    b[i] = 1
                del b
            """),
    )


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    hist = pytester.path / "h.sqlite"
    res = pytester.runpytest_subprocess("--suitefit", "--suitefit-history", str(hist), "-p", "no:randomly", *args)
    with History(hist) as h:
        run_id = h.runs(limit=1)[0].id
        return res, run_summary(h, run_id)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_hog_pool_and_fixture_users_are_measured(pytester: pytest.Pytester, workers: str) -> None:
    make_suite(pytester)
    res, s = run(pytester, "-n", workers)
    res.assert_outcomes(passed=8)
    files = {f["path"]: f for f in s["files"]}
    assert set(files) == {"test_direct.py", "test_indirect.py", "test_plain.py", "test_hog.py"}
    # the hog touched 150 MiB: reported within 15%
    assert 150 * 0.85 <= files["test_hog.py"]["peak_mb"] <= 150 * 1.15
    assert files["test_plain.py"]["peak_mb"] < 20
    pool = next(f for f in s["fixtures"] if f["name"] == "pool")
    assert pool["scope"] == "session"
    assert pool["procs"] == 3
    assert pool["mb"] >= 3 * 30 * 0.85
    assert pool["files"] == ["test_direct.py", "test_indirect.py"]  # direct and through uses_pool
    assert s["tests"]["total"] == 8 and s["tests"]["passed"] == 8
    expected_workers = {"main"} if workers == "0" else {"gw0", "gw1"}
    assert {w["id"] for w in s["workers"]} == expected_workers
    for w in s["workers"]:
        assert w["startup_s"] > 0 and w["baseline_mb"] > 5 and w["peak_rss_mb"] >= w["baseline_mb"]
    assert s["peak_rss_mb"] >= 150
    res.stdout.fnmatch_lines(["*suitefit run*", "*top files by peak memory*", "*test_hog.py*",
                              "*pool (session)*3 processes*used by 2 file(s)*"])


def test_whole_run_timeline_is_sampled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_slow="import time\ndef test_s():\n    time.sleep(1.0)\n")
    res, s = run(pytester, "--suitefit-interval", "0.1")
    res.assert_outcomes(passed=1)
    with History(pytester.path / "h.sqlite") as h:
        samples = h.samples(s["run_id"])
    assert len(samples) >= 8  # about 10 a second for over a second
    assert any(x.pss_mb is not None for x in samples)
    assert all(x.procs >= 1 and x.rss_mb > 5 for x in samples)


def test_pss_is_read_at_the_runs_peak_and_the_summary_says_so(pytester: pytest.Pytester) -> None:
    """A hog held for 0.8 s between tests that hold nothing: the summary's PSS is the one
    read at the peak (a read on the cadence alone was most often the tree before it)."""
    pytester.makepyfile(test_a=textwrap.dedent("""
        import time
        def test_before():
            time.sleep(1.2)
        def test_hog():
            b = bytearray(300 * 2**20); b[::4096] = b"x" * len(b[::4096])
            time.sleep(0.8)
        def test_after():
            time.sleep(1.2)
    """))
    res, s = run(pytester)
    res.assert_outcomes(passed=3)
    with History(pytester.path / "h.sqlite") as h:
        r = h.run(s["run_id"])
    at_peak = r.meta_dict.get("pss_at_peak_mb")
    assert at_peak is not None and at_peak > 300, r.meta_dict
    assert r.peak_rss_mb is not None and at_peak <= r.peak_rss_mb * 1.01
    res.stdout.fnmatch_lines([f"*tree peak RSS * (PSS {fmt_mb(at_peak)} at that peak)*"])


def test_pytest_sessions_inside_a_handed_over_process_watch_its_end_once(pytester: pytest.Pytester) -> None:
    """A suite that runs pytest sessions in its own process (pytester's inline runs: pytest's own
    suite runs thousands) calls every plugin's pytest_addoption again for each. The exit handler
    that closes a run pytest never started is registered once, not once a session."""
    pytester.makepyfile(test_inline=textwrap.dedent("""
        import atexit
        pytest_plugins = ["pytester"]
        def test_sessions(pytester):
            pytester.makepyfile("def test_x(): pass")
            before = atexit._ncallbacks()
            for _ in range(5):
                pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
            assert atexit._ncallbacks() == before
    """))
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--suitefit-run-id=1",
                                        f"--suitefit-history={pytester.path / 'h.sqlite'}")
    res.assert_outcomes(passed=1)


def test_parallel_workers_neither_lose_nor_duplicate_rows(pytester: pytest.Pytester) -> None:
    for i in range(8):
        pytester.makepyfile(**{f"test_m{i}": "import pytest\n@pytest.mark.parametrize('i', range(40))\ndef test_x(i):\n    pass\n"})
    res, s = run(pytester, "-n", "2")
    res.assert_outcomes(passed=320)
    con = sqlite3.connect(pytester.path / "h.sqlite")
    rows = con.execute("SELECT COUNT(*), COUNT(DISTINCT nodeid) FROM tests WHERE run_id = ?", (s["run_id"],)).fetchone()
    assert rows == (320, 320)
    per_worker = dict(con.execute("SELECT worker, COUNT(*) FROM tests WHERE run_id = ? GROUP BY worker", (s["run_id"],)))
    assert set(per_worker) == {"gw0", "gw1"} and sum(per_worker.values()) == 320
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


MIXED_FILES = {
    # module functions, a class, functions again: one file, one segment; the items of a
    # class share their module's path, which the recorder's same-file test relies on
    "test_mixed": textwrap.dedent("""
        import pytest

        @pytest.fixture(scope="module")
        def modfix():
            return 1

        @pytest.fixture
        def funcfix():
            return 2

        def test_first(modfix, funcfix):
            assert modfix + funcfix == 3

        class TestInside:
            @pytest.mark.parametrize("i", range(3))
            def test_in_class(self, i, funcfix):
                assert funcfix == 2

        def test_last(modfix):
            assert modfix == 1
        """),
    "test_other": "def test_o1():\n    pass\n\ndef test_o2():\n    assert False\n",
}


def check_mixed(h: History, run_id: int) -> None:
    """Every test in its file's one segment, its outcome and phases kept, fixtures by scope."""
    tests = h.tests(run_id)
    assert len(tests) == 7
    assert all(t.file == t.nodeid.split("::")[0] for t in tests)
    outcomes = {t.nodeid.split("::")[-1]: t.outcome for t in tests}
    assert outcomes["test_o2"] == "failed" and outcomes["test_last"] == "passed"
    assert sum(o == "passed" for o in outcomes.values()) == 6
    assert all(t.call_s > 0 and t.wall_s >= t.setup_s + t.call_s for t in tests)
    files = h.files(run_id)
    segs = {f.path: f.tests for f in files}
    assert sorted(f.path for f in files) == ["test_mixed.py", "test_other.py"], files  # one each
    assert segs == {"test_mixed.py": 5, "test_other.py": 2}
    names = {f.name for f in h.fixtures(run_id)}
    assert "modfix" in names and "funcfix" not in names


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_file_is_one_segment_whatever_its_classes(pytester: pytest.Pytester, workers: str) -> None:
    """The per-test path decides "same file?" without reading nodeids: watched here."""
    pytester.makepyfile(**MIXED_FILES)
    res, s = run(pytester, "-n", workers, *(["--dist", "loadfile"] if workers != "0" else []))
    res.assert_outcomes(passed=6, failed=1)
    with History(pytester.path / "h.sqlite") as h:
        check_mixed(h, s["run_id"])


def test_plugin_is_inert_without_the_flag(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    res = pytester.runpytest_subprocess("-p", "no:randomly")
    res.assert_outcomes(passed=1)
    assert "suitefit run" not in res.stdout.str()
    assert not (pytester.path / ".suitefit").exists()


def test_phases_and_outcomes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mix=textwrap.dedent("""
        import time, pytest
        @pytest.fixture
        def slow_setup():
            time.sleep(0.2)
            yield
            time.sleep(0.1)
        def test_ok(slow_setup):
            time.sleep(0.05)
        def test_fail():
            assert False
        @pytest.mark.skip
        def test_skip():
            pass
        @pytest.mark.xfail
        def test_xfail():
            assert False
        @pytest.fixture
        def broken():
            raise RuntimeError
        def test_error(broken):
            pass
        """))
    _res, s = run(pytester)
    with History(pytester.path / "h.sqlite") as h:
        tests = {t.nodeid.split("::")[1]: t for t in h.tests(s["run_id"])}
        run_rec = h.run(s["run_id"])
    assert tests["test_ok"].outcome == "passed"
    assert tests["test_ok"].setup_s >= 0.19 and tests["test_ok"].teardown_s >= 0.09
    assert tests["test_ok"].call_s >= 0.04 and tests["test_ok"].wall_s >= 0.33
    assert tests["test_fail"].outcome == "failed"
    assert tests["test_skip"].outcome == "skipped"
    assert tests["test_xfail"].outcome == "xfailed"
    assert tests["test_error"].outcome == "error"
    assert [t.seq for t in sorted(tests.values(), key=lambda t: t.seq)] == list(range(5))
    assert run_rec.status == "failed" and run_rec.exit_code == 1


def test_fixture_teardown_and_cpu_time(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_td=textwrap.dedent("""
        import time, pytest
        @pytest.fixture(scope="module")
        def mod():
            time.sleep(0.3)
            yield
            time.sleep(0.2)
        def test_burn(mod):
            end = time.process_time() + 0.3
            while time.process_time() < end:
                pass
        """))
    res, s = run(pytester)
    res.assert_outcomes(passed=1)
    fx = next(f for f in s["fixtures"] if f["name"] == "mod")
    assert fx["scope"] == "module" and fx["setup_s"] >= 0.29 and fx["teardown_s"] >= 0.19
    assert fx["procs"] == 0
    with History(pytester.path / "h.sqlite") as h:
        (t,) = h.tests(s["run_id"])
    assert t.cpu_s >= 0.28


def test_a_killed_worker_under_plain_xdist_is_recorded(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kill="import os, signal\ndef test_dies():\n    os.kill(os.getpid(), signal.SIGKILL)\n",
                        test_ok="def test_ok():\n    pass\n")
    res, s = run(pytester, "-n", "2", "--max-worker-restart=0")
    res.stdout.fnmatch_lines(["*crashed while running*test_kill.py::test_dies*"])
    with History(pytester.path / "h.sqlite") as h:
        run_rec = h.run(s["run_id"])
        died = [w for w in h.workers(s["run_id"]) if w.status == "died"]
        (crash,) = h.events(s["run_id"], "crash_item")
        tests = {t.nodeid: t for t in h.tests(s["run_id"])}
    assert crash.nodeid == "test_kill.py::test_dies"
    assert tests["test_kill.py::test_dies"].outcome == "failed"
    assert run_rec.failed == 1 and run_rec.status == "failed"
    assert len(died) == 1 and died[0].worker == crash.worker


@pytest.mark.slow
def test_measurement_on_the_oldest_supported_pytest(pytester: pytest.Pytester) -> None:
    import subprocess

    from venvs import OLDEST, make_venv

    python = make_venv(OLDEST, with_suitefit=True)
    make_suite(pytester)
    hist = pytester.path / "old.sqlite"
    for workers in ("0", "2"):
        res = subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "--suitefit",
                              f"--suitefit-history={hist}", "-n", workers],
                             cwd=pytester.path, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        with History(hist) as h:
            run_rec = h.runs(limit=1)[0]
            s = run_summary(h, run_rec.id)
        assert run_rec.pytest_version == "8.0.2"
        files = {f["path"]: f for f in s["files"]}
        assert 150 * 0.85 <= files["test_hog.py"]["peak_mb"] <= 150 * 1.15
        pool = next(f for f in s["fixtures"] if f["name"] == "pool")
        assert pool["procs"] == 3 and pool["files"] == ["test_direct.py", "test_indirect.py"]
        assert s["tests"]["passed"] == 8
    mixed = pytester.mkdir("mixed")
    for name, text in MIXED_FILES.items():
        (mixed / f"{name}.py").write_text(text)
    hist = mixed / "h.sqlite"
    for workers in ("0", "2"):
        res = subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", "--suitefit",
                              f"--suitefit-history={hist}", "-n", workers, "--dist", "loadfile",
                              "--rootdir", str(mixed), str(mixed)],
                             cwd=mixed, capture_output=True, text=True, timeout=300)
        assert res.returncode == 1, res.stdout + res.stderr
        with History(hist) as h:
            check_mixed(h, h.runs(limit=1)[0].id)


def test_a_measured_run_leaves_no_unclosed_file_behind(tmp_path: Path) -> None:
    # suitefit's lines go to the user's stderr through one stream per session; a new one per
    # caller was left to the garbage collector, and pytest 8.0 printed ResourceWarnings for
    # them in the user's output. Python's development mode reports every such file.
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    for args in ((), ("-n", "2")):
        res = subprocess.run([sys.executable, "-X", "dev", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}", *args],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "ResourceWarning" not in res.stdout + res.stderr, (args, res.stdout + res.stderr)
