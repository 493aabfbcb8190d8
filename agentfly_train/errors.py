"""Turning exceptions into the one-line messages the command line prints."""

from __future__ import annotations


def error_summary(error: BaseException, limit: int = 400) -> str:
    """``"<ErrorType>: <its message on one line>"``, cut at ``limit`` characters, for one-line error messages."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during training (or the validation and saving after it).

    Args:
        step: The (optimiser) step under way, 1-based.
    """

    def __init__(self, step: int) -> None:
        super().__init__(step)
        self.step = step
