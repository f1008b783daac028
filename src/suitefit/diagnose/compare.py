"""A/B timing: interleaved runs of two commands, and file-by-file deltas of two recorded runs.

Runs alternate which side goes first in each pair (A B, B A, A B, ...) so a machine
that slowly heats up, fills its page cache or gains a noisy neighbour biases neither
side. The statistics live in ``stats``; this module only runs and collects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from suitefit.diagnose.procs import Measured, run_measured
from suitefit.diagnose.stats import Comparison, analyse
from suitefit.errors import SuitefitError
from suitefit.history import History


@dataclass(frozen=True)
class Schedule:
    """Which side runs at each step: warm-up pairs first, then measured pairs."""

    steps: tuple[tuple[str, int, bool], ...]  # (side "a"/"b", pair index, measured?)


def interleave(runs: int, warmup: int) -> Schedule:
    """A B, B A, A B ... for ``warmup`` unmeasured pairs then ``runs`` measured pairs."""
    steps: list[tuple[str, int, bool]] = []
    for i in range(warmup + runs):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        measured = i >= warmup
        for side in order:
            steps.append((side, i - warmup if measured else i, measured))
    return Schedule(tuple(steps))


@dataclass
class CommandComparison:
    """What ``suitefit compare --a --b`` measured and concluded."""

    cmd_a: str
    cmd_b: str
    a: list[Measured] = field(default_factory=list)
    b: list[Measured] = field(default_factory=list)
    wall: Comparison | None = None
    cpu: Comparison | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "a": {"cmd": self.cmd_a, "wall_s": [m.wall_s for m in self.a], "cpu_s": [m.cpu_s for m in self.a]},
            "b": {"cmd": self.cmd_b, "wall_s": [m.wall_s for m in self.b], "cpu_s": [m.cpu_s for m in self.b]},
            "wall": self.wall.to_json() if self.wall else None,
            "cpu": self.cpu.to_json() if self.cpu else None,
        }


def compare_commands(cmd_a: str, cmd_b: str, *, runs: int, warmup: int, confidence: float = 0.95,
                     margin: float = 0.03, effect: float = 0.10, method: str = "t",
                     seed: int | None = 0, cwd: Path | None = None,
                     env: Mapping[str, str] | None = None, timeout_s: float | None = None,
                     progress: Callable[[str, int, Measured], None] | None = None) -> CommandComparison:
    """Run both commands interleaved and compare wall and CPU time. A failing run is an error."""
    if runs < 1:
        raise SuitefitError(f"--runs must be at least 1, got {runs}")
    if warmup < 0:
        raise SuitefitError(f"--warmup must be 0 or more, got {warmup}")
    if not cmd_a.strip() or not cmd_b.strip():
        raise SuitefitError("--a and --b must both be non-empty commands")
    result = CommandComparison(cmd_a, cmd_b)
    cmds = {"a": cmd_a, "b": cmd_b}
    for side, idx, measured in interleave(runs, warmup).steps:
        m = run_measured(cmds[side], cwd=cwd, env=env, timeout_s=timeout_s)
        if m.exit_code != 0:
            what = "warm-up" if not measured else "run"
            why = f"killed by signal {-m.exit_code}" if m.exit_code < 0 else f"exited {m.exit_code}"
            tail = f": {m.last_line}" if m.last_line else ""
            raise SuitefitError(
                f"command {side.upper()} ({cmds[side]}) {why} on {what} {idx + 1}{tail}", 1
            )
        if measured:
            (result.a if side == "a" else result.b).append(m)
            if progress:
                progress(side, idx, m)
    kw = dict(confidence=confidence, margin=margin, effect=effect, method=method, seed=seed)
    result.wall = analyse([m.wall_s for m in result.a], [m.wall_s for m in result.b], metric="wall", **kw)  # type: ignore[arg-type]
    # CPU time is read in clock ticks (10 ms on most kernels): smaller medians are not comparable.
    result.cpu = analyse([m.cpu_s for m in result.a], [m.cpu_s for m in result.b], metric="cpu",
                         resolution=0.02, **kw)  # type: ignore[arg-type]
    return result


@dataclass(frozen=True)
class FileDelta:
    """One file in two recorded runs (summed over workers; peak is the max)."""

    path: str
    wall_a: float | None
    wall_b: float | None
    cpu_a: float | None
    cpu_b: float | None
    peak_a: float | None
    peak_b: float | None

    @property
    def wall_delta(self) -> float | None:
        return None if self.wall_a is None or self.wall_b is None else self.wall_b - self.wall_a

    @property
    def peak_delta(self) -> float | None:
        return None if self.peak_a is None or self.peak_b is None else self.peak_b - self.peak_a


@dataclass(frozen=True)
class RunsComparison:
    run_a: int
    run_b: int
    wall_a: float | None
    wall_b: float | None
    cpu_a: float | None
    cpu_b: float | None
    peak_a: float | None
    peak_b: float | None
    files: tuple[FileDelta, ...]  # biggest absolute wall delta first

    def to_json(self) -> dict[str, object]:
        return {
            "run_a": self.run_a, "run_b": self.run_b,
            "wall_s": [self.wall_a, self.wall_b], "cpu_s": [self.cpu_a, self.cpu_b],
            "peak_rss_mb": [self.peak_a, self.peak_b],
            "files": [
                {"path": f.path, "wall_s": [f.wall_a, f.wall_b], "cpu_s": [f.cpu_a, f.cpu_b],
                 "peak_mb": [f.peak_a, f.peak_b]}
                for f in self.files
            ],
        }


def _per_file(history: History, run_id: int) -> dict[str, tuple[float, float, float]]:
    from suitefit.summary import file_summaries  # the one per-file aggregation every view uses

    out = {f.path: (f.wall_s, f.cpu_s, f.peak_mb) for f in file_summaries(history, run_id)}
    if not out:  # no files rows (a run recorded without memory measurement): sum the tests
        for t in history.tests(run_id):
            w, c, p = out.get(t.file, (0.0, 0.0, float("nan")))
            out[t.file] = (w + t.wall_s, c + t.cpu_s, p)
    return out


def compare_runs(history: History, run_a: int, run_b: int) -> RunsComparison:
    """File-by-file time and peak-memory deltas of two recorded runs."""
    ra, rb = history.run(run_a), history.run(run_b)
    fa, fb = _per_file(history, run_a), _per_file(history, run_b)
    for rid, rows in ((run_a, fa), (run_b, fb)):
        if not rows:
            raise SuitefitError(f"run {rid} in history {history.path} has no per-file or per-test rows")

    def val(d: dict[str, tuple[float, float, float]], p: str, i: int) -> float | None:
        if p not in d:
            return None
        v = d[p][i]
        return None if v != v else v  # NaN: not measured

    deltas = [
        FileDelta(p, val(fa, p, 0), val(fb, p, 0), val(fa, p, 1), val(fb, p, 1), val(fa, p, 2), val(fb, p, 2))
        for p in sorted(set(fa) | set(fb))
    ]
    deltas.sort(key=lambda d: (d.wall_delta is None, -abs(d.wall_delta or 0.0), d.path))
    return RunsComparison(run_a, run_b, ra.wall_s, rb.wall_s, ra.cpu_s, rb.cpu_s,
                          ra.peak_rss_mb, rb.peak_rss_mb, tuple(deltas))
