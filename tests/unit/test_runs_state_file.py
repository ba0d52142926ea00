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


# --- issue 26, 7: temporaries of killed writes go at start; runs are capped -----------------


def test_temporaries_of_killed_writes_are_removed_at_load(tmp_path: Path) -> None:
    """SIGKILL a process writing the registry, many times: the next load leaves no .tmp."""
    import signal
    import subprocess
    import sys
    import time

    state = tmp_path / STATE_FILE
    writer = (
        "import sys; from pathlib import Path; from collector.runs.registry import RunRegistry\n"
        "reg = RunRegistry(Path(sys.argv[1]), max_runs=100_000)\n"
        "for i in range(10**6):\n"
        "    reg.start(f'r{i}', {'k': 'v' * 200}); reg.stop(f'r{i}')\n"
    )
    for i in range(6):
        proc = subprocess.Popen([sys.executable, "-c", writer, str(state)])
        time.sleep(1.0 + 0.1 * i)  # at some point of a write: where does not matter
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Whatever the kills left, plus planted ones (SIGKILL between mkstemp and rename is a
    # narrow window): the names mkstemp gives, a link among them, and a file that is not one.
    for name in (".runs.json.a1b2c3.tmp", ".runs.json.zz.tmp"):
        (tmp_path / name).write_text("{")
    (tmp_path / ".runs.json.link.tmp").symlink_to(tmp_path / "keep-me")
    (tmp_path / "keep-me").write_text("not ours")
    (tmp_path / "runs.json.tmp-notes").write_text("not ours either")
    reg = RunRegistry(state)
    reg.load()
    assert reg.load_error is None
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["keep-me", STATE_FILE, "runs.json.tmp-notes"], left


def test_runs_are_capped_within_retention(tmp_path: Path) -> None:
    """1,500 runs inside retention with max_runs 1,000: 1,000 kept, the earliest-ended go."""
    t = [1_700_000_000.0]
    reg = RunRegistry(tmp_path / STATE_FILE, keep=10, max_runs=1000, clock=lambda: t[0])
    for i in range(1500):
        reg.start(f"r{i}")
        t[0] += 1
        reg.stop(f"r{i}")
    names = {r.name for r in reg.runs()}
    assert len(names) == 1000 and names == {f"r{i}" for i in range(500, 1500)}
    on_file = json.loads((tmp_path / STATE_FILE).read_text())["runs"]
    assert len(on_file) == 1000
    series = [s for m in reg.collect() for s in m.samples]
    assert len(series) == 4 * 1000
    again = RunRegistry(tmp_path / STATE_FILE, keep=10, max_runs=500, clock=lambda: t[0])
    again.load()  # a lower cap applies to what is loaded
    assert {r.name for r in again.runs()} == {f"r{i}" for i in range(1000, 1500)}


def test_active_runs_count_against_the_cap(tmp_path: Path) -> None:
    """Active runs are never dropped: at the cap a start is refused (409) and ended runs go."""
    from collector.runs.registry import RunError

    reg = RunRegistry(tmp_path / STATE_FILE, max_runs=3)
    reg.start("ended")
    reg.stop("ended")
    reg.start("a")
    reg.start("b")
    reg.start("c")  # three active: the ended one goes
    assert sorted(r.name for r in reg.runs()) == ["a", "b", "c"]
    with pytest.raises(RunError) as err:
        reg.start("d")
    assert err.value.status == 409 and "runs.max_runs" in str(err.value)
    reg.stop("a")
    reg.start("d")
    assert sorted(r.name for r in reg.runs()) == ["b", "c", "d"]  # "a" ended: it makes room
