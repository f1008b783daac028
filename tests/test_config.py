"""``[tool.suitefit]``: one schema, checked in one place; every key read or refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from clihelp import assert_one_line_error, suitefit

from suitefit.config import RETIRED, SCHEMA, load_config, markdown_table
from suitefit.errors import SuitefitError

README = Path(__file__).resolve().parents[1] / "README.md"


def _project(root: Path, toml: str) -> Path:
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n\n'
                                         "[tool.suitefit]\n" + toml)
    return root


def test_readme_table_is_the_schema() -> None:
    text = README.read_text()
    start = text.index("<!-- config-table")
    body = text[text.index("\n", start) + 1: text.index("<!-- /config-table -->")]
    assert body == markdown_table(), "README is stale: paste `python -m suitefit.config`"
    for k in SCHEMA:
        assert f"`{k.name}`" in body or f"[tool.suitefit.{k.name}" in body


def test_the_parallel_keys_are_declared_with_their_types(tmp_path: Path) -> None:
    ok = {"release_fixtures = true": True, 'release_fixtures = ["pool", "db"]': ("pool", "db"),
          "explain_failures = false": False, "explain_failures = 5": 5}
    for line, want in ok.items():
        _project(tmp_path, line + "\n")
        cfg = load_config(tmp_path)
        assert cfg.get(line.split(" ", 1)[0]) == want
    for line in ('release_fixtures = "pool"', "release_fixtures = [1]", 'explain_failures = "yes"',
                 "explain_failures = -1", "explain_failures = { max = 3 }"):
        _project(tmp_path, line + "\n")
        with pytest.raises(SuitefitError, match=line.split(" ", 1)[0]):
            load_config(tmp_path)
    _project(tmp_path, "")
    assert load_config(tmp_path).get("release_fixtures") is True  # expensive, non-autouse ones only
    assert load_config(tmp_path).get("explain_failures") is False
    assert load_config(tmp_path).explain_failures == 0  # off unless asked


@pytest.mark.parametrize("key", sorted(RETIRED))
def test_retired_keys_are_refused_with_what_to_use(tmp_path: Path, key: str) -> None:
    _project(tmp_path, f"{key} = 2\n")
    line = assert_one_line_error(suitefit("plan", cwd=tmp_path), key, "not a setting")
    assert RETIRED[key].split(":")[0] in line


@pytest.mark.parametrize(("toml", "needle"), [
    ("memroy_budget = '1GiB'\n", "unknown key(s) memroy_budget"),
    ("memory_margin = 2\n", "memory_margin must be a fraction"),
    ("workers = 0\n", "workers must be a positive integer"),
    ("default_file_mb = 'lots'\n", "default_file_mb 'lots' is not a size"),
    ("default_file_s = -1\n", "default_file_s must be seconds"),
    ("[tool.suitefit.sweep]\nrepat = 2\n", "[tool.suitefit.sweep]: unknown key(s) repat"),
    ("[tool.suitefit.compare]\nruns = 'many'\n", "[tool.suitefit.compare] runs must be a positive integer"),
    ("[tool.suitefit.doctor]\nsilense = {}\n", "[tool.suitefit.doctor]: unknown key(s) silense"),
    ("[tool.suitefit.lanes.a]\ncomand = 'x'\n", "[tool.suitefit.lanes.a]: unknown key(s) comand"),
])
def test_bad_config_is_one_line_for_every_verb(tmp_path: Path, toml: str, needle: str) -> None:
    _project(tmp_path, toml)
    for verb in ("plan", "sweep", "history"):
        assert_one_line_error(suitefit(verb, cwd=tmp_path), needle, "pyproject.toml")


def test_default_file_mb_as_a_size_works_for_plan_and_sweep(tmp_path: Path) -> None:
    _project(tmp_path, 'default_file_mb = "64MiB"\ndefault_file_s = 2\n')
    plan = suitefit("plan", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "64 MiB" in plan.stdout and "2.0 s" in plan.stdout
    sweep = suitefit("sweep", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr + sweep.stdout
    assert "no order dependencies" in sweep.stdout


def test_suitefit_group_marker_is_not_registered(tmp_path: Path) -> None:
    """Groups are plan input read before collection: a mark would act a run late, so none exists."""
    _project(tmp_path, "")
    (tmp_path / "tests" / "test_a.py").write_text(
        "import pytest\n@pytest.mark.suitefit_group('g')\ndef test_a():\n    pass\n")
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "pytest", "--suitefit", "--strict-markers", "-q",
                          "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode != 0 and "'suitefit_group' not found in `markers`" in res.stdout + res.stderr
