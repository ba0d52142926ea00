"""`wattbit report` without its extra (matplotlib, `wattbit[report]`) says which extra to
install, before it asks Prometheus anything; an agent host does not carry matplotlib."""

from __future__ import annotations

import sys

import pytest

from collector.cli import main


def test_report_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    # port 9 (discard) is never asked: the check comes first
    rc = main(["report", "r1", "--prometheus", "http://127.0.0.1:9", "--out", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "pip install 'wattbit[report]'" in err
    assert "matplotlib" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra", ["report", "test"])
def test_matplotlib_is_in_the_report_extra_only(extra: str) -> None:
    """The agent's own dependencies carry no plotting; the report extra (and tests) do."""
    import tomllib

    from tests.support.env import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith(("matplotlib", "numpy"))]
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"][extra])
