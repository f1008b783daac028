"""The ``suitefit`` command's entry point (the click application is ``cli.app``).

Light on purpose: `suitefit run` forks here, before click and the verbs are imported,
so that the process that becomes pytest imports pytest while its child parses the
command line and plans (``cli.handover``); every other verb goes straight to the app.
"""

from __future__ import annotations

import sys
from typing import Any


def main(argv: list[str] | None = None) -> Any:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["run"]:
        from suitefit.cli.handover import run_beside_pytest

        return run_beside_pytest(args)
    from suitefit.cli.app import main as app_main

    return app_main(args)

