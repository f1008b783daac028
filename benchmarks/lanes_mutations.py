"""Mutation check for lanes: apply each known regression, run the test meant to catch it.

Usage: .venv/bin/python benchmarks/lanes_mutations.py   (every line must say RED)
Each mutation is applied to the source, the named tests run, the source restored.
"""

import pathlib
import subprocess
import sys

R = pathlib.Path(__file__).resolve().parents[1]
M = [
    (
        "launch keeps our stdout/stderr (stops detaching)",
        "src/suitefit/lanes/launch.py",
        "            stdout=log_fd,\n            stderr=log_fd,",
        "            stdout=None,\n            stderr=None,",
        "tests/test_lanes.py::test_start_returns_at_once_and_the_lane_is_fully_detached",
    ),
    (
        "launch without its own session",
        "src/suitefit/lanes/launch.py",
        "            start_new_session=True,",
        "            start_new_session=False,",
        "tests/test_lanes.py::test_start_returns_at_once_and_the_lane_is_fully_detached",
    ),
    (
        "missing status read as success",
        "src/suitefit/lanes/collect.py",
        "            d.name, state.NEVER_REPORTED, elapsed,",
        "            d.name, state.PASSED, elapsed,",
        "tests/test_lanes.py::test_supervisor_killed_means_never_reported_not_passed",
    ),
    (
        "signalled lane reported as passing",
        "src/suitefit/lanes/supervisor.py",
        "        if rc < 0:\n            return self._finish(state.SIGNALLED",
        "        if rc < 0:\n            return self._finish(state.PASSED",
        "tests/test_lanes.py::test_exit_status_signal_and_log_are_reported tests/test_lanes.py::test_lane_killed_from_outside_is_a_failure",
    ),
    (
        "uncollected lane ignored on restart",
        "src/suitefit/lanes/launch.py",
        "        if d.is_launched() and not d.is_collected():",
        "        if False:",
        "tests/test_lanes.py::test_lane_launched_but_never_collected_is_caught",
    ),
    (
        "never-started named lane skipped",
        "src/suitefit/lanes/collect.py",
        '            missing.append(LaneResult(n, state.NEVER_STARTED, None, None, None, "no launch record"))',
        "            pass",
        "tests/test_lanes.py::test_lane_launched_but_never_collected_is_caught",
    ),
    (
        "audit forgets lanes never waited",
        "src/suitefit/workflow_audit.py",
        "    for n in started:\n",
        "    for n in []:\n",
        "tests/test_workflow_audit.py::test_planted_fixture_reports_exactly_the_planted_findings",
    ),
    (
        "audit ignores paths filters",
        "src/suitefit/workflow_audit.py",
        "        if self.paths is not None:\n            return path_filter_matches(self.paths, changed)",
        "        if False:\n            return path_filter_matches(self.paths, changed)",
        "tests/test_workflow_audit.py::test_planted_fixture_reports_exactly_the_planted_findings",
    ),
    (
        "timeout kills only the leader, not the group",
        "src/suitefit/lanes/supervisor.py",
        "            os.killpg(self.proc.pid, sig)",
        "            os.kill(self.proc.pid, sig)",
        "tests/test_lanes.py::test_timeout_kills_the_whole_process_group",
    ),
]
survivors = 0
for label, f, old, new, tests in M:
    p = R / f
    s = p.read_text()
    assert old in s, (label, old)
    p.write_text(s.replace(old, new, 1))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", *tests.split()],
            cwd=R,
            capture_output=True,
            text=True,
            timeout=120,
        )
        tail = r.stdout.strip().splitlines()[-1]
        print(f"{'RED  ' if r.returncode else 'GREEN'} {label}: {tail}")
        survivors += r.returncode == 0
    finally:
        p.write_text(s)

sys.exit(1 if survivors else 0)
