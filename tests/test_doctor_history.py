"""doctor's history checks on runs recorded by the real plugin (`suitefit profile`), not synthetic rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CONFTEST = '''
import os
import subprocess
import sys

import pytest

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"


@pytest.fixture(scope="session")
def pool():
    """A process pool that 'starts once': once per xdist worker, in fact."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    yield p
    p.stdin.close()
    p.wait()
'''

POOL_TEST = '''
import time

import pytest


@pytest.mark.parametrize("i", range(12))
def test_uses_pool(pool, i):
    time.sleep(0.02)
    assert pool.poll() is None
'''

BIG_TEST = '''
def test_big():
    b = bytearray(200 * 1024 * 1024)
    for i in range(0, len(b), 4096):
        b[i] = 1
'''

FLIP_TEST = '''
import os


def test_flip():
    assert not os.environ.get("SUITEFIT_TEST_FLIP")
'''


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "SUITEFIT_TEST_FLIP")}
    return subprocess.run([sys.executable, "-m", "suitefit", *args], cwd=cwd, env={**base, **env},
                          capture_output=True, text=True, timeout=300)


def test_history_findings_from_real_profiled_runs(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
        'addopts = "-p no:cacheprovider --max-worker-restart=0"\n\n'
        '[tool.suitefit]\nmemory_budget = "200MiB"\n')
    files = {"conftest.py": CONFTEST, "test_pool_a.py": POOL_TEST, "test_pool_b.py": POOL_TEST,
             "test_big.py": BIG_TEST, "test_flip.py": FLIP_TEST}
    for name, body in files.items():
        (tmp_path / "tests" / name).write_text(body)
    first = _run(tmp_path, "profile", "--", "-n", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    second = _run(tmp_path, "profile", "--", "-n", "2", SUITEFIT_TEST_FLIP="1")
    assert second.returncode == 1, second.stdout + second.stderr  # test_flip fails this time

    res = _run(tmp_path, "doctor", "--json", "--", "-n", "2")
    assert res.returncode == 1, res.stderr
    rep = json.loads(res.stdout)
    by_id = {f["id"]: f for f in rep["findings"]}
    assert {"session-pool-spread", "file-exceeds-budget", "outcome-differs"} <= set(by_id)
    # the configuration itself is sound: threads pinned, restarts off, no coverage flags
    assert not set(by_id) & {"blas-threads-unpinned", "worker-restarts-masked", "cov-report-without-cov",
                             "fail-under-inert", "loadgroup-ignored"}
    assert "pool" in by_id["session-pool-spread"]["title"]
    big = by_id["file-exceeds-budget"]["evidence"]
    assert big[0].startswith("tests/test_big.py: ") and not any("test_pool" in e for e in big)
    assert by_id["outcome-differs"]["evidence"] == [
        "tests/test_flip.py::test_flip: failed in run(s) 2 (profile); passed in run(s) 1 (profile)"]
