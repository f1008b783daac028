"""The report in real headless Chromium: loads clean, fetches nothing, draws, shows the history's numbers.

Chromium is Debian's package, installed here on first use when it is missing
(``report_browser.ensure_chromium``); the tests skip, loudly, only where apt-get
itself is unavailable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_browser import Browser, NoChromium, ensure_chromium, png_colours

from suitefit.history import History
from suitefit.report.synthetic import Shape, make_run
from suitefit.units import fmt_mb, fmt_s

RSS_BLUE = (0x1F, 0x5F, 0xBF)
BUDGET_RED = (0xC6, 0x28, 0x28)
FILE_COLOURS = [(0x4C, 0x78, 0xA8), (0xF5, 0x85, 0x18), (0x54, 0xA2, 0x4B), (0xB2, 0x79, 0xA2),
                (0xE4, 0x57, 0x56), (0x72, 0xB7, 0xB2), (0x9D, 0x75, 0x5D), (0x6F, 0x6F, 0x9F)]


@pytest.fixture(scope="session")
def chromium() -> Path:
    try:
        return ensure_chromium()
    except NoChromium as e:
        pytest.skip(f"BROWSER TESTS NOT RUN: {e}")


@pytest.fixture(scope="session")
def browser(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run 1: planned, crashed, 300 tests on 4 workers. Run 2: 260 tests on 3 workers. Run 3: 10,000 tests."""
    path = tmp_path_factory.mktemp("hist") / "history.sqlite"
    with History(path) as h:
        make_run(h, Shape(tests=300, files=24, workers=4, planned=True, crash=True, failed=2, seed=11))
        make_run(h, Shape(tests=260, files=22, workers=3, seed=12), started=1_790_000_900.0)
        make_run(h, Shape(tests=10_000, files=500, workers=4, mean_test_s=0.2, seed=13), started=1_790_002_000.0)
    return path


def report(tmp: Path, hist: Path, *args: str) -> Path:
    out = tmp / "report.html"
    p = subprocess.run([sys.executable, "-m", "suitefit", "report", *args, "-o", str(out), "--history", str(hist)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return out


def rows(b: Browser, table_id: str) -> list[list[str]]:
    return list(b.evaluate(
        f"Array.from(document.querySelectorAll('#{table_id} tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))"
    ))


def rect(b: Browser, selector: str) -> dict[str, float]:
    return dict(b.evaluate(
        f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
        " return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })()"
    ))


def test_loads_clean_and_draws_its_charts(tmp_path: Path, hist: Path, browser: Browser) -> None:
    page = report(tmp_path, hist, "1")
    load = browser.load(page)
    assert load.errors == []
    assert load.requests == [page.resolve().as_uri()]  # the file itself and nothing else
    _, _, mem = png_colours(browser.screenshot(clip=rect(browser, "#memory svg")))
    assert len(mem) > 50  # not blank: lines, labels, anti-aliasing
    assert RSS_BLUE in mem and BUDGET_RED in mem  # the RSS line and the budget line were drawn
    _, _, lanes = png_colours(browser.screenshot(clip=rect(browser, "#workers svg")))
    assert sum(c in lanes for c in FILE_COLOURS) >= 6  # the files were drawn on the worker lanes
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1300  # nothing runs off the side
    full = browser.screenshot(full=True)
    (tmp_path / "report.png").write_bytes(full)
    if os.environ.get("SUITEFIT_REPORT_SCREENSHOT"):
        Path(os.environ["SUITEFIT_REPORT_SCREENSHOT"]).write_bytes(full)


def test_tables_hold_the_runs_numbers(tmp_path: Path, hist: Path, browser: Browser) -> None:
    browser.load(report(tmp_path, hist, "1"))
    with History(hist) as h:
        run = h.run(1)
        q = h.execute
        # files by wall time, summed over workers, straight from the files table
        want = q("SELECT path, SUM(tests), SUM(wall_s), MAX(peak_mb) FROM files WHERE run_id = 1 "
                 "GROUP BY path ORDER BY SUM(wall_s) DESC")
        got = rows(browser, "files-time")
        assert [(r[0], r[2], r[3], r[5]) for r in got] == [
            (p, f"{n:,}", fmt_s(w), "+" + fmt_mb(pk)) for p, n, w, pk in want]
        want = q("SELECT path FROM files WHERE run_id = 1 GROUP BY path ORDER BY MAX(peak_mb) DESC")
        assert [r[0] for r in rows(browser, "files-mem")] == [p for (p,) in want]
        # tests by wall time
        want = q("SELECT nodeid, wall_s, outcome FROM tests WHERE run_id = 1 ORDER BY wall_s DESC LIMIT 50")
        assert [(r[0], r[3], r[6]) for r in rows(browser, "tests-time")] == [
            (n, fmt_s(w), o) for n, w, o in want]
        # what was in flight at the peak sample (samples.t is relative, tests.started is epoch)
        (pt, pmb), = q("SELECT t, rss_mb FROM samples WHERE run_id = 1 ORDER BY rss_mb DESC LIMIT 1")
        want = q("SELECT nodeid FROM tests WHERE run_id = 1 AND started - ? <= ? AND started - ? + wall_s >= ?",
                 [run.started, pt, run.started, pt])
        assert want, "the synthetic run should have tests at its peak"
        assert sorted(r[0] for r in rows(browser, "peak-tests")) == sorted(n for (n,) in want)
        heading = browser.evaluate("document.querySelector('#memory h3').textContent")
        assert f"{fmt_mb(pmb)} RSS" in heading and fmt_s(pt) in heading
        # the summary and the crash
        summary = dict(browser.evaluate(
            "Array.from(document.querySelectorAll('#summary dt')).map(d => [d.textContent, d.nextSibling.textContent])"))
        assert summary["peak tree RSS"] == fmt_mb(run.peak_rss_mb)
        assert summary["memory budget"] == fmt_mb(run.budget_mb)
        assert summary["status"] == "crashed (exit 1)"
        journal = [json.loads(d) for (d,) in q("SELECT detail FROM events WHERE run_id = 1 AND kind = 'inflight'")]
        named = [n for d in journal for n in d["tests"]]
        assert named and [r[1] for r in rows(browser, "crash-inflight")] == named
        # fixtures: set-ups and the files sharing them
        (setups, total), = q("SELECT COUNT(*), SUM(setup_s) FROM fixtures WHERE run_id = 1 AND name = 'cpu_dist_workers'")
        (files,), = q("SELECT COUNT(*) FROM fixture_files WHERE run_id = 1 AND name = 'cpu_dist_workers'")
        fx = {r[0]: r for r in rows(browser, "fixtures")}["cpu_dist_workers"]
        assert (fx[2], fx[3], fx[8]) == (str(setups), fmt_s(total), str(files))
        # plan against actual: each unit's measured wall is its file's
        plan = run.plan_dict
        assert plan is not None
        units = {r[0]: r for r in rows(browser, "plan-units")}
        for u in plan["units"][:10]:
            (wall,), = q("SELECT SUM(wall_s) FROM files WHERE run_id = 1 AND path = ?", [u["files"][0]])
            assert units[u["name"]][2:5] == [u["files"][0], fmt_s(u["wall_s"]), fmt_s(wall)]


def test_headers_sort_and_the_chart_reads_out(tmp_path: Path, hist: Path, browser: Browser) -> None:
    load = browser.load(report(tmp_path, hist, "2"))
    assert load.errors == []

    def walls() -> list[float]:
        return [float(x) for x in browser.evaluate(
            "Array.from(document.querySelectorAll('#files-time tbody tr td:nth-child(4)')).map(c => c.dataset.v)")]

    assert walls() == sorted(walls(), reverse=True)
    browser.evaluate("document.querySelectorAll('#files-time th')[3].click()")  # first click: descending
    browser.evaluate("document.querySelectorAll('#files-time th')[3].click()")  # second: ascending
    assert walls() == sorted(walls()) and walls() != sorted(walls(), reverse=True)
    visible = "Array.from(document.querySelectorAll('#files-time tbody tr')).filter(r => !r.hidden).length"
    assert browser.evaluate(visible) == 12  # long tables fold to their first rows
    browser.evaluate("document.querySelector('#files-time + button.more').click()")
    assert browser.evaluate(visible) == len(walls()) > 12
    text = browser.evaluate(
        "(() => { const s = document.querySelector('svg.mem'), b = s.getBoundingClientRect();"
        " s.dispatchEvent(new MouseEvent('mousemove', {clientX: b.x + b.width / 2, clientY: b.y + 50, bubbles: true}));"
        " return s.querySelector('.readout').textContent; })()")
    assert text and " MiB RSS, " in text and "processes" in text
    assert browser.load(page := tmp_path / "report.html").errors == [], page  # still clean after the clicks


def test_the_checks_can_fail(tmp_path: Path, browser: Browser) -> None:
    """A control page that logs an error and fetches an image: both must be seen."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><img src='http://127.0.0.1:9/x.png'>"
                   "<script>console.error('boom'); undefinedThing();</script></body></html>")
    load = browser.load(bad)
    assert any("boom" in e for e in load.errors)
    assert any("undefinedThing" in e or "Uncaught" in e for e in load.errors)
    assert "http://127.0.0.1:9/x.png" in load.requests
    _, _, blank = png_colours(browser.screenshot(clip={"x": 400, "y": 300, "width": 300, "height": 200}))
    assert len(blank) <= 2  # an empty stretch of page is "blank" by the same measure


def test_a_10000_test_run_is_small_and_opens_fast(tmp_path: Path, hist: Path, browser: Browser) -> None:
    page = report(tmp_path, hist, "3")
    size = page.stat().st_size
    assert size < 2 * 1024 * 1024, size
    load = browser.load(page)
    assert load.errors == [] and len(load.requests) == 1
    assert load.nav_ms < 2000, load  # the bound; benchmarks/bench_report.py measures medians
    assert "showing the top 50 of 10,000 tests" in browser.evaluate("document.body.textContent")
    assert len(rows(browser, "tests-time")) == 50
    points = browser.evaluate("document.querySelector('svg.mem polyline.rss').getAttribute('points').split(' ').length")
    assert 100 < points <= 2000


def test_compare_side_by_side(tmp_path: Path, hist: Path, browser: Browser) -> None:
    page = report(tmp_path, hist, "--compare", "1", "2")
    load = browser.load(page)
    assert load.errors == [] and load.requests == [page.resolve().as_uri()]
    assert browser.evaluate("document.querySelectorAll('svg.mem polyline.rss').length") == 2
    with History(hist) as h:
        walls: dict[int, dict[str, Any]] = {
            rid: dict(h.execute("SELECT path, SUM(wall_s) FROM files WHERE run_id = ? GROUP BY path", [rid]))
            for rid in (1, 2)}
    got = rows(browser, "deltas")
    assert {r[0] for r in got} == set(walls[1]) | set(walls[2])
    for r in got:
        a, b = walls[1].get(r[0]), walls[2].get(r[0])
        assert r[1:3] == [fmt_s(a), fmt_s(b)]
        if a is not None and b is not None:
            assert r[3] == ("+" if b - a >= 0 else "-") + fmt_s(abs(b - a))


KILLED_SUITE = {
    "test_hog.py": "import time\n\ndef test_hog():\n    b = bytearray(120 * 1024 * 1024)\n"
                   "    for i in range(0, len(b), 4096):\n        b[i] = 1\n    time.sleep(0.5)\n",
    "test_plain.py": "import pytest, time\n\n@pytest.mark.parametrize('i', range(6))\n"
                     "def test_c(i):\n    time.sleep(0.05)\n",
    "test_kill.py": "import os, signal, time\n\ndef test_dies():\n    time.sleep(0.3)\n"
                    "    os.kill(os.getpid(), signal.SIGKILL)\n",
}


def test_report_of_a_real_pytest_suitefit_run(tmp_path: Path, browser: Browser) -> None:
    """pytest --suitefit -n 2 on a tiny suite with a hog and a worker that is killed, then its report."""
    for name, text in KILLED_SUITE.items():
        (tmp_path / name).write_text(text)
    hist = tmp_path / "h.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_ADDOPTS", "PYTEST_XDIST"))}
    p = subprocess.run([sys.executable, "-m", "pytest", "--suitefit", "--suitefit-history", str(hist), "-n", "2",
                        "-p", "no:randomly", "-p", "no:cacheprovider", "-q"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr  # the killed worker fails the run
    page = report(tmp_path, hist)
    load = browser.load(page)
    assert load.errors == [] and load.requests == [page.resolve().as_uri()]
    _, _, mem = png_colours(browser.screenshot(clip=rect(browser, "#memory svg")))
    assert RSS_BLUE in mem
    with History(hist) as h:
        run = h.runs(limit=1)[0]
        q = h.execute
        want = q("SELECT path, SUM(tests), SUM(wall_s), MAX(peak_mb) FROM files WHERE run_id = ? "
                 "GROUP BY path ORDER BY SUM(wall_s) DESC", [run.id])
        assert {p for p, *_ in want} >= {"test_hog.py", "test_plain.py"}
        assert [(r[0], r[2], r[3], r[5]) for r in rows(browser, "files-time")] == [
            (p, f"{n:,}", fmt_s(w), "+" + fmt_mb(pk)) for p, n, w, pk in want]
        want = q("SELECT nodeid, wall_s FROM tests WHERE run_id = ? ORDER BY wall_s DESC", [run.id])
        assert [(r[0], r[3]) for r in rows(browser, "tests-time")] == [(n, fmt_s(w)) for n, w in want]
        (pt,), = q("SELECT t FROM samples WHERE run_id = ? ORDER BY rss_mb DESC LIMIT 1", [run.id])
        want = q("SELECT nodeid FROM tests WHERE run_id = ? AND started - ? <= ? AND started - ? + wall_s >= ?",
                 [run.id, run.started, pt, run.started, pt])
        got = rows(browser, "peak-tests") if want else []
        assert sorted(r[0] for r in got) == sorted(n for (n,) in want)
        summary = dict(browser.evaluate(
            "Array.from(document.querySelectorAll('#summary dt')).map(d => [d.textContent, d.nextSibling.textContent])"))
        assert summary["peak tree RSS"] == fmt_mb(run.peak_rss_mb)
        down = [w for (w,) in q("SELECT worker FROM events WHERE run_id = ? AND kind IN ('worker_down', 'worker_died')",
                                [run.id])]
    assert down, "the plugin should have recorded the killed worker"
    crash = browser.evaluate("document.querySelector('#crash').textContent")
    assert all(w in crash for w in down)
    lanes = browser.evaluate("Array.from(document.querySelectorAll('#workers svg text')).map(t => t.textContent)")
    assert "gw0" in lanes
