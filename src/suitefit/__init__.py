"""suitefit: make a pytest suite fit its CI runner.

The public surface is re-exported here; everything else is private to the package.

The names are loaded on first use (PEP 562): pytest imports this package for its
plugin (``suitefit.plugin``) in every run, measured or not, and the sampler process
imports it too; neither should pay for the data model (dataclasses, inspect) it
does not use.

PYTEST_DONT_REWRITE: `suitefit run` imports this package before it hands its process to
pytest, which would otherwise warn that it cannot rewrite the asserts of a plugin's
package already imported; suitefit's asserts are its own invariants, not tests.
"""

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the sampler process does not)
if TYPE_CHECKING:
    from suitefit.errors import SuitefitError
    from suitefit.model import Budget, FileCost, FixtureCost, WorkerCost
del TYPE_CHECKING  # not public

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "FileCost",
    "FixtureCost",
    "SuitefitError",
    "WorkerCost",
    "__version__",
]

_HOME = {"Budget": "model", "FileCost": "model", "FixtureCost": "model", "WorkerCost": "model",
         "SuitefitError": "errors"}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'suitefit' has no attribute {name!r}")
    value = getattr(__import__(f"suitefit.{home}", fromlist=[name]), name)
    globals()[name] = value  # once: later lookups never come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
