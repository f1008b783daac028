"""xdist's controller keeps every test's reports: planned at the suite's size, not a part's.

A profile's calibration runs a slice of the suite with workers, and so far it was the only
measurement of the controller before a first plan: pytest's own suite 43.5 MiB at 297 tests
against 73.6 MiB at 4,231; scipy's subpackages 109 against 423 MiB. Watched on real runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from plan_synth import SynthFile, SynthRun, write_history

from suitefit.config import load_config
from suitefit.costs import build_cost_model, load_cost_model, restrict
from suitefit.history import History

N_FILES = 6
PER_FILE = 1500
TEST = f"""
import pytest

@pytest.mark.parametrize("i", range({PER_FILE}))
def test_many(i):
    assert i >= 0
"""


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--suitefit", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _controller(root: Path) -> tuple[float, float, int]:
    with History(root / ".suitefit" / "history.sqlite") as h:
        run = h.runs()[0]
    meta = json.loads(run.meta)
    return float(meta["controller_start_mb"]), float(meta["controller_mb"]), int(run.collected or 0)


def test_a_part_run_s_controller_is_scaled_to_the_whole_suite(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for i in range(N_FILES):
        (tmp_path / "tests" / f"test_m{i}.py").write_text(TEST)
    assert _pytest(tmp_path).returncode == 0  # serially: the suite's size, no controller
    part = _pytest(tmp_path, "-n", "2", "tests/test_m0.py")
    assert part.returncode == 0, part.stdout[-2000:]
    start, peak, n = _controller(tmp_path)
    assert n == PER_FILE and start < peak, (start, peak, n)
    costs, _ = load_cost_model(load_config(tmp_path))
    planned = costs.controller_peak_mb
    assert planned > peak + 0.5 * (peak - start) * (N_FILES - 1), (planned, start, peak)
    assert any(note.startswith("xdist's controller: ") for note in costs.notes), costs.notes
    assert costs.controller_scaled
    whole = _pytest(tmp_path, "-n", "2")
    assert whole.returncode == 0, whole.stdout[-2000:]
    w_start, w_peak, w_n = _controller(tmp_path)
    assert w_n == N_FILES * PER_FILE
    print(f"controller: part {peak:.1f} MiB at {n} tests (from {start:.1f}), planned {planned:.1f}, "
          f"whole {w_peak:.1f} MiB at {w_n} tests (from {w_start:.1f})")
    assert abs(planned - w_peak) <= 0.25 * (w_peak - w_start) + 3.0, (planned, w_peak, w_start)
    assert abs(planned - w_peak) < abs(peak - w_peak) / 2  # far nearer than the part's own figure
    costs, _ = load_cost_model(load_config(tmp_path))
    assert costs.controller_peak_mb == pytest.approx(w_peak)  # once a whole run measured it, that
    assert not costs.controller_scaled


def test_the_scaling_reads_the_history(tmp_path: Path) -> None:
    """A calibration of 300 of 3,000 tests: 40 MiB at its first collection, 42 at its peak."""
    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, tests=300) for i in range(10)}
    serial = SynthRun({"main": sorted(files)}, files)
    calib = SynthRun({"gw0": ["tests/test_0.py"]}, {"tests/test_0.py": files["tests/test_0.py"]}, kind="calibrate")
    path = write_history(tmp_path / "h.sqlite", [serial, calib])
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET meta = ? WHERE id = 2",
                   [json.dumps({"controller_mb": 42.0, "controller_start_mb": 40.0, "paths_given": True})])
    with History(path) as h:
        costs = build_cost_model(h)
    assert costs.controller_peak_mb == pytest.approx(40.0 + 2.0 * 3000 / 300)
    # a plan of part of the suite counts the tests it plans, not the whole suite's
    half = restrict(costs, lambda f: f in {f"tests/test_{i}.py" for i in range(5)}, "the test's paths")
    assert half.controller_peak_mb == pytest.approx(40.0 + 2.0 * 1500 / 300)
    with sqlite3.connect(path) as db:  # a run before the start was recorded: its peak as it is
        db.execute("UPDATE runs SET meta = ? WHERE id = 2", [json.dumps({"controller_mb": 42.0})])
    with History(path) as h:
        assert build_cost_model(h).controller_peak_mb == pytest.approx(42.0)


def test_a_part_run_too_small_or_too_heavy_a_test_is_not_scaled(tmp_path: Path) -> None:
    """Too few tests (what grows once reads as growth a test), or more a test than a report
    holds (failures' tracebacks): the part's peak as it is, as before. A whole run's peak wins,
    and the largest of all is kept, as before. A file never run counts as the others."""
    import sqlite3

    from suitefit.costs import FileCost

    files = {f"tests/test_{i}.py": SynthFile(f"tests/test_{i}.py", 1.0, tests=300) for i in range(10)}
    serial = SynthRun({"main": sorted(files)}, files)
    calib = SynthRun({"gw0": ["tests/test_0.py"]}, {"tests/test_0.py": files["tests/test_0.py"]}, kind="calibrate")
    path = write_history(tmp_path / "h.sqlite", [serial, calib])

    def controller(meta: dict[str, float], collected: int = 300) -> float:
        with sqlite3.connect(path) as db:
            db.execute("UPDATE runs SET meta = ?, collected = ? WHERE id = 2", [json.dumps(meta), collected])
        with History(path) as h:
            return build_cost_model(h).controller_peak_mb

    assert controller({"controller_mb": 42.0, "controller_start_mb": 40.0}, collected=150) == pytest.approx(42.0)
    assert controller({"controller_mb": 100.0, "controller_start_mb": 40.0}) == pytest.approx(100.0)  # 205 KiB a test
    assert controller({"controller_mb": 42.0, "controller_start_mb": 40.0}) == pytest.approx(40.0 + 2.0 * 3000 / 300)
    with History(path) as h:
        costs = build_cost_model(h)
    assert costs.controller_scaled
    more = replace(costs, files=(*costs.files, FileCost("tests/test_new.py", 1.0, 10.0, measured=False)))
    assert more.controller_peak_mb == pytest.approx(40.0 + 2.0 * 3300 / 300)  # the new file as 300 tests
    whole = SynthRun({"gw0": sorted(files)[:5], "gw1": sorted(files)[5:]}, files, kind="run")
    with History(path) as h:
        from plan_synth import write_run

        rid = write_run(h, whole, started=1_010_000.0)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET meta = ? WHERE id = ?", [json.dumps({"controller_mb": 70.0}), rid])
        db.execute("UPDATE runs SET meta = ? WHERE id = 2", [json.dumps({"controller_mb": 80.0, "controller_start_mb": 40.0})])
    with History(path) as h:
        costs = build_cost_model(h)
    assert not costs.controller_scaled and costs.controller_peak_mb == pytest.approx(80.0)
