"""One run's numbers, gathered from the history: the terminal summary, `profile --json`
and the report all read this, so no verb re-derives another's figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from suitefit.history import History
from suitefit.median import median
from suitefit.rules import DEFAULT_RULES
from suitefit.units import fmt_mb


@dataclass(frozen=True)
class FileSummary:
    """A file's row in the end-of-run summary."""

    path: str
    wall_s: float
    cpu_s: float
    peak_mb: float
    tests: int
    workers: tuple[str, ...]


@dataclass(frozen=True)
class FixtureSummary:
    """A fixture's row in the end-of-run summary."""

    name: str
    scope: str
    setup_s: float  # median over the workers that set it up
    teardown_s: float | None
    procs: int  # per setup (max)
    mb: float  # per setup (max)
    setups: int  # how many workers set it up
    files: tuple[str, ...]

    @property
    def expensive(self) -> bool:
        # the planner's own test, so the summary names the fixtures the plan groups by
        r = DEFAULT_RULES
        return self.setup_s >= r.setup_s or self.procs >= r.procs or self.mb >= r.mb


def pss_words(peak_pss_mb: float | None, meta: Mapping[str, Any]) -> str | None:
    """What a run's PSS says beside its peak RSS, as the sampler read it: PSS walks page
    tables, so it is read on some samples only (``measure/pssgate.py``), and the largest of
    them is no peak unless one was read at the RSS peak. None: never read. Runs recorded
    before the sampler said where it read PSS: the largest read, as they showed it."""
    if peak_pss_mb is None:
        return None
    at_peak = meta.get("pss_at_peak_mb")
    if at_peak is not None:
        return f"{fmt_mb(float(at_peak))} at that peak"
    reads = meta.get("pss_reads")
    if reads is None:
        return fmt_mb(peak_pss_mb)
    return f"{fmt_mb(peak_pss_mb)}, the largest of {int(reads)} read(s), none at the RSS peak"


# pytest's own order of its summary line (``_pytest.terminal.KNOWN_TYPES``); other keys follow.
PYTEST_ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "error")


def pytest_outcomes(stats: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    """Counts as pytest's summary line counts them: every report pytest files under a key.

    That is reports, not tests: a module skipped at collection is one "skipped", a test that
    passes and then errors in teardown is one "passed" and one "error", a file that fails to
    collect is one "error". Plugins that mark reports ``count_towards_summary = False``
    (reruns) are left out, as pytest leaves them out.
    """
    keys = [k for k in PYTEST_ORDER if k in stats] + [k for k in stats if k and k not in PYTEST_ORDER]
    out = {}
    for k in keys:
        n = sum(1 for r in stats[k] if getattr(r, "count_towards_summary", True))
        if n:
            out[k] = n
    return out


def outcome_words(outcomes: Mapping[str, int]) -> str:
    """``24 failed, 2 passed, 3 errors``: pytest's own words and order."""
    def noun(k: str, n: int) -> str:
        if k not in ("error", "warnings"):
            return k
        k = k.replace("warnings", "warning")
        return k + "s" if n != 1 else k

    keys = [k for k in PYTEST_ORDER if k in outcomes] + [k for k in outcomes if k not in PYTEST_ORDER]
    return ", ".join(f"{outcomes[k]:,} {noun(k, outcomes[k])}" for k in keys if outcomes[k]) or "no tests ran"


def run_outcomes(run: Any) -> dict[str, int] | None:
    """The run's counts as pytest counted them (recorded since suitefit counts that way), else None."""
    got = run.meta_dict.get("outcomes")
    return {str(k): int(v) for k, v in got.items()} if isinstance(got, dict) else None


@dataclass(frozen=True)
class FailedTest:
    """A test that failed or errored (or a file that failed to collect), with its short reason."""

    nodeid: str
    file: str
    worker: str  # "collection" for a file that did not collect
    outcome: str  # failed, error, collect-error
    reason: str | None
    start: float  # seconds since the run started: the listing is in the order they happened


SHOWN_FAILURES = 20  # listed in the terminal summary and the Markdown summary; the rest are counted


def failed_tests(h: History, run_id: int, t0: float) -> list[FailedTest]:
    """Every failure of a run, in the order it happened: collection errors, failed and errored tests."""
    out = [FailedTest(e.nodeid or ".", (e.nodeid or ".").split("::", 1)[0], "collection", "collect-error",
                      e.detail_dict.get("reason"), e.t - t0) for e in h.events(run_id, "collect_error")]
    out += [FailedTest(str(n), str(f), str(w), str(o), r, float(s) - t0) for n, f, w, o, r, s in h.execute(
        "SELECT nodeid, file, worker, outcome, reason, started FROM tests "
        "WHERE run_id = ? AND outcome IN ('failed', 'error')", [run_id])]
    return sorted(out, key=lambda x: x.start)


def file_summaries(h: History, run_id: int) -> list[FileSummary]:
    agg: dict[str, dict[str, Any]] = {}
    for r in h.files(run_id):
        a = agg.setdefault(r.path, {"wall": 0.0, "cpu": 0.0, "peak": 0.0, "tests": 0, "workers": []})
        a["wall"] += r.wall_s
        a["cpu"] += r.cpu_s
        a["peak"] = max(a["peak"], r.peak_mb)
        a["tests"] += r.tests
        a["workers"].append(r.worker)
    return [
        FileSummary(p, a["wall"], a["cpu"], a["peak"], a["tests"], tuple(sorted(set(a["workers"]))))
        for p, a in agg.items()
    ]


def fixture_summaries(h: History, run_id: int) -> list[FixtureSummary]:
    users = h.fixture_files(run_id)
    by_name: dict[tuple[str, str], list[Any]] = {}
    for r in h.fixtures(run_id):
        by_name.setdefault((r.name, r.scope), []).append(r)
    out = []
    for (name, scope), rows in by_name.items():
        tds = [r.teardown_s for r in rows if r.teardown_s is not None]
        out.append(
            FixtureSummary(
                name=name,
                scope=scope,
                setup_s=median(r.setup_s for r in rows),
                teardown_s=median(tds) if tds else None,
                procs=max(r.procs for r in rows),
                mb=max(r.mb for r in rows),
                setups=len({r.worker for r in rows}),
                files=tuple(users.get(name, ())),
            )
        )
    out.sort(key=lambda f: (f.procs, f.setup_s, f.mb), reverse=True)
    return out


def run_summary(h: History, run_id: int) -> dict[str, Any]:
    """The machine-readable summary (`suitefit profile --json`)."""
    run = h.run(run_id)
    tests = h.tests(run_id)
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
    files = sorted(file_summaries(h, run_id), key=lambda f: f.peak_mb, reverse=True)
    return {
        "run_id": run.id,
        "kind": run.kind,
        "status": run.status,
        "exit_code": run.exit_code,
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "peak_rss_mb": run.peak_rss_mb,
        "peak_pss_mb": run.peak_pss_mb,  # the largest PSS read: a peak only where it was read at one
        "pss_at_peak_mb": run.meta_dict.get("pss_at_peak_mb"),  # read at the RSS peak; None: none was
        "pss_reads": run.meta_dict.get("pss_reads"),
        "peak_procs": run.peak_procs,
        "threshold_mb": run.threshold_mb,
        "secs_above_threshold": run.secs_above,
        "tests": {"total": len(tests), **counts},  # per test row: its folded outcome
        "outcomes": run_outcomes(run),  # as pytest's summary line counts (reports, not tests)
        "files": [
            {"path": f.path, "wall_s": f.wall_s, "cpu_s": f.cpu_s, "peak_mb": f.peak_mb,
             "tests": f.tests, "workers": list(f.workers)}
            for f in files
        ],
        "workers": [
            {"id": w.worker, "pid": w.pid, "startup_s": w.startup_s, "baseline_mb": w.baseline_mb,
             "peak_rss_mb": w.peak_rss_mb, "tests": w.tests, "status": w.status}
            for w in h.workers(run_id)
        ],
        "fixtures": [
            {"name": f.name, "scope": f.scope, "setup_s": f.setup_s, "teardown_s": f.teardown_s,
             "procs": f.procs, "mb": f.mb, "setups": f.setups, "files": list(f.files),
             "expensive": f.expensive}
            for f in fixture_summaries(h, run_id)
        ],
    }


def release_lines(h: History, run_id: int) -> list[str]:
    """One line per fixture released early (``release.py``) and per release not carried out.

    Here, not in ``release.py``: every measured run's summary asks, and only a planned run
    needs that module.
    """
    out = []
    for e in h.events(run_id, "fixture_released"):
        d = e.detail_dict
        how = f"in {d.get('seconds', 0):.2f} s" if d.get("ok") else f"FAILED: {d.get('error')}"
        out.append(f"released fixture {d.get('fixture')} on {e.worker} after {e.nodeid} {how}")
    for e in h.events(run_id, "fixture_kept"):
        d = e.detail_dict
        out.append(f"kept fixture {d.get('fixture')} on {e.worker} after {e.nodeid}: {d.get('reason')}")
    return out
