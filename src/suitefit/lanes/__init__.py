"""Background lanes: short CI jobs run detached beside a job's foreground work.

``spec`` parses lanes, ``launch`` starts their supervisors detached, ``supervisor``
runs one lane and writes its exit status, ``collect`` waits and judges, ``venvs``
gives each lane its own cached virtualenv, ``state`` is the on-disk layout.
"""

from suitefit.lanes.collect import LaneResult
from suitefit.lanes.spec import LaneSpec

__all__ = ["LaneResult", "LaneSpec"]
