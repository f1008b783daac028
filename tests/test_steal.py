"""What a run says of the CPU time a shared host took from it (steal)."""

from __future__ import annotations

import pytest

from suitefit.steal import NOTABLE, steal_words


@pytest.mark.parametrize("share", [None, "0.2", 0.0, NOTABLE - 0.001])
def test_a_run_the_host_took_little_from_says_nothing(share: object) -> None:
    assert steal_words(share) is None


def test_a_run_the_host_took_enough_from_says_how_much() -> None:
    words = steal_words(0.123)
    assert words is not None and "12%" in words and "steal" in words
