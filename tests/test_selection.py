"""Which files a pytest command line selects by path (selection.files_selected), on real paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from suitefit.selection import files_selected, measured_root, missing_paths

FILES = ["tests/test_a.py", "tests/unit/test_b.py", "tests/unit/deep/test_c.py", "tests/test_unitless.py"]


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    for f in FILES:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("def test_x(): pass\n")
    return tmp_path


def picked(args: list[str], cwd: Path, root: Path) -> list[str] | None:
    keep = files_selected(args, cwd, root)
    return None if keep is None else [f for f in FILES if keep(f)]


@pytest.mark.parametrize(("args", "want"), [
    (["tests/unit"], ["tests/unit/test_b.py", "tests/unit/deep/test_c.py"]),  # a folder, not a prefix of a name
    (["tests/test_a.py::test_x", "-q"], ["tests/test_a.py"]),  # a node id's file
    (["-k", "tests", "tests/test_a.py"], ["tests/test_a.py"]),  # an option's value is no path
    (["tests", "--ignore", "tests/unit/deep"], ["tests/test_a.py", "tests/unit/test_b.py", "tests/test_unitless.py"]),
    (["tests", "--ignore=tests/unit"], ["tests/test_a.py", "tests/test_unitless.py"]),
    (["."], FILES),
])
def test_paths_select_the_files_under_them(root: Path, args: list[str], want: list[str]) -> None:
    assert picked(args, root, root) == want


def test_paths_are_read_from_the_working_directory(root: Path) -> None:
    assert picked(["deep", "test_b.py"], root / "tests" / "unit", root) == [
        "tests/unit/test_b.py", "tests/unit/deep/test_c.py"]


@pytest.mark.parametrize("args", [
    [],  # no path: the configured testpaths, the whole suite
    ["-k", "unit", "-x"],
    ["--pyargs", "tests"],  # module names
    ["--reruns", "3", "tests/unit"],  # a plugin option's value read as a word: not a path
    ["tests/test_gone.py"],  # pytest will say it is not there
])
def test_what_cannot_be_read_as_paths_selects_the_whole_suite(root: Path, args: list[str]) -> None:
    assert files_selected(args, root, root) is None


def test_a_path_outside_the_suites_folder_selects_the_whole_suite(root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("other")
    assert files_selected([str(other)], root, root) is None


def test_words_that_read_as_paths_and_are_not_there_are_named(root: Path) -> None:
    args = ["-q", "tests/gone/", "--reruns", "3", "gone_too.py::test_x", "tests/unit", "-k", "x/y.py", "word"]
    assert missing_paths(args, root) == ["tests/gone/", "gone_too.py"]
    assert missing_paths(["tests/unit", "tests/test_a.py"], root) == []
    assert missing_paths(["--pyargs", "pkg/mod.py"], root) == []


def test_paths_select_files_named_from_a_rootdir_deeper_than_the_working_directory(tmp_path: Path) -> None:
    """Where a package's tests are run from the folder it is installed in (`pytest
    pandas/tests/frame` in site-packages), pytest finds its ini file in the package and names
    the files from there (``tests/frame/...``): the paths given still select them, and a
    path that selects one of two files plans that one."""
    from clihelp import suitefit

    pkg = tmp_path / "pkg"
    for sub in ("frame", "window"):
        (pkg / "tests" / sub).mkdir(parents=True)
        (pkg / "tests" / sub / f"test_{sub}.py").write_text("def test_x():\n    pass\n\ndef test_y():\n    pass\n")
    (pkg / "pytest.ini").write_text("[pytest]\n")
    assert suitefit("profile", "--", "-q", "-p", "no:cacheprovider", "pkg/tests", cwd=tmp_path).returncode == 0
    res = suitefit("plan", "--", "-q", "pkg/tests/frame", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "suitefit: plan: the paths given select 1 of the 2 files (2 of 4 tests, 50%): the plan is theirs" \
        in res.stderr, res.stderr
    assert measured_root(["tests/frame/test_frame.py"], ["-q", "pkg/tests/frame"], tmp_path, tmp_path) == pkg
    assert measured_root(["pkg/tests/frame/test_frame.py"], ["pkg/tests/frame"], tmp_path, tmp_path) == tmp_path
