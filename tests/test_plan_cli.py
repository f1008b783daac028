"""`suitefit plan` end to end: a real subprocess over a history written through History."""

from __future__ import annotations

import json
from pathlib import Path

from clihelp import assert_one_line_error, json_out, suitefit
from plan_synth import SynthRun, pool_suite, write_history

from suitefit.model import Plan


def _project(root: Path, extra: str = "") -> Path:
    (root / "tests").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n[tool.suitefit]\n'
        f'history = "h.sqlite"\n{extra}')
    return root


def _pool_history(root: Path) -> dict[str, object]:
    files, fixtures = pool_suite(n_files=12, pool_files=4)
    paths = sorted(files)
    placement = {"gw0": paths[0::2], "gw1": paths[1::2]}  # pool users spread: the pool ran twice
    write_history(root / "h.sqlite", [SynthRun(placement, files, fixtures, scale=s) for s in (1.0, 1.1)])
    return dict(files)


def test_plan_json_groups_the_pool_and_places_every_file(tmp_path: Path) -> None:
    _project(tmp_path)
    files = _pool_history(tmp_path)
    res = suitefit("plan", "--json", "--memory-budget", "4GiB", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    d = json_out(res)
    plan = Plan.from_json(d)
    assert d["history_found"] is True
    placed = sorted(f for u in plan.units for f in u.files)
    assert placed == sorted(files)
    (pool,) = [u for u in plan.units if u.name.startswith("fixture:pool")]
    assert sorted(pool.files) == [f"tests/test_{i:02d}.py" for i in range(4)]
    assert plan.budget.memory_mb == 4096.0 and plan.budget.memory_source.startswith("--memory-budget")
    assert any(r.startswith("workers:") for r in plan.reasons)
    assert plan.predicted_peak_mb <= 4096.0


def test_plan_text_shows_table_predictions_and_reasons(tmp_path: Path) -> None:
    _project(tmp_path)
    _pool_history(tmp_path)
    res = suitefit("plan", "--memory-budget", "1.2GiB", "--workers", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for needle in ("history: ", "units on 2 worker(s)", "predicted: wall", "why:",
                   "workers: 2, pinned", "fixture:pool: fixture group: 4 files share pool",
                   "hog tests/test_11.py"):
        assert needle in out, (needle, out)


def test_no_history_says_so_and_plans_found_files(tmp_path: Path) -> None:
    _project(tmp_path, 'groups = { db = ["tests/test_b.py", "tests/test_a.py"] }\n')
    for name in ("test_a.py", "test_b.py", "test_c.py", "helper.py"):
        (tmp_path / "tests" / name).write_text("def test_x():\n    pass\n")
    res = suitefit("plan", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "no history at" in res.stdout and "3 test file(s) found by name" in res.stdout
    assert "memory admission stays on" in res.stdout
    d = json_out(suitefit("plan", "--json", cwd=tmp_path))
    assert d["history_found"] is False
    units = {u["name"]: u["files"] for u in d["units"]}
    assert units["group:db"] == ["tests/test_b.py", "tests/test_a.py"]
    assert units["tests/test_c.py"] == ["tests/test_c.py"]
    assert not (tmp_path / "h.sqlite").exists()


def test_a_declared_group_naming_a_file_that_is_not_there_plans_without_it(tmp_path: Path) -> None:
    # A typo or a file deleted since: it had a unit at a default cost that never ran, in every
    # prediction. Now one line says so and the plan leaves it out, with or without a history.
    _project(tmp_path, 'groups = { db = ["tests/test_b.py", "tests/test_gone.py"], '
                       'lost = ["tests/test_typo.py"] }\n')
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / "tests" / name).write_text("def test_x():\n    pass\n")
    for history in (False, True):
        if history:
            assert suitefit("profile", cwd=tmp_path).returncode == 0
        res = suitefit("plan", "--json", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        said = [ln for ln in res.stderr.splitlines() if "[tool.suitefit] groups" in ln]
        assert said == [f"suitefit: [tool.suitefit] groups: 'db' names tests/test_gone.py, which is not under "
                        f"{tmp_path}: left out of the plan",
                        f"suitefit: [tool.suitefit] groups: 'lost' names tests/test_typo.py, which is not "
                        f"under {tmp_path}: left out of the plan"], res.stderr
        units = {u["name"]: u["files"] for u in json_out(res)["units"]}
        assert units == {"group:db": ["tests/test_b.py"], "tests/test_a.py": ["tests/test_a.py"]}, units


def test_shards_json_covers_every_file_once(tmp_path: Path) -> None:
    _project(tmp_path)
    files = _pool_history(tmp_path)
    res = suitefit("plan", "--json", "--shards", "3", "--memory-budget", "4GiB", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    d = json_out(res)
    assert d["shards"] == 3 and d["balanced"] is True
    # every file once: whole, or as its first chunk (the others name it again)
    placed = [f for p in d["plans"] for u in p["units"] for f in u["files"]
              if not u.get("chunk") or u["chunk"][0] == 1]
    assert sorted(placed) == sorted(files)
    assert [p["shard"] for p in d["plans"]] == [[1, 3], [2, 3], [3, 3]]
    text = suitefit("plan", "--shards", "3", "--memory-budget", "4GiB", cwd=tmp_path).stdout
    assert "slowest shard" in text and "shard 3/3:" in text


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    _project(tmp_path)
    _pool_history(tmp_path)
    assert_one_line_error(suitefit("plan", "--memory-budget", "100MiB", cwd=tmp_path),
                          "below one worker's baseline")
    assert_one_line_error(suitefit("plan", "--memory-budget", "1GiB", "--workers", "20", cwd=tmp_path),
                          "20 workers need")
    assert_one_line_error(suitefit("plan", "--memory-budget", "lots", cwd=tmp_path), "not a size")
    assert_one_line_error(suitefit("plan", "--shards", "0", cwd=tmp_path), "--shards")
    # pytest's arguments go after `--`: a mistyped option of suitefit's own is still an error
    assert_one_line_error(suitefit("plan", "--jsn", cwd=tmp_path), "No such option '--jsn'")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    assert_one_line_error(suitefit("plan", "--history", str(bad), cwd=tmp_path), "corrupt")


def test_plan_from_a_real_profiled_run(tmp_path: Path) -> None:
    """A real pytest -n 2 run recorded by the plugin feeds the planner (no synthetic rows)."""
    _project(tmp_path)
    (tmp_path / "tests" / "conftest.py").write_text(
        "import subprocess, sys, pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def pool():\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],\n"
        "                         stdin=subprocess.PIPE)\n"
        "    yield p\n"
        "    p.stdin.close(); p.wait()\n")
    for i in range(4):
        uses = "pool" if i < 2 else ""
        (tmp_path / "tests" / f"test_{i}.py").write_text(f"def test_x({uses}):\n    pass\n")
    prof = suitefit("profile", "--", "-q", "-n", "2", cwd=tmp_path)  # real xdist rows
    assert prof.returncode == 0, prof.stderr + prof.stdout
    res = suitefit("plan", "--json", "--memory-budget", "8GiB", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["history_found"] is True
    assert sorted(f for u in d["units"] for f in u["files"]) == [f"tests/test_{i}.py" for i in range(4)]
    pool = [u for u in d["units"] if u["name"] == "fixture:pool"]
    assert pool and sorted(pool[0]["files"]) == ["tests/test_0.py", "tests/test_1.py"]
    assert [f["name"] for f in d["fixtures"]] == ["pool"] and d["fixtures"][0]["procs"] >= 1
