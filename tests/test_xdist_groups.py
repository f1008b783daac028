"""`xdist_group` marks under `suitefit run`: a group's files share one worker, as `--dist
loadgroup` keeps its tests (they had run on two workers at once)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clihelp import suitefit
from hypothesis import given
from hypothesis import strategies as st
from venvs import OLDEST, make_venv

from suitefit.history import History
from suitefit.plan.constraints import join_marked_groups


def test_marks_join_the_groups_they_touch_and_make_their_own() -> None:
    declared = {"A": ("x", "y"), "B": ("z",), "C": ("c1", "c2")}
    marked = {"db": ["w", "y"], "cache": ["q", "z"], "solo": ["s"], "join": ["c2", "z"]}
    assert join_marked_groups(declared, marked) == {
        "A+xdist_group:db": ("x", "y", "w"),
        "B+C+xdist_group:cache+xdist_group:join": ("z", "c1", "c2", "q"),
        "xdist_group:solo": ("s",),  # one file: a group's unit, never split
    }


files = st.sampled_from([f"t/test_{i}.py" for i in range(12)])


@given(st.lists(st.lists(files, min_size=1, max_size=4, unique=True), max_size=4),
       st.dictionaries(st.sampled_from("abcdef"), st.lists(files, min_size=1, max_size=4), max_size=4))
def test_every_file_once_declared_order_kept_marked_files_together(groups: list[list[str]],
                                                                   marked: dict[str, list[str]]) -> None:
    seen: set[str] = set()
    declared: dict[str, tuple[str, ...]] = {}
    for i, g in enumerate(groups):  # disjoint, as the planner requires
        declared[f"g{i}"] = tuple(f for f in g if f not in seen)
        seen.update(g)
    declared = {k: v for k, v in declared.items() if v}
    out = join_marked_groups(declared, marked)
    listed = [f for fs in out.values() for f in fs]
    assert len(listed) == len(set(listed))
    assert set(listed) == seen | {f for fs in marked.values() for f in fs}
    where = {f: name for name, fs in out.items() for f in fs}
    for fs in marked.values():
        assert len({where[f] for f in fs}) == 1
    for fs in declared.values():
        got = out[where[fs[0]]]
        assert [f for f in got if f in fs] == list(fs)


def test_the_marks_pytest_sees_are_recorded_as_xdist_reads_them(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(textwrap.dedent("""
        import pytest
        pytestmark = pytest.mark.xdist_group("m")
        def test_module_mark(): pass
        @pytest.mark.xdist_group(name="f")
        def test_own_mark_wins(): pass
    """))
    (tmp_path / "test_b.py").write_text(textwrap.dedent("""
        import pytest
        @pytest.mark.xdist_group("c")
        class TestC:
            def test_class_mark(self): pass
        def test_unmarked(): pass
    """))
    (tmp_path / "test_c.py").write_text("def test_plain(): pass\n")
    # xdist's own reading (its worker's loadgroup code): each item's closest mark, its name
    # or first argument
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import json, os
        def pytest_collection_finish(session):
            if os.environ.get("PYTEST_XDIST_WORKER") != "gw0":
                return
            out = []
            for item in session.items:
                m = item.get_closest_marker("xdist_group")
                if m is not None:
                    out.append([m.kwargs.get("name", m.args[0] if m.args else "default"), item.nodeid.split("::")[0]])
            with open("xdist_reads.json", "w") as f:
                json.dump(out, f)
    """))
    hist = tmp_path / "h.sqlite"
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                          f"--suitefit-history={hist}", "-n", "2"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    with History(hist) as h:
        ours = h.xdist_groups([r.id for r in h.runs()])
    assert ours == {"m": {"test_a.py"}, "f": {"test_a.py"}, "c": {"test_b.py"}}
    theirs = {tuple(x) for x in json.loads((tmp_path / "xdist_reads.json").read_text())}
    assert theirs == {(n, f) for n, fs in ours.items() for f in fs}


def _suite(root: Path) -> None:
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    for f in ("a1", "a2"):
        (root / "tests" / f"test_{f}.py").write_text(textwrap.dedent(f"""
            import json, os, time, pytest
            @pytest.mark.xdist_group("db")
            @pytest.mark.parametrize("i", range(4))
            def test_db(i):
                with open(os.environ["WHERE_LOG"], "a") as fh:
                    fh.write(json.dumps(["{f}", os.environ.get("PYTEST_XDIST_WORKER", "main")]) + "\\n")
                time.sleep(0.2)
        """))
    for f in ("b1", "b2", "b3"):
        (root / "tests" / f"test_{f}.py").write_text(
            "import time, pytest\n@pytest.mark.parametrize('i', range(4))\ndef test_x(i):\n    time.sleep(0.2)\n")


@pytest.mark.parametrize("versions", ["newest", "oldest"])
def test_a_groups_files_run_on_one_worker_from_the_first_run_on(tmp_path: Path, versions: str) -> None:
    # The first run reads the marks from the source (no run recorded them yet); the next
    # ones read what pytest saw. Two files of group "db" had run on two workers at once.
    # (pytest 9.2's own --dist loadgroup spreads them too: docs/doctor.md, the probe.)
    python = str(make_venv(OLDEST, with_suitefit=True)) if versions == "oldest" else None
    _suite(tmp_path)
    log = tmp_path / "where.jsonl"
    for run in (1, 2):
        log.unlink(missing_ok=True)
        res = suitefit("run", "--workers", "2", "--", "-q", "-p", "no:cacheprovider", cwd=tmp_path,
                       env={"WHERE_LOG": str(log)}, python=python)
        assert res.returncode == 0, res.stdout + res.stderr
        workers = {w for _, w in (json.loads(x) for x in log.read_text().splitlines())}
        assert len(workers) == 1 and workers <= {"gw0", "gw1"}, (run, workers)
    plan = suitefit("plan", cwd=tmp_path, python=python).stdout
    assert "their tests are marked xdist_group('db') (2 file(s)): kept on one worker" in plan, plan


@pytest.mark.parametrize(("source", "names"), [
    (b'@pytest.mark.xdist_group("db")\ndef test_a(): ...', {"db"}),
    (b'pytestmark = [pytest.mark.xdist_group(name="db"), pytest.mark.xdist_group("q")]', {"db", "q"}),
    (b'@pytest.mark.xdist_group(GROUP)\ndef test_a(): ...', {"?"}),  # a name the source does not spell
    (b'item.add_marker("xdist_group")', {"?"}),
    (b'# xdist_group is what --dist loadgroup reads\ndef test_a(): ...', set()),  # a mention
    (b'def test_a(): ...', set()),
])
def test_the_first_plan_and_the_doctor_read_marks_in_source_alike(source: bytes, names: set[str]) -> None:
    from suitefit.marks import MARK_USE, group_names

    assert group_names(source) == names
    assert bool(MARK_USE.search(source)) == bool(names)  # the doctor: "marks in use"
