"""A generated suite with planted order faults, for the sweep and bisect tests.

Files run alphabetically in one process, so each polluter/provider runs before
its victim/consumer. What is planted (and nothing else):

- victim ``test_e_env_victim.py::test_mode_is_normal``: polluted by
  ``test_c_env_polluter.py::test_switches_mode`` (an environment variable left set);
- victim ``test_h_state_victim.py::test_registry_empty``: polluted by
  ``test_f_state_polluter.py::test_registers`` (a module-level list appended to);
- dependent ``test_b_jwt_client.py::test_client_token`` (and its sibling): its fixture
  reads the secret that ``test_a_jwt_setup.py::test_setup_secret`` sets, as in the
  field report;
- flaky ``test_z_flaky.py::test_alternates``: fails on every other invocation
  (a counter file under a lock), so two repeats alone always differ.

Fillers are plain passing tests in the polluters' files, so the prefixes have
both file and test structure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

VICTIMS = {
    "test_e_env_victim.py::test_mode_is_normal": "test_c_env_polluter.py::test_switches_mode",
    "test_h_state_victim.py::test_registry_empty": "test_f_state_polluter.py::test_registers",
}
DEPENDENTS = {
    "test_b_jwt_client.py::test_client_token": "test_a_jwt_setup.py::test_setup_secret",
    "test_b_jwt_client.py::test_admin_token": "test_a_jwt_setup.py::test_setup_secret",
}
FLAKY = {"test_z_flaky.py::test_alternates"}


def _filler(n: int) -> str:
    return "\n".join(f"def test_fill_{i}():\n    assert {i} + 1 == {i + 1}\n" for i in range(n))


def write_planted_suite(root: Path) -> Path:
    files = {
        "shared_state.py": "REGISTRY = []\n",
        "test_a_jwt_setup.py": """
            import os

            def test_setup_secret():
                os.environ["SF_JWT_SECRET"] = "s3cret"

            def test_other():
                assert True
        """,
        "test_b_jwt_client.py": """
            import os
            import pytest

            @pytest.fixture
            def token():
                return "tok-" + os.environ["SF_JWT_SECRET"]

            def test_client_token(token):
                assert token.startswith("tok-")

            def test_admin_token(token):
                assert token.endswith("cret")

            def test_no_token_needed():
                assert True
        """,
        "test_c_env_polluter.py": """
            import os

            def test_before():
                assert True

            def test_switches_mode():
                os.environ["SF_MODE"] = "weird"

            def test_after():
                assert True
        """,
        "test_e_env_victim.py": """
            import os

            def test_unrelated():
                assert True

            def test_mode_is_normal():
                assert os.environ.get("SF_MODE", "normal") == "normal"
        """,
        "test_f_state_polluter.py": """
            import shared_state

            def test_reads():
                assert isinstance(shared_state.REGISTRY, list)

            def test_registers():
                shared_state.REGISTRY.append("leaked")
        """,
        "test_h_state_victim.py": """
            import shared_state

            def test_registry_empty():
                assert shared_state.REGISTRY == []
        """,
        "test_z_flaky.py": """
            import fcntl
            from pathlib import Path

            COUNTER = Path(__file__).with_name(".flaky_counter")

            def test_alternates():
                with open(COUNTER.with_suffix(".lock"), "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    n = int(COUNTER.read_text()) if COUNTER.exists() else 0
                    COUNTER.write_text(str(n + 1))
                assert n % 2 == 0, f"invocation {n} fails"
        """,
    }
    fillers = {"test_c_env_polluter.py": 3, "test_f_state_polluter.py": 3}
    for name, body in files.items():
        text = textwrap.dedent(body).lstrip()
        if name in fillers:
            text += "\n\n" + _filler(fillers[name])
        (root / name).write_text(text)
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = \"-p no:cacheprovider\"\n")
    return root


# -- a suite whose serial (alphabetical) order passes and whose planned order fails ------------
#
# `suitefit run` orders files longest first. The consumer's file is the longest, so it runs
# before its provider (b); the polluter's file (g) is longer than its victim's (e), so it runs
# before it. The flaky test runs after both (it is short), so no replay of theirs includes it.
PAIRS = {
    "test_d_consumer.py::test_reads_secret": ("provider", "test_b_provider.py::test_sets_secret"),
    "test_e_victim.py::test_mode_is_normal": ("polluter", "test_g_polluter.py::test_switches_mode"),
}
PAIRS_FLAKY = "test_z_flaky.py::test_alternates"
SESSION_LOG = ".pytest_sessions"  # one line per pytest session: its arguments (counts every run)


def write_pairs_suite(root: Path) -> Path:
    files = {
        "conftest.py": """
            import json
            import sys
            from pathlib import Path

            def pytest_sessionstart(session):
                if hasattr(session.config, "workerinput"):
                    return  # an xdist worker: its controller is the session that counts
                with open(Path(__file__).with_name(".pytest_sessions"), "a") as fh:
                    fh.write(json.dumps(sys.argv[1:]) + "\\n")
        """,
        "test_a_fill.py": _filler(3),
        "test_b_provider.py": textwrap.dedent("""
            import os

            def test_sets_secret():
                os.environ["SF_SECRET"] = "s3cret"
        """) + "\n" + _filler(2),
        "test_c_fill.py": _filler(3),
        "test_d_consumer.py": """
            import os
            import time
            import pytest

            @pytest.fixture
            def secret():
                return os.environ["SF_SECRET"]

            def test_reads_secret(secret):
                assert secret == "s3cret"

            def test_slow():
                time.sleep(0.5)
        """,
        "test_e_victim.py": """
            import os
            import time

            def test_mode_is_normal():
                assert os.environ.get("SF_MODE", "normal") == "normal"

            def test_slow():
                time.sleep(0.12)
        """,
        "test_f_fill.py": _filler(3),
        "test_g_polluter.py": textwrap.dedent("""
            import os
            import time

            def test_before():
                time.sleep(0.3)

            def test_switches_mode():
                os.environ["SF_MODE"] = "weird"
        """) + "\n" + _filler(2),
        "test_h_fill.py": _filler(3),
        "test_z_flaky.py": """
            import fcntl
            from pathlib import Path

            COUNTER = Path(__file__).with_name(".flaky_counter")

            def test_alternates():
                with open(COUNTER.with_suffix(".lock"), "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    n = int(COUNTER.read_text()) if COUNTER.exists() else 0
                    COUNTER.write_text(str(n + 1))
                assert n % 2 == 0, f"invocation {n} fails"
        """,
    }
    for name, body in files.items():
        (root / name).write_text(textwrap.dedent(body).lstrip())
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = \"-p no:cacheprovider\"\n")
    return root
