"""Which disk identities a BPF backend reports (exporters/blockio/bpfshared.LiveDisks), over
small /sys trees built here: a gone disk is dropped, a re-created one (same dev_t, new
diskseq) starts afresh, and /sys is re-listed once per read, not once per gone disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.blockio import bpfshared
from exporters.blockio.bpfshared import LiveDisks
from exporters.blockio.devt import encode
from tests.support.clock import ManualClock

LOOP7 = encode(7, 7)
LOOP8 = encode(7, 8)


def _disk(root: Path, name: str, major: int, minor: int, diskseq: int | None = None) -> None:
    d = root / "class" / "block" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "dev").write_text(f"{major}:{minor}\n")
    if diskseq is not None:
        (d / "diskseq").write_text(f"{diskseq}\n")


def _gone(root: Path, name: str) -> None:
    d = root / "class" / "block" / name
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def test_the_current_diskseq_is_reported_the_others_are_dead(tmp_path: Path) -> None:
    _disk(tmp_path, "loop7", 7, 7, diskseq=14)
    live = LiveDisks(tmp_path)
    # The map still holds the former loop7's counts (diskseq 12) beside the new one's.
    assert live.live({(LOOP7, 12): 6, (LOOP7, 14): 1}) == {(LOOP7, 14): "loop7"}
    # A new disk that has done no I/O yet: nothing of the former one is shown for it.
    (tmp_path / "class/block/loop7/diskseq").write_text("15\n")
    assert live.live({(LOOP7, 14): 1}) == {}


def test_a_disk_that_leaves_is_dropped_not_renamed(tmp_path: Path) -> None:
    _disk(tmp_path, "loop7", 7, 7, diskseq=3)
    _disk(tmp_path, "loop8", 7, 8, diskseq=4)
    live = LiveDisks(tmp_path)
    assert live.live({(LOOP7, 3): 1, (LOOP8, 4): 1}) == {(LOOP7, 3): "loop7", (LOOP8, 4): "loop8"}
    _gone(tmp_path, "loop7")
    assert live.live({(LOOP7, 3): 1, (LOOP8, 4): 1}) == {(LOOP8, 4): "loop8"}


def test_no_diskseq_before_5_15_the_dev_t_names_the_disk(tmp_path: Path) -> None:
    _disk(tmp_path, "sda", 8, 0)
    assert LiveDisks(tmp_path).live({(encode(8, 0), 0): 5}) == {(encode(8, 0), 0): "sda"}


def test_a_map_without_diskseq_drops_the_predecessor_when_diskseq_changes(
    tmp_path: Path,
) -> None:
    """bcc's tracepoints carry no diskseq: its entries are (dev, 0)."""
    _disk(tmp_path, "loop7", 7, 7, diskseq=20)
    live = LiveDisks(tmp_path)
    assert live.live({(LOOP7, 0): 6}) == {(LOOP7, 0): "loop7"}
    (tmp_path / "class/block/loop7/diskseq").write_text("22\n")  # detached, re-attached
    assert live.live({(LOOP7, 0): 7}) == {}  # the old counts: the backend deletes them
    assert live.live({(LOOP7, 0): 1}) == {(LOOP7, 0): "loop7"}  # counted afresh


def test_unnamed_devices_only_where_some_are_hidden_and_only_while_active(
    tmp_path: Path,
) -> None:
    _disk(tmp_path, "nvme0n1", 259, 0, diskseq=2)
    path = encode(259, 3)  # the hidden path device nvme0c0n1 has no dev file
    clock = ManualClock(0.0)
    live = LiveDisks(tmp_path, clock=clock, unnamed_idle=600.0)
    # No hidden device listed: an unknown dev_t is a disk that came and went.
    assert live.live({(path, 9): 100}) == {}
    (tmp_path / "class/block/nvme0c0n1").mkdir()
    live = LiveDisks(tmp_path, clock=clock, unnamed_idle=600.0)
    assert live.live({(path, 9): 100}) == {(path, 9): "259:3"}
    clock.now = 599.0
    assert live.live({(path, 9): 100}) == {(path, 9): "259:3"}
    clock.now = 601.0
    assert live.live({(path, 9): 100}) == {}  # idle for longer than unnamed_idle
    assert live.live({(path, 9): 101}) == {(path, 9): "259:3"}  # busy again


def test_sys_is_relisted_once_per_read_and_dev_files_only_on_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old reader re-read every dev file of /sys/class/block on every scrape, once per
    gone disk still in the map (issue 26: 1,300 gone disks, 1.4-3 s scrapes)."""
    reads: list[Path] = []
    real = bpfshared.devt_names

    def counting(root: Path) -> dict[tuple[int, int], str]:
        reads.append(root)
        return real(root)

    monkeypatch.setattr(bpfshared, "devt_names", counting)
    _disk(tmp_path, "loop7", 7, 7, diskseq=3)
    live = LiveDisks(tmp_path)
    gone = {(encode(7, 1000 + i), 1): 1 for i in range(500)}
    for _ in range(5):
        assert live.live({(LOOP7, 3): 1, **gone}) == {(LOOP7, 3): "loop7"}
    assert len(reads) == 1
    _disk(tmp_path, "loop8", 7, 8, diskseq=4)
    live.live({(LOOP7, 3): 1})
    assert len(reads) == 2
