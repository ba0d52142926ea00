"""Golden files: a test's output against its committed golden (rewritten on purpose with
WATTBIT_UPDATE_GOLDEN=1, then reviewed as a diff), and what the whole-process /metrics
goldens (agent and site collector) share: one scrape of the WSGI app, the parts that vary
from run to run set aside, promtool's verdict."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from tests.support.env import require
from tests.support.realparts import have

UPDATE = os.environ.get("WATTBIT_UPDATE_GOLDEN") == "1"


def assert_golden(golden: Path, got: str) -> None:
    """``got`` is the golden's text (with WATTBIT_UPDATE_GOLDEN=1 it becomes it first)."""
    if UPDATE:
        golden.write_text(got)
    assert golden.exists(), f"no golden {golden}: run with WATTBIT_UPDATE_GOLDEN=1"
    # Compared as text for a readable diff; UTF-8 both ways, so equal text is equal bytes.
    assert got == golden.read_text(), f"{golden.name}: intended? WATTBIT_UPDATE_GOLDEN=1"


def scrape(app: Callable[..., Iterable[bytes]]) -> bytes:
    """One GET /metrics from the WSGI app."""
    status: list[str] = []
    body = b"".join(app({"REQUEST_METHOD": "GET"}, lambda s, h: status.append(s)))
    assert status == ["200 OK"]
    return body


def normalise(
    body: bytes, varying: Iterable[str] = ("wattbit_exporter_duration_seconds",)
) -> bytes:
    """The exposition without this test process's own process_* families, and the samples of
    the ``varying`` families (durations, timestamps) reading 0."""
    text = re.sub(r"(?m)^(# (HELP|TYPE) )?process_\S*.*\n", "", body.decode())
    for name in varying:
        text = re.sub(rf"(?m)^({name}(\{{[^}}]*\}})?) \S+$", r"\1 0.0", text)
    return text.encode()


def promtool_accepts(golden: Path) -> None:
    """`promtool check metrics` finds nothing to say about the golden."""
    require(have("promtool"), "promtool (Debian package prometheus) is not installed")
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=golden.read_bytes(), capture_output=True, timeout=60
    )
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
