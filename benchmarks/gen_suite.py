"""Generate synthetic pytest suites with a known cost structure.

Each knob maps to a cost the field reports describe: a conftest whose import is
slow and holds memory (paid by every xdist worker), a session fixture that starts
a pool of helper processes (paid once per worker that uses it), memory-hog files
(a known number of MiB touched), many ordinary CPU-bound tests, and an
order-dependent provider/consumer pair. ``manifest.json`` records the truth, so
measurements can be checked against it.

    python benchmarks/gen_suite.py OUT --shape example|pool-heavy|pool-heavy-30|hog-heavy|many-small|fifty-k
"""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Shape:
    import_s: float = 0.5  # conftest import time, per process
    import_mb: int = 40  # memory the conftest import holds, per process
    pool_procs: int = 2  # helper processes the session pool fixture starts
    pool_mb: int = 40  # memory each helper holds
    pool_setup_s: float = 0.8  # pool start-up time
    pool_files: int = 4  # files that use the pool
    pool_tests: int = 4  # tests per pool file
    pool_test_ms: int = 40  # CPU per pool test
    hogs_mb: list[int] = field(default_factory=lambda: [300, 500])  # one file per entry
    files: int = 12  # ordinary files
    tests_per_file: int = 8
    test_ms: float = 30  # CPU per ordinary test
    fine_ms: bool = False  # spread test_ms in fractions of a millisecond (sub-millisecond tests)
    pair: bool = True  # order-dependent provider/consumer pair
    declare_pair_group: bool = True  # declare the pair as a group in [tool.suitefit]
    long_file_share: float = 0.0  # one more file holding this share of the ordinary work
    hang_file: bool = False  # a file whose test hangs 5x and fails when BENCH_HANG=1 (a timeout)
    # a file of this many tests that is 10x slower in the runs than in the profiling run
    # (BENCH_HANG=1: its costly path was skipped there), and the history has it short
    drift_tests: int = 0


SHAPES: dict[str, Shape] = {
    "example": Shape(),
    # The first report's shape: an expensive import and a pool used by many files.
    "pool-heavy": Shape(import_s=2.0, import_mb=80, pool_procs=2, pool_mb=150, pool_setup_s=2.0,
                        pool_files=10, pool_tests=6, pool_test_ms=60, hogs_mb=[], files=14,
                        tests_per_file=6, test_ms=40, pair=False),
    # Issue 12's own account of it, at --scale 1.0: 30 files, 8 of them share a session
    # fixture that starts 3 helper processes, one 800 MB hog, a 2 s conftest import per process.
    # The ordinary files hold a little more work than the pool group, so that a worker given
    # the whole group is not the long pole (as it is in pool-heavy, where the group holds 62%).
    "pool-heavy-30": Shape(import_s=2.0, import_mb=80, pool_procs=3, pool_mb=150, pool_setup_s=2.0,
                           pool_files=8, pool_tests=6, pool_test_ms=60, hogs_mb=[800], files=21,
                           tests_per_file=6, test_ms=40, pair=False),
    # The third report's shape: a few files that alone nearly fill the runner.
    "hog-heavy": Shape(import_s=0.5, import_mb=40, pool_procs=0, pool_files=0,
                       hogs_mb=[900, 700, 600, 500, 400], files=16, tests_per_file=6, test_ms=40,
                       pair=False),
    # The pool group alone is longer than a lane on 2 workers: it must be split (its memory twice).
    "pool-split": Shape(import_s=1.0, import_mb=60, pool_procs=2, pool_mb=150, pool_setup_s=1.5,
                        pool_files=16, pool_tests=8, pool_test_ms=80, hogs_mb=[], files=4,
                        tests_per_file=6, test_ms=40, pair=False),
    # A wrong history and a long pole: one file holds 20% of the work, and the one profiling
    # run recorded another file at 5x its cost (a test hung to a timeout and failed).
    "skewed": Shape(import_s=1.0, import_mb=60, pool_procs=0, pool_files=0, hogs_mb=[], files=20,
                    tests_per_file=6, test_ms=40, pair=False, long_file_share=0.2, hang_file=True),
    # A history that has a file short: it takes 10x its profiled time in the runs (24 tests of
    # 80 ms, 8 ms in the profile), so a plan from the profile starts it among the last, and
    # it would end alone.
    "drifted": Shape(import_s=1.0, import_mb=60, pool_procs=0, pool_files=0, hogs_mb=[], files=20,
                     tests_per_file=6, test_ms=40, pair=False, drift_tests=24),
    # Many small files behind a heavy import (the second report's guard modules).
    "many-small": Shape(import_s=1.5, import_mb=60, pool_procs=0, pool_files=0, hogs_mb=[],
                        files=60, tests_per_file=3, test_ms=25, pair=False),
    # The measuring-overhead issue's scale: ~50,000 fast tests in 300 files (0.25-1 ms of CPU
    # each, 1-2 ms with pytest's own per-test work), four behind a process pool, one hog: the
    # per-test and per-file costs of measuring dominate, as on the 47,000-test suite it came from.
    "fifty-k": Shape(import_s=0.5, import_mb=40, pool_procs=2, pool_mb=20, pool_setup_s=0.3,
                     pool_files=4, pool_tests=50, pool_test_ms=1, hogs_mb=[200], files=300,
                     tests_per_file=166, test_ms=0.5, fine_ms=True, pair=False),
}

CONFTEST = '''\
"""Generated: the costs every process pays, and the shared pool."""
import os
import subprocess
import sys
import time

import pytest

# A slow import that holds memory, paid by every process that imports this conftest.
_t = time.perf_counter()
while time.perf_counter() - _t < {import_s}:
    pass
_BALLAST = bytearray({import_mb} * 1024 * 1024)
for _i in range(0, len(_BALLAST), 4096):
    _BALLAST[_i] = 1

_HELPER = (
    "import sys, time\\n"
    "b = bytearray({pool_mb} * 1024 * 1024)\\n"
    "for i in range(0, len(b), 4096): b[i] = 1\\n"
    "print('ready', flush=True)\\n"
    "sys.stdin.read()\\n"
)


def burn(ms):
    """Spend ``ms`` of CPU time (not sleep: a lost core shows as longer wall time)."""
    end = time.process_time() + ms / 1000
    x = 0
    while time.process_time() < end:
        x += 1
    return x


@pytest.fixture(scope="session")
def cpu_pool():
    """Like the first report's distributed-worker pool: starts once, shared by its users."""
    t = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
        for _ in range({pool_procs})
    ]
    for p in procs:
        p.stdout.readline()
    left = {pool_setup_s} - (time.perf_counter() - t)
    if left > 0:
        burn(left * 1000)
    yield procs
    for p in procs:
        p.stdin.close()
        p.wait(timeout=10)
'''

ORDINARY = '''\
import pytest

from conftest import burn


@pytest.mark.parametrize("i", range({n}))
def test_compute(i):
    assert burn({ms}) >= 0
'''

POOL = '''\
import pytest

from conftest import burn


@pytest.mark.parametrize("i", range({n}))
def test_with_pool(cpu_pool, i):
    assert all(p.poll() is None for p in cpu_pool)
    burn({ms})
'''

HOG = '''\
def test_hog_{mb}mb():
    """Touches {mb} MiB, like a test that materialises a checkpoint-sized tensor."""
    block = bytearray({mb} * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    assert block[0] == 1
    del block
'''

HANG = '''\
import os

import pytest

from conftest import burn


@pytest.mark.parametrize("i", range({n}))
def test_sometimes_hangs(i):
    """In the profiling run (BENCH_HANG=1) its last test hangs to a 'timeout' and fails."""
    if os.environ.get("BENCH_HANG") and i == {n} - 1:
        burn({hang_ms})
        raise TimeoutError("Timeout: the test hung (simulated pytest-timeout)")
    burn({ms})
'''

DRIFT = '''\
import os

import pytest

from conftest import burn


@pytest.mark.parametrize("i", range({n}))
def test_slower_since_the_profile(i):
    """10x slower than in the profiling run (BENCH_HANG=1), where its costly path was skipped."""
    burn({fast_ms} if os.environ.get("BENCH_HANG") else {ms})
'''

PROVIDER = '''\
import os


def test_settings_init():
    """Sets the secret as a side effect, like the report's setup_jwt_secret."""
    os.environ["APP_SECRET"] = "s3cret"
    assert os.environ["APP_SECRET"]
'''

CONSUMER = '''\
import os


def test_token_signing():
    """Silently depends on test_settings.py having run first in this process."""
    secret = os.environ.get("APP_SECRET")
    assert secret, "APP_SECRET not set: this test depends on an earlier one"
'''


def generate(out: Path, shape: Shape, name: str = "suite") -> dict[str, object]:
    if out.exists():
        shutil.rmtree(out)
    tests = out / "tests"
    tests.mkdir(parents=True)
    (tests / "conftest.py").write_text(CONFTEST.format(**asdict(shape)))
    manifest: dict[str, object] = {"shape": asdict(shape), "name": name, "files": {}}
    files: dict[str, dict[str, object]] = {}
    for i in range(shape.files):
        # vary the work so files differ in cost, deterministically
        n = shape.tests_per_file + (i % 3) - 1 if shape.tests_per_file > 1 else 1
        ms = round(shape.test_ms * (1 + (i % 4)) / 2, 3) if shape.fine_ms else int(shape.test_ms * (1 + (i % 4)) // 2 or 1)
        p = tests / f"test_compute_{i:03d}.py"
        p.write_text(ORDINARY.format(n=n, ms=ms))
        files[f"tests/{p.name}"] = {"kind": "ordinary", "tests": n, "cpu_ms": n * ms}
    if shape.pool_procs:
        for i in range(shape.pool_files):
            p = tests / f"test_pool_{i:03d}.py"
            p.write_text(POOL.format(n=shape.pool_tests, ms=shape.pool_test_ms))
            files[f"tests/{p.name}"] = {"kind": "pool", "tests": shape.pool_tests,
                                        "cpu_ms": shape.pool_tests * shape.pool_test_ms}
    ordinary_ms = sum(int(f["cpu_ms"]) for f in files.values())  # type: ignore[call-overload]
    if shape.long_file_share > 0:
        total = ordinary_ms / (1 - shape.long_file_share)
        n = max(2, shape.tests_per_file * 4)
        ms = max(1, round(total * shape.long_file_share / n))
        (tests / "test_long_pole.py").write_text(ORDINARY.format(n=n, ms=ms))
        files["tests/test_long_pole.py"] = {"kind": "long", "tests": n, "cpu_ms": n * ms}
    if shape.hang_file:
        n, ms = shape.tests_per_file, shape.test_ms * 2
        (tests / "test_hangs_in_profile.py").write_text(
            HANG.format(n=n, ms=ms, hang_ms=5 * n * ms))
        files["tests/test_hangs_in_profile.py"] = {"kind": "hangs-in-profile", "tests": n,
                                                   "cpu_ms": n * ms, "profile_cpu_ms": (n - 1) * ms + 5 * n * ms}
    if shape.drift_tests:
        n, ms = shape.drift_tests, shape.test_ms * 2
        (tests / "test_slower_since.py").write_text(DRIFT.format(n=n, ms=ms, fast_ms=ms / 10))
        files["tests/test_slower_since.py"] = {"kind": "slower-since-profile", "tests": n,
                                               "cpu_ms": n * ms, "profile_cpu_ms": n * ms / 10}
    for mb in shape.hogs_mb:
        p = tests / f"test_hog_{mb}mb.py"
        p.write_text(HOG.format(mb=mb))
        files[f"tests/{p.name}"] = {"kind": "hog", "tests": 1, "mb": mb}
    if shape.pair:
        (tests / "test_settings.py").write_text(PROVIDER)
        (tests / "test_tokens.py").write_text(CONSUMER)
        files["tests/test_settings.py"] = {"kind": "provider", "tests": 1}
        files["tests/test_tokens.py"] = {"kind": "consumer", "tests": 1, "needs": "tests/test_settings.py"}
    manifest["files"] = files
    pyproject = textwrap.dedent(f"""\
        # Generated by benchmarks/gen_suite.py ({name}).
        [tool.pytest.ini_options]
        testpaths = ["tests"]
        pythonpath = ["tests"]
        addopts = "-p no:cacheprovider"
        """)
    if shape.pair and shape.declare_pair_group:
        pyproject += textwrap.dedent("""
            [tool.suitefit]
            # test_tokens.py relies on state test_settings.py leaves behind (found by
            # `suitefit sweep`): keep them on one worker, in this order, until fixed.
            groups = { secret = ["tests/test_settings.py", "tests/test_tokens.py"] }
            """)
    (out / "pyproject.toml").write_text(pyproject)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def copy_suite(src: Path, dst: Path) -> Path:
    """A copy of a suite to measure on: its bytecode, pytest's cache and suitefit's history stay behind."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", ".suitefit", ".pytest_cache"))
    return dst


def order_dependent(suite: Path) -> list[str]:
    """The files of a generated suite that fail on another worker than their provider (the
    consumer of its order-dependent pair), from its manifest; none for a suite without one.
    Runs with xdist's own modes leave them out."""
    manifest = suite / "manifest.json"
    if not manifest.is_file():
        return []
    return sorted(p for p, f in json.loads(manifest.read_text())["files"].items() if f["kind"] == "consumer")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="example")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply file counts by this")
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    if args.scale != 1.0:
        shape.files = max(1, round(shape.files * args.scale))
        shape.pool_files = round(shape.pool_files * args.scale)
    m = generate(args.out, shape, args.shape)
    print(f"wrote {len(m['files'])} test files to {args.out}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
