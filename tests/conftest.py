"""Shared fixtures. Helpers live in tests/support and are imported as tests.support.*."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.pdu.profile import Profile
from tests.support.env import FIXTURES


@pytest.fixture
def fixtures() -> Path:
    """The tests/fixtures directory."""
    return FIXTURES


@pytest.fixture(scope="session")
def profiles() -> list[Profile]:
    """Every shipped PDU profile."""
    from collector.site.profiles import load_profiles

    return load_profiles()
