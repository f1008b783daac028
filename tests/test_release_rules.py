"""Which fixtures may be released early: the pure rule, the setting that steers it, and
the data it needs (autouse, recorded by a real measured run and carried to the plan)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clihelp import assert_one_line_error, suitefit

from suitefit.config import load_config
from suitefit.costs import build_cost_model, load_costs_or_discover
from suitefit.errors import SuitefitError
from suitefit.history import History
from suitefit.model import (
    Budget,
    CostModel,
    FixtureCost,
    Plan,
    ReleaseSetting,
    Unit,
    release_verdict,
    release_verdicts,
)

POOL = FixtureCost("pool", "session", setup_s=0.1, procs=3, mb=40.0)
BIG = FixtureCost("big", "package", setup_s=0.1, procs=0, mb=600.0)
SLOW = FixtureCost("slow", "session", setup_s=9.0, procs=0, mb=5.0)  # slow, but holds nothing
QT_APP = FixtureCost("app", "session", setup_s=0.1, procs=2, mb=300.0, autouse=True)
MOD = FixtureCost("model", "module", setup_s=2.0, procs=1, mb=900.0)


@pytest.mark.parametrize(("fx", "setting", "release", "why"), [
    (POOL, True, True, "holds 3 processes"),
    (BIG, True, True, "holds 600 MiB"),
    (SLOW, True, False, "cheap"),
    (QT_APP, True, False, "autouse"),
    (QT_APP, ("app",), False, "autouse"),  # naming it does not override the autouse rule
    (MOD, True, False, "module scope"),
    (POOL, False, False, "release_fixtures = false"),
    (POOL, ("big",), False, "not named"),
    (BIG, ("big",), True, "holds 600 MiB"),
    (SLOW, ("slow",), False, "cheap"),  # naming a cheap fixture does not make it worth a teardown
])
def test_release_verdict(fx: FixtureCost, setting: ReleaseSetting, release: bool, why: str) -> None:
    v = release_verdict(fx, setting)
    assert (v.fixture, v.release) == (fx.name, release)
    assert why in v.reason, v.reason


def test_release_verdicts_apply_the_models_own_setting() -> None:
    costs = CostModel(files=(), fixtures=(POOL, BIG, QT_APP), release=("pool", "app"))
    assert {n: v.release for n, v in release_verdicts(costs).items()} == {"pool": True, "big": False, "app": False}


def _pyproject(root: Path, line: str) -> None:
    (root / "pyproject.toml").write_text(f'[tool.suitefit]\nhistory = "h.sqlite"\n{line}\n')


@pytest.mark.parametrize(("line", "want"), [
    ("", True),
    ("release_fixtures = false", False),
    ("release_fixtures = true", True),
    ('release_fixtures = ["pool", "db"]', ("pool", "db")),
    ("release_fixtures = []", ()),
])
def test_setting_reaches_the_cost_model(tmp_path: Path, line: str, want: ReleaseSetting) -> None:
    _pyproject(tmp_path, line)
    cfg = load_config(tmp_path)
    assert cfg.release_fixtures == want
    costs, _, _ = load_costs_or_discover(cfg)  # what `suitefit plan` and `run` call
    assert costs.release == want


@pytest.mark.parametrize("bad", ['"yes"', "1", '["pool", 3]', '[""]', "{ pool = true }"])
def test_a_bad_setting_is_one_line(tmp_path: Path, bad: str) -> None:
    _pyproject(tmp_path, f"release_fixtures = {bad}")
    with pytest.raises(SuitefitError, match="release_fixtures must be true, false or a list"):
        _ = load_config(tmp_path).release_fixtures
    (tmp_path / "tests").mkdir()
    assert_one_line_error(suitefit("plan", cwd=tmp_path), "release_fixtures must be true, false or a list")


def test_plan_json_keeps_autouse() -> None:
    plan = Plan(workers=1, units=(Unit("u", ("t.py",), 1.0, 1.0),), budget=Budget(1000, 1),
                predicted_wall_s=1.0, predicted_peak_mb=1.0, reasons=(), fixtures=(QT_APP, POOL))
    back = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert back.fixtures == (QT_APP, POOL)
    assert [f.autouse for f in back.fixtures] == [True, False]


AUTOUSE_SUITE = {
    "conftest.py": """
        import subprocess, sys, pytest

        def _sleeper():
            return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

        @pytest.fixture(scope="session", autouse=True)
        def app():  # like pytest-qt's: every test gets it without asking
            p = _sleeper()
            yield p
            p.kill(); p.wait()

        @pytest.fixture(scope="session")
        def pool():
            p = _sleeper()
            yield p
            p.kill(); p.wait()
    """,
    "test_a.py": """
        def test_a(pool):
            pass
    """,
    "test_b.py": """
        def test_b(app):  # names it too: another test's view still shows it is autouse
            pass
    """,
}


def test_a_measured_run_records_autouse_and_the_rule_refuses_it(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    for name, body in AUTOUSE_SUITE.items():
        (tmp_path / "tests" / name).write_text(textwrap.dedent(body))
    env = {**os.environ}
    for v in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(v, None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--suitefit",
                          f"--suitefit-history={tmp_path / 'h.sqlite'}", "tests"],
                         cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    with History(tmp_path / "h.sqlite") as h:
        rows = {r.name: (r.procs, bool(r.autouse)) for r in h.fixtures(1)}
        costs = build_cost_model(h)
    assert rows == {"app": (1, True), "pool": (1, False)}
    fx = {f.name: f for f in costs.fixtures}
    assert fx["app"].autouse and not fx["pool"].autouse
    assert release_verdict(fx["pool"]).release
    assert not release_verdict(fx["app"]).release


def test_an_older_history_gains_the_autouse_column(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "h.sqlite"
    History(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE fixtures DROP COLUMN autouse")  # as a history written before it
    db.execute("INSERT INTO runs (kind, status, started) VALUES ('profile', 'passed', 0)")
    db.execute("INSERT INTO fixtures (run_id, worker, name, scope, setup_s, procs, mb) "
               "VALUES (1, 'main', 'pool', 'session', 1.0, 2, 50.0)")
    db.commit()
    db.close()
    with History(path) as h:
        (rec,) = h.fixtures(1)
    assert (rec.name, rec.autouse) == ("pool", 0)
