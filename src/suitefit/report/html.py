"""The self-contained HTML report: one file, inline CSS, SVG and a little script.

Nothing on the page refers to anything outside it (no fonts, scripts, images or
styles to fetch), so it opens offline, from a CI artifact, years later. Tables of
tests are capped to their top rows, and the timeline is downsampled, so a
10,000-test run stays well under 2 MB.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from suitefit import __version__
from suitefit.model import CONTENTION_UNKNOWN
from suitefit.report import svg
from suitefit.report.markdown import outcome_text
from suitefit.report.queries import (
    FileDelta,
    Marker,
    RunView,
    TestSpan,
    file_deltas,
    text_of,
)
from suitefit.steal import notable
from suitefit.summary import SHOWN_FAILURES, pss_words
from suitefit.units import fmt_mb, fmt_s

TOP_TESTS = 50
TOP_FILES = 100
TOP_ROWS = 200  # failures, heartbeats, deltas
FOLD = 12  # longer tables show this many rows until "show all" (without script: all rows)


# -- small building blocks ------------------------------------------------------------------


@dataclass(frozen=True)
class Col:
    title: str
    num: bool = False
    mono: bool = False
    tip: str = ""


Cell = tuple[str, Any]  # (text shown, sort value)


def _num(v: float | int | None, text: str) -> Cell:
    return (text, "" if v is None else v)


def _s(v: float | None) -> Cell:
    return _num(v, fmt_s(v))


def _mb(v: float | None, plus: bool = False) -> Cell:
    if v is None:
        return ("-", "")
    return (("+" if plus and v >= 0 else "") + fmt_mb(v), v)


def _txt(v: str) -> Cell:
    return (v, v)


def _delta_s(v: float | None) -> Cell:
    if v is None:
        return ("-", "")
    return (("+" if v >= 0 else "-") + fmt_s(abs(v)), v)


def _delta_mb(v: float | None) -> Cell:
    if v is None:
        return ("-", "")
    return (("+" if v >= 0 else "-") + fmt_mb(abs(v)), v)


def table(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], *, tid: str = "",
          row_cls: Callable[[int], str] | None = None, fold: bool = True) -> str:
    """A table sortable by clicking its headers (sort values sit in data-v); long ones fold unless told."""
    if not rows:
        return '<p class="note">none recorded</p>'
    head = "".join(
        f'<th class="{"num" if c.num else ""}"{f" title={_attr(c.tip)}" if c.tip else ""}>{escape(c.title)}</th>'
        for c in cols
    )
    body = []
    for i, r in enumerate(rows):
        cells = []
        for c, (text, v) in zip(cols, r, strict=True):
            cls = " ".join(x for x in ("num" if c.num else "", "mono" if c.mono else "") if x)
            dv = f' data-v="{escape(str(v))}"' if c.num else ""
            cells.append(f'<td{f" class={_attr(cls)}" if cls else ""}{dv}>{escape(text)}</td>')
        rc = row_cls(i) if row_cls else ""
        body.append(f'<tr{f" class={_attr(rc)}" if rc else ""}>{"".join(cells)}</tr>')
    tid_attr = f' id="{escape(tid)}"' if tid else ""
    folded = f' data-fold="{FOLD}"' if fold and len(rows) > FOLD + 5 else ""
    return (f'<table class="sortable"{tid_attr}{folded}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _attr(v: str) -> str:
    return '"' + escape(v, quote=True) + '"'


def _kv(pairs: Sequence[tuple[str, str]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs) + "</dl>"


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>{body}</section>'


def _note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>' if text else ""


def _capped(n_shown: int, n_all: int, what: str) -> str:
    return _note(f"showing the top {n_shown:,} of {n_all:,} {what}") if n_all > n_shown else ""


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return _dt.datetime.fromtimestamp(epoch, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# -- sections of one run -----------------------------------------------------------------------


def _steal(share: Any) -> str:
    """The share of the run's CPU time a shared host's hypervisor took (``steal.py``)."""
    if not isinstance(share, (int, float)):
        return "not measured"
    return f"{share:.1%} of the CPU time the run wanted" + (
        ": its times are that much slower than the machine's own" if notable(share) else "")


def _summary(v: RunView) -> str:
    r = v.run
    ran = f"{len(v.tests):,} tests ran" if v.tests else "no test ran"
    pairs = [
        ("status", f"{r.status}" + (f" (exit {r.exit_code})" if r.exit_code is not None else "")),
        ("kind", r.kind),
        ("started", _when(r.started)),
        ("session wall", fmt_s(r.wall_s) if r.wall_s is not None else f"{fmt_s(v.duration_s)} (last record)"),
        ("CPU time", fmt_s(r.cpu_s)),
        ("taken by the host (steal)", _steal(r.meta_dict.get("host_steal"))),
        ("tests", ran),
        ("outcomes", outcome_text(v) or "-"),
        ("workers", str(r.workers or len(v.workers))),
        ("peak tree RSS", fmt_mb(v.peak_rss_mb)),
        ("tree PSS", pss_words(v.peak_pss_mb, r.meta_dict) or "not measured"),
        ("peak processes", "-" if v.peak_procs is None else str(v.peak_procs)),
    ]
    if r.budget_mb is not None:
        pairs.append(("memory budget", fmt_mb(r.budget_mb)))
    if r.threshold_mb is not None:
        above = f", {fmt_s(r.secs_above)} above it" if r.secs_above is not None else ""
        pairs.append(("heartbeat threshold", fmt_mb(r.threshold_mb) + above))
    versions = ", ".join(x for x in (
        f"Python {r.python}" if r.python else "", f"pytest {r.pytest_version}" if r.pytest_version else "",
        f"xdist {r.xdist_version}" if r.xdist_version else "") if x)
    if versions:
        pairs.append(("versions", versions))
    if r.host:
        pairs.append(("host", r.host))
    try:
        argv = " ".join(json.loads(r.argv or "[]"))
    except ValueError:
        argv = r.argv
    if argv:
        pairs.append(("command", argv))
    return _kv(pairs)


def _levels(v: RunView, label: str = "") -> list[svg.Level]:
    out = []
    r = v.run
    pre = f"{label} " if label else ""
    same = (r.budget_mb is not None and r.threshold_mb is not None
            and abs(r.threshold_mb - r.budget_mb) <= 0.01 * r.budget_mb)
    if r.budget_mb is not None:
        name = "budget and heartbeat threshold" if same else "budget"
        out.append(svg.Level(f"{pre}{name} {fmt_mb(r.budget_mb)}", r.budget_mb, "budget"))
    if r.threshold_mb is not None and not same:
        out.append(svg.Level(f"{pre}heartbeat threshold {fmt_mb(r.threshold_mb)}", r.threshold_mb, "threshold"))
    return out


def _peak_tip(v: RunView) -> str:
    assert v.peak is not None
    names = ", ".join(t.nodeid for t in v.peak_tests[:10])
    more = f" and {len(v.peak_tests) - 10} more" if len(v.peak_tests) > 10 else ""
    return (f"peak {fmt_mb(v.peak.rss_mb)} RSS, {v.peak.procs} processes at {fmt_s(v.peak.t)}"
            + (f"; in flight: {names}{more}" if names else ""))


def _memory(v: RunView) -> str:
    if not v.points:
        return _note("no memory samples were recorded for this run, so there is no timeline; "
                     f"the run's recorded peak is {fmt_mb(v.peak_rss_mb)}")
    chart = svg.memory_chart(
        [svg.Series(f"run {v.run.id}", v.points)], t_max=v.duration_s, levels=_levels(v),
        markers=[*v.heartbeats, *v.markers], peak=(v.peak, _peak_tip(v)) if v.peak else None,
    )
    keys = [("rss", "summed RSS")]
    if any(p.pss_mb is not None for p in v.points):
        keys.append(("pss", "summed PSS"))
    keys.append(("procs", "processes (right axis)"))
    kinds = {lv.cls for lv in _levels(v)}
    keys += [(k, label) for k, label in (("budget", "budget"), ("threshold", "heartbeat threshold")) if k in kinds]
    if v.heartbeats:
        keys.append(("hb", "heartbeat"))
    if v.markers:
        keys.append(("died", "worker died or down, in-flight record"))
    legend = '<p class="legend">' + " ".join(f'<span class="k {k}"></span>{escape(t)}' for k, t in keys) + "</p>"
    sampled = (f"{len(v.points):,} of {v.samples_total:,} samples drawn (lowest and highest of each "
               "interval kept, so no peak is lost)" if v.samples_total > len(v.points)
               else f"{v.samples_total:,} samples")
    out = [f'<div class="chartbox">{chart}</div>', legend, _note(sampled)]
    if v.peak is not None:
        p = v.peak
        pss = f", PSS {fmt_mb(p.pss_mb)}" if p.pss_mb is not None else ""
        out.append(f"<h3>In flight at the peak: {escape(fmt_mb(p.rss_mb))} RSS{escape(pss)}, "
                   f"{p.procs} processes, at {escape(fmt_s(p.t))}</h3>")
        out.append(table(
            [Col("test", mono=True), Col("worker"), Col("started", num=True), Col("wall", num=True),
             Col("outcome")],
            [[_txt(t.nodeid), _txt(t.worker), _s(t.start), _s(t.wall_s), _txt(t.outcome)] for t in v.peak_tests],
            tid="peak-tests",
        ) if v.peak_tests else _note("no recorded test spans the peak sample"))
        if v.peak_files:
            out.append("<h4>Files in flight at the peak</h4>")
            out.append(table(
                [Col("file", mono=True), Col("worker"), Col("peak above baseline", num=True),
                 Col("peak (absolute)", num=True)],
                [[_txt(f.path), _txt(f.worker), _mb(f.peak_mb, True), _mb(f.peak_abs_mb)] for f in v.peak_files],
            ))
    if v.heartbeats:
        out.append(f"<h3>Heartbeat crossings ({len(v.heartbeats):,})</h3>")
        out.append(_markers_table(v.heartbeats[:TOP_ROWS]))
        out.append(_capped(TOP_ROWS, len(v.heartbeats), "heartbeats"))
    return "".join(out)


def _markers_table(ms: Sequence[Marker]) -> str:
    return table(
        [Col("at", num=True), Col("event"), Col("worker"), Col("tree memory", num=True), Col("detail"),
         Col("tests named", mono=True)],
        [[_s(m.t), _txt(m.kind), _txt(m.worker or "-"), _mb(m.mb), _txt(text_of(m.detail)),
          _txt(", ".join(m.tests) or "-")] for m in ms],
    )


def _workers(v: RunView) -> str:
    chart, note = svg.worker_chart(v)
    out = [f'<div class="chartbox">{chart}</div>' if chart else "", _note(note)]
    t0 = v.run.started
    out.append(table(
        [Col("worker"), Col("pid", num=True), Col("started", num=True), Col("start-up", num=True,
         tip="process start to first test: interpreter, imports, collection"),
         Col("baseline", num=True), Col("peak RSS", num=True), Col("tests", num=True), Col("status"),
         Col("detail")],
        [[_txt(w.worker), _num(w.pid, str(w.pid or "-")),
          _s(None if w.started is None else w.started - t0), _s(w.startup_s), _mb(w.baseline_mb),
          _mb(w.peak_rss_mb), _num(w.tests, f"{w.tests:,}"), _txt(w.status), _txt(w.detail or "")]
         for w in sorted(v.workers, key=lambda w: svg._natural(w.worker))],
    ))
    if v.leftovers:
        out.append(f"<h3>Processes left running by tests ({len(v.leftovers):,})</h3>")
        out.append(table(
            [Col("at", num=True), Col("worker"), Col("started by", mono=True), Col("pid", num=True),
             Col("command"), Col("what became of it")],
            [[_s(m.t), _txt(m.worker or "-"), _txt(m.nodeid or "-"),
              _num(m.detail.get("pid"), str(m.detail.get("pid", "-"))),
              _txt(str(m.detail.get("cmdline", ""))[:120]), _txt(str(m.detail.get("fate", "")))]
             for m in v.leftovers[:TOP_ROWS]], tid="leftovers"))
        out.append(_capped(TOP_ROWS, len(v.leftovers), "leftover processes"))
    return "".join(out)


def _file_rows(fs: Sequence[Any]) -> list[list[Cell]]:
    return [[_txt(f.path), _txt(", ".join(f.workers)), _num(f.tests, f"{f.tests:,}"), _s(f.wall_s),
             _s(f.cpu_s), _mb(f.peak_mb, True), _mb(f.peak_abs_mb)] for f in fs]


FILE_COLS = [Col("file", mono=True), Col("workers"), Col("tests", num=True), Col("wall", num=True),
             Col("CPU", num=True), Col("peak above baseline", num=True,
                                        tip="highest RSS of the worker's tree above its level before the file"),
             Col("peak (absolute)", num=True)]


def _files(v: RunView) -> str:
    if not v.file_totals:
        return _note("no per-file rows were recorded for this run")
    by_time = sorted(v.file_totals, key=lambda f: f.wall_s, reverse=True)[:TOP_FILES]
    by_mem = sorted(v.file_totals, key=lambda f: f.peak_mb, reverse=True)[:TOP_FILES]
    n = len(v.file_totals)
    return "".join([
        f"<h3>By wall time ({n:,} files)</h3>", table(FILE_COLS, _file_rows(by_time), tid="files-time"),
        _capped(len(by_time), n, "files"),
        "<h3>By peak memory</h3>", table(FILE_COLS, _file_rows(by_mem), tid="files-mem"),
        _capped(len(by_mem), n, "files"),
    ])


TEST_COLS = [Col("test", mono=True), Col("worker"), Col("started", num=True), Col("wall", num=True),
             Col("CPU", num=True), Col("tree peak while it ran", num=True,
                                       tip="highest summed RSS of the whole tree while the test ran (the samples either "
                                           "side of it when none fell inside; all workers, not this test alone)"),
             Col("outcome")]


def _test_rows(ts: Sequence[TestSpan]) -> list[list[Cell]]:
    return [[_txt(t.nodeid), _txt(t.worker), _s(t.start), _s(t.wall_s), _s(t.cpu_s), _mb(t.tree_mb),
             _txt(t.outcome)] for t in ts]


def _tests(v: RunView) -> str:
    if not v.tests:
        return _note("no test rows were recorded for this run")
    n = len(v.tests)
    by_time = sorted(v.tests, key=lambda t: t.wall_s, reverse=True)[:TOP_TESTS]
    with_mem = [t for t in v.tests if t.tree_mb is not None]
    by_mem = sorted(with_mem, key=lambda t: (t.tree_mb or 0.0, t.wall_s), reverse=True)[:TOP_TESTS]
    out = [f"<h3>By wall time ({n:,} tests)</h3>", table(TEST_COLS, _test_rows(by_time), tid="tests-time"),
           _capped(len(by_time), n, "tests")]
    if by_mem:
        out += ["<h3>By tree memory while they ran</h3>",
                _note("a test's figure is the whole tree's, so under several workers it includes "
                      "what the other workers held at the time"),
                table(TEST_COLS, _test_rows(by_mem), tid="tests-mem"), _capped(len(by_mem), n, "tests")]
    return "".join(out)


def _failed(v: RunView) -> str:
    shown = v.failed[:SHOWN_FAILURES]
    rows = [[_txt(f.nodeid), _txt(f.reason or f.outcome), _txt(f.worker), _txt(f.file), _s(f.start)]
            for f in shown]
    return (table([Col("test", mono=True), Col("reason"), Col("worker"), Col("file", mono=True),
                   Col("at", num=True)], rows, tid="failed", fold=False)
            + (_note(f"… and {len(v.failed) - len(shown):,} more: the first {len(shown)} in the order they "
                     "failed are listed") if len(v.failed) > len(shown) else ""))


def _fixtures(v: RunView) -> str:
    if not v.fixtures:
        return _note("no session, package or module fixtures were timed in this run")
    rows = []
    for f in v.fixtures[:TOP_FILES]:
        files = ", ".join(f.files[:8]) + (f" and {len(f.files) - 8} more" if len(f.files) > 8 else "")
        rows.append([_txt(f.name), _txt(f.scope), _num(f.setups, str(f.setups)), _s(f.setup_s),
                     _s(f.max_setup_s), _s(f.teardown_s), _num(f.procs, str(f.procs)), _mb(f.mb),
                     _num(len(f.files), str(len(f.files))), _txt(files)])
    return table(
        [Col("fixture", mono=True), Col("scope"), Col("set-ups", num=True, tip="once per worker that used it"),
         Col("set-up total", num=True), Col("set-up max", num=True), Col("teardown", num=True),
         Col("processes", num=True, tip="processes it left running"), Col("memory", num=True),
         Col("files", num=True, tip="how many files use it"), Col("files sharing it", mono=True)],
        rows, tid="fixtures",
    ) + _capped(min(TOP_FILES, len(v.fixtures)), len(v.fixtures), "fixtures")


def _plan(v: RunView) -> str:
    if v.plan is None:
        return _note(v.plan_error or "")
    pc = v.plan
    p = pc.plan
    bars = svg.pair_bars([("wall time", p.predicted_wall_s, pc.wall_s, "s"),
                          ("peak tree memory", p.predicted_peak_mb, pc.peak_mb, "mb")])
    b = p.budget
    pairs = [("workers", f"{p.workers} planned, {pc.workers} ran"),
             ("budget", f"{fmt_mb(b.memory_mb)}, {b.cpus} CPUs"
              + (f" ({b.memory_source})" if b.memory_source else ""))]
    if p.shard:
        pairs.append(("shard", f"{p.shard[0]} of {p.shard[1]}"))
    if p.measured is not None:
        pairs.append(("predictions based on", p.measured.words()))
        if p.measured.contention_unknown:
            pairs.append(("predicted wall", CONTENTION_UNKNOWN))
    out = [f'<div class="chartbox">{bars}</div>', _kv(pairs)]
    if p.measured is not None and p.measured.nothing:
        out.insert(0, _note("Nothing was measured when this plan was made: its predicted wall and peak "
                            "are guesses from default costs, not forecasts."))
    if pc.part:
        out.insert(0, _note("This run ran part of the plan (a path argument, -k, -m, --lf or a node id): "
                            "the plan predicted all of its files, so the two do not compare."))
    if p.reasons:
        out.append("<h4>Why</h4><ul>" + "".join(f"<li>{escape(r)}</li>" for r in p.reasons) + "</ul>")
    if p.warnings:
        out.append('<h4>Warnings</h4><ul class="warn">' + "".join(f"<li>{escape(w)}</li>" for w in p.warnings) + "</ul>")
    rows = []
    for u in pc.units[:TOP_FILES]:
        d_wall = None if u.wall_s is None else u.wall_s - u.predicted_wall_s
        rows.append([_txt(u.name), _num(len(u.files), str(len(u.files))),
                     _txt(", ".join(u.files[:6]) + (f" and {len(u.files) - 6} more" if len(u.files) > 6 else "")),
                     _s(u.predicted_wall_s), _s(u.wall_s), _delta_s(d_wall), _mb(u.predicted_peak_mb),
                     _mb(u.peak_mb), _txt(u.planned_worker or "-"), _txt(", ".join(u.workers) or "did not run")])
    out.append("<h3>Units: predicted and measured</h3>")
    out.append(table(
        [Col("unit", mono=True), Col("files", num=True), Col("which", mono=True), Col("predicted wall", num=True),
         Col("measured wall", num=True), Col("difference", num=True), Col("predicted peak", num=True),
         Col("measured peak", num=True), Col("planned worker"), Col("ran on")],
        rows, tid="plan-units"))
    out.append(_capped(min(TOP_FILES, len(pc.units)), len(pc.units), "units"))
    planned = {f for u in p.units for f in u.files}
    outside = [f.path for f in v.file_totals if f.path not in planned]
    if outside:
        out.append(_note(f"{len(outside)} file(s) ran outside the plan (no unit named them): "
                         + ", ".join(outside[:10]) + (" …" if len(outside) > 10 else "")))
    if v.decisions:
        kinds: dict[str, int] = {}
        for m in v.decisions:
            kinds[m.kind.removeprefix("sched_")] = kinds.get(m.kind.removeprefix("sched_"), 0) + 1
        out.append("<h3>Scheduler decisions</h3>" + _note(", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items()))))
        notable = [m for m in v.decisions if m.kind not in ("sched_send", "sched_done")][:TOP_ROWS]
        if notable:
            out.append(table([Col("at", num=True), Col("decision"), Col("worker"), Col("unit", mono=True),
                              Col("reason")],
                             [[_s(m.t), _txt(m.kind.removeprefix("sched_")), _txt(m.worker or "-"),
                               _txt(m.nodeid or "-"), _txt(str(m.detail.get("reason", "")))] for m in notable],
                             tid="decisions"))
    return "".join(out)


def _crash(v: RunView) -> str:
    c = v.crash
    assert c is not None
    out = ['<div class="crash">']
    down = [m for m in c.events if m.kind in ("worker_died", "worker_down") and m.worker]
    if c.dead_workers:
        out.append("<p><strong>" + escape(", ".join(w.worker for w in c.dead_workers)) + " died.</strong> "
                   + escape("; ".join(f"{w.worker}: {w.detail}" for w in c.dead_workers if w.detail)) + "</p>")
    elif down:
        names = ", ".join(dict.fromkeys(m.worker or "" for m in down))
        why = "; ".join(dict.fromkeys(text_of(m.detail) for m in down if m.detail))
        out.append(f"<p><strong>Worker {escape(names)} went down.</strong> {escape(why)}</p>")
    elif c.run_status == "crashed":
        out.append("<p><strong>The run crashed.</strong></p>")
    if c.inflight:
        out.append("<h3>In flight when it died (from the journal)</h3>")
        out.append(table([Col("worker"), Col("test", mono=True)],
                         [[_txt(w), _txt(n)] for w, n in c.inflight], tid="crash-inflight"))
    else:
        out.append(_note("the journal named no test in flight"))
    if c.events:
        out.append("<h3>Events</h3>")
        out.append(_markers_table(c.events[:TOP_ROWS]))
    out.append("</div>")
    return "".join(out)


# -- the page ----------------------------------------------------------------------------------


CSS = """
:root{--fg:#1d2330;--mut:#5b6475;--bg:#fff;--line:#d9dde5;--rss:#1f5fbf;--pss:#2a9d5b;--procs:#9aa3b2;
--budget:#c62828;--thr:#e08a00;--b:#8e44ad}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}header{padding:16px 24px;background:#f3f5f9;border-bottom:1px solid var(--line)}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line);
padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}h4{font-size:14px;margin:12px 0 4px}
main{padding:0 24px 40px;max-width:1280px}nav a{margin-right:12px;color:var(--rss);text-decoration:none}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;background:#e3e7ee;margin-left:6px}
.badge.passed{background:#d7f0de}.badge.failed,.badge.crashed,.badge.error{background:#f8d7d7}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px 0}dt{color:var(--mut)}dd{margin:0}
.note{color:var(--mut);font-size:12.5px;margin:4px 0}.chartbox{overflow-x:auto}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{padding:3px 8px;border-bottom:1px solid #eceef3;
text-align:left;vertical-align:top}th{cursor:pointer;user-select:none;background:#f6f7fa;position:sticky;top:0}
th.num,td.num{text-align:right;white-space:nowrap}td.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
th.asc::after{content:" ▲"}th.desc::after{content:" ▼"}
svg.chart{font-size:11px;background:#fff}.decision{fill:#5a6270}.d-wait{fill:#d98a00}.d-release{fill:#2a9d4b}.d-shutdown{fill:#8b93a3}.d-over-budget{fill:#c0392b}.d-split{fill:#2b6cb0}.grid{stroke:#eef0f4}.axis{stroke:#8b93a3}.tick{fill:var(--mut)}
polyline{fill:none;stroke-linejoin:round}.rss{stroke:var(--rss);stroke-width:1.5}.pss{stroke:var(--pss);stroke-width:1.2;
stroke-dasharray:4 2}.procs{stroke:var(--procs);stroke-width:1}.rss.b{stroke:var(--b)}.pss.b{stroke:#c39bd3}
.procs.b{stroke:#d7bde2}.budget{stroke:var(--budget);stroke-width:1.5;stroke-dasharray:6 3}.budget-t{fill:var(--budget)}
.threshold{stroke:var(--thr);stroke-width:1.2;stroke-dasharray:3 3}.threshold-t{fill:var(--thr)}
.ev line{stroke:var(--thr);stroke-width:1;opacity:.7}.ev path{fill:var(--thr)}
.ev.worker_died line,.ev.worker_down line,.ev.inflight line{stroke:var(--budget);stroke-width:1.5;opacity:1}
.ev.worker_died path,.ev.worker_down path,.ev.inflight path{fill:var(--budget)}
.peak circle{fill:none;stroke:var(--budget);stroke-width:2}.peak text{fill:var(--budget);font-weight:600}
.guide{stroke:#444;stroke-width:.5}.readout{fill:#222;font-size:11px}
.startup{fill:#d5d9e0}.file{stroke:#fff;stroke-width:.5}.flabel{fill:#fff;font-size:10px;pointer-events:none}
.f0{fill:#4c78a8}.f1{fill:#f58518}.f2{fill:#54a24b}.f3{fill:#b279a2}.f4{fill:#e45756}.f5{fill:#72b7b2}
.f6{fill:#9d755d}.f7{fill:#6f6f9f}.test{fill:#8fa7c9}.o-failed,.o-error{fill:#d62728}.o-skipped{fill:#c7c7c7}
.death path{stroke:var(--budget);stroke-width:2.5}.pred{fill:#9fb7dd}.meas{fill:var(--rss)}
.legend{font-size:12px;color:var(--mut)}.k{display:inline-block;width:18px;height:3px;margin:0 4px 3px 10px;vertical-align:middle}
.k.rss{background:var(--rss)}.k.pss{background:var(--pss)}.k.procs{background:var(--procs)}.k.budget{background:var(--budget)}
.k.threshold{background:var(--thr)}.k.hb{background:var(--thr);height:9px;width:3px}.k.died{background:var(--budget);height:9px;width:3px}
.k.b{background:var(--b)}
.crash{border:1px solid #e9a3a3;background:#fdf3f3;padding:8px 14px;border-radius:6px}ul.warn{color:#8a4b00}
.pos{color:#b02a2a}.neg{color:#1e7b3c}footer{color:var(--mut);font-size:12px;padding:16px 24px;border-top:1px solid var(--line)}
button.more{font:inherit;font-size:12px;color:var(--rss);background:none;border:1px solid var(--line);border-radius:4px;
padding:2px 10px;margin:0 0 8px;cursor:pointer}
"""

JS = """
(function(){
function val(td){var v=td.getAttribute('data-v');if(v===null)return td.textContent;return v===''?NaN:parseFloat(v);}
document.querySelectorAll('table.sortable th').forEach(function(th){th.addEventListener('click',function(){
var i=th.cellIndex,tb=th.closest('table').tBodies[0],rows=Array.prototype.slice.call(tb.rows),num=th.classList.contains('num');
var dir=th.classList.contains('desc')?1:-1;if(!num&&!th.classList.contains('asc')&&!th.classList.contains('desc'))dir=1;
th.parentNode.querySelectorAll('th').forEach(function(x){x.classList.remove('asc','desc');});
th.classList.add(dir===1?'asc':'desc');
rows.sort(function(a,b){var x=val(a.cells[i]),y=val(b.cells[i]);
if(num){if(isNaN(x))return 1;if(isNaN(y))return -1;return dir*(x-y);}return dir*String(x).localeCompare(String(y));});
rows.forEach(function(r){tb.appendChild(r);});fold(th.closest('table'));});});
function fold(t){var n=+t.getAttribute('data-fold');if(!n)return;var open=t.classList.contains('open');
Array.prototype.forEach.call(t.tBodies[0].rows,function(r,i){r.hidden=!open&&i>=n;});}
document.querySelectorAll('table[data-fold]').forEach(function(t){var b=document.createElement('button');
var total=t.tBodies[0].rows.length;b.className='more';b.textContent='show all '+total+' rows';
b.addEventListener('click',function(){t.classList.toggle('open');
b.textContent=t.classList.contains('open')?'show the first '+t.getAttribute('data-fold'):'show all '+total+' rows';fold(t);});
t.parentNode.insertBefore(b,t.nextSibling);fold(t);});
document.querySelectorAll('svg.mem').forEach(function(s){
var raw=s.getAttribute('data-pts');if(!raw)return;var pts=raw.split(';').map(function(p){return p.split(',').map(Number);});
var x0=+s.getAttribute('data-x0'),sx=+s.getAttribute('data-sx'),g=s.querySelector('.guide'),r=s.querySelector('.readout');
var vb=s.viewBox.baseVal;
s.addEventListener('mousemove',function(e){var b=s.getBoundingClientRect();var x=(e.clientX-b.left)*vb.width/b.width;
var t=(x-x0)/sx,lo=0,hi=pts.length-1;if(t<0||hi<0){return;}
while(lo<hi){var m=(lo+hi)>>1;if(pts[m][0]<t)lo=m+1;else hi=m;}
var p=pts[lo];if(lo>0&&Math.abs(pts[lo-1][0]-t)<Math.abs(p[0]-t))p=pts[lo-1];var px=x0+p[0]*sx;
g.setAttribute('x1',px);g.setAttribute('x2',px);g.setAttribute('y1',14);g.setAttribute('y2',vb.height-30);
r.setAttribute('x',Math.min(px+6,vb.width-190));r.setAttribute('y',26);
r.textContent=p[0].toFixed(1)+' s: '+p[1].toFixed(0)+' MiB RSS, '+p[2]+' processes';});
s.addEventListener('mouseleave',function(){r.textContent='';g.setAttribute('y2',0);g.setAttribute('y1',0);});});
})();
"""


def _page(title: str, header: str, nav: Sequence[tuple[str, str]], sections: str, footer: str) -> str:
    links = "".join(f'<a href="#{sid}">{escape(name)}</a>' for sid, name in nav)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        # forbid every fetch: the page must be whole in itself, offline or not
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f"<header>{header}<nav>{links}</nav></header><main>{sections}</main>"
        f"<footer>{footer}</footer><script>{JS}</script></body></html>\n"
    )


def _footer(paths: Sequence[str]) -> str:
    return (f"suitefit {escape(__version__)} · every figure read from the history "
            f"{escape(', '.join(dict.fromkeys(paths)))} · generated {escape(_when(_now()))}")


def _now() -> float:
    from suitefit import timing

    return timing.wall()


def render_run(v: RunView) -> str:
    """The whole report of one run as one HTML string."""
    r = v.run
    title = f"suitefit report · run {r.id} ({r.kind})"
    header = f'<h1>{escape(title)}<span class="badge {escape(r.status)}">{escape(r.status)}</span></h1>'
    secs: list[tuple[str, str, str]] = [("summary", "Summary", _summary(v) + "".join(_note(n) for n in v.notes))]
    if v.crash is not None:
        secs.append(("crash", "Crash", _crash(v)))
    if v.failed:
        secs.append(("failed", f"Failed ({len(v.failed):,})", _failed(v)))
    secs += [
        ("memory", "Memory of the process tree", _memory(v)),
        ("workers", "Workers", _workers(v)),
        ("files", "Files", _files(v)),
        ("tests", "Tests", _tests(v)),
        ("fixtures", "Expensive fixtures", _fixtures(v)),
    ]
    if v.plan is not None or v.plan_error:
        secs.append(("plan", "Plan against actual", _plan(v)))
    body = "".join(_section(sid, name, html) for sid, name, html in secs)
    return _page(title, header, [(s, n) for s, n, _ in secs], body, _footer([v.history_path]))


# -- two runs ------------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "-"
    return f"×{b / a:.2f}"


def render_compare(a: RunView, b: RunView) -> str:
    """Two runs side by side: their figures, both memory lines, and every file's change."""
    title = f"suitefit compare · run {a.run.id} against run {b.run.id}"
    header = f"<h1>{escape(title)}</h1>"

    def row(name: str, fa: Any, fb: Any, fmt: Callable[[Any], str]) -> list[Cell]:
        return [_txt(name), _txt(fmt(fa) if fa is not None else "-"), _txt(fmt(fb) if fb is not None else "-"),
                _txt(_ratio(fa, fb) if isinstance(fa, (int, float)) and isinstance(fb, (int, float)) else "")]

    def pss_row(a: RunView, b: RunView) -> list[Cell]:
        """PSS as each run read it; a ratio only of two reads at their RSS peaks."""
        fa, fb = (v.run.meta_dict.get("pss_at_peak_mb") for v in (a, b))
        words = [pss_words(v.peak_pss_mb, v.run.meta_dict) or "-" for v in (a, b)]
        ratio = _ratio(fa, fb) if isinstance(fa, (int, float)) and isinstance(fb, (int, float)) else ""
        return [_txt("tree PSS"), _txt(words[0]), _txt(words[1]), _txt(ratio)]

    rows = [
        [_txt("kind"), _txt(a.run.kind), _txt(b.run.kind), _txt("")],
        [_txt("status"), _txt(a.run.status), _txt(b.run.status), _txt("")],
        [_txt("started"), _txt(_when(a.run.started)), _txt(_when(b.run.started)), _txt("")],
        row("wall time", a.run.wall_s, b.run.wall_s, fmt_s),
        row("CPU time", a.run.cpu_s, b.run.cpu_s, fmt_s),
        row("tests", len(a.tests), len(b.tests), lambda n: f"{n:,}"),
        row("workers", a.run.workers or len(a.workers), b.run.workers or len(b.workers), str),
        row("peak tree RSS", a.peak_rss_mb, b.peak_rss_mb, fmt_mb),
        pss_row(a, b),
        row("peak processes", a.peak_procs, b.peak_procs, str),
        row("budget", a.budget_mb, b.budget_mb, fmt_mb),
    ]
    cols = [Col("figure"), Col(f"run {a.run.id}"), Col(f"run {b.run.id}"), Col("B / A")]
    summary = table(cols, rows)
    lv = _levels(a, f"run {a.run.id}")
    lv += [x for x in _levels(b, f"run {b.run.id}") if all(x.mb != y.mb for y in lv)]
    series = [s for s in (svg.Series(f"run {a.run.id}", a.points), svg.Series(f"run {b.run.id}", b.points, "b"))
              if s.points]
    if series:
        chart = svg.memory_chart(series, t_max=max(a.duration_s, b.duration_s), levels=lv)
        mem = (f'<div class="chartbox">{chart}</div><p class="legend"><span class="k rss"></span>run {a.run.id} '
               f'<span class="k b"></span>run {b.run.id} (summed RSS; dashed: PSS; thin: processes)</p>')
    else:
        mem = _note("neither run recorded memory samples")
    deltas = file_deltas(a, b)
    shown = deltas[:TOP_ROWS]
    dcols = [Col("file", mono=True), Col(f"wall {a.run.id}", num=True), Col(f"wall {b.run.id}", num=True),
             Col("wall change", num=True), Col(f"peak {a.run.id}", num=True), Col(f"peak {b.run.id}", num=True),
             Col("peak change", num=True), Col(f"tests {a.run.id}", num=True), Col(f"tests {b.run.id}", num=True)]
    drows = [[_txt(d.path), _s(d.wall_a), _s(d.wall_b), _delta_s(d.wall_delta), _mb(d.peak_a, True),
              _mb(d.peak_b, True), _delta_mb(d.peak_delta), _num(d.tests_a, f"{d.tests_a:,}"),
              _num(d.tests_b, f"{d.tests_b:,}")] for d in shown]
    files = table(dcols, drows, tid="deltas") + _capped(len(shown), len(deltas), "files")
    only = _one_sided(deltas, a.run.id, b.run.id)
    secs = [("summary", "Side by side", summary), ("memory", "Memory of the process tree", mem),
            ("deltas", "Per-file changes", _note("largest change of wall time first") + files + only)]
    for v in (a, b):
        chart, note = svg.worker_chart(v)
        secs.append((f"workers-{v.run.id}", f"Workers of run {v.run.id}",
                     (f'<div class="chartbox">{chart}</div>' if chart else "") + _note(note)))
    body = "".join(_section(sid, name, html) for sid, name, html in secs)
    return _page(title, header, [(s, n) for s, n, _ in secs], body, _footer([a.history_path, b.history_path]))


def _one_sided(deltas: Sequence[FileDelta], ida: int, idb: int) -> str:
    only_a = [d.path for d in deltas if d.wall_b is None]
    only_b = [d.path for d in deltas if d.wall_a is None]
    out = []
    if only_a:
        out.append(_note(f"{len(only_a)} file(s) ran only in run {ida}"))
    if only_b:
        out.append(_note(f"{len(only_b)} file(s) ran only in run {idb}"))
    return "".join(out)

