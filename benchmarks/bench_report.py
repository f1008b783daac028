"""Benchmark: the report of a synthetic 10,000-test run: its size, render time, open time in Chromium.

    .venv/bin/python benchmarks/bench_report.py [--tests 10000] [--repeat 5]

Prints medians (and ranges) of several runs. The issue's bounds: under 2 MB and
under 2 s to open in headless Chromium (the page's own loadEventEnd).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from report_browser import browser

from suitefit.history import History
from suitefit.report import load_view, render_markdown, render_run
from suitefit.report.synthetic import Shape, make_run


def _stat(xs: list[float], unit: str, scale: float = 1.0) -> str:
    return (f"median {statistics.median(xs) * scale:.1f} {unit} "
            f"(range {min(xs) * scale:.1f}-{max(xs) * scale:.1f}, n={len(xs)})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    with History(tmp / "history.sqlite") as h:
        t = time.perf_counter()
        rid = make_run(h, Shape(tests=args.tests, files=args.files, workers=args.workers, mean_test_s=0.2,
                                planned=True, crash=True, seed=7))
        print(f"synthetic run: {args.tests:,} tests, {args.files} files, {args.workers} workers, "
              f"{len(h.samples(rid)):,} samples (built in {time.perf_counter() - t:.2f} s)")
        render, md = [], []
        page = ""
        for _ in range(args.repeat):
            t = time.perf_counter()
            view = load_view(h, h.run(rid))
            page = render_run(view)
            render.append(time.perf_counter() - t)
            t = time.perf_counter()
            render_markdown(view)
            md.append(time.perf_counter() - t)
    out = tmp / "report.html"
    out.write_text(page)
    size = out.stat().st_size
    print(f"HTML size: {size / 1024 / 1024:.2f} MiB ({size:,} bytes){'  OVER 2 MB' if size >= 2_000_000 else ''}")
    print(f"read history + render HTML: {_stat(render, 'ms', 1000)}")
    print(f"render Markdown: {_stat(md, 'ms', 1000)}")
    nav, wall = [], []
    with browser(tmp / "profile") as b:
        for _ in range(args.repeat):
            load = b.load(out)
            if load.errors or len(load.requests) != 1:
                raise SystemExit(f"page not clean: errors {load.errors}, requests {load.requests}")
            nav.append(load.nav_ms / 1000)
            wall.append(load.load_s)
    print(f"open in Chromium (page loadEventEnd): {_stat(nav, 'ms', 1000)}")
    print(f"open in Chromium (navigate to load event, seen by the driver): {_stat(wall, 'ms', 1000)}")


if __name__ == "__main__":
    main()
