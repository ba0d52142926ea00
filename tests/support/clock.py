"""A clock a test sets by hand (for code that takes its clock as a callable)."""

from __future__ import annotations


class ManualClock:
    """Returns ``now``, which the test moves itself."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
