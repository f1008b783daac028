"""The one exception type that reaches the user as a single line, never a traceback."""

from __future__ import annotations


class SuitefitError(Exception):
    """Bad input or an unmet constraint; the message is shown as one line.

    ``exit_code`` follows a simple convention: 2 for bad input/usage, 1 for a
    check that found problems, 3 for an environment the tool cannot work in.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def __str__(self) -> str:  # always one line
        return " ".join(str(self.args[0]).split()) if self.args else ""
