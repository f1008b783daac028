"""Hogs apart, end to end: the plan's soft ceiling is what the real xdist run keeps.

On hog-heavy the plan predicted the 900 and 700 MiB files side by side when two short
units ended close together, and the run, a few ms off, did not (or did): the predicted
peak was 18-69% off. With the ceiling the core runs large files one after another while
small ones can fill in, in the prediction and in the run alike. Watched on real workers:
where each file ran and when, and the tree's peak.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

from clihelp import suitefit

from suitefit.config import load_config
from suitefit.costs import load_cost_model
from suitefit.model import Budget
from suitefit.plan import make_plan

HOGS_MB = (240, 200, 160)
# Enough small files to fill in beside each hog: keeping the hogs apart then costs the plan
# ~0.1 s, 1.2% of the predicted wall here, under the 2% a first plan may spend on it. With
# 12 files (~1.8%), one CI run in ten-odd under load went over it and planned no ceiling;
# 24 chose it 10 of 10 times with three CPU burners beside the profile.
SMALL_FILES = 24

HOG = """
import time

def test_hog():
    b = bytearray({mb} * 2**20)
    b[::4096] = b"x" * len(b[::4096])
    time.sleep(0.35)  # held long enough for the 0.1 s tree sampler to see it
"""
SMALL = """
import time
import pytest

@pytest.mark.parametrize("i", range(3))
def test_small(i):
    time.sleep(0.1)
"""


def _project(root: Path) -> None:
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for mb in HOGS_MB:
        (root / "tests" / f"test_hog{mb}.py").write_text(HOG.format(mb=mb))
    for i in range(SMALL_FILES):
        (root / "tests" / f"test_small{i:02}.py").write_text(SMALL)


def test_the_run_keeps_hogs_apart_as_its_plan_predicts(tmp_path: Path) -> None:
    _project(tmp_path)
    assert suitefit("profile", "--", "-q", cwd=tmp_path).returncode == 0
    costs, _ = load_cost_model(load_config(tmp_path))
    budget = Budget(100_000, 2, workers=2)
    plan = make_plan(costs, budget)
    assert plan.spread_mb is not None, "\n".join(plan.reasons)
    assert any(r.startswith("hogs apart: ") for r in plan.reasons)  # `suitefit plan` says so
    # the same plan without the ceiling predicts two hogs together
    from suitefit.plan.simulate import simulate

    bare = simulate(replace(plan, spread_mb=None), startup_s=0.0, baseline_mb=plan.baseline_mb,
                    budget_mb=plan.admit_mb, fixed_mb=plan.fixed_mb, slow=plan.slow)
    kept = simulate(plan, startup_s=0.0, baseline_mb=plan.baseline_mb, budget_mb=plan.admit_mb,
                    fixed_mb=plan.fixed_mb, slow=plan.slow)
    assert kept.peak_mb < bare.peak_mb

    res = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    with sqlite3.connect(tmp_path / ".suitefit" / "history.sqlite") as db:
        run_id = db.execute("select max(id) from runs").fetchone()[0]
        spans = {p: (w, a, b) for p, w, a, b in db.execute(
            "select path, worker, started, finished from files where run_id = ?", (run_id,))}
    hogs = [f"tests/test_hog{mb}.py" for mb in HOGS_MB]
    assert {spans[h][0] for h in hogs} <= {"gw0", "gw1"}
    for a, b in itertools.combinations(hogs, 2):  # never two hogs at once, on any workers
        (_, sa, ea), (_, sb, eb) = spans[a], spans[b]
        assert ea <= sb + 0.02 or eb <= sa + 0.02, (a, spans[a], b, spans[b])
    m = re.search(r"peak (\d+) MiB \(predicted (\d+) MiB", res.stderr)
    assert m, res.stderr
    measured, predicted = int(m.group(1)), int(m.group(2))
    assert abs(predicted - measured) <= 0.15 * measured, res.stderr
    print(f"hogs apart: measured {measured} MiB, predicted {predicted}, without the ceiling "
          f"{bare.peak_mb:.0f} predicted")
