"""audit-workflows on fixture repositories: exactly the planted findings, and one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from lanes_helpers import assert_one_line_error, suitefit

from suitefit.workflow_audit import audit, path_filter_matches

FIXTURES = Path(__file__).parent / "fixtures" / "workflows"

PLANTED = {
    ("guard-not-run-unfiltered", None, None, "tests/guards/test_release_guard.py"),
    ("lane-never-collected", ".github/workflows/lint.yml", "lint", None),
    ("background-not-detached", ".github/workflows/lint.yml", "background", None),
}


def test_planted_fixture_reports_exactly_the_planted_findings() -> None:
    result = audit(FIXTURES / "planted")
    assert {f.key() for f in result.findings} == PLANTED
    assert len(result.findings) == len(PLANTED)
    guards = {g.module: g.reads for g in result.guards}
    assert set(guards) == {
        "tests/guards/test_lint_guard.py",
        "tests/guards/test_backend_guard.py",
        "tests/guards/test_release_guard.py",
        "tests/guards/test_all_workflows.py",
        "tests/guards/test_reuse_guard.py",
    }  # not tests/unit/test_mentions.py: a docstring mention reads nothing
    assert guards["tests/guards/test_release_guard.py"] == (".github/workflows/release.yml",)
    assert len(guards["tests/guards/test_all_workflows.py"]) == 5  # globs the folder
    # A local reusable workflow runs under its caller's triggers.
    assert "lint.yml/call-guards" in result.runs["tests/guards/test_reuse_guard.py"]
    # Filtered and unfiltered jobs are told apart.
    filtered = {j.label: j.filtered() for j in result.jobs}
    assert filtered["lint.yml/lint"] is False
    assert filtered["backend.yml/test"] is True and filtered["release.yml/build"] is True
    # The nightly script is followed: it runs every guard, though only on a schedule.
    assert "nightly.yml/soak" in result.runs["tests/guards/test_release_guard.py"]


def test_cli_exit_codes_and_json() -> None:
    r = suitefit(FIXTURES, "audit-workflows", "planted")
    assert r.rc == 1
    assert "[guard-not-run-unfiltered] tests/guards/test_release_guard.py reads" in r.out
    assert any(
        ln.split()[0] == "lint.yml/lint" and ln.endswith("pull_request: all paths; push: all paths")
        for ln in r.out.splitlines()
        if ln.startswith("  ")
    )
    j = suitefit(FIXTURES, "audit-workflows", "planted/.github/workflows", "--json")
    assert j.rc == 1
    data = json.loads(j.out)
    assert {(f["kind"], f["workflow"], f["job"], f["module"]) for f in data["findings"]} == PLANTED
    clean = suitefit(FIXTURES, "audit-workflows", "clean")
    assert clean.rc == 0, clean.out
    assert "findings: none" in clean.out
    assert "tests/test_ci_guard.py  reads ci.yml; run by ci.yml/test" in clean.out


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(FIXTURES / "planted", dst)
    return dst


def test_fixing_the_planted_findings_clears_them(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    wf = repo / ".github" / "workflows"
    lint = (wf / "lint.yml").read_text()
    lint = lint.replace(
        "      - run: ruff check .\n      - name: workflow guards",
        "      - run: suitefit lanes wait audit\n      - name: workflow guards",
    )
    lint = lint.replace(
        "tests/guards/test_lint_guard.py \\",
        "tests/guards/test_lint_guard.py tests/guards/test_release_guard.py \\",
    )
    lint = lint.replace(
        "      - run: bash .github/scripts/lane-audit.sh &\n",
        "      - run: bash .github/scripts/lane-audit.sh > a.log 2>&1 &\n",
    )
    (wf / "lint.yml").write_text(lint)
    assert audit(repo).findings == []


def test_a_paths_filter_on_the_only_unfiltered_job_is_caught(tmp_path: Path) -> None:
    """Mutation from the field report: the guard job gaining a paths filter."""
    repo = _copy(tmp_path)
    lint = repo / ".github" / "workflows" / "lint.yml"
    lint.write_text(
        lint.read_text().replace("  pull_request:\n", '  pull_request:\n    paths: ["src/**"]\n', 1)
    )
    modules = {f.module for f in audit(repo).findings if f.kind == "guard-not-run-unfiltered"}
    assert modules == {
        "tests/guards/test_lint_guard.py",
        "tests/guards/test_release_guard.py",
        "tests/guards/test_all_workflows.py",
        "tests/guards/test_reuse_guard.py",
    }


def test_a_guard_dropped_from_the_list_is_caught(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    lint = repo / ".github" / "workflows" / "lint.yml"
    lint.write_text(
        lint.read_text().replace("            tests/guards/test_lint_guard.py \\\n", "")
    )
    modules = {f.module for f in audit(repo).findings if f.kind == "guard-not-run-unfiltered"}
    assert "tests/guards/test_lint_guard.py" in modules


def test_a_wait_in_a_later_step_does_not_count(tmp_path: Path) -> None:
    """Each step is its own shell: `wait` in a later step cannot collect anything."""
    repo = _copy(tmp_path)
    lint = repo / ".github" / "workflows" / "lint.yml"
    text = lint.read_text().replace(
        "      - run: ruff check .\n      - run: test", "      - run: wait\n      - run: test"
    )
    lint.write_text(text)
    kinds = [f.kind for f in audit(repo).findings if f.job == "background"]
    assert kinds == ["background-not-detached"]


@pytest.mark.parametrize(
    ("patterns", "path", "expected"),
    [
        (["src/**"], "src/a/b.py", True),
        (["src/*"], "src/a/b.py", False),
        (["src/*"], "src/a.py", True),
        (["**.yml"], ".github/workflows/x.yml", True),
        ([".github/workflows/*.yml"], ".github/workflows/x.yml", True),
        (["tests/**", "!tests/guards/**"], "tests/guards/t.py", False),
        (["!docs/**", "docs/keep.md"], "docs/keep.md", True),
        (["docs/**"], ".github/workflows/x.yml", False),
        (["**/*.py"], "a.py", True),
    ],
)
def test_github_path_filter_globs(patterns: list[str], path: str, expected: bool) -> None:
    assert path_filter_matches(patterns, path) is expected


def _repo_with(tmp_path: Path, name: str, content: bytes) -> Path:
    repo = tmp_path / "bad"
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / name).write_bytes(content)
    return repo


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"on: [push\njobs: {}\n", "not valid YAML (line"),
        (b"\xff\xfe\x00bad", "cannot read: not UTF-8 text"),
        (b"- just\n- a list\n", "a workflow must be a YAML mapping"),
        (b"on: push\njobs: [1, 2]\n", "'jobs' must be a mapping"),
    ],
)
def test_bad_workflow_files_are_one_line(tmp_path: Path, content: bytes, needle: str) -> None:
    repo = _repo_with(tmp_path, "ci.yml", content)
    assert_one_line_error(suitefit(repo, "audit-workflows"), ".github/workflows/ci.yml", needle)


def test_unreadable_workflow_files_are_one_line(tmp_path: Path) -> None:
    repo = _repo_with(tmp_path, "ok.yml", b"on: push\njobs: {}\n")
    wf = repo / ".github" / "workflows"
    (wf / "dangling.yml").symlink_to(tmp_path / "nowhere.yml")
    assert_one_line_error(suitefit(repo, "audit-workflows"), "dangling.yml: cannot read")
    (wf / "dangling.yml").unlink()
    (wf / "folder.yml").mkdir()
    assert_one_line_error(suitefit(repo, "audit-workflows"), "folder.yml: cannot read")


def test_bad_directories_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(suitefit(tmp_path, "audit-workflows", "missing"), "no such directory")
    assert_one_line_error(suitefit(tmp_path, "audit-workflows"), "has no .github/workflows")
