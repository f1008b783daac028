"""``suitefit doctor``: the silent traps in a suite's parallel set-up, each with evidence and a fix.

Flow: ask the target interpreter's pytest what the options mean (``target_facts.py``),
read what pytest does not (coverage config, sources, machine, history), run the
checks, apply the user's silences. Nothing here runs the project's tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suitefit import timing
from suitefit.budget import detect_budget
from suitefit.config import load_config
from suitefit.doctor.checks import CHECKS, Context
from suitefit.doctor.config_reader import TargetFacts, coverage_fail_under, scan_group_marks
from suitefit.doctor.findings import CATALOG, Finding, apply_silence, parse_silence
from suitefit.doctor.machine import cpu_facts
from suitefit.doctor.probe import ProbeResult, probe
from suitefit.errors import SuitefitError
from suitefit.history import History

__all__ = ["CATALOG", "Finding", "Report", "diagnose", "read_target"]

FACTS_SCRIPT = Path(__file__).with_name("target_facts.py")
FACTS_TIMEOUT_S = 120.0
PROBE_CACHE = "doctor-probe.json"


@dataclass
class Report:
    project: Path
    facts: TargetFacts
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    probe: ProbeResult | None = None
    history: Path | None = None
    wall_s: float = 0.0

    @property
    def active(self) -> list[Finding]:
        return [f for f in self.findings if f.silenced is None]

    @property
    def exit_code(self) -> int:
        return 1 if self.active else 0

    def to_json(self) -> dict[str, Any]:
        f = self.facts
        return {
            "project": str(self.project),
            "python": f.get("python"),
            "pytest": f.get("pytest"),
            "xdist": f.get("xdist"),
            "inifile": f.get("inipath"),
            "workers": f.workers,
            "dist": f.dist,
            "findings": [x.to_json() for x in self.findings],
            "notes": self.notes,
            "probe": self.probe.to_json() if self.probe else None,
            "history": str(self.history) if self.history else None,
            "wall_s": round(self.wall_s, 3),
            "exit_code": self.exit_code,
        }


def read_target(python: str, project: Path, pytest_args: Sequence[str]) -> TargetFacts:
    """Ask ``python``'s pytest what the suite's options are; one clear line when it cannot say."""
    found = shutil.which(python) if os.sep not in python else python
    if not found or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        raise SuitefitError(f"--python {python}: no such executable")
    python = found
    with tempfile.TemporaryDirectory(prefix="suitefit-doctor-") as tmp:
        out = Path(tmp) / "facts.json"
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            proc = subprocess.run(
                [python, str(FACTS_SCRIPT), str(out), *pytest_args], cwd=project, env=env,
                capture_output=True, text=True, timeout=FACTS_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise SuitefitError(f"{python}: reading the pytest configuration took over "
                                f"{FACTS_TIMEOUT_S:.0f} s (a slow conftest import?)", 3) from None
        except OSError as e:
            raise SuitefitError(f"--python {python}: cannot run it: {e.strerror}") from None
        try:
            raw = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise SuitefitError(f"{python} could not read the pytest configuration (exit "
                                f"{proc.returncode}): {tail}") from None
    err = raw.get("error")
    if err == "no-pytest":
        raise SuitefitError(f"{python} has no pytest installed ({raw.get('message')}): point --python "
                            "at the interpreter that runs your tests")
    if err == "usage":
        msg = str(raw.get("message"))
        hint = (f"; is the plugin that defines it installed in {python}?"
                if "unrecognized arguments" in msg else "")
        raise SuitefitError(f"pytest rejects the suite's configuration: {msg}{hint}")
    if err:
        raise SuitefitError(f"pytest could not load the suite's configuration: {raw.get('message')}")
    return TargetFacts(raw)


def diagnose(project: Path, python: str | None = None, pytest_args: Sequence[str] = (),
             *, refresh_probe: bool = False, history_path: Path | None = None) -> Report:
    """Gather the facts and run every check; raises ``SuitefitError`` on bad input."""
    t0 = timing.perf_counter()
    project = project.resolve()
    config = load_config(project)
    where = str(config.pyproject) if config.pyproject else "pyproject.toml"
    silence = parse_silence(config.section("doctor"), where)
    python = python or sys.executable
    facts = read_target(python, project, pytest_args)
    python = str(facts.get("python") or python)  # as the target names itself (PATH lookups resolved)
    rootpath = Path(str(facts.get("rootpath") or project))
    budget = detect_budget(cfg=config)  # the planner's budget: config, else cgroup/RAM minus margin
    history_path = history_path or config.history_path
    history = History(history_path, create=False) if history_path.is_file() else None
    cache = history_path.parent / PROBE_CACHE

    def run_probe() -> ProbeResult:
        return probe(python, str(facts.get("pytest")), str(facts.get("xdist")), cache, refresh_probe)

    ctx = Context(
        project=project, facts=facts, cpus=cpu_facts(), scan=scan_group_marks(rootpath, facts.get("collect")),
        fail_under=coverage_fail_under(project, facts.get("cov_config")), history=history,
        history_path=history_path, budget_mb=budget.memory_mb, budget_source=budget.memory_source, run_probe=run_probe)
    if history is None:
        ctx.notes.append(f"history checks skipped: no history at {history_path} "
                         "(run `suitefit profile` to record one)")
    if not facts.workers:
        ctx.notes.append("-n is not set in the configuration, so the worker checks (BLAS threads, "
                         "worker restarts, payoff) were skipped; pass your CI's options after `--` "
                         "to check them: suitefit doctor -- -n 4")
    if ctx.scan.truncated:
        ctx.notes.append(f"xdist_group scan stopped after {ctx.scan.scanned} files")
    findings: list[Finding] = []
    try:
        for check in CHECKS:
            findings += check(ctx)
    finally:
        if history is not None:
            history.close()
    return Report(project, facts, apply_silence(findings, silence), ctx.notes, ctx.probe,
                  history_path if history else None, timing.perf_counter() - t0)
