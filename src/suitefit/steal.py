"""CPU time the host took from a run (steal), and how a run's lines say it.

On a shared cloud machine the hypervisor runs other tenants on the same physical CPUs;
the time this machine's CPUs wanted to run but did not is counted as steal. It moved
from 1% to 15% (over runs and 10 s windows) from minute to minute on the machines suitefit is developed on, and
every time measured in such a stretch (a file's, a run's) is that much slower than the
machine's own: a prediction that missed by 12% in a run the host took 15% from did
not miss for the suite's sake. The share is measured over the run (``proctree.cpu_ticks``
at its start and end) and kept in the run's meta as ``host_steal``.
"""

from __future__ import annotations

from typing import Any

NOTABLE = 0.05  # below this share of stolen CPU time a run's times are taken as the machine's own


def notable(share: Any) -> bool:
    """Whether a run's recorded ``host_steal`` is a share large enough to change its times."""
    return isinstance(share, (int, float)) and share >= NOTABLE


def steal_words(share: Any) -> str | None:
    """What the host took from a run, when it took enough to change its times; else None."""
    if not notable(share):
        return None
    return (f"the host took {share:.0%} of this machine's CPU time during the run (steal: its hypervisor "
            f"ran something else while the run wanted the CPUs): times measured here are that much slower "
            f"than the machine's own")
