"""Shared fixtures. Helpers live in tests/support and are imported as tests.support.*."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.env import FIXTURES


@pytest.fixture
def fixtures() -> Path:
    """The tests/fixtures directory."""
    return FIXTURES
