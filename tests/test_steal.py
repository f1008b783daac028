"""What a run says of the CPU time a shared host took from it (steal)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from suitefit.steal import NOTABLE, steal_words


@pytest.mark.parametrize("share", [None, "0.2", 0.0, NOTABLE - 0.001])
def test_a_run_the_host_took_little_from_says_nothing(share: object) -> None:
    assert steal_words(share) is None


def test_a_run_the_host_took_enough_from_says_how_much() -> None:
    words = steal_words(0.123)
    assert words is not None and "12%" in words and "steal" in words


def test_suitefit_runs_closing_line_says_what_the_host_took(tmp_path: Path) -> None:
    from suitefit.history import History
    from suitefit.model import Budget, Plan, Unit
    from suitefit.run_close import RunClose

    plan = Plan(workers=1, units=(Unit("a", ("a.py",), 2.0, 80.0),), budget=Budget(2048.0, 2),
                predicted_wall_s=3.0, predicted_peak_mb=200.0, reasons=())
    with History(tmp_path / "h.sqlite") as h:
        rid = h.new_run("run", started=1_700_000_000.0)
        h.update_run(rid, status="passed", exit_code=0, wall_s=3.2, peak_rss_mb=190.0)

        def first_line(share: float) -> str:
            h.merge_run_meta(rid, host_steal=share)
            out = io.StringIO()
            RunClose(h, rid, plan, out, [], None, None).say(0)
            return out.getvalue().splitlines()[0]

        assert "(steal)" not in first_line(0.01)
        assert first_line(0.123).endswith("; the host took 12% of the CPU time (steal)")
