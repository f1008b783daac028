"""pytest's exit codes, named, and the one line that explains an exit that is neither pass nor fail.

Shared by the CLI (which runs pytest as a child) and the plugin (which says it from
inside pytest when `suitefit run` has handed its process over), so it imports neither
click nor pytest.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INTERNAL, EXIT_USAGE, EXIT_NO_TESTS = 0, 1, 2, 3, 4, 5


def explain_exit(rc: int, run_status: str | None) -> str | None:
    """One line for a pytest exit that is not a plain pass/fail; None when there is nothing to say."""
    if rc == EXIT_NO_TESTS:
        return "pytest collected no tests (exit 5): nothing was measured"
    if run_status == "collect-error":
        return f"pytest stopped before the tests ran (exit {rc}): collection failed, see its output above"
    if rc == EXIT_INTERRUPTED:  # -x/--maxfail under xdist, Ctrl-C: tests ran, the rest did not
        return f"pytest was interrupted (exit {rc}: -x/--maxfail, Ctrl-C or a collection error), see its output above"
    if rc == EXIT_USAGE:
        return "pytest rejected its arguments (exit 4), see its output above"
    if rc == EXIT_INTERNAL:
        return "pytest hit an internal error (exit 3), see its output above"
    if rc < 0:
        return f"pytest was killed by signal {-rc}"
    if rc not in (EXIT_OK, EXIT_FAILED):
        return f"pytest exited with {rc}"
    return None


def describe_exit(code: int | None) -> str:
    """A child process's end, as ``Popen.returncode`` gives it: "signal 9 SIGKILL", "exit code 1"."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        import signal

        try:
            return f"signal {-code} {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
