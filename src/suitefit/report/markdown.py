"""A short Markdown summary of a run, sized for a CI step summary.

GitHub renders ``$GITHUB_STEP_SUMMARY`` as Markdown on the job page; the figures
a person needs first (did it fit, what was in flight at the peak, which files
cost most, did a worker die) come first, the rest is in the HTML report.
"""

from __future__ import annotations

from collections.abc import Sequence

from suitefit.model import DEFAULT_RULES, predicted
from suitefit.report.queries import FixtureTotal, RunView, file_deltas
from suitefit.summary import SHOWN_FAILURES, outcome_words, pss_words, run_outcomes
from suitefit.units import fmt_mb, fmt_s

TOP = 5


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


def outcome_text(v: RunView) -> str:
    """What pytest's summary line said (its outcomes, recorded by suitefit), else one outcome per test row."""
    pytest_said = run_outcomes(v.run)
    if pytest_said is not None:
        return f"{outcome_words(pytest_said)} (as pytest counts: reports, not tests)"
    rows = v.outcome_counts()
    return (f"{outcome_words(rows)} (one outcome per test)" if rows else "")


def render_markdown(v: RunView) -> str:
    r = v.run
    wall = fmt_s(r.wall_s) if r.wall_s is not None else "-"
    lines = [f"### suitefit: run {r.id} ({r.kind}) {r.status}, session {wall}", ""]
    tests = outcome_text(v)
    mem = fmt_mb(v.peak_rss_mb) + " RSS"
    pss = pss_words(v.peak_pss_mb, v.run.meta_dict)
    if pss is not None:
        mem += f", PSS {pss}"
    if v.peak_procs is not None:
        mem += f", {v.peak_procs} processes"
    budget = v.budget_mb
    if budget is not None and v.peak_rss_mb is not None:
        mem += f" (budget {fmt_mb(budget)}: {100 * v.peak_rss_mb / budget:.0f}%)"
    rows = [["tests", tests or "-"], ["workers", str(r.workers or len(v.workers))], ["peak tree memory", mem]]
    if v.heartbeats:
        rows.append(["heartbeat crossings", str(len(v.heartbeats))])
    if v.plan is not None:
        p = v.plan.plan
        rows.append(["plan: wall", f"{predicted(p, 'wall', fmt_s(p.predicted_wall_s))}, measured {fmt_s(v.plan.wall_s)}"])
        rows.append(["plan: peak", f"{predicted(p, 'peak', fmt_mb(p.predicted_peak_mb))}, measured {fmt_mb(v.plan.peak_mb)}"])
        if p.measured is not None:
            rows.append(["plan: based on", p.measured.words()])
        if v.plan.part:
            rows.append(["plan: compared", "no: this run ran part of the plan's files (a path, -k, a node id)"])
    lines += _table(["", f"run {r.id}"], rows)
    if v.crash is not None:
        c = v.crash
        who = ", ".join(f"{w.worker}" + (f" ({w.detail})" if w.detail else "") for w in c.dead_workers)
        if not who:  # an in-flight record names a test, not a death
            who = ", ".join(dict.fromkeys(m.worker for m in c.events if m.worker and m.kind != "inflight"))
        lines += ["", f"**{'Worker died: ' + who if who else 'The run crashed'}.**"]
        if c.inflight:
            mb = {(m.worker, n): m.mb for m in c.events for n in m.tests if m.mb is not None}
            lines.append("In flight: " + ", ".join(
                f"{_code(n)} on {w}" + (f" ({fmt_mb(mb[(w, n)])} at its last reading)" if (w, n) in mb else "")
                for w, n in c.inflight[:10]))
    if v.failed:
        shown = v.failed[:SHOWN_FAILURES]
        lines += ["", f"Failed ({len(v.failed):,}):", ""]
        lines += _table(["test", "reason", "worker", "file"],
                        [[_code(f.nodeid), f.reason or f.outcome, f.worker, _code(f.file)] for f in shown])
        if len(v.failed) > len(shown):
            lines += ["", f"… and {len(v.failed) - len(shown):,} more (the HTML report lists them)."]
    if v.peak is not None and v.peak_tests:
        names = ", ".join(_code(t.nodeid) for t in v.peak_tests[:TOP])
        more = f" and {len(v.peak_tests) - TOP} more" if len(v.peak_tests) > TOP else ""
        lines += ["", f"At the peak ({fmt_mb(v.peak.rss_mb)} at {fmt_s(v.peak.t)}): {names}{more}"]
    if v.file_totals:
        top = sorted(v.file_totals, key=lambda f: f.wall_s, reverse=True)[:TOP]
        lines += ["", f"Slowest files (of {len(v.file_totals):,}):", ""]
        lines += _table(["file", "wall", "peak above baseline", "tests"],
                        [[_code(f.path), fmt_s(f.wall_s), fmt_mb(f.peak_mb), f"{f.tests:,}"] for f in top])
        hogs = sorted(v.file_totals, key=lambda f: f.peak_mb, reverse=True)[:TOP]
        if hogs and hogs != top:
            lines += ["", "Most memory:", ""]
            lines += _table(["file", "peak above baseline", "wall"],
                            [[_code(f.path), fmt_mb(f.peak_mb), fmt_s(f.wall_s)] for f in hogs])
    # what holds processes or much memory first (a pool, set up in no time), then the slowest
    costly = sorted((f for f in v.fixtures if f.setups), key=_holds, reverse=True)[:3]  # stable: slowest next
    if costly:
        lines += ["", "Expensive fixtures: " + "; ".join(
            f"{_code(f.name)} {fmt_s(f.setup_s)} over {f.setups} set-up(s)"
            + (f", {f.procs} process(es), {fmt_mb(f.mb)}" if _holds(f) else "")
            + f", {len(f.files)} file(s)" for f in costly)]
    return "\n".join(lines) + "\n"


def _holds(f: FixtureTotal) -> bool:
    """Does a fixture hold what the grouping rule counts: processes, or much memory?"""
    return f.procs >= DEFAULT_RULES.procs or f.mb >= DEFAULT_RULES.mb


def render_compare_markdown(a: RunView, b: RunView) -> str:
    lines = [f"### suitefit: run {a.run.id} against run {b.run.id}", ""]
    rows = [
        ["status", a.run.status, b.run.status],
        ["wall", fmt_s(a.run.wall_s), fmt_s(b.run.wall_s)],
        ["tests", f"{len(a.tests):,}", f"{len(b.tests):,}"],
        ["peak tree RSS", fmt_mb(a.peak_rss_mb), fmt_mb(b.peak_rss_mb)],
    ]
    lines += _table(["", f"run {a.run.id}", f"run {b.run.id}"], rows)
    moved = [d for d in file_deltas(a, b) if d.wall_delta is not None][:TOP]
    if moved:
        lines += ["", "Largest per-file changes of wall time:", ""]
        lines += _table(["file", f"run {a.run.id}", f"run {b.run.id}", "change"],
                        [[_code(d.path), fmt_s(d.wall_a), fmt_s(d.wall_b),
                          ("+" if (d.wall_delta or 0) >= 0 else "-") + fmt_s(abs(d.wall_delta or 0.0))]
                         for d in moved])
    return "\n".join(lines) + "\n"
