"""Shards across CI machines: which tests a shard keeps, its portable result file, and the merge.

Every shard collects the whole suite and keeps the files its split assigns it (a
file no shard knows goes by a stable hash), so every collected test runs in
exactly one shard. A shard records a fingerprint of everything it collected; the
merge refuses shards of different suites, a missing shard, and a test that ran
twice or never.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from suitefit.errors import SuitefitError
from suitefit.history import (
    FileRecord,
    FixtureRecord,
    History,
    TestRecord,
    WorkerRecord,
)
from suitefit.plan.shards import hash_shard

FORMAT = "suitefit-shard/1"

# CI systems' own parallelism variables: (index var, total var, index base)
CI_VARIABLES = (
    ("CI_NODE_INDEX", "CI_NODE_TOTAL", 1),  # GitLab parallel:
    ("CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),  # CircleCI parallelism
    ("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),  # Buildkite parallelism
)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        k_s, n_s = text.split("/")
        k, n = int(k_s), int(n_s)
    except ValueError:
        raise SuitefitError(f"--shard {text!r} is not K/N (for example 2/4)") from None
    check(k, n, f"--shard {text}")
    return k, n


def check(k: int, n: int, source: str) -> None:
    if n < 1:
        raise SuitefitError(f"{source}: the shard count must be at least 1, got {n}")
    if not 1 <= k <= n:
        raise SuitefitError(f"{source}: shard {k} is not in 1..{n}")


def shard_from_env(env: Mapping[str, str]) -> tuple[tuple[int, int], str] | None:
    """(k, n) 1-based from the CI's own variables, with the variable names it came from."""
    for ivar, nvar, base in CI_VARIABLES:
        if ivar in env and nvar in env:
            try:
                k, n = int(env[ivar]) - base + 1, int(env[nvar])
            except ValueError:
                raise SuitefitError(f"{ivar}={env[ivar]!r} / {nvar}={env[nvar]!r} are not integers") from None
            check(k, n, f"{ivar}/{nvar}")
            return (k, n), f"{ivar}/{nvar}"
    return None


@dataclass(frozen=True)
class ShardSpec:
    """What a shard's pytest needs to keep its own tests."""

    k: int
    n: int
    assignment: Mapping[str, int]  # known file -> shard (from the split)

    def keeps(self, file: str) -> bool:
        s = self.assignment.get(file)
        return (s if s is not None else hash_shard(file, self.n)) == self.k

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps({"k": self.k, "n": self.n, "assignment": dict(self.assignment)}))

    @classmethod
    def load(cls, path: str | Path) -> ShardSpec:
        d = json.loads(Path(path).read_text())
        return cls(int(d["k"]), int(d["n"]), {str(f): int(s) for f, s in d["assignment"].items()})


def fingerprint(nodeids: Sequence[str]) -> str:
    h = hashlib.sha256()
    for nid in sorted(nodeids):
        h.update(nid.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()[:16]


def collected_path(history_path: Path, run_id: int) -> Path:
    return history_path.parent / f"collected-{run_id}.json"


def write_collected(history_path: Path, run_id: int, nodeids: Sequence[str]) -> None:
    """Every process of a shard writes the same list; the last atomic replace wins."""
    p = collected_path(history_path, run_id)
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"fingerprint": fingerprint(nodeids), "nodeids": list(nodeids)}))
    os.replace(tmp, p)


# -- the portable result file ------------------------------------------------------------


def write_result(h: History, run_id: int, k: int, n: int, out: Path) -> dict[str, Any]:
    run = h.run(run_id)
    try:
        coll = json.loads(collected_path(h.path, run_id).read_text())
    except (OSError, ValueError):
        coll = {"fingerprint": None, "nodeids": []}
    data = {
        "format": FORMAT,
        "shard": [k, n],
        "fingerprint": coll["fingerprint"],
        "collected": coll["nodeids"],
        "run": {key: getattr(run, key) for key in (
            "status", "exit_code", "started", "finished", "wall_s", "cpu_s", "workers", "peak_rss_mb",
            "peak_pss_mb", "host", "python", "pytest_version", "xdist_version")},
        "tests": [_strip(asdict(t)) for t in h.tests(run_id)],
        "files": [_strip(asdict(f)) for f in h.files(run_id)],
        "workers": [_strip(asdict(w)) for w in h.workers(run_id)],
        "fixtures": [_strip(asdict(f)) for f in h.fixtures(run_id)],
        "fixture_files": h.fixture_files(run_id),
        "partial_files": sorted(p for _, p in h.partial_files([run_id])),
    }
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, out)
    except OSError as e:
        raise SuitefitError(f"cannot write shard result {out}: {e.strerror}") from None
    return data


def _known(cls: type, d: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A record's fields as a shard wrote them, its worker named for its shard; fields a newer
    suitefit added (a files row's forks, 2026-12-07) are left out, not an error."""
    names = {f.name for f in fields(cls)} - {"run_id"}
    return {**{k: v for k, v in d.items() if k in names}, "worker": prefix + d["worker"]}


def _strip(d: dict[str, Any]) -> dict[str, Any]:
    d.pop("run_id", None)
    return d


def read_result(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise SuitefitError(f"shard result {path}: cannot read ({e.strerror})") from None
    try:
        d = json.loads(text)
    except ValueError:
        raise SuitefitError(f"shard result {path} is truncated or not JSON") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise SuitefitError(f"{path} is not a suitefit shard result ({FORMAT})")
    try:
        k, n = (int(x) for x in d["shard"])
        for key in ("fingerprint", "collected", "run", "tests", "files", "workers", "fixtures"):
            d[key]
    except (KeyError, TypeError, ValueError):
        raise SuitefitError(f"shard result {path} is incomplete (truncated?)") from None
    d["_path"] = str(path)
    d["_k"], d["_n"] = k, n
    return d


@dataclass(frozen=True)
class Merged:
    shards: int
    tests: int
    outcomes: dict[str, int]
    shard_walls: tuple[float, ...]
    failed: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        walls = [w for w in self.shard_walls if w]
        mean = sum(walls) / len(walls) if walls else 0.0
        return {"shards": self.shards, "tests": self.tests, "outcomes": self.outcomes,
                "shard_wall_s": list(self.shard_walls), "slowest_over_mean": (max(walls) / mean) if mean else None,
                "failed": list(self.failed), "ok": self.ok}


def validate(results: Sequence[dict[str, Any]]) -> Merged:
    """One clear error for every way shards can disagree; the merged summary otherwise."""
    if not results:
        raise SuitefitError("no shard result files given")
    ns = {r["_n"] for r in results}
    if len(ns) != 1:
        raise SuitefitError(f"shard results disagree on the shard count: {sorted(ns)}")
    n = ns.pop()
    ks = [r["_k"] for r in results]
    dup = sorted({k for k in ks if ks.count(k) > 1})
    if dup:
        raise SuitefitError(f"shard {dup[0]}/{n} given twice")
    missing = sorted(set(range(1, n + 1)) - set(ks))
    if missing:
        raise SuitefitError(f"shard {'/'.join([str(missing[0]), str(n)])} is missing "
                            f"({len(missing)} of {n} missing): a shard that never reported is a failure")
    fps = {r["fingerprint"] for r in results}
    if len(fps) != 1 or None in fps:
        by = ", ".join(f"{r['_k']}/{n}: {r['fingerprint']} ({len(r['collected'])} tests)" for r in results)
        raise SuitefitError(f"shards collected different suites ({by})")
    collected = set(results[0]["collected"])
    seen: dict[str, int] = {}
    for r in sorted(results, key=lambda r: r["_k"]):
        for t in r["tests"]:
            if t["nodeid"] in seen:
                raise SuitefitError(f"{t['nodeid']} ran in shard {seen[t['nodeid']]} and in shard {r['_k']}")
            seen[t["nodeid"]] = r["_k"]
    never = sorted(collected - set(seen))
    if never:
        raise SuitefitError(f"{len(never)} collected test(s) ran in no shard, e.g. {never[0]}")
    extra = sorted(set(seen) - collected)
    if extra:
        raise SuitefitError(f"{extra[0]} ran but was not collected (shards of different suites?)")
    outcomes: dict[str, int] = {}
    failed = []
    for r in results:
        for t in r["tests"]:
            outcomes[t["outcome"]] = outcomes.get(t["outcome"], 0) + 1
            if t["outcome"] in ("failed", "error"):
                failed.append(t["nodeid"])
    walls = tuple(float(r["run"].get("wall_s") or 0.0) for r in sorted(results, key=lambda r: r["_k"]))
    return Merged(n, len(seen), outcomes, walls, tuple(sorted(failed)))


def fold_into_history(h: History, results: Sequence[dict[str, Any]]) -> list[int]:
    """Each shard becomes a run of kind "shard" (workers named s<K>:<worker>), so the next split uses it."""
    ids = []
    for r in sorted(results, key=lambda r: r["_k"]):
        k, n = r["_k"], r["_n"]
        run = r["run"]
        rid = h.new_run("shard", started=float(run.get("started") or 0.0),
                        meta={"shard": [k, n], "fingerprint": r["fingerprint"], "source": r["_path"]})
        prefix = f"s{k}:"
        h.update_run(rid, **{key: run.get(key) for key in (
            "status", "exit_code", "finished", "wall_s", "cpu_s", "workers", "peak_rss_mb", "peak_pss_mb",
            "host", "python", "pytest_version", "xdist_version")}, collected=len(r["tests"]))
        h.add_tests([TestRecord(run_id=rid, **_known(TestRecord, t, prefix)) for t in r["tests"]])
        h.add_files([FileRecord(run_id=rid, **_known(FileRecord, f, prefix)) for f in r["files"]])
        for w in r["workers"]:
            h.upsert_worker(WorkerRecord(run_id=rid, **_known(WorkerRecord, w, prefix)))
        h.add_fixtures([FixtureRecord(run_id=rid, **_known(FixtureRecord, f, prefix)) for f in r["fixtures"]])
        h.add_fixture_files(rid, [(name, f) for name, files in r.get("fixture_files", {}).items() for f in files])
        h.add_partial_files(rid, r.get("partial_files", ()))  # absent from results written before
        ids.append(rid)
    return ids
