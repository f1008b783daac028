"""What a person sees: a command run on a real pseudo-terminal, and the screen its bytes leave.

The emulator knows what pytest, xdist and rich write to a terminal: text, CR, LF,
backspace, and the CSI sequences for erasing (K, J) and moving the cursor (A-D, G,
H); colours and other modes change nothing it keeps. Lines scroll into an unlimited
history, so the whole output can be read back as the lines a person scrolled past.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b[()][A-Za-z0-9]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[=>78]")


class Screen:
    """A terminal ``width`` columns wide whose rows never scroll away."""

    def __init__(self, width: int = 120) -> None:
        self.width = width
        self.rows: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def feed(self, data: str) -> None:
        pos = 0
        for m in CSI.finditer(data):
            self._text(data[pos:m.start()])
            if m.group(2):
                self._csi(m.group(1), m.group(2))
            pos = m.end()
        self._text(data[pos:])

    def lines(self) -> list[str]:
        return ["".join(r).rstrip() for r in self.rows]

    def _line(self) -> list[str]:
        while len(self.rows) <= self.row:
            self.rows.append([])
        return self.rows[self.row]

    def _text(self, text: str) -> None:
        for ch in text:
            if ch == "\n":
                self.row += 1
                self._line()
            elif ch == "\r":
                self.col = 0
            elif ch == "\b":
                self.col = max(0, self.col - 1)
            elif ch >= " ":
                if self.col >= self.width:  # wrap
                    self.row += 1
                    self.col = 0
                line = self._line()
                line.extend(" " * (self.col + 1 - len(line)))
                line[self.col] = ch
                self.col += 1

    def _csi(self, args: str, cmd: str) -> None:
        if args.startswith("?"):
            return  # modes (cursor shown or hidden)
        nums = [int(x) if x else 0 for x in args.split(";")] if args else []
        n = nums[0] if nums else 0
        line = self._line()
        if cmd == "K":
            if n == 0:
                del line[self.col:]
            elif n == 1:
                line[:self.col] = [" "] * min(self.col, len(line))
            else:
                line.clear()
        elif cmd == "J" and n in (0, 2):
            del line[self.col:]
            del self.rows[self.row + 1:]
        elif cmd == "A":
            self.row = max(0, self.row - max(n, 1))
        elif cmd == "B":
            self.row += max(n, 1)
            self._line()
        elif cmd == "C":
            self.col += max(n, 1)
        elif cmd == "D":
            self.col = max(0, self.col - max(n, 1))
        elif cmd == "G":
            self.col = max(n, 1) - 1
        elif cmd == "H":
            self.row, self.col = (max(nums[0], 1) - 1 if nums else 0), (max(nums[1], 1) - 1 if len(nums) > 1 else 0)
            self._line()


def run_on_terminal(cmd: Sequence[str], cwd: Path, env: dict[str, str], *, width: int = 120,
                    timeout: float = 120) -> tuple[int, str, list[str]]:
    """Run ``cmd`` with stdin, stdout and stderr on one pty; its exit code, the raw output and the screen."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdin=slave, stdout=slave, stderr=slave, env=env,
                            close_fds=True, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    rc = proc.wait(timeout=30)
    raw = b"".join(chunks).decode("utf-8", "replace")
    screen = Screen(width)
    screen.feed(raw)
    return rc, raw, screen.lines()
