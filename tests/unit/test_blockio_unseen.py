"""The core backend's count of completions the kernel counted and the program did not see
(unseen.py): a lower bound, exact when the disk is quiet across a read, never more than
the kernel's, reset with a re-created disk, gone with a gone disk."""

from __future__ import annotations

from exporters.blockio.model import DeviceStats, OpStats
from exporters.blockio.unseen import Unseen


def _k(read: int, write: int = 0, discard: int | None = None) -> DeviceStats:
    ops = {"read": OpStats(ios=read), "write": OpStats(ios=write)}
    if discard is not None:
        ops["discard"] = OpStats(ios=discard)
    return DeviceStats(ops=ops)


ID = (7 << 20, 3)


def test_quiet_disk_is_exact_and_only_the_kernels_excess_counts() -> None:
    u = Unseen()
    u.start({"loop0": _k(100, 50), "loop0p1": _k(10)})
    # the program saw 997 of the kernel's 1000 new reads and all 20 writes
    out = u.update(
        {"loop0": _k(1100, 70), "loop0p1": _k(10)}, {"loop0": (ID, {"read": 997, "write": 20})}
    )
    assert out == {"loop0": {"read": 3}}  # zeros are not kept


def test_a_lower_bound_while_busy_and_never_decreasing() -> None:
    u = Unseen()
    u.start({"sda": _k(0)})
    # completions between the kernel's read and the maps' make the program look ahead:
    # negative differences count nothing and never lower what was counted
    assert u.update({"sda": _k(10)}, {"sda": (ID, {"read": 12})})["sda"] == {}
    assert u.update({"sda": _k(20)}, {"sda": (ID, {"read": 18})})["sda"] == {"read": 2}
    assert u.update({"sda": _k(30)}, {"sda": (ID, {"read": 29})})["sda"] == {"read": 2}


def test_a_disk_listed_before_its_first_sight_is_baselined_with_the_next_kernel_read() -> None:
    u = Unseen()
    u.start({})
    # listed at a read, idle (the program has no entry for it): its kernel counts cannot be
    # told apart from what it did before, so they are not taken as a baseline
    assert u.update({"vdb": _k(2)}, {}) == {}
    # first sight: the program's 4; the kernel's baseline is the next read's (6: read after
    # the maps that said 4, so the 2 in between cannot be claimed unseen)
    assert u.update({"vdb": _k(5)}, {"vdb": (ID, {"read": 4})}) == {}
    assert u.update({"vdb": _k(6)}, {"vdb": (ID, {"read": 6})}) == {}
    out = u.update({"vdb": _k(16)}, {"vdb": (ID, {"read": 13})})
    assert out["vdb"] == {"read": 1}  # (16 - 6) - (13 - 4) = 1 <= the 3 truly unseen


def test_a_disk_born_since_the_last_read_is_exact_from_its_first_read() -> None:
    u = Unseen()
    u.start({"vda": _k(7)})
    # vdb did not exist at the last read: both counts began at zero after the attach
    out = u.update({"vda": _k(7), "vdb": _k(101)}, {"vdb": (ID, {"read": 100})})
    assert out == {"vdb": {"read": 1}}
    out = u.update({"vda": _k(7), "vdb": _k(111)}, {"vdb": (ID, {"read": 110})})
    assert out == {"vdb": {"read": 1}}  # never counted twice


def test_a_recreated_disk_starts_again_and_a_gone_disk_leaves() -> None:
    u = Unseen()
    u.start({"loop1": _k(0, 0, 0)})
    out = u.update({"loop1": _k(9, 0, 4)}, {"loop1": (ID, {"read": 8})})
    assert out["loop1"] == {"read": 1, "discard": 4}
    new = (ID[0], ID[1] + 1)  # a new diskseq at the same name: counts restart
    assert u.update({"loop1": _k(9)}, {"loop1": (new, {"read": 0})}) == {}
    assert u.update({"loop1": _k(9)}, {"loop1": (new, {"read": 0})}) == {}
    out = u.update({"loop1": _k(19)}, {"loop1": (new, {"read": 10})})
    assert out["loop1"] == {}
    assert u.update({}, {}) == {}
    assert not u._base
