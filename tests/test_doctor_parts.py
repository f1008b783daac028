"""doctor's readers on real files: coverage config files, group marks, silences, option origins."""

from __future__ import annotations

from pathlib import Path

import pytest

from suitefit.doctor.config_reader import TargetFacts, coverage_fail_under, scan_group_marks
from suitefit.doctor.findings import CATALOG, parse_silence
from suitefit.errors import SuitefitError


@pytest.mark.parametrize(("name", "text", "expect"), [
    (".coveragerc", "[report]\nfail_under = 90\n", (90.0, ".coveragerc [report]")),
    ("setup.cfg", "[coverage:report]\nfail_under = 85\n", (85.0, "setup.cfg [coverage:report]")),
    ("tox.ini", "[tox]\n[coverage:report]\nfail_under=70.5\n", (70.5, "tox.ini [coverage:report]")),
    ("pyproject.toml", "[tool.coverage.report]\nfail_under = 80\n", (80.0, "pyproject.toml [tool.coverage.report]")),
    ("setup.cfg", "[coverage:run]\nbranch = true\n", None),
])
def test_fail_under_sources(tmp_path: Path, name: str, text: str, expect: tuple[float, str] | None) -> None:
    (tmp_path / name).write_text(text)
    got = coverage_fail_under(tmp_path, None)
    assert (got and (got.value, got.source)) == expect


def test_broken_coverage_ini_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text("[coverage:report\nfail_under = 1\n")
    with pytest.raises(SuitefitError, match=r"setup\.cfg: not a valid ini file"):
        coverage_fail_under(tmp_path, None)


GROUP = "xdist" + "_group"  # spelled apart so that doctor run on this repo does not see a mark here


def test_group_mark_scan_follows_pytest_collection(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(f"item.add_marker(pytest.mark.{GROUP}('pool'))\n")
    (tests / "test_x.py").write_text(f"@pytest.mark.{GROUP}(name='db')\ndef test_x(): pass\n")
    (tests / "test_talks.py").write_text(f"def test_doc():\n    assert '{GROUP} is ignored'\n")
    (tests / "helpers.py").write_text(f"pytest.mark.{GROUP}('x')\n")  # not a test file by name
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "test_y.py").write_text(f"pytest.mark.{GROUP}('y')\n")  # outside testpaths
    for d in (".venv/lib", "tests/env2", "tests/fixture_project"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "test_z.py").write_text(f"pytest.mark.{GROUP}('z')\n")
    (tmp_path / "tests/env2/pyvenv.cfg").write_text("")
    (tmp_path / "tests/fixture_project/pytest.ini").write_text("[pytest]\n")  # another project
    scan = scan_group_marks(tmp_path, {"testpaths": ["tests"], "python_files": [], "norecursedirs": []})
    assert scan.files_with_group_marks == ("tests/conftest.py", "tests/test_x.py")
    everywhere = scan_group_marks(tmp_path, None)  # no testpaths: the whole rootdir
    assert "src/test_y.py" in everywhere.files_with_group_marks


def test_origin_and_tokens() -> None:
    facts = TargetFacts({"inipath": "/p/pyproject.toml", "ini_addopts": ["-n4", "--dist", "loadgroup"],
                         "env_addopts": ["--cov-report=xml"], "args": ["-n", "2"]})
    assert facts.origin("-n", "--numprocesses") == "addopts in pyproject.toml and the command line"
    assert facts.tokens("--dist") == ["--dist loadgroup"]
    assert facts.origin("--cov-report") == "PYTEST_ADDOPTS"
    assert facts.origin("--cov") == "a plugin or conftest default"  # --cov-report is not --cov


def test_workers_and_dist_resolution() -> None:
    assert TargetFacts({"numprocesses": "auto", "auto_workers": 8, "maxprocesses": 3}).workers == 3
    assert TargetFacts({"numprocesses": 4, "dist": "no"}).dist == "load"  # as xdist does with -n
    assert TargetFacts({"numprocesses": None, "dist": "no"}).workers is None


def test_silence_parsing() -> None:
    assert parse_silence({"silence": {"worker-restarts-masked": " xdist 3.9 default "}}, "pp") == {
        "worker-restarts-masked": "xdist 3.9 default"}
    with pytest.raises(SuitefitError, match="must be a table"):
        parse_silence({"silence": ["worker-restarts-masked"]}, "pp")
    assert set(CATALOG) >= {"loadgroup-ignored", "n-auto-miscount", "blas-threads-unpinned",
                            "worker-restarts-masked", "cov-report-without-cov", "fail-under-inert",
                            "session-pool-spread", "file-exceeds-budget", "outcome-differs",
                            "workers-exceed-payoff"}
