"""The Wall's 20 s copy of the limiter rules is what alerts/make_wall.py makes (issue 31)."""

from __future__ import annotations

import importlib.util
import sys

from tests.support.env import ROOT


def _make_wall():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_wall", ROOT / "alerts" / "make_wall.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_wall"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_generated_sections_are_current() -> None:
    assert _make_wall().main(["--check"]) == 0, "run python alerts/make_wall.py"


def test_the_copy_renames_every_window_and_reads_copies() -> None:
    mw = _make_wall()
    copies = dict(mw.copies(mw.split((ROOT / "alerts" / "wattbit-recording.yml").read_text())))
    assert "host:wattbit_limiter:ratio20s" in copies
    assert "host_resource:wattbit_utilisation:ratio20s" in copies
    for name, expr in copies.items():
        assert "[1m]" not in expr, name
        # a copy reads no 1-minute rule that has a copy of its own
        for other in copies:
            assert other.replace("20s", "1m") not in expr, (name, other)
    # the latches are read as they are, never copied
    assert not any(n.endswith(":last") for n in copies)
