"""Where the tests are, and the rule for a real part that is missing: fail in CI, skip elsewhere."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

# Real PDU recordings: the company's shared ones (beside the clone) and the project's own
# (tests/fixtures/pdu/recordings/, each with its provenance in the README there).
RECORDINGS = Path(
    os.environ.get("WATTBIT_PDU_RECORDINGS", str(ROOT.parent / "shared" / "pdu-recordings"))
)
OWN_RECORDINGS = FIXTURES / "pdu" / "recordings"

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) when a real part this test needs is missing."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"cannot run in CI: {reason}")
    pytest.skip(reason)


def sigint_default() -> None:
    """preexec_fn: SIGINT back to its default in a child a test will interrupt.

    A test runner started as a background job of a non-interactive shell inherits SIGINT
    ignored, and an ignored signal stays ignored across exec: the program under test would
    then (rightly) stay immune to the Ctrl-C the test sends in place of a terminal's.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
