"""Live progress of a run: a redrawn line on a terminal, plain periodic lines in a CI log.

A CI log keeps every byte, so redrawing there would bury the log in control codes;
it gets one plain line every ``every_s`` seconds instead (and those lines are also
what survives when the runner is killed). On a terminal one line is redrawn in place,
below everything else: suitefit's own lines go above it through ``log``, and pytest's
output through ``above`` (pytest's terminal writer writes to that file while the line
is drawn), so that neither erases the other.
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, cast

from suitefit import timing
from suitefit.units import fmt_mb, fmt_s

if TYPE_CHECKING:  # rich is imported only to draw on a terminal: a CI log never pays for it
    from rich.live import Live

REDRAW_S = 0.1  # at most ten redraws a second on a terminal


class Progress:
    """Tests done of ``total``, time since start, and the tree's memory against the budget."""

    def __init__(self, total: int, budget_mb: float | None, stream: IO[str], is_tty: bool, *,
                 every_s: float = 10.0, clock: Callable[[], float] = timing.monotonic,
                 carry: str = "", mid_line: Callable[[], bool] | None = None) -> None:
        """``carry``: a line another writer left unfinished on the terminal (pytest's), which
        the live area takes over (shown above the live line, continued by ``above``).
        ``mid_line``: off a terminal, is another writer's line unfinished in the same log?
        Then a plain line starts on a line of its own."""
        self.total = max(0, int(total))
        self.budget_mb = budget_mb
        self.stream = stream
        self.is_tty = is_tty
        self.every_s = every_s
        self._clock = clock
        self._start = clock()
        self._last_out = self._start  # plain mode: the first line comes after every_s
        self._done = 0
        self._tree_mb: float | None = None
        self._peak_mb: float | None = None
        self._closed = False
        self._frozen: float | None = None  # when the run ended: the final line's time
        self._lock = threading.RLock()
        self._partial = carry if is_tty else ""  # the unfinished line of the writer routed through ``above``
        self._mid_line = mid_line
        self._live: Live | None = None
        if is_tty:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=stream, force_terminal=True, highlight=False, soft_wrap=False)
            self._live = Live(self._render(), console=console, auto_refresh=False, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start(refresh=True)

    # -- what the caller does ---------------------------------------------------------------

    def update(self, done: int, tree_mb: float) -> None:
        """Record the latest count and tree memory; draw or print when it is time."""
        with self._lock:
            if self._closed or self._frozen is not None:
                return
            self._done = done
            if math.isfinite(tree_mb):
                self._tree_mb = tree_mb
                self._peak_mb = tree_mb if self._peak_mb is None else max(self._peak_mb, tree_mb)
            now = self._clock()
            if self._live is not None:
                if now - self._last_out >= REDRAW_S:
                    self._last_out = now
                    self._live.update(self._render(now), refresh=True)
            elif now - self._last_out >= self.every_s:
                self._last_out = now
                self._write(self.line(now))

    def log(self, line: str) -> None:
        """A line that must stay in the output (a heartbeat, a dead worker): above the live line on a terminal."""
        with self._lock:
            if self._live is not None and not self._closed:
                from rich.text import Text

                if "\r" in self._partial:
                    # a status line rewritten in place (xdist's "2 workers [37 items]") is done:
                    # it ends above ours; pytest's dots (never rewritten) stay in the live area
                    self._live.console.print(Text.from_ansi(self._partial.rsplit("\r", 1)[-1]), soft_wrap=True)
                    self._partial = ""
                self._live.console.print(Text(line), soft_wrap=True)
            else:
                self._write(line)

    def above(self, file: IO[str]) -> IO[str]:
        """A file for another writer (pytest's) whose lines go above the live line; ``file``
        itself once the line is gone. Off a terminal there is no live line: ``file``."""
        return cast(IO[str], _Above(self, file)) if self._live is not None else file

    def _write_above(self, file: IO[str], text: str) -> None:
        with self._lock:
            if self._live is None or self._closed:
                file.write(text)
                return
            from rich.text import Text

            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:  # "\r" rewrote the line in place: what stays is after the last one
                self._live.console.print(Text.from_ansi(line.rsplit("\r", 1)[-1]), soft_wrap=True)
            now = self._clock()
            if lines or now - self._last_out >= REDRAW_S:  # at most ten redraws a second for dots
                self._last_out = now
                self._live.update(self._render(now), refresh=True)

    def freeze(self, peak_mb: float | None = None) -> None:
        """The tests are over: stop counting and keep this moment for the final line.

        ``peak_mb``: the run's measured peak (the sampler's and every worker's exact high-water
        mark). The live line sees the tree only at its redraws, which can miss a spike that
        the run's closing lines report: the final line shows the same figure they do.
        """
        with self._lock:
            if self._frozen is None:
                self._frozen = self._clock()
            if peak_mb is not None and math.isfinite(peak_mb) and peak_mb > 0:
                self._peak_mb = peak_mb if self._peak_mb is None else max(self._peak_mb, peak_mb)

    def close(self) -> None:
        """Draw the final state once and stop; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = self._frozen if self._frozen is not None else self._clock()
            if self._live is not None:
                if self._partial:  # the other writer's unfinished line stays where it was
                    from rich.text import Text

                    self._live.console.print(Text.from_ansi(self._partial.rsplit("\r", 1)[-1]), soft_wrap=True)
                    self._partial = ""
                self._live.update(self._render(now, final=True), refresh=True)
                self._live.stop()
            else:
                self._write(self.line(now, final=True))

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what it shows --------------------------------------------------------------------------

    def _memory(self, mb: float | None) -> str:
        if mb is None:
            return "not measured yet"
        if self.budget_mb:
            return f"{fmt_mb(mb)} of {fmt_mb(self.budget_mb)}"
        return fmt_mb(mb)

    def line(self, now: float | None = None, *, final: bool = False) -> str:
        """The plain line, e.g. ``suitefit: 120/400 tests, 12.3 s, tree 812 MiB of 6.00 GiB``."""
        elapsed = (self._clock() if now is None else now) - self._start
        if final:
            return (f"suitefit: done {self._done}/{self.total} collected tests, tests {fmt_s(elapsed)} "
                    f"(from collection to the last), tree peak {self._memory(self._peak_mb)}")
        return f"suitefit: {self._done}/{self.total} tests, {fmt_s(elapsed)}, tree {self._memory(self._tree_mb)}"

    def _render(self, now: float | None = None, *, final: bool = False) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        elapsed = (self._clock() if now is None else now) - self._start
        mb = self._peak_mb if final else self._tree_mb
        style = "green"
        if mb is not None and self.budget_mb:
            share = mb / self.budget_mb
            style = "bold red" if share >= 1 else "yellow" if share >= 0.8 else "green"
        grid = Table.grid(padding=(0, 1))
        grid.add_row(
            Text("suitefit", style="bold"),
            ProgressBar(total=max(self.total, 1), completed=min(self._done, max(self.total, 1)), width=24),
            Text(f"{self._done}/{self.total} tests"),
            Text(fmt_s(elapsed), style="cyan"),
            Text(("tree peak " if final else "tree ") + self._memory(mb), style=style),
        )
        partial = self._partial.rsplit("\r", 1)[-1]
        return Group(Text.from_ansi(partial), grid) if partial and not final else grid

    def _write(self, line: str) -> None:
        if self._mid_line is not None and self._mid_line():
            line = "\n" + line
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed log must not fail the run
            pass


class _Above(io.TextIOBase):
    """What pytest's terminal writer writes to while the live line is drawn (see ``Progress.above``)."""

    def __init__(self, progress: Progress, file: IO[str]) -> None:
        self._progress = progress
        self._file = file

    def write(self, text: str) -> int:
        self._progress._write_above(self._file, text)
        return len(text)

    def flush(self) -> None:
        self._file.flush()

    def isatty(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._file, "encoding", "utf-8")
