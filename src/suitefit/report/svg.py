"""Charts as inline SVG strings, drawn in Python: no chart library, nothing to fetch.

Colours live in the page's CSS (classes here), so the markup stays small. Native
SVG ``<title>`` elements give every mark a tooltip without script.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from suitefit.report.queries import FileSpan, Marker, Point, RunView, TestSpan
from suitefit.units import fmt_mb, fmt_s

TEST_DETAIL_MAX = 2000  # above this many tests the worker timeline shows files only
DECISIONS_MAX = 2000  # scheduler decisions drawn on the worker timeline
PALETTE = 8  # file colour classes f0..f7 in the CSS
OFF_SCALE = 3.0  # a budget more than this many times the highest reading is named, not drawn to scale


def nice_ticks(hi: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``hi`` (steps of 1, 2 or 5 times a power of ten)."""
    if hi <= 0 or not math.isfinite(hi):
        return [0.0, 1.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    count = math.ceil(hi / step - 1e-9)
    return [i * step for i in range(count + 1)]


TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800)


def time_ticks(hi: float, n: int = 8) -> list[float]:
    """Ticks for seconds: round seconds below a minute, whole minutes or hours above."""
    raw = hi / max(n, 1)
    if raw < 1:
        return nice_ticks(hi, n)
    step = next((s for s in TIME_STEPS if s >= raw), TIME_STEPS[-1])
    return [i * step for i in range(math.ceil(hi / step - 1e-9) + 1)]


def mem_ticks(hi: float, n: int = 5) -> list[tuple[float, str]]:
    """Ticks in MiB with their labels: whole GiB steps when the range is a few GiB or more."""
    if hi >= 2048:
        return [(v * 1024, f"{v:g} GiB" if v else "0") for v in nice_ticks(hi / 1024, n)]
    return [(v, f"{v:g} MiB" if v else "0") for v in nice_ticks(hi, n)]


def fmt_t(s: float) -> str:
    """Axis label for seconds since the start."""
    if s >= 7200 and s % 3600 == 0:
        return f"{s / 3600:g}h"
    if s >= 120:
        m, sec = divmod(round(s), 60)
        return f"{m}m{sec:02d}" if sec else f"{m}m"
    return f"{s:g}s"


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Series:
    """One run's memory line in a chart (two in the compare view)."""

    label: str
    points: Sequence[Point]
    cls: str = ""  # extra CSS class, e.g. "b" for the second run


@dataclass(frozen=True)
class Level:
    label: str
    mb: float
    cls: str  # "budget" or "threshold"


@dataclass(frozen=True)
class Frame:
    """Plot area and scales shared by the marks of one chart."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    t_max: float
    y_max: float

    @property
    def pw(self) -> float:
        return self.width - self.left - self.right

    @property
    def ph(self) -> float:
        return self.height - self.top - self.bottom

    def x(self, t: float) -> float:
        return self.left + self.pw * max(0.0, t) / self.t_max

    def y(self, mb: float) -> float:
        return self.top + self.ph * (1 - mb / self.y_max)


def _x_axis(f: Frame, y_bottom: float) -> list[str]:
    out = []
    for t in time_ticks(f.t_max, max(2, int(f.pw // 90))):
        if t > f.t_max * 1.0001:
            break
        x = f.x(t)
        out.append(f'<line class="grid" x1="{_n(x)}" y1="{f.top}" x2="{_n(x)}" y2="{_n(y_bottom)}"/>')
        out.append(f'<text class="tick" x="{_n(x)}" y="{_n(y_bottom + 14)}" text-anchor="middle">{fmt_t(t)}</text>')
    return out


def memory_chart(series: Sequence[Series], *, t_max: float, levels: Sequence[Level] = (),
                 markers: Sequence[Marker] = (), peak: tuple[Point, str] | None = None,
                 width: int = 1180, height: int = 320, show_procs: bool = True) -> str:
    """The summed tree memory over time: RSS line, PSS readings, process count, limits, events."""
    all_pts = [p for s in series for p in s.points]
    data_hi = max([p.rss_mb for p in all_pts] + [p.pss_mb or 0.0 for p in all_pts]
                  + [m.mb or 0.0 for m in markers] + [1.0])
    # a limit far above the data would flatten the line: name it at the top instead of scaling to it
    off_scale = [lv for lv in levels if lv.mb > OFF_SCALE * data_hi]
    on_scale = [lv for lv in levels if lv not in off_scale]
    y_hi = max([data_hi] + [lv.mb for lv in on_scale])
    ticks = mem_ticks(y_hi * 1.05)
    f = Frame(width, height, 64, 46 if show_procs else 16, 14, 30, max(t_max, 1e-3), ticks[-1][0])
    procs_hi = max([p.procs for p in all_pts] + [1])
    p_ticks = nice_ticks(procs_hi * 1.1, 4)
    p_ticks = [v for v in p_ticks if v == int(v)] or [0.0, 1.0]
    p_max = max(p_ticks[-1], 1.0)

    def yp(n: float) -> float:
        return f.top + f.ph * (1 - n / p_max)

    data = ";".join(f"{_n(p.t)},{_n(p.rss_mb)},{p.procs}" for p in series[0].points) if series else ""
    out = [
        f'<svg class="chart mem" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="memory of the process tree over time" '
        f'data-x0="{f.left}" data-sx="{f.pw / f.t_max:.6g}" data-pts="{data}">'
    ]
    for v, label in ticks:
        y = f.y(v)
        out.append(f'<line class="grid" x1="{f.left}" y1="{_n(y)}" x2="{width - f.right}" y2="{_n(y)}"/>')
        out.append(f'<text class="tick" x="{f.left - 6}" y="{_n(y + 4)}" text-anchor="end">{escape(label)}</text>')
    out += _x_axis(f, f.top + f.ph)
    if show_procs and all_pts:
        for v in p_ticks:
            out.append(f'<text class="tick procs-t" x="{width - f.right + 6}" y="{_n(yp(v) + 4)}">{int(v)}</text>')
        out.append(f'<text class="tick procs-t" x="{width - 4}" y="{height - 4}" text-anchor="end">procs</text>')
    for s in series:
        cls = f" {s.cls}" if s.cls else ""
        if show_procs and s.points:
            steps: list[str] = []
            prev: Point | None = None
            for p in s.points:
                if prev is not None:
                    steps.append(f"{_n(f.x(p.t))},{_n(yp(prev.procs))}")
                steps.append(f"{_n(f.x(p.t))},{_n(yp(p.procs))}")
                prev = p
            out.append(f'<polyline class="procs{cls}" points="{" ".join(steps)}"><title>{escape(s.label)}: processes in the tree</title></polyline>')
        if s.points:
            pts = " ".join(f"{_n(f.x(p.t))},{_n(f.y(p.rss_mb))}" for p in s.points)
            out.append(f'<polyline class="rss{cls}" points="{pts}"><title>{escape(s.label)}: summed RSS of the tree</title></polyline>')
        pss = [p for p in s.points if p.pss_mb is not None]
        if pss:
            pts = " ".join(f"{_n(f.x(p.t))},{_n(f.y(p.pss_mb or 0.0))}" for p in pss)
            out.append(f'<polyline class="pss{cls}" points="{pts}"><title>{escape(s.label)}: summed PSS (read less often)</title></polyline>')
    placed: list[tuple[float, float]] = []  # (y, x) of the labels so far, so that none overlap
    for lv in on_scale:
        y = f.y(lv.mb)
        x = f.left + 6.0
        while any(abs(y - py) < 12 and abs(x - px) < 260 for py, px in placed):
            x += 270
        placed.append((y, x))
        out.append(
            f'<line class="{lv.cls}" x1="{f.left}" y1="{_n(y)}" x2="{width - f.right}" y2="{_n(y)}">'
            f"<title>{escape(lv.label)}</title></line>"
            f'<text class="lvl {lv.cls}-t" x="{_n(x)}" y="{_n(y - 4)}">{escape(lv.label)}</text>'
        )
    for i, lv in enumerate(off_scale):
        out.append(f'<text class="lvl {lv.cls}-t" x="{f.left + 6 + 290 * i}" y="{f.top + 10}">'
                   f"↑ {escape(lv.label)} (above the chart)</text>")
    for m in markers:
        x = f.x(m.t)
        tip = m.describe() + ("; in flight: " + ", ".join(m.tests[:8]) if m.tests else "")
        out.append(
            f'<g class="ev {escape(m.kind)}"><line x1="{_n(x)}" y1="{f.top}" x2="{_n(x)}" y2="{_n(f.top + f.ph)}"/>'
            f'<path d="M{_n(x - 5)},{f.top - 1}h10l-5,8z"/><title>{escape(tip)}</title></g>'
        )
    if peak is not None:
        p, tip = peak
        x, y = f.x(p.t), f.y(p.rss_mb)
        anchor = "end" if x > f.left + f.pw * 0.7 else "start"
        dx = -8 if anchor == "end" else 8
        out.append(
            f'<g class="peak"><circle cx="{_n(x)}" cy="{_n(y)}" r="5"/>'
            f'<text x="{_n(x + dx)}" y="{_n(max(y - 6, f.top + 10))}" text-anchor="{anchor}">'
            f"peak {escape(fmt_mb(p.rss_mb))} at {escape(fmt_s(p.t))}</text><title>{escape(tip)}</title></g>"
        )
    out.append(f'<line class="axis" x1="{f.left}" y1="{_n(f.top + f.ph)}" x2="{width - f.right}" y2="{_n(f.top + f.ph)}"/>')
    out.append(f'<line class="axis" x1="{f.left}" y1="{f.top}" x2="{f.left}" y2="{_n(f.top + f.ph)}"/>')
    out.append('<line class="guide" x1="0" y1="0" x2="0" y2="0"/><text class="readout" x="0" y="0"></text>')
    out.append("</svg>")
    return "".join(out)


def _natural(s: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def worker_chart(view: RunView, *, width: int = 1180, lane: int = 24) -> tuple[str, str]:
    """One lane per worker: its start-up, its files (and its tests when there are few).

    Returns the SVG and a note saying what was aggregated, for the page to print.
    """
    files = view.files or _files_from_tests(view.tests)
    names = {f.worker for f in files} | {t.worker for t in view.tests} | {w.worker for w in view.workers}
    workers = sorted(names, key=_natural)
    if not workers:
        return "", "no worker activity was recorded"
    show_tests = 0 < len(view.tests) <= TEST_DETAIL_MAX
    note = "" if show_tests or not view.tests else (
        f"{len(view.tests):,} tests: shown aggregated by file (tests are drawn up to {TEST_DETAIL_MAX:,})"
    )
    top, bottom, left = 6, 24, 64
    height = top + bottom + lane * len(workers)
    f = Frame(width, height, left, 16, top, bottom, max(view.duration_s, 1e-3), 1.0)
    row = {w: i for i, w in enumerate(workers)}
    palette = {p: i % PALETTE for i, p in enumerate(sorted({x.path for x in files}))}
    out = [f'<svg class="chart lanes" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="per-worker timeline of files and tests">']
    out += _x_axis(f, height - bottom)
    t0 = view.run.started
    for w in workers:
        y = top + row[w] * lane
        out.append(f'<text class="tick" x="{left - 6}" y="{y + lane / 2 + 4:.0f}" text-anchor="end">{escape(w)}</text>')
    for wr in view.workers:
        if wr.started is not None and wr.first_test is not None and wr.first_test > wr.started:
            x1, x2 = f.x(wr.started - t0), f.x(wr.first_test - t0)
            y = top + row[wr.worker] * lane
            out.append(
                f'<rect class="startup" x="{_n(x1)}" y="{y + 3}" width="{_n(max(x2 - x1, 0.5))}" height="{lane - 6}">'
                f"<title>{escape(wr.worker)} start-up (interpreter, imports, collection): "
                f"{escape(fmt_s(wr.first_test - wr.started))}</title></rect>"
            )
    h_file = lane - 6 if not show_tests else (lane - 6) // 2 + 2
    for fs in files:
        x1, x2 = f.x(fs.start), f.x(fs.end)
        y = top + row[fs.worker] * lane + 3
        w_px = max(x2 - x1, 0.6)
        tip = (f"{fs.path} on {fs.worker}: {fmt_s(fs.start)} to {fmt_s(fs.end)}, wall {fmt_s(fs.wall_s)}, "
               f"{fs.tests} tests, peak +{fmt_mb(fs.peak_mb)} above baseline")
        label = ""
        if w_px > 48 and h_file >= 10:
            name = fs.path.rsplit("/", 1)[-1]
            room = int((w_px - 6) / 6.2)
            if room >= 4:
                name = name if len(name) <= room else name[: room - 1] + "…"
                label = f'<text class="flabel" x="{_n(x1 + 3)}" y="{y + h_file - 4}">{escape(name)}</text>'
        out.append(
            f'<g><rect class="file f{palette[fs.path]}" x="{_n(x1)}" y="{y}" width="{_n(w_px)}" height="{h_file}"/>'
            f"{label}<title>{escape(tip)}</title></g>"
        )
    if show_tests:
        for ts in view.tests:
            x1 = f.x(ts.start)
            y = top + row[ts.worker] * lane + 3 + h_file + 1
            w_px = max(f.x(ts.end) - x1, 0.6)
            tip = f"{ts.nodeid} ({ts.outcome}) on {ts.worker}: {fmt_s(ts.start)}, wall {fmt_s(ts.wall_s)}"
            out.append(f'<rect class="test o-{escape(ts.outcome)}" x="{_n(x1)}" y="{y}" width="{_n(w_px)}" '
                       f'height="{lane - 7 - h_file}"><title>{escape(tip)}</title></rect>')
    # the scheduler's decisions (its log in the history), as ticks on the lane they concern
    shown = [m for m in view.decisions if m.worker in row and m.kind not in ("sched_done", "sched_note")]
    for m in shown[:DECISIONS_MAX]:
        kind = m.kind.removeprefix("sched_")
        x = f.x(max(m.t, 0.0))
        y = top + row[m.worker or ""] * lane + 2
        tip = f"{fmt_s(m.t)} {m.worker}: {kind} {m.nodeid or ''} ({m.detail.get('reason', '')})"
        out.append(f'<path class="decision d-{escape(kind)}" d="M{_n(x - 3)},{_n(y - 2)}h6l-3,5z">'
                   f"<title>{escape(tip)}</title></path>")
    for wr in view.workers:
        if wr.status != "died":
            continue
        ends = [s.end for s in files if s.worker == wr.worker] + [t.end for t in view.tests if t.worker == wr.worker]
        x = f.x(max(ends, default=0.0))
        yc = top + row[wr.worker] * lane + lane / 2
        out.append(f'<g class="death"><path d="M{_n(x - 5)},{_n(yc - 5)}l10,10m0,-10l-10,10"/>'
                   f"<title>{escape(wr.worker)} died: {escape(wr.detail or 'no detail recorded')}</title></g>")
    out.append("</svg>")
    return "".join(out), note


def _files_from_tests(tests: Sequence[TestSpan]) -> list[FileSpan]:
    """Without files rows, consecutive tests of one file on one worker make a span."""
    out: list[FileSpan] = []
    by_worker: dict[str, list[TestSpan]] = {}
    for t in tests:
        by_worker.setdefault(t.worker, []).append(t)
    for w, ts in by_worker.items():
        ts.sort(key=lambda t: t.start)
        runs: list[list[TestSpan]] = []
        for t in ts:
            if runs and runs[-1][0].file == t.file:
                runs[-1].append(t)
            else:
                runs.append([t])
        for cur in runs:
            out.append(FileSpan(cur[0].file, w, cur[0].start, max(c.end for c in cur),
                                sum(c.wall_s for c in cur), sum(c.cpu_s for c in cur), len(cur),
                                0.0, 0.0, 0.0))
    return out


def pair_bars(rows: Sequence[tuple[str, float | None, float | None, str]], *, width: int = 460) -> str:
    """Predicted against measured, one pair of bars per row (label, predicted, measured, unit)."""
    bar, gap = 14, 14
    height = 8 + len(rows) * (2 * bar + gap)
    left = 130
    out = [f'<svg class="chart bars" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="predicted against measured">']
    for i, (label, pred, meas, unit) in enumerate(rows):
        hi = max(pred or 0.0, meas or 0.0, 1e-9)
        y = 4 + i * (2 * bar + gap)
        out.append(f'<text class="tick" x="{left - 6}" y="{y + bar + 4}" text-anchor="end">{escape(label)}</text>')
        for j, (cls, v) in enumerate((("pred", pred), ("meas", meas))):
            if v is None:
                continue
            w = (width - left - 120) * v / hi
            shown = fmt_s(v) if unit == "s" else fmt_mb(v)
            out.append(f'<rect class="{cls}" x="{left}" y="{y + j * bar}" width="{_n(max(w, 0.5))}" height="{bar - 2}"/>'
                       f'<text class="tick" x="{_n(left + w + 4)}" y="{y + j * bar + bar - 4}">'
                       f'{"predicted" if j == 0 else "measured"} {escape(shown)}</text>')
    out.append("</svg>")
    return "".join(out)
