"""The loadgroup probe: does this interpreter's pytest + xdist keep an xdist_group on one worker?

A version table cannot answer that (pytest-xdist issue #1386 broke it from the pytest
side), so the probe asks the installed pair: a throw-away suite in a temp folder, run
with ``-n 2 --dist loadgroup`` under the user's interpreter; each test writes the
worker it ran on (``PYTEST_XDIST_WORKER``). The answer is cached in the history
folder, keyed by the interpreter and the pytest/xdist versions.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from suitefit import timing

GROUPED = 8  # tests in the group: with 2 workers, load scheduling splits them if groups are ignored
FREE = 8
TIMEOUT_S = 120.0

_PROBE_TEST = '''
import os
from pathlib import Path

import pytest

OUT = Path(__file__).parent / "where"


def _record(name):
    OUT.mkdir(exist_ok=True)
    (OUT / name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))


@pytest.mark.xdist_group("probe")
@pytest.mark.parametrize("i", range({grouped}))
def test_grouped(i):
    _record("grouped-%d" % i)


@pytest.mark.parametrize("i", range({free}))
def test_free(i):
    _record("free-%d" % i)
'''


@dataclass(frozen=True)
class ProbeResult:
    honoured: bool | None  # None: the probe could not tell (see detail)
    grouped_on: dict[str, int]  # worker -> grouped tests it ran
    detail: str  # one line: what was seen
    python: str
    pytest: str
    xdist: str
    wall_s: float
    measured_at: float  # epoch seconds
    cached: bool = False

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def cache_key(python: str, pytest_version: str, xdist_version: str) -> str:
    real = os.path.abspath(python)  # a venv is its own bin/python, even if it links to one base
    return hashlib.sha256(f"{real}\n{pytest_version}\n{xdist_version}".encode()).hexdigest()[:16]


def _load_cache(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cached_probe(cache: Path, python: str, pytest_version: str, xdist_version: str) -> ProbeResult | None:
    entry = _load_cache(cache).get(cache_key(python, pytest_version, xdist_version))
    if not isinstance(entry, dict):
        return None
    try:
        res = ProbeResult(**{**entry, "cached": True})  # type: ignore[arg-type]
    except TypeError:
        return None
    return res if res.honoured is not None else None


def _store(cache: Path, result: ProbeResult) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        data = _load_cache(cache)
        data[cache_key(result.python, result.pytest, result.xdist)] = result.to_json()
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(cache)
    except OSError:
        pass  # a cache that cannot be written only costs the next run a probe


def run_probe(python: str, pytest_version: str, xdist_version: str) -> ProbeResult:
    """Run the throw-away grouped suite under ``python``; never touches the user's project."""
    t0 = timing.perf_counter()
    if os.sep in python:
        python = os.path.abspath(python)  # the probe runs in its own folder
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_AUTO_NUM_WORKERS", "PYTEST_PLUGINS")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Only the pytest + xdist pair is under test: other plugins stay out (faster, and a user's
    # plugin cannot break or colour the answer). Loading them all tripled the probe's time here.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"

    def result(honoured: bool | None, on: dict[str, int], detail: str) -> ProbeResult:
        return ProbeResult(honoured, on, detail, python, pytest_version, xdist_version,
                           round(timing.perf_counter() - t0, 3), timing.wall())

    with tempfile.TemporaryDirectory(prefix="suitefit-probe-") as tmp:
        folder = Path(tmp)
        (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        (folder / "test_probe.py").write_text(_PROBE_TEST.format(grouped=GROUPED, free=FREE), encoding="utf-8")
        cmd = [python, "-m", "pytest", "-p", "xdist", "-n", "2", "--dist", "loadgroup", "-q",
               "-p", "no:cacheprovider", "--max-worker-restart=0", "test_probe.py"]
        try:
            proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return result(None, {}, f"the probe run did not finish in {TIMEOUT_S:.0f} s")
        except OSError as e:
            return result(None, {}, f"cannot start {python}: {e.strerror}")
        where = folder / "where"
        seen = {p.name: p.read_text() for p in where.iterdir()} if where.is_dir() else {}
        grouped = Counter(w for name, w in seen.items() if name.startswith("grouped-"))
        free = Counter(w for name, w in seen.items() if name.startswith("free-"))
        on = dict(sorted(grouped.items()))
        if proc.returncode != 0 or sum(grouped.values()) != GROUPED:
            tail = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or ["no output"])[-1]
            return result(None, on, f"the probe run failed (exit {proc.returncode}): {tail}")
        if "none" in grouped or len(set(grouped) | set(free)) < 2:
            return result(None, on, "the probe run did not use 2 xdist workers, so grouping could not be seen")
        where_txt = ", ".join(f"{w} ({n})" for w, n in on.items())
        if len(grouped) == 1:
            return result(True, on, f"{GROUPED} tests marked xdist_group('probe') all ran on {where_txt} "
                          f"with -n 2 --dist loadgroup")
        return result(False, on, f"{GROUPED} tests marked xdist_group('probe') ran on {where_txt} "
                      f"with -n 2 --dist loadgroup")


def probe(python: str, pytest_version: str, xdist_version: str, cache: Path | None,
          refresh: bool = False) -> ProbeResult:
    """The probe's answer, from the cache when this interpreter + versions were probed before."""
    if cache is not None and not refresh:
        hit = cached_probe(cache, python, pytest_version, xdist_version)
        if hit is not None:
            return hit
    res = run_probe(python, pytest_version, xdist_version)
    if cache is not None and res.honoured is not None:
        _store(cache, res)
    return res
