"""What measuring costs in imports and hooks, kept from creeping back (issue 13).

Every check is a real process: a plain ``pytest`` run with suitefit installed, a
measured run, and the sampler process as a session starts it. The ``sys.modules``
of each is read from inside it, not predicted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from venvs import OLDEST, PYTEST_92, make_venv

from suitefit.history import History
from suitefit.measure.sampler import SamplerProcess

# Modules whose import cost a process pays for nothing: the data model (dataclasses and
# inspect behind it), psutil, and, in the sampler process, pathlib, typing, json (re, enum),
# contextlib and site (its .pth files) too.
SAMPLER_MUST_NOT_LOAD = ("dataclasses", "inspect", "pathlib", "typing", "psutil", "suitefit.model",
                         "suitefit.history", "suitefit.config", "suitefit.session", "suitefit.measure.sampler",
                         "suitefit.measure.recorder", "json", "re", "enum", "contextlib", "site")

MODULES_AT_END = """
import json, os, sys

def pytest_unconfigure(config):
    hooks = sorted(type(i.plugin).__name__ for i in config.hook.pytest_runtest_logreport.get_hookimpls()
                   if "suitefit" in (getattr(i.plugin, "__module__", "") or ""))
    out = os.environ["MODULES_OUT"].replace(".json", "-" + os.environ.get("PYTEST_XDIST_WORKER", "main") + ".json")
    rewritten = sorted(n for n, m in list(sys.modules.items()) if n.split(".")[0] == "suitefit"
                       and type(getattr(m, "__loader__", None)).__name__ == "AssertionRewritingHook")
    with open(out, "w") as f:
        json.dump({"modules": sorted(sys.modules), "logreport": hooks, "rewritten": rewritten}, f)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SUITEFIT_"))}
    env.update(extra)
    return env


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text(MODULES_AT_END)
    (suite / "test_a.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (suite / "test_c.py").write_text("def test_c():\n    pass\n")
    return suite


def _run_pytest(suite: Path, *args: str, process: str = "main", python: str = sys.executable) -> dict[str, list[str]]:
    """What ``process`` (``main``, or an xdist worker's id) had loaded at its end."""
    res = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=suite,
                         env=_env(MODULES_OUT=str(suite / "modules.json")), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return dict(json.loads((suite / f"modules-{process}.json").read_text()))


def test_a_plain_pytest_run_loads_only_the_plugin_module(tmp_path: Path) -> None:
    """Installed but not asked for, suitefit adds its package and plugin module, and nothing
    else: not its data model (dataclasses, inspect), SQLite or psutil."""
    suite = _suite(tmp_path)
    without = set(_run_pytest(suite, "-p", "no:suitefit")["modules"])
    plain = set(_run_pytest(suite)["modules"])
    assert plain - without == {"suitefit", "suitefit.plugin"}


def test_a_measured_serial_run_loads_what_it_uses_only(tmp_path: Path) -> None:
    """``pytest --suitefit`` without xdist: no psutil unless a leftover is found, no data model,
    no sampler-process code; one per-report hook (the recorder's; the session's count
    comes from it)."""
    suite = _suite(tmp_path)
    got = _run_pytest(suite, "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}")
    loaded = set(got["modules"])
    for heavy in ("psutil", "suitefit.model", "suitefit.measure.watcher", "suitefit.measure.journal",
                  "suitefit.plan", "suitefit.costs", "suitefit.run_control", "suitefit.release",
                  "suitefit.config"):  # no [tool.suitefit] anywhere: no budget to read
        assert heavy not in loaded, heavy
    assert "suitefit.session" in loaded and "suitefit.summary" in loaded  # it did measure
    assert got["logreport"] == ["WorkerRecorder"]
    with History(tmp_path / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        assert run.passed == 3 and len(h.tests(run.id)) == 3 and run.meta_dict["samples"] >= 1


def test_an_xdist_worker_loads_no_sampler_or_psutil(tmp_path: Path) -> None:
    """Under xdist the controller owns the sampler process; a worker records its tests only."""
    suite = _suite(tmp_path)
    got = _run_pytest(suite, "-n", "2", "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}",
                      process="gw0")
    loaded = set(got["modules"])
    for heavy in ("psutil", "suitefit.model", "suitefit.measure.sampler", "suitefit.measure.watcher",
                  "suitefit.measure.reaper", "suitefit.report.progress", "suitefit.summary", "suitefit.config"):
        assert heavy not in loaded, heavy
    assert "suitefit.measure.recorder" in loaded and got["logreport"] == ["WorkerRecorder"]


def test_a_planned_run_loads_the_core_but_not_the_planner(tmp_path: Path) -> None:
    """Under a plan given on pytest's command line, the pytest process drives the scheduling
    core: it has its plan and loads neither the planner nor ``statistics``
    (fractions, decimal). The run's closing lines come without the failure explainer when
    nothing failed."""
    from suitefit.model import Budget, Plan, Unit

    suite = _suite(tmp_path)
    files = ("test_a.py", "test_c.py")
    plan = Plan(workers=1, units=tuple(Unit(f, (f,), 0.1, 1.0) for f in files), budget=Budget(4096.0, 2),
                predicted_wall_s=1.0, predicted_peak_mb=50.0, reasons=("hand-written for a test",))
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    base = ["--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}", f"--suitefit-plan={tmp_path / 'plan.json'}"]
    for args, process in ((["-n", "0"], "main"), (["-n", "2"], "main")):
        loaded = set(_run_pytest(suite, *base, *args, process=process)["modules"])
        assert "suitefit.plan.core" in loaded and "suitefit.run_control" in loaded, args  # it ran under the plan
        for heavy in ("statistics", "suitefit.plan.planner", "suitefit.plan.grouping", "suitefit.plan.workers",
                      "suitefit.costs", "suitefit.diagnose.explain"):
            assert heavy not in loaded, (heavy, args)


@pytest.mark.parametrize("args,process,pair", [
    ([], "main", None), (["-n", "2"], "main", None), (["-n", "2"], "gw0", None), (["--suitefit-plan=PLAN"], "main", None),
    pytest.param([], "main", OLDEST, marks=pytest.mark.slow), pytest.param([], "main", PYTEST_92, marks=pytest.mark.slow),
], ids=["serial", "xdist controller", "xdist worker", "planned", "wheel, oldest pytest", "wheel, newest pytest"])
def test_pytest_does_not_rewrite_the_modules_a_measured_run_imports(tmp_path: Path, args: list[str], process: str,
                                                                   pair: tuple[str, ...] | None) -> None:
    """pytest rewrites the asserts of a plugin's whole package, from a cache that installing
    suitefit does not write: uncached, each process parsed, rewrote and compiled every suitefit
    module it imported. Only the package and the plugin module, which pytest imports itself
    before any hook runs, may go through its rewriter; nothing suitefit imports after. Checked
    where suitefit is installed from its wheel too (pytest marks a wheel's packages from its
    file list; an editable install's, from the egg-info beside the sources)."""
    from suitefit.model import Budget, Plan, Unit

    suite = _suite(tmp_path)
    plan = Plan(workers=1, units=(Unit("test_a.py", ("test_a.py", "test_c.py"), 0.1, 1.0),), budget=Budget(4096.0, 2),
                predicted_wall_s=1.0, predicted_peak_mb=50.0, reasons=("hand-written for a test",))
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    args = [a.replace("PLAN", str(tmp_path / "plan.json")) for a in args]
    python = str(make_venv(pair, from_wheel=True)) if pair else sys.executable
    got = _run_pytest(suite, "--suitefit", f"--suitefit-history={tmp_path / 'h.sqlite'}", *args, process=process,
                      python=python)
    loaded = {m for m in got["modules"] if m.startswith("suitefit.")}
    assert {"suitefit.session", "suitefit.measure.recorder", "suitefit.history"} <= loaded  # it did measure
    assert set(got["rewritten"]) <= {"suitefit", "suitefit.plugin"}, got["rewritten"]


@pytest.mark.parametrize("journal", [False, True], ids=["measured run", "one-process suitefit run"])
def test_the_sampler_process_started_by_a_session_imports_lean(tmp_path: Path, journal: bool) -> None:
    """The real sampler process, started and stopped as a session does, with its writes: its
    imports (``-X importtime`` through the environment it inherits) stay lean. Under a
    one-process ``suitefit run`` it also keeps the in-flight journal and the heartbeat: json
    (and the re it imports) for the journal's text, and still no dataclasses, pathlib or
    the session's sampler module (its CPU on a 1-test run: 77-100 ms before b655686, 43-64 after)."""
    h = History(tmp_path / "h.sqlite")
    run_id = h.new_run("pytest", started=time.time())
    log = tmp_path / "sampler.log"
    sp = SamplerProcess(os.getpid(), history=str(h.path), run_id=run_id, started_wall=time.time(),
                        threshold_mb=None, interval=0.05)
    if journal:  # a budget the tree is past at once: the heartbeat fires and is recorded
        sp.keep_journal(str(tmp_path / "inflight.json"), 1.0)
    old = os.environ.get("PYTHONPROFILEIMPORTTIME")
    os.environ["PYTHONPROFILEIMPORTTIME"] = "1"
    try:
        with open(log, "w") as f:
            sp.start(f)
    finally:
        if old is None:
            del os.environ["PYTHONPROFILEIMPORTTIME"]
        else:
            os.environ["PYTHONPROFILEIMPORTTIME"] = old
    time.sleep(2.5)  # past its first flush (every 2 s): SQLite written through historydb
    peaks = sp.stop()
    assert peaks.samples >= 10 and len(h.samples(run_id)) == peaks.samples
    loaded = {line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines()
              if line.startswith("import time:") and "|" in line}
    assert "sqlite3" in loaded and "suitefit.historydb" in loaded
    forbidden = set(SAMPLER_MUST_NOT_LOAD) - ({"json", "re", "enum"} if journal else set())
    assert not loaded & forbidden, sorted(loaded & forbidden)
    assert ("suitefit.measure.journal" in loaded) == journal
    if journal:  # it did keep them: the journal file, and the heartbeat's event
        assert json.loads((tmp_path / "inflight.json").read_text())["run_id"] == run_id
        assert any(e.kind == "heartbeat" for e in h.events(run_id))


def test_plain_row_columns_are_the_records_fields() -> None:
    """Rows written as tuples (a worker's tests, the sampler's files and samples) in the order
    of the records the history reads them back as."""
    from dataclasses import fields

    from suitefit.history import FileRecord, SampleRecord, TestRecord
    from suitefit.historydb import FILE_COLUMNS, SAMPLE_COLUMNS, TEST_COLUMNS

    for cols, record in ((TEST_COLUMNS, TestRecord), (FILE_COLUMNS, FileRecord), (SAMPLE_COLUMNS, SampleRecord)):
        assert cols == tuple(f.name for f in fields(record))


def test_a_configured_budget_is_the_threshold_of_a_plain_measured_run(tmp_path: Path) -> None:
    """`pytest --suitefit` draws its line at [tool.suitefit] memory_budget; a pyproject that
    does not mention suitefit configures none and is not parsed (the config module stays out)."""
    suite = _suite(tmp_path)
    (suite / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = ""\n')
    got = _run_pytest(suite, "--suitefit", f"--suitefit-history={tmp_path / 'a.sqlite'}")
    assert "suitefit.config" not in set(got["modules"])
    (suite / "pyproject.toml").write_text('[tool.suitefit]\nmemory_budget = "123MiB"\n')
    got = _run_pytest(suite, "--suitefit", f"--suitefit-history={tmp_path / 'b.sqlite'}")
    assert "suitefit.config" in set(got["modules"])
    for name, want in (("a.sqlite", None), ("b.sqlite", 123.0)):
        with History(tmp_path / name) as h:
            assert h.runs(limit=1)[0].threshold_mb == want, name
