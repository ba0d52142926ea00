"""`wattbit ARGS` as a subprocess, from this checkout: what a user at a shell would run."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.env import ROOT


def wattbit(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the wattbit CLI with `args` (extra environment in `env`); output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
    )
