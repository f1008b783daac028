"""suitefit: make a pytest suite fit its CI runner.

The public surface is re-exported here; everything else is private to the package.
"""

from suitefit.errors import SuitefitError
from suitefit.model import Budget, FileCost, FixtureCost, WorkerCost

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "FileCost",
    "FixtureCost",
    "SuitefitError",
    "WorkerCost",
    "__version__",
]
