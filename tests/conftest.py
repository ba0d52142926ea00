"""Shared test helpers. In CI (CI=true) a test that cannot run fails; elsewhere it skips."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when a real part this test needs is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"cannot run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def fixtures() -> Path:
    """The tests/fixtures directory."""
    return FIXTURES
