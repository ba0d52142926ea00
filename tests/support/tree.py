"""Writing a synthetic /sys or /proc tree: files with their directories, links as sysfs makes them.

Used by the tests and benchmarks that build a machine's tree (tests/unit/test_agent_golden.py,
tests/unit/test_pcie.py, bench/pcie_read.py).
"""

from __future__ import annotations

import os
from pathlib import Path


def write_file(path: Path, text: str) -> None:
    """Write text to path, making its directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def sys_link(path: Path, target: Path) -> None:
    """A relative symlink at path to target, as sysfs makes them, making its directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(os.path.relpath(target, path.parent))
