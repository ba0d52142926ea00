"""dev_t decoding, /proc/diskstats parsing across kernels, and the busy-time arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.blockio import devt
from exporters.blockio.diskstats import (
    DiskstatsBackend,
    device_stats,
    line_stats,
    parse_diskstats,
)


@pytest.mark.parametrize(
    ("dev", "pair"),
    [
        (0x00700003, (7, 3)),  # loop3: major 7 << 20 | 3
        (0x00800000, (8, 0)),  # sda
        (0x00800011, (8, 17)),  # sdb1
        (0x10300000, (259, 0)),  # nvme0n1 (blkext major 259)
        (0x103FFFFF, (259, 0xFFFFF)),  # largest minor
        (0x0FE00000, (254, 0)),  # virtio vda
    ],
)
def test_kernel_devt(dev: int, pair: tuple[int, int]) -> None:
    assert devt.decode(dev) == pair
    assert devt.encode(*pair) == dev


def test_kernel_devt_is_not_glibc_makedev() -> None:
    import os

    # glibc's encoding puts minor bits elsewhere: decoding with os.major would be wrong.
    assert os.makedev(259, 1) != devt.encode(259, 1)
    with pytest.raises(ValueError):
        devt.encode(1, 1 << 20)


def test_diskstats_6_18(fixtures: Path) -> None:
    rows = parse_diskstats((fixtures / "proc" / "diskstats-6.18").read_text())
    loop0 = device_stats(rows["loop0"])
    assert loop0.ops["read"].ios == 4972
    assert loop0.ops["read"].bytes == 39776 * 512
    assert loop0.ops["write"].ios == 5035
    assert loop0.busy_seconds == pytest.approx(0.056)
    assert set(loop0.ops) == {"read", "write", "discard", "flush"}


def test_diskstats_4_15_has_no_discard_or_flush(fixtures: Path) -> None:
    rows = parse_diskstats((fixtures / "proc" / "diskstats-4.15").read_text())
    nvme = device_stats(rows["nvme0n1"])
    assert set(nvme.ops) == {"read", "write"}
    assert nvme.inflight == 2
    assert nvme.busy_seconds == pytest.approx(114.892)
    assert nvme.ops["write"].time_seconds == pytest.approx(289.62)


def test_diskstats_5_4_discard_and_flush(fixtures: Path) -> None:
    rows = parse_diskstats((fixtures / "proc" / "diskstats-5.4").read_text())
    nvme = device_stats(rows["nvme1n1"])
    assert nvme.ops["discard"].ios == 4
    assert nvme.ops["discard"].bytes == 2048 * 512
    assert nvme.ops["discard"].time_seconds == pytest.approx(0.001)
    assert "flush" not in nvme.ops  # flush fields arrived in 5.5: 15 fields only here


def test_diskstats_garbage_lines_ignored() -> None:
    text = "garbage\n 8 0 sda x y z 1 2 3 4 5 6 7 8 9\n 8 1 sda1 " + " ".join(["1"] * 11)
    assert list(parse_diskstats(text)) == ["sda1"]


def test_diskstats_backend_reads_proc_root(tmp_path: Path, fixtures: Path) -> None:
    (tmp_path / "diskstats").write_text((fixtures / "proc" / "diskstats-4.15").read_text())
    assert set(DiskstatsBackend(tmp_path).read()) == {"sda", "sda1", "nvme0n1"}


def test_diskstats_backend_reuses_a_line_only_while_it_is_unchanged(
    tmp_path: Path, fixtures: Path
) -> None:
    """Issue 35: an unchanged line's stats come again; a changed line shows at the next read,
    a malformed one is left out again, and a device gone leaves (nothing kept for it)."""
    text = (fixtures / "proc" / "diskstats-6.18").read_text()
    path = tmp_path / "diskstats"
    path.write_text(text + "garbage line\n")
    backend = DiskstatsBackend(tmp_path)
    first = backend.read()
    assert first == {n: device_stats(r) for n, r in parse_diskstats(text).items()}
    second = backend.read()
    assert second == first and second["loop0"] is first["loop0"]  # the same line: reused
    line = next(x for x in text.splitlines() if x.split()[2] == "loop0")
    fields = line.split()
    fields[3] = str(int(fields[3]) + 1)  # one more read completed
    changed = " ".join(fields)
    path.write_text(text.replace(line, changed) + "garbage line\n")
    third = backend.read()
    assert third["loop0"].ops["read"].ios == first["loop0"].ops["read"].ios + 1
    assert third["loop0"] == device_stats(parse_diskstats(changed)["loop0"])
    assert set(third) == set(first)
    path.write_text(text.replace(line + "\n", ""))  # loop0 removed
    assert "loop0" not in backend.read()
    assert all(changed not in k and line not in k for k in backend._lines)


@pytest.mark.parametrize("kernel", ["4.15", "5.4", "6.18"])
def test_line_stats_is_device_stats_of_the_row(fixtures: Path, kernel: str) -> None:
    """Issue 35: the backend's one-line parse gives what the row and device_stats() give,
    for each kernel's field count (11, 15, 17 and 20 counters), and skips what parse skips."""
    text = (fixtures / "proc" / f"diskstats-{kernel}").read_text()
    lines = text.splitlines()
    for n in (11, 12, 13, 14, 15, 16, 17, 20):  # every cut of a real line
        head = lines[0].split()
        lines.append(" ".join([*head[:2], f"cut{n}", *head[3 : 3 + n]]))
    lines += [
        "garbage",
        "8 0 sdz " + " ".join(["1"] * 10),  # 10 counters: too few
        "8 0 sdy " + " ".join(["1"] * 13 + [str(1 << 64)]),  # a counter past 2^64
        str(1 << 64) + " 0 sdx " + " ".join(["1"] * 17),  # a major past 2^64
        "8 0 sdw " + " ".join(["1"] * 12 + ["-1", "2"]),  # a sign
        "8 0 sdv " + " ".join(["1"] * 12 + ["\u0661", "2"]),  # a digit, not ASCII
    ]
    for line in lines:
        rows = parse_diskstats(line)
        want = [(n, device_stats(r)) for n, r in rows.items()]
        got = line_stats(line)
        assert (got is None and not want) or [got] == want, line
