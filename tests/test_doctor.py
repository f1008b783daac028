"""`suitefit doctor` end to end: fixture projects, real target interpreters, real probe runs.

Each project under tests/fixtures/doctor/ is copied to a temp folder and doctor runs in
it as a subprocess, against a venv with a known pytest (tests/venvs.py). Projects that
need a history get one written through ``History`` (the same store the plugin fills).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import psutil
import pytest
from venvs import PYTEST_90, PYTEST_92, make_venv

from suitefit import history as hist
from suitefit.history import FileRecord, FixtureRecord, History, WorkerRecord

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
PYTEST_92_COV = (*PYTEST_92, "pytest-cov==7.1.0")
_SCRUB = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PYTEST_ADDOPTS",
          "PYTEST_XDIST_AUTO_NUM_WORKERS", "PYTEST_PLUGINS")


@pytest.fixture(scope="session")
def py92() -> str:
    return str(make_venv(PYTEST_92))


@pytest.fixture(scope="session")
def py90() -> str:
    return str(make_venv(PYTEST_90))


@pytest.fixture(scope="session")
def py92cov() -> str:
    return str(make_venv(PYTEST_92_COV))


def project(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(FIXTURES / name, dest)
    return dest


def doctor(cwd: Path, python: str | None, *args: str, affinity: set[int] | None = None,
           as_json: bool = True) -> tuple[int, Any, str]:
    """Run `suitefit doctor` in ``cwd``; returns (exit code, parsed JSON or stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    cmd = [sys.executable, "-m", "suitefit", "doctor"]
    if as_json:
        cmd.append("--json")
    if python:
        cmd += ["--python", python]
    cmd += list(args)

    def pin() -> None:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)

    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=pin if affinity is not None else None)
    out: Any = proc.stdout
    if as_json and proc.returncode in (0, 1):
        out = json.loads(proc.stdout)
    return proc.returncode, out, proc.stderr


def ids(report: dict[str, Any], *, silenced: bool = False) -> list[str]:
    return [f["id"] for f in report["findings"] if (f["silenced"] is not None) == silenced]


# -- histories ------------------------------------------------------------------------------


def add_run(h: History, *, workers: dict[str, tuple[float, float]], files: list[tuple[str, str, float, float]],
            tests: list[tuple[str, str, str]] = (), fixtures: list[tuple[str, str, int]] = (),  # type: ignore[assignment]
            fixture_files: list[tuple[str, str]] = (), kind: str = "profile") -> int:  # type: ignore[assignment]
    """One finished run: workers {name: (startup_s, baseline_mb)}, files (path, worker, wall_s, peak_mb),
    tests (nodeid, worker, outcome), fixtures (name, worker, procs), fixture_files (name, file)."""
    run = h.new_run(kind, started=1000.0)
    h.update_run(run, status="passed", exit_code=0, wall_s=10.0, workers=len(workers))
    for w, (startup, base) in workers.items():
        h.upsert_worker(WorkerRecord(run, w, 1, 1000.0, 1000.0 + startup, startup, base, base + 10))
    h.add_files([FileRecord(run, p, w, 1000.0, 1000.0 + s, s, s, 1, 60.0, peak, 60.0 + peak)
                 for p, w, s, peak in files])
    h.add_tests([hist.TestRecord(run, n, n.split("::")[0], w, i, 1000.0, 0, 0.1, 0, 0.1, 0.1, o)
                 for i, (n, w, o) in enumerate(tests)])
    h.add_fixtures([FixtureRecord(run, w, n, "session", "", 0.5, 0.1, p, 100.0) for n, w, p in fixtures])
    h.add_fixture_files(run, fixture_files)
    return run


def history(root: Path) -> History:
    return History(root / ".suitefit" / "history.sqlite")


HEALTHY = dict(
    workers={"gw0": (0.3, 60.0), "gw1": (0.3, 60.0)},
    files=[("test_one.py", "gw0", 3.0, 20.0), ("test_two.py", "gw1", 3.0, 25.0)],
    tests=[("test_one.py::test_one", "gw0", "passed"), ("test_two.py::test_two", "gw1", "failed")],
    fixtures=[("cpu_pool", "gw0", 2)],
    fixture_files=[("cpu_pool", "test_one.py")],
)


# -- one project per finding ------------------------------------------------------------------


def test_clean_project_has_no_findings(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "clean")
    with history(root) as h:
        add_run(h, **HEALTHY)  # type: ignore[arg-type]
        add_run(h, **HEALTHY)  # type: ignore[arg-type]
    rc, rep, err = doctor(root, py92)
    assert (rc, rep["findings"], err) == (0, [], "")
    assert rep["probe"] is None  # no loadgroup in use: no probe run
    assert rep["workers"] == 2 and rep["dist"] == "loadfile"
    assert not any("not checked" in n for n in rep["notes"]), rep["notes"]


@pytest.mark.parametrize(("name", "finding"), [
    ("blas", "blas-threads-unpinned"),
    ("restarts", "worker-restarts-masked"),
    ("fail_under", "fail-under-inert"),
    ("group_marks", "group-marks-without-loadgroup"),
])
def test_config_project_reports_exactly_its_finding(tmp_path: Path, py92: str, name: str, finding: str) -> None:
    rc, rep, _ = doctor(project(tmp_path, name), py92)
    assert rc == 1
    assert ids(rep) == [finding]
    f = rep["findings"][0]
    assert f["title"] and f["fix"] and f["evidence"]


def test_cov_report_without_cov(tmp_path: Path, py92cov: str) -> None:
    rc, rep, _ = doctor(project(tmp_path, "cov_report"), py92cov)
    assert (rc, ids(rep)) == (1, ["cov-report-without-cov"])
    assert "--cov-report=xml --cov-report=term-missing from addopts in pytest.ini" in rep["findings"][0]["evidence"]


def test_cov_report_is_fine_once_cov_is_given(tmp_path: Path, py92cov: str) -> None:
    rc, rep, _ = doctor(project(tmp_path, "cov_report"), py92cov, "--", "--cov=.")
    assert (rc, ids(rep)) == (0, [])


def test_blas_evidence_names_the_unset_variables(tmp_path: Path, py92: str) -> None:
    _, rep, _ = doctor(project(tmp_path, "blas"), py92)
    ev = " ".join(rep["findings"][0]["evidence"])
    assert "OMP_NUM_THREADS unset" in ev and "-n 2 (addopts in pytest.ini) starts 2 workers" in ev


def test_loadgroup_probe_pytest_92_ignores_groups(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "loadgroup")
    rc, rep, _ = doctor(root, py92)
    assert (rc, ids(rep)) == (1, ["loadgroup-ignored"])
    assert rep["probe"]["honoured"] is False and rep["probe"]["cached"] is False
    assert len(rep["probe"]["grouped_on"]) == 2  # the grouped tests really ran on both workers
    # Second run: the cached answer is used and said so.
    rc2, text, _ = doctor(root, py92, as_json=False)
    assert rc2 == 1
    assert "loadgroup probe (cached result of an earlier probe): groups IGNORED" in text
    assert "[loadgroup-ignored]" in text


def test_loadgroup_probe_pytest_90_honours_groups(tmp_path: Path, py90: str) -> None:
    rc, rep, _ = doctor(project(tmp_path, "loadgroup"), py90)
    assert (rc, ids(rep)) == (0, [])
    assert rep["probe"]["honoured"] is True
    assert list(rep["probe"]["grouped_on"].values()) == [8]


@pytest.mark.skipif((psutil.cpu_count(logical=False) or 1) < 2, reason="needs 2+ physical cores for -n auto to exceed 1 CPU")
def test_n_auto_counts_more_workers_than_usable_cpus(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "n_auto")
    rc, rep, _ = doctor(root, py92, affinity={0})  # the run may use 1 CPU; psutil counts the machine's cores
    assert (rc, ids(rep)) == (1, ["n-auto-miscount"])
    ev = " ".join(rep["findings"][0]["evidence"])
    assert "psutil physical cores" in ev and "1 usable by this run: CPUs this process may use (affinity)" in ev


def test_payoff_from_measured_startup(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "payoff")
    with history(root) as h:
        add_run(h, workers={"gw0": (3.0, 60.0), "gw1": (3.2, 60.0)},
                files=[("test_one.py", "gw0", 1.0, 5.0), ("test_two.py", "gw1", 1.5, 5.0)])
    rc, rep, _ = doctor(root, py92)
    assert (rc, ids(rep)) == (1, ["workers-exceed-payoff"])
    ev = " ".join(rep["findings"][0]["evidence"])
    assert "3.1 s to start" in ev and "medians of 2 recorded worker(s)" in ev and "2.5 s in all" in ev


def test_session_pool_spread_over_workers(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "pool_spread")
    with history(root) as h:
        add_run(h, workers={"gw0": (0.3, 60.0), "gw1": (0.3, 60.0)},
                files=[("test_a.py", "gw0", 2.0, 5.0), ("test_b.py", "gw1", 2.0, 5.0),
                       ("test_c.py", "gw1", 2.0, 5.0)],
                fixtures=[("cpu_pool", "gw0", 2), ("cpu_pool", "gw1", 2), ("tmp_db", "gw0", 0), ("tmp_db", "gw1", 0)],
                fixture_files=[("cpu_pool", "test_a.py"), ("cpu_pool", "test_b.py"), ("tmp_db", "test_c.py")])
    rc, rep, _ = doctor(root, py92)
    assert (rc, ids(rep)) == (1, ["session-pool-spread"])
    f = rep["findings"][0]
    assert "cpu_pool" in f["title"] and "tmp_db" not in f["title"]
    assert "gw0 (2), gw1 (2), 100 MiB per copy, 2 copies" in f["evidence"][0]


def test_file_exceeding_budget(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "file_budget")  # [tool.suitefit] memory_budget = "1GiB"
    with history(root) as h:
        add_run(h, workers={"gw0": (0.3, 60.0), "gw1": (0.3, 60.0)},
                files=[("test_big.py", "gw0", 2.0, 1500.0), ("test_small.py", "gw1", 2.0, 900.0)])
    rc, rep, _ = doctor(root, py92)
    assert (rc, ids(rep)) == (1, ["file-exceeds-budget"])
    ev = rep["findings"][0]["evidence"]
    assert ev[0] == ("test_big.py: 1.46 GiB above its worker's baseline (largest of its recent runs) "
                     "+ 60 MiB worker baseline = 1.52 GiB")
    assert not any("test_small.py" in e for e in ev)  # 960 MiB fits in 1 GiB
    assert "memory_budget" in ev[-1]


def test_outcome_differs_between_runs(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "outcomes")
    files = [("test_one.py", "gw0", 1.0, 5.0)]
    with history(root) as h:
        add_run(h, workers={"main": (0.3, 60.0)}, files=files,
                tests=[("test_one.py::test_a", "main", "passed"), ("test_one.py::test_b", "main", "skipped")])
        add_run(h, workers={"main": (0.3, 60.0)}, files=files, kind="sweep",
                tests=[("test_one.py::test_a", "main", "failed"), ("test_one.py::test_b", "main", "passed")])
    rc, rep, _ = doctor(root, py92)
    assert (rc, ids(rep)) == (1, ["outcome-differs"])
    assert rep["findings"][0]["evidence"] == ["test_one.py::test_a: failed in run(s) 2 (sweep); passed in run(s) 1 (profile)"]


# -- silencing ----------------------------------------------------------------------------------


def test_silenced_finding_is_shown_and_exit_is_0(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "blas")
    (root / "pyproject.toml").write_text(
        '[tool.suitefit.doctor]\nsilence = { blas-threads-unpinned = "CI env pins them" }\n')
    rc, rep, _ = doctor(root, py92)
    assert (rc, ids(rep), ids(rep, silenced=True)) == (0, [], ["blas-threads-unpinned"])
    rc, text, _ = doctor(root, py92, as_json=False)
    assert "[blas-threads-unpinned] (silenced)" in text and "silenced: CI env pins them" in text


@pytest.mark.parametrize(("silence", "message"), [
    ('{ blas-threads-unpinned = "" }', "needs a reason"),
    ('{ no-such-check = "x" }', "unknown finding 'no-such-check'"),
])
def test_bad_silence_is_one_line(tmp_path: Path, py92: str, silence: str, message: str) -> None:
    root = project(tmp_path, "blas")
    (root / "pyproject.toml").write_text(f"[tool.suitefit.doctor]\nsilence = {silence}\n")
    rc, out, err = doctor(root, py92)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err and err.startswith("suitefit: error: ")


# -- bad input ------------------------------------------------------------------------------------


def test_broken_ini_is_one_line(tmp_path: Path, py92: str) -> None:
    rc, out, err = doctor(project(tmp_path, "bad_ini"), py92)
    assert (rc, out) == (2, "")
    assert err.count("\n") == 1 and "pytest.ini:1" in err and "Traceback" not in err


def test_unknown_option_in_addopts_is_one_line(tmp_path: Path, py92: str) -> None:
    rc, out, err = doctor(project(tmp_path, "bad_option"), py92)
    assert (rc, out) == (2, "")
    assert err.count("\n") == 1 and "unrecognized arguments: --no-such-option (inifile: " in err


def test_interpreter_without_pytest_is_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(bare)
    rc, out, err = doctor(project(tmp_path, "clean"), str(bare / "bin" / "python"))
    assert (rc, out) == (2, "")
    assert err.count("\n") == 1 and "has no pytest installed" in err


def test_missing_interpreter_is_one_line(tmp_path: Path) -> None:
    rc, _, err = doctor(project(tmp_path, "clean"), str(tmp_path / "nope" / "python"))
    assert rc == 2 and err.count("\n") == 1 and "no such executable" in err


# -- the default interpreter, and what doctor must not do ----------------------------------------


def test_default_interpreter_is_the_one_suitefit_runs_in(tmp_path: Path) -> None:
    rc, rep, err = doctor(project(tmp_path, "clean"), None)
    assert (rc, rep["findings"], err) == (0, [], "")
    assert rep["python"] == sys.executable


def test_doctor_never_runs_the_projects_tests(tmp_path: Path, py92: str) -> None:
    root = project(tmp_path, "loadgroup")  # loadgroup in use: the probe runs, but in its own folder
    (root / "test_marker.py").write_text(
        "from pathlib import Path\n\ndef test_mark():\n    Path(__file__).with_name('RAN').write_text('x')\n")
    rc, rep, _ = doctor(root, py92, "--refresh-probe")
    assert rc == 1 and rep["probe"]["cached"] is False
    assert not (root / "RAN").exists()
    assert rep["wall_s"] < 60  # sanity bound only; figures come from benchmarks, not unit tests
