"""A barrier for the throw-away suites of tests that need every xdist worker to get work.

`suitefit run` sends each worker its first unit as soon as that worker has collected (xdist's
own schedulers wait for the last one). On a tiny suite the first worker can then run it all
while the second still starts, and a test that checks what happens on two workers (thread
pins, a group beside other files) would pass or fail with the machine's load. With this
conftest every worker waits, at the end of its collection and before xdist hears of it,
until all have collected: the start xdist's own schedulers have, made explicit.
"""

from __future__ import annotations

from pathlib import Path

CONFTEST = '''
import time
from pathlib import Path
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session):
    # an xdist worker's config, not its environment: a pytest started from inside an
    # xdist worker inherits PYTEST_XDIST_WORKER without being one
    info = getattr(session.config, "workerinput", None)
    if info is None:
        return
    here = Path(str(session.config.rootpath)) / ".collected" / str(info["testrunuid"])
    here.mkdir(parents=True, exist_ok=True)
    (here / info["workerid"]).touch()
    n = int(info["workercount"])
    end = time.monotonic() + 120
    while len(list(here.iterdir())) < n and time.monotonic() < end:
        time.sleep(0.01)
'''


def start_together(tests_dir: Path) -> None:
    """Add the barrier to ``tests_dir``'s conftest.py (created if missing)."""
    conftest = tests_dir / "conftest.py"
    before = conftest.read_text() if conftest.exists() else ""
    conftest.write_text(before + "\n" + CONFTEST)
