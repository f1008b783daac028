"""Live progress: plain periodic lines off a terminal, one redrawn line on a terminal (a real pty)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from suitefit.history import History
from suitefit.report.progress import Progress

SCRIPT = """
import sys, time
from suitefit.report.progress import Progress
p = Progress(400, 6144.0, sys.stdout, is_tty=sys.stdout.isatty(), every_s=0.2)
for i in range(1, 401):
    p.update(i, 500.0 + i)
    if i == 200:
        p.log("suitefit: heartbeat: halfway")
    time.sleep(0.0025)
p.close()
p.close()  # a second close draws nothing more
"""

PLAIN = re.compile(r"^suitefit: (\d+)/400 tests, [0-9.]+ (?:ms|s), tree (\d+) MiB of 6\.00 GiB$")


def _script(tmp_path: Path) -> Path:
    p = tmp_path / "progress_demo.py"
    p.write_text(SCRIPT)
    return p


def test_plain_lines_in_a_log(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(_script(tmp_path))], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\r" not in out.stdout  # a CI log gets no control codes
    lines = out.stdout.splitlines()
    assert lines.count("suitefit: heartbeat: halfway") == 1
    lines.remove("suitefit: heartbeat: halfway")
    periodic, final = lines[:-1], lines[-1]
    assert len(periodic) >= 2, out.stdout  # about one line per 0.2 s over a run of ~1 s or more
    done = []
    for line in periodic:
        m = PLAIN.match(line)
        assert m, line
        done.append(int(m.group(1)))
        assert int(m.group(2)) == 500 + int(m.group(1))  # the tree figure is the one last reported
    assert done == sorted(done) and done[-1] < 400
    assert re.match(r"^suitefit: done 400/400 collected tests, tests [0-9.]+ (?:ms|s) \(from collection to the last\), "
                    r"tree peak 900 MiB of 6\.00 GiB$", final), final


def test_plain_lines_follow_the_clock() -> None:
    now = [100.0]
    buf = io.StringIO()
    p = Progress(10, None, buf, is_tty=False, every_s=5.0, clock=lambda: now[0])
    for i in range(1, 11):
        now[0] += 2.0
        p.update(i, 300.0 + 10 * i)
    p.close()
    assert buf.getvalue().splitlines() == [
        "suitefit: 3/10 tests, 6.0 s, tree 330 MiB",
        "suitefit: 6/10 tests, 12.0 s, tree 360 MiB",
        "suitefit: 9/10 tests, 18.0 s, tree 390 MiB",
        "suitefit: done 10/10 collected tests, tests 20.0 s (from collection to the last), tree peak 400 MiB",
    ]


def test_live_line_on_a_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path))], stdin=slave, stdout=slave, stderr=slave,
                            env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=30) == 0
    raw = b"".join(chunks).decode("utf-8", "replace")
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert "\x1b[" in raw  # redrawn in place, with colour
    assert plain.count("suitefit: ") == 1  # no periodic log lines on a terminal, only the logged one
    assert "suitefit: heartbeat: halfway" in plain  # logged lines stay, above the live line
    counts = {int(n) for n in re.findall(r"(\d+)/400 tests", plain)}
    assert len(counts) >= 3 and 400 in counts, sorted(counts)  # it was redrawn as tests finished
    assert "━" in plain  # the bar
    assert re.search(r"400/400 tests\s+[0-9.]+ (?:ms|s)\s+tree peak 900 MiB of 6\.00 GiB", plain), plain[-400:]
    assert re.search(r"tree \d+ MiB of 6\.00 GiB", plain)


# -- a real run's terminal: pytest's lines, suitefit's lines and the live line together --------

HOG = """
import time
def test_hog():
    b = bytearray(200 * 2**20)
    b[::4096] = b"x" * len(b[::4096])
    time.sleep(1.5)  # sampled above 70% of the budget: a heartbeat
"""
QUICK = "import time, pytest\n@pytest.mark.parametrize('i', range(12))\ndef test_x(i):\n    time.sleep(0.1)\n"


def planned_suite(root: Path) -> list[str]:
    """A suite whose hog sends a heartbeat while pytest's dots line is unfinished; its pytest command."""
    from suitefit.model import Budget, Plan, Unit

    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (root / "tests" / "test_hog.py").write_text(HOG)
    for i in range(3):
        (root / "tests" / f"test_q{i}.py").write_text(QUICK)
    files = ["tests/test_hog.py", *[f"tests/test_q{i}.py" for i in range(3)]]
    plan = Plan(workers=2, units=tuple(Unit(f, (f,), 1.0, 1.0) for f in files), budget=Budget(350.0, 2),
                predicted_wall_s=1.0, predicted_peak_mb=0.0, reasons=("hand-written for a test",))
    (root / "plan.json").write_text(json.dumps(plan.to_json()))
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--suitefit",
            f"--suitefit-history={root / 'h.sqlite'}", f"--suitefit-plan={root / 'plan.json'}"]


def _env() -> dict[str, str]:
    env = {**os.environ, "TERM": "xterm-256color"}
    for k in ("NO_COLOR", "COLUMNS", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(k, None)
    return env


def test_a_log_gets_each_line_whole_and_xdists_status_once(tmp_path: Path) -> None:
    cmd = planned_suite(tmp_path)
    res = subprocess.run([*cmd, "-q"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = res.stdout.splitlines()
    assert res.returncode == 0, res.stdout
    assert lines.count("bringing up nodes...") == 1, res.stdout  # -q: xdist wrote it twice
    assert any(ln.startswith("suitefit: heartbeat: ") for ln in lines), res.stdout
    assert not any(re.search(r".suitefit:", ln) for ln in lines), res.stdout  # none after pytest's dots or "[100%]"
    done = next(i for i, ln in enumerate(lines) if ln.startswith("suitefit: done 37/37 collected tests"))
    assert done > next(i for i, ln in enumerate(lines) if " passed in " in ln), res.stdout  # after pytest's summary


def test_a_terminal_shows_pytests_lines_suitefits_lines_and_one_live_line(tmp_path: Path) -> None:
    from screen import run_on_terminal

    rc, raw, screen = run_on_terminal(planned_suite(tmp_path), tmp_path, _env())
    text = "\n".join(screen)
    assert rc == 0, text
    assert "\x1b[" in raw  # it was drawn live
    # pytest's dots, all of them, ending in [100%]: whole on one line when no suitefit line came
    # between them (the sampler process may name a hog in flight before the first dot or after)
    assert sum(len(re.findall(r"(?<![\w.])\.+(?=\s|$)", ln)[0]) for ln in screen
               if re.search(r"(^|\s)\.+(\s|$)", ln)) == 37 and any("[100%]" in ln for ln in screen), text
    beats = [ln for ln in screen if "heartbeat" in ln]
    assert beats and all(ln.startswith("suitefit: heartbeat: tree memory") for ln in beats), text
    bars = [ln for ln in screen if "━" in ln]
    assert len(bars) == 1 and "37/37 tests" in bars[0] and "tree peak" in bars[0], text  # the live line's last state
    assert screen.index(bars[0]) > max(i for i, ln in enumerate(screen) if "passed in" in ln)
    assert not any(re.search(r".(suitefit:|suitefit ━)", ln) for ln in screen), text


LATE_GW1 = """
import os, time
from pathlib import Path
import pytest

MARK = Path(os.environ["LATE_MARK"])
if os.environ.get("PYTEST_XDIST_WORKER") == "gw1":  # it collects once the other has run a test
    end = time.monotonic() + 20
    while not MARK.exists() and time.monotonic() < end:
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def _ran():
    yield
    MARK.touch()
"""


def test_a_worker_that_collects_after_tests_began_writes_no_status_over_them(tmp_path: Path) -> None:
    """The scheduler starts each worker once it has collected; on a terminal xdist rewrites its
    status line (a carriage return) as each worker collects: the second worker's must not
    be written over the first's test progress. pytest's default verbosity, where the status
    line says how many workers have collected."""
    from screen import run_on_terminal

    from suitefit.model import Budget, Plan, Unit

    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests" / "conftest.py").write_text(LATE_GW1)
    files = [f"tests/test_q{i}.py" for i in range(4)]
    for f in files:
        (tmp_path / f).write_text(QUICK)
    plan = Plan(workers=2, units=tuple(Unit(f, (f,), 1.2, 1.0) for f in files), budget=Budget(0.0, 2),
                predicted_wall_s=1.0, predicted_peak_mb=0.0, reasons=("hand-written for a test",))
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--suitefit", "--suitefit-progress=off",
           f"--suitefit-history={tmp_path / 'h.sqlite'}", f"--suitefit-plan={tmp_path / 'plan.json'}"]
    rc, _, screen = run_on_terminal(cmd, tmp_path, {**_env(), "LATE_MARK": str(tmp_path / "ran")})
    text = "\n".join(screen)
    assert rc == 0, text
    with History(tmp_path / "h.sqlite") as h:
        run = h.runs(limit=1)[0]
        began = {w: min(t.started for t in h.tests(run.id) if t.worker == w) for w in ("gw0", "gw1")}
    assert began["gw1"] - began["gw0"] > 0.1, began  # the case: gw0 ran a test before gw1 collected
    dotted = [ln for ln in screen if re.search(r"(^|\s)\.+(\s|$)", ln)]
    assert sum(len(re.findall(r"(?<![\w.])\.+(?=\s|$)", ln)[0]) for ln in dotted) == 48, text  # every dot
    assert not any("worker" in ln for ln in dotted), text  # no status line over them
    assert all(re.search(r"\[ *\d+%\]$", ln.rstrip()) for ln in dotted), text  # pytest's column, where it put it


SPIKE = """
import time
def test_spike():
    b = bytearray(300 * 2**20)
    b[::4096] = b"x" * len(b[::4096])
    time.sleep(0.5)  # sampled while it holds the memory
    del b
    time.sleep(0.3)  # ... and freed before the test ends, where the live line is fed
"""


def test_the_final_line_shows_the_runs_measured_peak(tmp_path: Path) -> None:
    """One process: the live line is fed at test ends, after a spike is freed; its final
    line must still say the peak the run measured (the closing lines' figure), not 'its' peak."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_spike.py").write_text(SPIKE)
    (tmp_path / "tests" / "test_quick.py").write_text(QUICK)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--suitefit",
                          f"--suitefit-history={tmp_path / 'h.sqlite'}", "tests"],
                         cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout
    session = re.search(r"tree peak RSS (\d+) MiB", res.stdout)
    done = re.search(r"^suitefit: done 13/13 collected tests, .*tree peak (\d+) MiB$", res.stdout, re.M)
    assert session and done, res.stdout
    assert int(session.group(1)) >= 300, res.stdout  # the spike is in the run's peak
    assert done.group(1) == session.group(1), res.stdout
