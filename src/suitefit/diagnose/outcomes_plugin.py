"""A tiny pytest plugin the diagnose verbs load with ``-p``: each test's outcome, in run order.

Active only when ``SUITEFIT_OUTCOMES_FILE`` names a file; it appends one JSON line
per finished test (and per failed collection), flushed at once so a crashed run
keeps what it finished. Under xdist it runs in the controller and names the worker
each report came from; ``seq`` counts within that worker, as the history does.
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any

import pytest

ENV = "SUITEFIT_OUTCOMES_FILE"


def _worker_of(report: Any) -> str:
    node = getattr(report, "node", None)
    gateway = getattr(node, "gateway", None)
    return str(getattr(gateway, "id", "main"))


class OutcomeRecorder:
    def __init__(self, path: str) -> None:
        self._out: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed at unconfigure)
        self._phases: dict[str, dict[str, Any]] = {}
        self._seq: dict[str, int] = {}

    def _write(self, rec: dict[str, Any]) -> None:
        self._out.write(json.dumps(rec) + "\n")
        self._out.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        st = self._phases.setdefault(report.nodeid, {"outcome": None, "duration": 0.0,
                                                     "started": time.time()})
        st["duration"] += float(getattr(report, "duration", 0.0) or 0.0)
        wasxfail = hasattr(report, "wasxfail")
        if report.when == "setup":
            if report.failed:
                st["outcome"] = "error"
            elif report.skipped:
                st["outcome"] = "xfailed" if wasxfail else "skipped"
        elif report.when == "call":
            if wasxfail:
                st["outcome"] = "xpassed" if report.passed else ("xfailed" if report.skipped else "failed")
            else:
                st["outcome"] = report.outcome
        elif report.when == "teardown":
            if report.failed:
                st["outcome"] = "error"
            worker = _worker_of(report)
            seq = self._seq.get(worker, 0)
            self._seq[worker] = seq + 1
            self._write({"nodeid": report.nodeid, "file": report.nodeid.split("::", 1)[0],
                         "outcome": st["outcome"] or "passed", "worker": worker, "seq": seq,
                         "started": st["started"], "duration": st["duration"]})
            del self._phases[report.nodeid]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._write({"collect_error": report.nodeid or ".", "detail": str(report.longrepr)[-500:]})

    def close(self) -> None:
        self._out.close()


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if path and not config.pluginmanager.has_plugin("suitefit-outcomes"):
        if hasattr(config, "workerinput"):  # an xdist worker: the controller records
            return
        config.pluginmanager.register(OutcomeRecorder(path), "suitefit-outcomes")


def pytest_unconfigure(config: pytest.Config) -> None:
    rec = config.pluginmanager.get_plugin("suitefit-outcomes")
    if isinstance(rec, OutcomeRecorder):
        rec.close()
