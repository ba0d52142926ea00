"""The run registry's state file: private (0600), and never reached through a symlink."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from collector.runs.registry import STATE_FILE, RunRegistry


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_state_is_written_0600(tmp_path: Path) -> None:
    state = tmp_path / STATE_FILE
    reg = RunRegistry(state)
    reg.start("a")
    assert _mode(state) == 0o600
    state.chmod(0o644)  # a file from an older version is made private on the next write
    reg.stop("a")
    assert _mode(state) == 0o600


def test_a_symlinked_state_file_is_not_followed_on_load(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 1, "runs": [{"name": "x", "start_time": 1.0}]}))
    state = tmp_path / STATE_FILE
    state.symlink_to(elsewhere)
    reg = RunRegistry(state)
    with pytest.raises(OSError) as err:
        reg.load()
    assert "symbolic link" in str(err.value)
    assert reg.runs() == []
    assert state.is_symlink()  # left as found, for the operator to look at


def test_a_symlink_planted_before_a_write_is_replaced_not_followed(tmp_path: Path) -> None:
    state = tmp_path / STATE_FILE
    reg = RunRegistry(state)
    reg.load()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    state.symlink_to(victim)
    reg.start("a")
    assert victim.read_text() == "keep me\n"
    assert not state.is_symlink() and _mode(state) == 0o600
    assert json.loads(state.read_text())["runs"][0]["name"] == "a"


def test_corrupt_file_set_aside_does_not_follow_a_symlinked_candidate(tmp_path: Path) -> None:
    state = tmp_path / STATE_FILE
    state.write_text("{not json")
    dangling = tmp_path / f"{STATE_FILE}.corrupt"
    dangling.symlink_to(tmp_path / "nowhere")  # exists() says no, yet the name is taken
    reg = RunRegistry(state)
    reg.load()
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    assert (tmp_path / f"{STATE_FILE}.corrupt.1").read_text() == "{not json"


def test_no_temporary_file_is_left_world_readable(tmp_path: Path) -> None:
    state = tmp_path / STATE_FILE
    RunRegistry(state).start("a")
    for f in tmp_path.iterdir():
        assert not _mode(f) & 0o077, (f, oct(_mode(f)))
    assert os.listdir(tmp_path) == [STATE_FILE]
