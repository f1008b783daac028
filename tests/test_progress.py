"""Live progress: plain periodic lines off a terminal, one redrawn line on a terminal (a real pty)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

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
