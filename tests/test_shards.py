"""Shards: every collected test runs in exactly one shard, and the merge catches every mismatch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clihelp import assert_one_line_error, json_out, suitefit

ROOT = Path(__file__).resolve().parents[1]


def gen(out: Path) -> Path:
    """A small generated suite with a pool-fixture group, a declared group and hogs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gen_suite import Shape, generate
    finally:
        sys.path.pop(0)
    generate(out, Shape(import_s=0.05, import_mb=5, pool_procs=1, pool_mb=5, pool_setup_s=0.1, pool_files=3,
                        pool_tests=2, pool_test_ms=5, hogs_mb=[60, 40], files=14, tests_per_file=3, test_ms=5),
             "shards")
    return out


def collected(root: Path) -> list[str]:
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=root, capture_output=True, text=True, check=True)
    return sorted(ln for ln in res.stdout.splitlines() if "::" in ln)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gen(tmp_path_factory.mktemp("shards") / "suite")


def run_shard(root: Path, k: int, n: int, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    args = ["run", "--workers", "1"] + ([f"--shard={k}/{n}"] if k else []) + list(extra) + ["--", "-q", "-p", "no:randomly"]
    return suitefit(*args, cwd=root, env=env)


def test_four_shards_merge_to_the_full_suite_with_and_without_history(suite: Path) -> None:
    full = collected(suite)
    for round_ in ("no history", "with history"):
        files = []
        for k in range(1, 5):
            res = run_shard(suite, k, 4)
            assert res.returncode == 0, res.stderr
            assert ("stable hash split" in res.stderr) == (round_ == "no history"), res.stderr
            files.append(str(suite / ".suitefit" / f"shard-{k}-of-4.json"))
        ran = sorted(t["nodeid"] for f in files for t in json.loads(Path(f).read_text())["tests"])
        assert ran == full  # each collected test exactly once
        # a shard's inputs (its spec, its plan) go with the run; its result stays for merge
        assert sorted(p.name for p in (suite / ".suitefit").glob("*.json")) == sorted(Path(f).name for f in files)
        if round_ == "with history":  # a newer suitefit's shard may carry fields this one lacks
            newer = json.loads(Path(files[0]).read_text())
            for key in ("tests", "files", "workers", "fixtures"):
                for row in newer[key]:
                    row["added_later"] = 1
            Path(files[0]).write_text(json.dumps(newer))
        res = suitefit("merge", "--json", *files, cwd=suite)
        assert res.returncode == 0, res.stderr
        m = json_out(res)
        assert m["tests"] == len(full) and m["ok"] and m["outcomes"] == {"passed": len(full)}
        # groups stay whole: all pool files and the declared pair each in one shard
        by_file = {t["file"]: k for k, f in enumerate(files, 1) for t in json.loads(Path(f).read_text())["tests"]}
        assert by_file["tests/test_settings.py"] == by_file["tests/test_tokens.py"]
        if round_ == "with history":
            pools = {by_file[f] for f in by_file if "test_pool_" in f}
            assert len(pools) == 1, pools


def test_ci_variables_choose_the_shard_and_the_flag_wins(suite: Path) -> None:
    res = run_shard(suite, 0, 0, env={"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "3"})
    assert res.returncode == 0, res.stderr
    assert "shard 2/3 (from CI_NODE_INDEX/CI_NODE_TOTAL)" in res.stderr
    res = run_shard(suite, 0, 0, env={"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "2"})
    assert "shard 1/2 (from CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL)" in res.stderr
    res = run_shard(suite, 0, 0, env={"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "2"})
    assert "shard 2/2 (from BUILDKITE_PARALLEL_JOB/BUILDKITE_PARALLEL_JOB_COUNT)" in res.stderr
    res = run_shard(suite, 1, 2, env={"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "3"})
    assert "shard 1/2 (from --shard)" in res.stderr


def test_bad_shard_input_is_one_line(suite: Path, tmp_path: Path) -> None:
    assert_one_line_error(suitefit("run", "--shard", "5/4", cwd=suite), "shard 5 is not in 1..4")
    assert_one_line_error(suitefit("run", "--shard", "1/0", cwd=suite), "at least 1")
    assert_one_line_error(suitefit("run", "--shard", "two", cwd=suite), "not K/N")
    assert_one_line_error(suitefit("run", cwd=suite, env={"CI_NODE_INDEX": "x", "CI_NODE_TOTAL": "2"}), "not integers")
    for k in (1, 2):
        assert run_shard(suite, k, 2).returncode == 0
    one, two = (suite / ".suitefit" / f"shard-{k}-of-2.json" for k in (1, 2))
    assert_one_line_error(suitefit("merge", str(one), cwd=suite), "shard 2/2 is missing")
    assert_one_line_error(suitefit("merge", str(one), str(one), cwd=suite), "given twice")
    assert_one_line_error(suitefit("merge", str(one), str(tmp_path / "nope.json"), cwd=suite), "cannot read")
    cut = tmp_path / "cut.json"
    cut.write_text(two.read_text()[: len(two.read_text()) // 2])
    assert_one_line_error(suitefit("merge", str(one), str(cut), cwd=suite), "truncated")
    # a shard of a different suite: one more test file before shard 2 runs
    (suite / "tests" / "test_zz_new.py").write_text("def test_new():\n    pass\n")
    try:
        assert run_shard(suite, 2, 2).returncode == 0
        assert_one_line_error(suitefit("merge", str(one), str(two), cwd=suite), "different suites")
    finally:
        (suite / "tests" / "test_zz_new.py").unlink()
    d = json.loads(one.read_text())
    d["tests"].append(d["tests"][0])
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps(d))
    assert run_shard(suite, 2, 2).returncode == 0
    assert_one_line_error(suitefit("merge", str(dup), str(two), cwd=suite), "ran in shard 1 and in shard")
