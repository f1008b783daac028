"""New failures explained, diagnosed in fresh processes and remembered (issue 14).

The real test starts from one serial `suitefit profile` of a suite with a planted
provider/consumer pair, a planted polluter/victim pair and a flaky test; its first
`suitefit run` (one worker: the plan's longest-first order puts each consumer/victim
before what it needs or after what breaks it) fails, names both pairs and the flaky
test, and the next runs, on two workers, pass with no hand edit.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from diagnose_planted import PAIRS, PAIRS_FLAKY, SESSION_LOG, write_pairs_suite
from hypothesis import given
from hypothesis import strategies as st

from suitefit import timing
from suitefit.config import load_config
from suitefit.history import ConstraintRecord, History
from suitefit.model import OrderConstraint
from suitefit.plan.constraints import merge_constraints

SUITEFIT = [sys.executable, "-m", "suitefit"]


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # As a user would: not inside the xdist worker this test may run in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    return subprocess.run([*SUITEFIT, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=env)


def oc(first: str, second: str, kind: str = "provider") -> OrderConstraint:
    return OrderConstraint(first, second, kind, f"{second}::t", f"{first}::c")


# -- the pure merge ------------------------------------------------------------------------------

def test_constraints_become_ordered_groups_and_join_declared_ones() -> None:
    groups, kept, dropped = merge_constraints(
        {"secret": ("s1.py", "s2.py")},
        [oc("b.py", "d.py"), oc("e.py", "g.py", "polluter"), oc("s2.py", "x.py"), oc("y.py", "s1.py")])
    assert groups == {"secret": ("y.py", "s1.py", "s2.py", "x.py"),
                      "order-1": ("b.py", "d.py"), "order-2": ("e.py", "g.py")}
    assert len(kept) == 4 and dropped == []


def test_contradicting_constraints_are_dropped_with_a_line() -> None:
    groups, kept, dropped = merge_constraints(
        {"secret": ("s1.py", "s2.py")}, [oc("s2.py", "s1.py"), oc("a.py", "a.py"), oc("a.py", "b.py"),
                                         oc("b.py", "a.py")])
    assert groups == {"secret": ("s1.py", "s2.py"), "order-1": ("a.py", "b.py")}
    assert [(c.first, c.second) for c in kept] == [("a.py", "a.py"), ("a.py", "b.py")]
    assert len(dropped) == 2 and all(d.startswith("constraint dropped: ") for d in dropped)


def test_a_constraint_inside_one_file_keeps_that_file_whole() -> None:
    # Both tests in c.py: only a split (a chunk, a moved tail) breaks its order, so the file
    # becomes a group of one, whose unit is never split; inside a declared group it stays there.
    groups, kept, dropped = merge_constraints({"secret": ("s1.py", "s2.py")},
                                              [oc("c.py", "c.py"), oc("s2.py", "s2.py", "polluter")])
    assert groups == {"secret": ("s1.py", "s2.py"), "order-1": ("c.py",)}
    assert len(kept) == 2 and dropped == []
    assert kept[0].explain().startswith("c.py whole on one worker, never split: c.py::c provides")


def test_a_diagnosis_inside_one_file_is_remembered_as_keep_it_whole(tmp_path: Path) -> None:
    from suitefit.diagnose.explain import remember

    with History(tmp_path / "h.sqlite") as h:
        said = remember(h, "provider", "t.py::test_uses", "t.py::test_opens", "fails alone",
                        source="bisect", run_id=None, rootdir=str(tmp_path))
        assert said == "t.py runs whole on one worker, never split"
        assert [(c.first_file, c.second_file, c.kind) for c in h.constraints()] == [("t.py", "t.py", "provider")]


def test_a_learned_group_never_takes_a_declared_name() -> None:
    groups, _, _ = merge_constraints({"order-1": ("z.py",)}, [oc("a.py", "b.py")])
    assert groups == {"order-1": ("z.py",), "order-2": ("a.py", "b.py")}


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=12))
def test_every_kept_constraint_holds_in_its_group(pairs: list[tuple[int, int]]) -> None:
    cs = [oc(f"f{a}.py", f"f{b}.py") for a, b in pairs]
    groups, kept, dropped = merge_constraints({"d": ("f0.py", "f1.py")}, cs)
    assert len(kept) + len(dropped) == len(cs)
    where = {f: (name, i) for name, fs in groups.items() for i, f in enumerate(fs)}
    assert sum(len(fs) for fs in groups.values()) == len(where)  # no file in two groups
    assert where["f0.py"][1] < where["f1.py"][1]  # declared order kept
    for c in kept:
        (g1, i1), (g2, i2) = where[c.first], where[c.second]
        assert g1 == g2 and (i1 < i2 or c.first == c.second), (c, groups)


# -- stale constraints, the TOML export, the setting ------------------------------------------------

def _history_with(root: Path, *rows: tuple[str, str, str], found_in: Path | None = None) -> Path:
    path = root / ".suitefit" / "history.sqlite"
    with History(path) as h:
        for test, culprit, kind in rows:
            tf, cf = test.split("::")[0], culprit.split("::")[0]
            first, second = (cf, tf) if kind == "provider" else (tf, cf)
            h.add_constraint(ConstraintRecord(test, culprit, kind, first, second, "seen", "bisect", None,
                                              str(found_in or root), timing.wall()))
    return path


def test_a_constraint_on_a_test_that_is_gone_is_dropped_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.suitefit]\n")
    (tmp_path / "test_a.py").write_text("def test_sets():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_renamed():\n    pass\n")
    _history_with(tmp_path, ("test_b.py::test_reads", "test_a.py::test_sets", "provider"),
                  ("test_gone.py::test_x", "test_a.py::test_sets", "polluter"))
    p = cli("plan", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    dropped = [ln for ln in p.stderr.splitlines() if "constraint dropped" in ln]
    assert dropped == [
        "suitefit: constraint dropped: test_b.py::test_reads no longer exists "
        "(provider test_a.py::test_sets -> test_b.py::test_reads, found by bisect)",
        "suitefit: constraint dropped: test_gone.py::test_x no longer exists "
        "(polluter test_a.py::test_sets -> test_gone.py::test_x, found by bisect)"], p.stderr
    assert "Traceback" not in p.stderr
    assert "order-" not in p.stdout  # nothing was grouped
    j = cli("plan", "--json", cwd=tmp_path)
    assert j.returncode == 0 and json.loads(j.stdout)["units"]


def test_a_history_from_another_checkout_path_keeps_its_constraints(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.suitefit]\n")
    (tmp_path / "test_a.py").write_text("def test_sets():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_reads():\n    pass\n")
    _history_with(tmp_path, ("test_b.py::test_reads", "test_a.py::test_sets", "provider"),
                  found_in=tmp_path / "gone" / "checkout")
    p = cli("plan", "--constraints", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("test_a.py before test_b.py"), p.stdout + p.stderr


def test_constraints_listed_with_evidence_and_written_as_groups(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.suitefit]\nworkers = 2\n')
    for f, t in (("test_a.py", "test_sets"), ("test_b.py", "test_reads"), ("test_e.py", "test_victim"),
                 ("test_g.py", "test_pollutes")):
        (tmp_path / f).write_text(f"def {t}():\n    pass\n")
    _history_with(tmp_path, ("test_b.py::test_reads", "test_a.py::test_sets", "provider"),
                  ("test_e.py::test_victim", "test_g.py::test_pollutes", "polluter"))
    listed = cli("plan", "--constraints", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "test_a.py before test_b.py, one worker: test_a.py::test_sets provides the state it needs "
        "(test_b.py::test_reads: seen; found by bisect)",
        "test_e.py before test_g.py, one worker: test_g.py::test_pollutes pollutes it "
        "(test_e.py::test_victim: seen; found by bisect)"]
    plan = cli("plan", cwd=tmp_path)
    assert "learned order: test_a.py before test_b.py" in plan.stdout
    toml = cli("plan", "--constraints", "--as-groups", cwd=tmp_path)
    assert toml.stdout == ('[tool.suitefit.groups]\n"order-1" = ["test_a.py", "test_b.py"]\n'
                           '"order-2" = ["test_e.py", "test_g.py"]\n')
    w = cli("plan", "--constraints", "--as-groups", "--write", cwd=tmp_path)
    assert w.returncode == 0, w.stderr
    assert load_config(tmp_path).groups == {"order-1": ("test_a.py", "test_b.py"),
                                            "order-2": ("test_e.py", "test_g.py")}
    again = cli("plan", "--constraints", "--as-groups", "--write", cwd=tmp_path)
    assert again.returncode != 0 and again.stderr.startswith("suitefit: error: ")
    assert len(again.stderr.strip().splitlines()) == 1 and "already declares" in again.stderr
    # Declared now and learned still: the same groups, nothing twice.
    assert cli("plan", "--constraints", "--as-groups", cwd=tmp_path).stdout == toml.stdout


@pytest.mark.parametrize("value", ['"yes"', "-1", "1.5"])
def test_a_bad_explain_failures_setting_is_one_line(tmp_path: Path, value: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.suitefit]\nexplain_failures = {value}\n")
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    p = cli("run", cwd=tmp_path)
    assert p.returncode != 0
    assert p.stderr.strip().splitlines() == [
        f"suitefit: error: {tmp_path / 'pyproject.toml'}: [tool.suitefit] explain_failures must be true, "
        f"false or a number of "
        f"failures >= 0, got {load_value(value)!r}"]


def load_value(text: str) -> object:
    return json.loads(text)


# -- the real thing --------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def _lean_child_pytest() -> Iterator[None]:
    """The generated suite uses no hypothesis: its children need not import its plugin."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
        yield


def _sessions(root: Path) -> list[list[str]]:
    log = root / SESSION_LOG
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def test_the_first_failing_run_names_each_planted_pair_and_the_next_runs_pass(tmp_path: Path) -> None:
    root = write_pairs_suite(tmp_path)
    prof = cli("profile", "-n", "0", cwd=root)
    assert prof.returncode == 0, prof.stdout[-2000:] + prof.stderr
    before = len(_sessions(root))
    run = cli("run", "--workers", "1", "--explain-failures", cwd=root)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    news = [ln for ln in out.splitlines() if ln.startswith("suitefit: new failure: ")]
    assert sorted(ln.split()[3] for ln in news) == sorted([*PAIRS, PAIRS_FLAKY]), out[-3000:]
    assert all("it passed in run(s) 1 " in ln and "reproduce: " in ln for ln in news)
    # The diagnosis names each planted pair, and nothing else; the flaky test is called flaky.
    with History(root / ".suitefit" / "history.sqlite") as h:
        run_id = h.latest_run(kinds=["run"])
        assert run_id is not None
        found = {e.nodeid: e.detail_dict["diagnosis"] for e in h.events(run_id.id, "diagnosis")}
        learned = {(c.test, c.kind, c.culprit) for c in h.constraints()}
    assert learned == {(t, kind, culprit) for t, (kind, culprit) in PAIRS.items()}
    assert found[PAIRS_FLAKY]["verdict"] == "flaky", found
    for test, (kind, culprit) in PAIRS.items():
        d = found[test]
        assert (d["verdict"], d["culprit"]) == (kind, culprit), d
        assert f"suitefit: diagnosis: {test}: {kind} {culprit}: " in out
    # At most ceil(log2 n) + 2 extra pytest runs per failure, counted by the suite's own conftest.
    extra = _sessions(root)[before + 1:]  # the run's own session first
    assert len(extra) == sum(d["pytest_runs"] for d in found.values())
    for test, d in found.items():
        n = d["prefix_len"]
        bound = (math.ceil(math.log2(n)) if n > 1 else 0) + 2
        mine = [argv for argv in extra if argv[-1] == test]
        assert len(mine) == d["pytest_runs"] <= d["budget"] == bound, (test, d, len(mine))
    assert "flaky: passes 3 of 5 alone" in out
    # The next runs honour what was learned, with no hand edit: 5 of 5 pass, on two workers.
    for i in range(5):
        nxt = cli("run", "--workers", "2", "--", "--deselect", PAIRS_FLAKY, cwd=root)
        assert nxt.returncode == 0, (i, nxt.stdout[-3000:] + nxt.stderr)
        assert "new failure" not in nxt.stdout + nxt.stderr
    plan = cli("plan", "--workers", "2", cwd=root)
    assert "learned order: test_b_provider.py before test_d_consumer.py" in plan.stdout
    # A constraint whose test is renamed away is dropped with one line; the plan still stands.
    g = root / "test_g_polluter.py"
    g.write_text(g.read_text().replace("def test_switches_mode", "def test_sets_mode"))
    stale = cli("plan", cwd=root)
    assert stale.returncode == 0, stale.stderr
    assert [ln for ln in stale.stderr.splitlines() if "dropped" in ln] == [
        "suitefit: constraint dropped: test_g_polluter.py::test_switches_mode no longer exists "
        f"(polluter test_g_polluter.py::test_switches_mode -> test_e_victim.py::test_mode_is_normal, "
        f"found by run {run_id.id} --explain-failures)"]


def _split_file_suite(root: Path) -> str:
    """One long file whose last test needs its first (module state); three short files.
    Passes under pytest and `--dist loadfile`; a split of the long file breaks it."""
    (root / "pyproject.toml").write_text("[tool.suitefit]\nworkers = 2\ncalibrate = false\n")
    body = ["import time", "STATE = {}", "", "def test_00_opens():", "    STATE['conn'] = 'open'", ""]
    for i in range(30):
        body += [f"def test_{i + 1:02d}_works():", "    time.sleep(0.04)", ""]
    body += ["def test_zz_uses_the_connection():", "    assert STATE.get('conn') == 'open'", ""]
    (root / "test_long.py").write_text("\n".join(body))
    for f in "abc":
        (root / f"test_{f}.py").write_text("import time\n\ndef test_short():\n    time.sleep(0.1)\n")
    return "test_long.py::test_zz_uses_the_connection"


def test_a_test_that_needs_an_earlier_test_of_its_split_file_keeps_the_file_whole_next_time(
        tmp_path: Path) -> None:
    # The plan splits a long file (chunks, or a tail moved at the end): its last test then runs
    # without its first. The diagnosis finds that provider in the same file; a one-file
    # constraint keeps the file whole from the next run on. It was "not remembered" (a file
    # order cannot order a file's own tests), and every next run failed again.
    victim = _split_file_suite(tmp_path)
    prof = cli("profile", cwd=tmp_path)
    assert prof.returncode == 0, prof.stdout[-2000:] + prof.stderr
    started = timing.monotonic()
    run = cli("run", "--explain-failures", cwd=tmp_path)
    took = timing.monotonic() - started
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-3000:]
    new = [ln for ln in out.splitlines() if ln.startswith(f"suitefit: new failure: {victim} ")]
    assert len(new) == 1 and "this run split its file across gw0, gw1: " in new[0], out[-3000:]
    assert (f"suitefit: diagnosis: {victim}: provider test_long.py::test_00_opens: " in out
            and "remembered: test_long.py runs whole on one worker, never split" in out), out[-3000:]
    with History(tmp_path / ".suitefit" / "history.sqlite") as h:
        rec = h.latest_run(kinds=["run"])
        assert rec is not None
        meta = rec.meta_dict
    # The diagnosis's pytest runs are not the run's: the next plans would predict them.
    assert meta["explained_s"] > 1.0 and meta["command_wall_s"] <= took - meta["explained_s"] + 0.5, meta
    plan = cli("plan", cwd=tmp_path)
    assert "learned order: test_long.py whole on one worker, never split: " in plan.stdout, plan.stdout
    assert "test_long.py[" not in plan.stdout and "tail of test_long.py" not in plan.stdout, plan.stdout
    nxt = cli("run", cwd=tmp_path)
    assert nxt.returncode == 0, nxt.stdout[-3000:] + nxt.stderr
    assert "new failure" not in nxt.stdout + nxt.stderr


def test_a_diagnosis_past_its_time_box_says_so_and_runs_nothing(tmp_path: Path) -> None:
    from suitefit.diagnose.explain import NewFailure, diagnose

    nf = NewFailure("test_x.py::test_y", "failed", 2, "gw0", ["test_w.py::test_v"], [1], "main", [], set())
    d = diagnose(nf, cwd=tmp_path, deadline=timing.monotonic() - 1)
    assert (d.verdict, d.pytest_runs, d.culprit) == ("unfinished", 0, None)
    assert d.line().startswith("suitefit: diagnosis: test_x.py::test_y: unfinished: the time box ran out")
