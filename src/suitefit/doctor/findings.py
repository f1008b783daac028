"""A doctor finding (id, one line, evidence, fix) and the catalogue of ids users may silence."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from suitefit.errors import SuitefitError

# id -> what it means; the ids are stable (users silence them by id in pyproject.toml).
CATALOG: dict[str, str] = {
    "loadgroup-ignored": "--dist loadgroup / xdist_group marks in use, but the installed pytest + "
    "pytest-xdist do not keep a group on one worker (checked by a probe run)",
    "group-marks-without-loadgroup": "xdist_group marks in the suite, but the run distributes with "
    "another --dist mode, which ignores them",
    "n-auto-miscount": "-n auto/logical starts a different number of workers than the CPUs this "
    "machine gives the run",
    "workers-exceed-payoff": "more workers than the measured per-worker startup cost pays for",
    "blas-threads-unpinned": "-n above 1 while OMP/MKL/OpenBLAS thread pools are sized to the whole "
    "machine in every worker",
    "worker-restarts-masked": "xdist replaces crashed workers (--max-worker-restart not 0), so a "
    "crash does not stop the run",
    "cov-report-without-cov": "--cov-report given without --cov: coverage never runs, no report is "
    "written",
    "fail-under-inert": "a coverage fail_under threshold while coverage is not enabled in pytest",
    "session-pool-spread": "a session fixture that starts processes was set up on several workers",
    "file-exceeds-budget": "a test file whose own peak memory exceeds the memory budget",
    "outcome-differs": "tests whose outcome differs between recent runs",
}


@dataclass(frozen=True)
class Finding:
    id: str
    title: str  # one line: what is wrong, with this suite's numbers
    evidence: tuple[str, ...]  # where it was seen: option origins, probe results, run ids
    fix: str
    silenced: str | None = None  # the user's reason, when silenced in [tool.suitefit.doctor]

    def __post_init__(self) -> None:
        assert self.id in CATALOG, self.id

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        return d


def parse_silence(section: dict[str, Any], where: str) -> dict[str, str]:
    """``[tool.suitefit.doctor] silence = {id = "reason"}``: known ids, non-empty reasons.

    The table's keys were checked by the config schema (``suitefit.config``); the ids here.
    """
    raw = section.get("silence", {})
    if not isinstance(raw, dict):
        raise SuitefitError(f'{where}: [tool.suitefit.doctor] silence must be a table such as {{ worker-restarts-masked = "why" }}')
    out: dict[str, str] = {}
    for key, reason in raw.items():
        if key not in CATALOG:
            raise SuitefitError(f"{where}: [tool.suitefit.doctor] silence names unknown finding {key!r} (known: {', '.join(CATALOG)})")
        if not isinstance(reason, str) or not reason.strip():
            raise SuitefitError(f"{where}: [tool.suitefit.doctor] silence.{key} needs a reason (a non-empty string)")
        out[key] = reason.strip()
    return out


def apply_silence(findings: list[Finding], silence: dict[str, str]) -> list[Finding]:
    return [replace(f, silenced=silence[f.id]) if f.id in silence else f for f in findings]
