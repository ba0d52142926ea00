"""Where the tests are, and the rule for a real part that is missing: fail in CI, skip elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when a real part this test needs is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"cannot run in CI: {reason}")
    pytest.skip(reason)
