"""A long file split into chunks where its measured time is shared equally, watched in a real run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clihelp import json_out, suitefit
from venvs import OLDEST, make_venv

from suitefit.costs import build_cost_model
from suitefit.history import History

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_chunks.py"
BIG = (
    "import time\n\nimport pytest\n\n\n"
    "@pytest.mark.parametrize('i', range(20))\n"
    "def test_x(i):\n"
    "    time.sleep(0.3 if i >= 15 else 0.02)\n"
)


def test_a_file_whose_time_lies_in_its_last_tests_is_cut_by_time_not_by_count(tmp_path: Path) -> None:
    # 20 tests, the last 5 hold 1.5 of its 1.8 s. Cut at equal counts, one worker would get
    # tests 0-9 (0.2 s) and the other 10-19 (1.6 s); cut where the profile put half its time,
    # each gets about 0.9 s: the slow tests are shared.
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "test_big.py").write_text(BIG)
    (tmp_path / "tests" / "test_small.py").write_text("import time\n\ndef test_s():\n    time.sleep(0.05)\n")
    assert suitefit("profile", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path).returncode == 0
    path = tmp_path / ".suitefit" / "history.sqlite"
    with History(path) as h:
        (big,) = [f for f in build_cost_model(h).files if f.path == "tests/test_big.py"]
    assert big.tests == 20 and len(big.time_shares) > 2
    assert big.time_shares[0] == 0.0 and big.time_shares[-1] == 1.0
    # three quarters of the tests hold a sixth of the time
    assert big.time_shares[(len(big.time_shares) - 1) * 3 // 4] < 0.3

    plan = json_out(suitefit("plan", "--json", "--workers", "2", cwd=tmp_path))
    spans = sorted(tuple(u["span"]) for u in plan["units"] if u["files"] == ["tests/test_big.py"])
    assert len(spans) == 2 and spans[0][0] == 0.0 and spans[0][1] == spans[1][0] and spans[1][1] == 1.0
    assert 0.8 <= spans[0][1] <= 0.9  # cut at test 16-18 of 20, not at 10

    res = suitefit("run", "--workers", "2", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with History(path) as h:
        run = h.runs(limit=1)[0]
        rows = h.execute("SELECT worker, nodeid FROM tests WHERE run_id = ? AND file = 'tests/test_big.py'",
                         [run.id])
    assert len(rows) == 20
    slow_on: dict[str, int] = {}
    for worker, nodeid in rows:
        slow_on.setdefault(worker, 0)
        slow_on[worker] += int(nodeid.split("[")[1].rstrip("]")) >= 15
    assert sorted(slow_on.values()) in ([2, 3], [1, 4]), slow_on
    # planned from the chunked run alone (a window of one run), the file's shape still comes
    # from the newest run that ran it whole: chunked runs do not lose it
    with History(path) as h:
        (again,) = [f for f in build_cost_model(h, last=1).files if f.path == "tests/test_big.py"]
    assert again.time_shares == big.time_shares
    # the benchmark reads the same cuts back from a run's own test times: by time, the two
    # chunks are within a test of each other; by count, one holds 1.6 of the 1.8 s
    bench = subprocess.run([sys.executable, str(BENCH), str(path), "--check", "1", "--cpus", "2"],
                           capture_output=True, text=True, timeout=60)
    assert bench.returncode == 0, bench.stderr
    lines = bench.stdout.splitlines()
    assert lines[0].startswith("equal counts: 2 workers") and "by time, as planned: 2 workers" in bench.stdout
    by_count, by_time = (float(ln.rsplit("the longest ", 1)[1].split("x")[0]) for ln in lines
                         if "tests/test_big.py: 2 chunks" in ln)
    assert by_count > 1.6 and by_time < 1.25, bench.stdout
    # as if one worker had run both chunks, the second first (the core may send them so): its
    # tests' order there is not the file's, and the shape is not read from it
    with sqlite3.connect(path) as db:
        for _, nodeid in rows:
            i = int(nodeid.split("[")[1].rstrip("]"))
            db.execute("UPDATE tests SET worker = 'gw0', seq = ? WHERE run_id = ? AND nodeid = ?",
                       [(i - 100) if i >= 17 else i, run.id, nodeid])
        db.execute("UPDATE OR REPLACE files SET worker = 'gw0' WHERE run_id = ?", [run.id])
    with History(path) as h:
        (rotated,) = [f for f in build_cost_model(h, last=1).files if f.path == "tests/test_big.py"]
    assert rotated.time_shares == big.time_shares


def _classes_file(classes: int, size: int, ordered: int) -> str:
    """``classes`` test classes of ``size`` tests of 0.1 s, each class's fixture logging its
    set-up; class ``ordered`` asserts that its tests before each one ran, in order, in the
    same process (state kept on the class, as a ``--dist loadscope`` suite may)."""
    out = ["import os", "import time", "", "import pytest", "",
           "LOG = os.path.join(os.path.dirname(__file__), 'setups.log')", ""]
    for c in range(classes):
        check = "        assert type(self).seen == list(range(i))\n" if c == ordered else ""
        out.append(
            f"class TestC{c}:\n"
            "    seen = []\n\n"
            "    @pytest.fixture(scope='class', autouse=True)\n"
            "    def once(self):\n"
            "        with open(LOG, 'a') as f:\n"
            f"            f.write('C{c}\\n')\n\n"
            f"    @pytest.mark.parametrize('i', range({size}))\n"
            "    def test_step(self, i):\n"
            "        time.sleep(0.1)\n"
            f"{check}"
            "        type(self).seen.append(i)\n")
    return "\n".join(out)


@pytest.mark.parametrize("versions", ["newest", "oldest"])
def test_a_long_files_chunks_are_cut_between_its_test_classes(tmp_path: Path, versions: str) -> None:
    # 5 classes of 4 tests of 0.1 s: the 2 s file is cut in two where the profile put half
    # its time, test 10 of 20, inside the third class (tests 8-11), whose tests rely on the
    # ones before them. The plan (from the classes the cost model keeps) and the run (from
    # the node ids it collected) move the cut to the class boundary nearest it: that class
    # runs whole on one worker and sets up once (cut at test 10, it failed at its third test
    # on the other worker, and set up twice).
    python = make_venv(OLDEST, with_suitefit=True) if versions == "oldest" else None
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "test_classes.py").write_text(_classes_file(5, 4, ordered=2))
    (tmp_path / "tests" / "test_small.py").write_text("import time\n\ndef test_s():\n    time.sleep(0.05)\n")
    assert suitefit("profile", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path, python=python).returncode == 0
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        (big,) = [f for f in build_cost_model(h).files if f.path == "tests/test_classes.py"]
    assert big.classes == tuple((4 * c / 20, 4 * (c + 1) / 20) for c in range(5))
    plan = json_out(suitefit("plan", "--json", "--workers", "2", cwd=tmp_path, python=python))
    spans = sorted(tuple(u["span"]) for u in plan["units"] if u["files"] == ["tests/test_classes.py"])
    # cut by time alone, inside the third class; the plan moves it to a class boundary
    assert len(spans) == 2 and round(spans[0][1] * 20) in (8, 12), spans
    log = tmp_path / "tests" / "setups.log"
    log.unlink()
    res = suitefit("run", "--workers", "2", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path, python=python)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "21 passed" in res.stdout
    assert log.read_text().split().count("C2") == 1
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        run = h.runs(limit=1)[0]
        rows = h.execute("SELECT worker, nodeid FROM tests WHERE run_id = ? AND file = 'tests/test_classes.py'",
                         [run.id])
    assert len(rows) == 20 and len({w for w, _ in rows}) == 2  # split between the workers
    assert len({w for w, n in rows if "::TestC2::" in n}) == 1


LONG_WITH_A_HOG = (
    "import time\n\nimport pytest\n\n\n"
    "@pytest.mark.parametrize('i', range(16))\n"
    "def test_long(i):\n"
    "    if i == 0:  # its first test holds 300 MiB for a moment; the other fifteen hold nothing\n"
    "        b = bytearray(300 * 1024 * 1024)\n"
    "        for j in range(0, len(b), 4096):\n"
    "            b[j] = 1\n"
    "        del b\n"
    "    time.sleep(0.15)\n"
)


def test_a_chunk_is_planned_at_the_peak_a_run_measured_for_its_own_tests(tmp_path: Path) -> None:
    """A long file's peak is one figure: each of its chunks was planned at all of it, so two
    chunks side by side at twice a peak only one of them has (joblib: 77-92% over). A run that
    split the file measured each worker's part exactly; the next plan puts each chunk at what
    its own tests peaked at, and the chunk that holds the hog keeps it."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "test_long.py").write_text(LONG_WITH_A_HOG)
    (tmp_path / "tests" / "test_small.py").write_text("import time\n\ndef test_s():\n    time.sleep(0.05)\n")
    args = ("--", "-q", "-p", "no:cacheprovider")
    assert suitefit("profile", "--no-calibrate", *args, cwd=tmp_path).returncode == 0

    def chunks() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        plan = json_out(suitefit("plan", "--json", "--workers", "2", cwd=tmp_path))
        return plan, sorted((u for u in plan["units"] if u["files"] == ["tests/test_long.py"]),
                            key=lambda u: u["chunk"])

    first, before = chunks()
    assert len(before) == 2 and before[0]["chunk"] == [1, 2], before
    assert before[0]["peak_mb"] == before[1]["peak_mb"] >= 250  # both at the file's peak
    res = suitefit("run", "--workers", "2", *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    path = tmp_path / ".suitefit" / "history.sqlite"
    with History(path) as h:
        run = h.runs(limit=1)[0]
        on = {w for (w,) in h.execute("SELECT DISTINCT worker FROM tests WHERE run_id = ? AND file = ?",
                                      [run.id, "tests/test_long.py"])}
        (long_,) = [f for f in build_cost_model(h).files if f.path == "tests/test_long.py"]
    assert len(on) == 2, on  # the run split it, as planned
    assert len(long_.piece_peaks) == 1 and long_.peak_mb >= 250
    second, after = chunks()
    assert [u["span"] for u in after] == [u["span"] for u in before]
    assert after[0]["peak_mb"] >= 250 and after[0]["peak_mb"] == pytest.approx(long_.peak_mb, abs=1)
    assert after[1]["peak_mb"] < 60, after[1]  # its tests hold nothing: an interpreter's growth
    assert "as runs that split the file measured these tests" in after[1]["reason"]
    assert second["predicted_peak_mb"] <= first["predicted_peak_mb"] - 200
    # still a bound of what ran: the run's own peak, as the independent figure, is not above it
    assert run.peak_rss_mb is not None and run.peak_rss_mb <= second["predicted_peak_mb"] * 1.1


def test_a_chunks_peak_is_what_the_worker_whose_tests_hold_it_measured() -> None:
    from suitefit.model import FileCost, FixtureCost, Unit
    from suitefit.plan.chunks import split_long_files

    one = ((0.0, 0.5, 300.0, 0.0, 0, 0.0, 0), (0.5, 1.0, 20.0, 0.0, 0, 0.0, 1))
    fc = FileCost("t.py", wall_s=4.0, peak_mb=300.0, tests=16, piece_peaks=(one,))
    assert fc.peak_between(0.5, 1.0) == (20.0, 0.0, 0, 0.0)  # within one worker's tests: its peak
    assert fc.peak_between(0.0, 0.5) is None  # the file's own peak: nothing lower to plan
    assert fc.peak_between(0.4, 1.0) is None  # both workers' tests: neither part bounds it
    three = ((0.0, 0.3, 40.0, 0.0, 0, 0.0, 0), (0.3, 0.6, 50.0, 10.0, 1, 80.0, 1), (0.6, 1.0, 60.0, 0.0, 0, 0.0, 2))
    fc3 = FileCost("t.py", wall_s=4.0, peak_mb=300.0, tests=16, piece_peaks=(three,))
    assert fc3.peak_between(0.2, 0.5) is None
    assert fc3.peak_between(0.35, 0.55) == (50.0, 10.0, 1, 80.0)
    # a run cut a little off the plan's cut (joblib: 596 and 603 of 647) spans two workers'
    # tests there and says nothing of the chunk; the run cut at it does
    near = ((0.0, 0.52, 280.0, 0.0, 0, 0.0, 0), (0.52, 1.0, 25.0, 0.0, 0, 0.0, 1))
    assert FileCost("t.py", wall_s=4.0, peak_mb=300.0, tests=16, piece_peaks=(one, near)).peak_between(
        0.5, 1.0) == (20.0, 0.0, 0, 0.0)
    # a second run cut elsewhere: its bound over the chunk counts too (the higher wins)
    other = ((0.0, 0.25, 300.0, 0.0, 0, 0.0, 0), (0.25, 1.0, 90.0, 40.0, 2, 60.0, 1))
    two = FileCost("t.py", wall_s=4.0, peak_mb=300.0, tests=16, piece_peaks=(one, other))
    assert two.peak_between(0.5, 1.0) == (90.0, 40.0, 2, 60.0)
    assert FileCost("t.py", wall_s=4.0, peak_mb=300.0, tests=16).peak_between(0.5, 1.0) is None
    # the unit adds its session fixture's memory to the file's peak: each chunk keeps it
    db = FixtureCost("db", "session", setup_s=0.1, mb=150.0, files=("t.py",))
    unit = Unit(name="t.py", files=("t.py",), wall_s=4.0, peak_mb=450.0, fixtures=("db",), tests=16)
    units, _ = split_long_files([unit], {"t.py": fc}, [db], workers=2, lane_s=2.0)
    assert [(u.chunk, u.peak_mb) for u in units] == [((1, 2), 450.0), ((2, 2), 170.0)]
