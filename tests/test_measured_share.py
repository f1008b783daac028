"""A prediction says how much of it is measured: a guess with no history is never shown as known."""

from __future__ import annotations

import json
import re
from pathlib import Path

from clihelp import suitefit

from suitefit.model import Measured, Plan


def _project(root: Path, n: int) -> None:
    (root / "tests").mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for i in range(n):
        (root / "tests" / f"test_{i}.py").write_text(
            f"import time\ndef test_x():\n    time.sleep({0.05 * (i + 1)})\n")


def test_first_run_says_its_prediction_is_a_guess(tmp_path: Path) -> None:
    _project(tmp_path, 3)
    plan = suitefit("plan", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    head = next(ln for ln in plan.stdout.splitlines() if "wall" in ln and "budget" in ln)
    assert head.startswith("guessed (nothing measured yet): wall") and "predicted" not in head, plan.stdout
    assert "why (every figure below is from default costs, not measurements):" in plan.stdout
    assert "nothing measured yet: all 3 file(s) at a default cost" in plan.stdout
    d = json.loads(suitefit("plan", "--json", cwd=tmp_path).stdout)
    assert d["measured"] == {"files": 0, "planned": 3, "measured_s": 0.0, "work_s": d["measured"]["work_s"],
                             "runs": 0, "contention_unknown": d["workers"] >= 2, "partial": []}

    run = suitefit("run", "--", "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    plan_line = next(ln for ln in run.stderr.splitlines() if ln.startswith("suitefit: plan:"))
    assert "guessed wall" in plan_line and "predicted" not in plan_line
    closing = next(ln for ln in run.stdout.splitlines() + run.stderr.splitlines()
                   if re.match(r"suitefit: run \d+: command", ln))
    assert "guessed wall" in closing and "and peak" in closing and "predicted" not in closing
    md = suitefit("report", "--markdown", cwd=tmp_path)
    assert "guessed wall" in md.stdout and "nothing measured yet" in md.stdout
    html = suitefit("report", "-o", "-", cwd=tmp_path).stdout
    assert "Nothing was measured when this plan was made" in html


def test_partial_history_says_how_much_is_measured(tmp_path: Path) -> None:
    _project(tmp_path, 3)
    assert suitefit("profile", "--", "-q", cwd=tmp_path).returncode == 0
    full = suitefit("plan", cwd=tmp_path)
    assert "\npredicted: wall" in full.stdout and "all 3 file(s) measured" in full.stdout
    assert "guessed" not in full.stdout and "\nwhy:" in full.stdout
    _project(tmp_path, 4)  # one new file, never measured, declared in a group: planned at a default cost
    with (tmp_path / "pyproject.toml").open("a") as f:
        f.write('\n[tool.suitefit]\ngroups = { pair = ["tests/test_0.py", "tests/test_3.py"] }\n')
    plan = suitefit("plan", cwd=tmp_path)
    assert "predicted: wall" in plan.stdout
    m = re.search(r"3/4 files measured, (\d+)% of the predicted work; the rest at a default cost", plan.stdout)
    assert m and 0 < int(m.group(1)) < 100, plan.stdout
    run = suitefit("run", "--", "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = run.stdout + run.stderr
    assert out.count("3/4 files measured") == 2, out  # the plan line and the closing line


def test_a_wall_that_assumes_no_contention_says_so_until_a_run_with_workers_measured_it(tmp_path: Path) -> None:
    """After a serial profile, how much workers slow each other here is not known: the first
    plan with workers predicts as if not at all (scipy.sparse on 2 CPUs: 138 s predicted, 213 s
    taken, the files 1.57x slower side by side) and says so where the prediction is shown; the
    plan after that run has measured it and says nothing."""
    _project(tmp_path, 4)
    # a profile without its calibration (test_calibrate.py: with it, the first plan knows)
    assert suitefit("profile", "--no-calibrate", "--", "-q", cwd=tmp_path).returncode == 0
    said = "if workers do not slow each other: no run with workers measured yet"
    plan = suitefit("plan", "--workers", "2", cwd=tmp_path)
    # the wall as shown, in s or (on a fast machine, under a second) in ms
    assert re.search(rf"predicted: wall [\d.]+ m?s \({re.escape(said)}\)", plan.stdout), plan.stdout
    assert suitefit("plan", "--workers", "1", cwd=tmp_path).stdout.count(said) == 0
    first = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    out = first.stdout + first.stderr
    assert out.count(said) == 2, out  # the plan line and the closing line
    assert re.search(r"suitefit: plan: 2 worker\(s\), predicted wall [\d.]+ m?s \(" + re.escape(said) + r"\), peak", out)
    html = suitefit("report", "-o", "-", cwd=tmp_path).stdout
    assert said in html
    again = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert said not in again.stdout + again.stderr
    assert "measured slowdown against a serial run: 2 workers" in suitefit("plan", "--workers", "2", cwd=tmp_path).stdout


def test_a_history_of_runs_with_workers_only_does_not_claim_its_wall_assumes_no_contention(tmp_path: Path) -> None:
    """With no serial run, file times are what runs with workers measured, their contention
    included: the wall is no "if workers do not slow each other" floor, and no run with
    workers will ever turn it into one (every plan of a `suitefit run`-only history said so,
    and that the first run with workers would measure it)."""
    _project(tmp_path, 4)
    said = "if workers do not slow each other"
    first = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = suitefit("run", "--workers", "2", "--", "-q", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    out = second.stdout + second.stderr
    assert re.search(r"suitefit: plan: 2 worker\(s\), predicted wall [\d.]+ m?s, peak", out), out
    assert said not in out
    plan = suitefit("plan", "--workers", "2", cwd=tmp_path).stdout
    assert said not in plan and "no run with workers measured yet" not in plan
    assert "contention: no serial run recorded" in plan and "a serial `suitefit profile` separates the two" in plan
    # a serial profile gives the reference: the runs with workers then measure the slowdown
    assert suitefit("profile", "--no-calibrate", "--", "-q", cwd=tmp_path).returncode == 0
    assert "measured slowdown against a serial run: 2 workers" in suitefit("plan", "--workers", "2", cwd=tmp_path).stdout


def test_measured_round_trips_in_the_plan_json() -> None:
    from suitefit.model import Budget

    m = Measured(files=2, planned=5, measured_s=3.0, work_s=4.0, runs=1, contention_unknown=True)
    p = Plan(workers=1, units=(), budget=Budget(1000.0, 2), predicted_wall_s=1.0, predicted_peak_mb=1.0,
             reasons=(), measured=m)
    assert Plan.from_json(json.loads(json.dumps(p.to_json()))).measured == m
    assert m.share == 0.75 and "2/5 files measured, 75% of the predicted work" in m.words()
    old = p.to_json()
    del old["measured"]  # a plan recorded before this field
    assert Plan.from_json(old).measured is None
