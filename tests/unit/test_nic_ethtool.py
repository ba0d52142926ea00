"""Curation of ethtool -S statistics into per-queue counters, and the ioctl reader's logic."""

from __future__ import annotations

import ctypes
import errno
import struct
from pathlib import Path

import pytest

from exporters.nic import ethtool
from exporters.nic.ethtool import MAX_QUEUES, Ethtool, QueueStat, queue_stats
from tests.support.env import require

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "ethtool"


def parse_ethtool_s(text: str) -> list[tuple[str, int]]:
    """(name, value) pairs out of `ethtool -S` output ("NIC statistics:" then "  name: value")."""
    lines = text.splitlines()
    assert lines[0] == "NIC statistics:"
    pairs = []
    for line in lines[1:]:
        # Names may hold ": " themselves (bnxt's "[0]: rx_ucast_packets"): split on the last.
        name, sep, value = line.strip().rpartition(": ")
        assert sep, line
        pairs.append((name, int(value)))
    return pairs


def fixture(driver: str) -> list[tuple[str, int]]:
    """The fixture's pairs."""
    return parse_ethtool_s((FIX / f"{driver}.txt").read_text())


def keys(stats: list[QueueStat]) -> set[tuple[str, int, str]]:
    """The (direction, queue, kind) set."""
    return {(s.direction, s.queue, s.kind) for s in stats}


def value(stats: list[QueueStat], direction: str, queue: int, kind: str) -> int:
    """The one value for a key."""
    (hit,) = [s.value for s in stats if (s.direction, s.queue, s.kind) == (direction, queue, kind)]
    return hit


def full(queues: int, kinds: tuple[str, ...] = ("bytes", "packets")) -> set[tuple[str, int, str]]:
    """Every direction x queue x kind."""
    return {(d, q, k) for d in ("rx", "tx") for q in range(queues) for k in kinds}


@pytest.mark.parametrize(
    ("driver", "expected", "samples"),
    [
        # 8 channels; the rx*_xsk_*, rx*_xdp_*, tx*_xdp_*, ch*_*, qos_tx*_*, rx_vport_*,
        # *_phy and rx_prio* counters are all in the fixture and must not show.
        ("mlx5_core", full(8), {("rx", 3, "bytes"): 8584105448, ("tx", 3, "packets"): 22508921}),
        (
            "ixgbe",
            full(16),
            {("tx", 15, "bytes"): 29892761267, ("rx", 0, "packets"): 92118532},
        ),
        ("i40e", full(4), {("rx", 2, "bytes"): 5916700169, ("tx", 1, "packets"): 90983476}),
        ("ice", full(4), {("rx", 1, "bytes"): 68513560572, ("tx", 2, "packets"): 37798913}),
        (
            "virtio_net",
            full(4),
            {("rx", 1, "bytes"): 68513560572, ("tx", 2, "packets"): 37798913},
        ),
        # ena: queues 4-7 are XDP TX queues (queue_N_xdp_tx_*): not traffic of the stack.
        ("ena", full(4), {("rx", 3, "packets"): 62103261, ("tx", 0, "bytes"): 32231233645}),
        # sfc counts packets only; tx-xdp-cpu-N.tx_packets are XDP queues.
        (
            "sfc",
            full(4, ("packets",)),
            {("rx", 3, "packets"): 30523122, ("tx", 0, "packets"): 6281653},
        ),
        (
            "bnxt_en",
            full(4),
            {
                ("rx", 0, "packets"): 14568477 + 7419 + 5422,
                ("rx", 0, "bytes"): 65715520514 + 613878 + 8104,
                ("tx", 0, "packets"): 60698105 + 95 + 7482,
            },
        ),
    ],
)
def test_driver_fixture(
    driver: str, expected: set[tuple[str, int, str]], samples: dict[tuple[str, int, str], int]
) -> None:
    stats = queue_stats(fixture(driver))
    assert keys(stats) == expected
    assert len(stats) == len(expected)
    for key, want in samples.items():
        assert value(stats, *key) == want


def test_bnxt_sums_unicast_multicast_broadcast() -> None:
    pairs = fixture("bnxt_en")
    d = dict(pairs)
    stats = queue_stats(pairs)
    for q in range(4):
        for direction in ("rx", "tx"):
            for kind in ("packets", "bytes"):
                want = sum(d[f"[{q}]: {direction}_{c}_{kind}"] for c in ("ucast", "mcast", "bcast"))
                assert value(stats, direction, q, kind) == want
    # The TPA counters ("[0]: rx_tpa_bytes") and port totals are not per-queue traffic.
    assert value(stats, "rx", 0, "bytes") != d["rx_bytes"]


def test_veth_has_no_queue_traffic() -> None:
    # Captured on this project's VM (`ip link add ... type veth`): per-queue XDP counters only.
    pairs = fixture("veth")
    assert ("rx_queue_0_xdp_packets", 0) in pairs
    assert queue_stats(pairs) == []


def test_virtio_net_from_6_10_has_no_queue_traffic() -> None:
    # Captured on kernel 6.18: per-queue packets/bytes moved to netdev-genl qstats.
    pairs = fixture("virtio_net-6.18")
    assert ("rx0_kicks", dict(pairs)["rx0_kicks"]) in pairs
    assert queue_stats(pairs) == []


def test_queues_past_budget_dropped() -> None:
    pairs = [
        (f"{d}_queue_{q}_{k}", 1)
        for d in ("rx", "tx")
        for q in range(100)
        for k in ("bytes", "packets")
    ]
    stats = queue_stats(pairs)
    assert keys(stats) == full(MAX_QUEUES)
    assert max(s.queue for s in stats) == MAX_QUEUES - 1
    assert queue_stats([("rx64_bytes", 5), ("[64]: rx_ucast_packets", 1)]) == []


def test_unknown_names_ignored() -> None:
    pairs = [
        ("rx_packets", 1),
        ("rx_bytes", 2),
        ("rx_queue_0_drops", 3),
        ("rx_queue_0_xdp_packets", 4),
        ("rx0_xdp_drop", 5),
        ("rx0_xsk_bytes", 6),
        ("tx0_xdp_xmit", 7),
        ("ch0_events", 8),
        ("qos_tx0_bytes", 9),
        ("ptp_tx0_packets", 10),
        ("rx_prio0_bytes", 11),
        ("rx_64_bytes_phy", 12),
        ("queue_0_xdp_tx_cnt", 13),
        ("tx-xdp-cpu-0.tx_packets", 14),
        ("[0]: rx_tpa_bytes", 15),
        ("veb.tc_0_rx_bytes", 16),
        ("rvec_0_rx_pkts", 17),
        ("rx-0.tx_packets", 18),  # direction and field disagree: not a known format
        ("RX_QUEUE_0_BYTES", 19),
        ("rx_queue_0_bytes_extra", 20),
    ]
    assert queue_stats(pairs) == []
    assert queue_stats([*pairs, ("rx_queue_0_bytes", 21)]) == [QueueStat("rx", 0, "bytes", 21)]


def test_i40e_before_4_18_and_iavf_names() -> None:
    old = [
        ("tx-0.tx_packets", 1),
        ("tx-0.tx_bytes", 2),
        ("rx-1.rx_packets", 3),
        ("rx-1.rx_bytes", 4),
    ]
    assert queue_stats(old) == [
        QueueStat("rx", 1, "bytes", 4),
        QueueStat("rx", 1, "packets", 3),
        QueueStat("tx", 0, "bytes", 2),
        QueueStat("tx", 0, "packets", 1),
    ]


def test_duplicates_summed_and_sorted() -> None:
    stats = queue_stats([("tx1_bytes", 5), ("rx_queue_1_bytes", 1), ("tx1_bytes", 7)])
    assert stats == [QueueStat("rx", 1, "bytes", 1), QueueStat("tx", 1, "bytes", 12)]


def test_queue_stats_takes_any_iterable() -> None:
    assert queue_stats(iter([("rx2_packets", 3)])) == [QueueStat("rx", 2, "packets", 3)]


# --- the reader, with a fake kernel behind _ioctl ----------------------------------------


class FakeKernel(Ethtool):
    """Answers SIOCETHTOOL as a post-2025 kernel would, for a driver whose set can change.

    counts: the driver's stat count at each successive request (the last one repeats).
    """

    def __init__(
        self, counts: list[int], *, gsset_info: bool = True, efault_once: bool = False
    ) -> None:
        super().__init__()
        self.counts = counts
        self.calls: list[int] = []
        self.gsset_info = gsset_info
        self.efault_once = efault_once

    def _count(self) -> int:
        return self.counts[min(len(self.calls) - 1, len(self.counts) - 1)]

    def _ioctl(self, ifname: str, address: int) -> None:
        (cmd,) = struct.unpack("=I", ctypes.string_at(address, 4))
        self.calls.append(cmd)
        n = self._count()
        names = [f"rx_queue_{i}_bytes" for i in range(n)]
        if cmd == ethtool.ETHTOOL_GSSET_INFO:
            if not self.gsset_info:
                raise OSError(errno.EOPNOTSUPP, "no GSSET_INFO")
            out = struct.pack("=IIQI", cmd, 0, 1 << ethtool.ETH_SS_STATS, n)
        elif cmd == ethtool.ETHTOOL_GDRVINFO:
            strs = (b"fake", b"9.9", b"fw", b"0000:00:01.0", b"", b"")
            out = struct.pack("=I32s32s32s32s32s12s5I", cmd, *strs, 0, n, 0, 0, 0)
        elif cmd in (ethtool.ETHTOOL_GSTRINGS, ethtool.ETHTOOL_GSTATS):
            if self.efault_once and cmd == ethtool.ETHTOOL_GSTRINGS:
                self.efault_once = False
                raise OSError(errno.EFAULT, "Bad address")  # an old kernel hit the guard page
            hdr = 12 if cmd == ethtool.ETHTOOL_GSTRINGS else 8
            (asked,) = struct.unpack("=I", ctypes.string_at(address + hdr - 4, 4))
            got = n if asked == n else 0  # net/ethtool/ioctl.c since the Dec 2025 fix
            if cmd == ethtool.ETHTOOL_GSTRINGS:
                body = b"".join(s.encode().ljust(32, b"\0") for s in names[:got])
                out = struct.pack("=III", cmd, ethtool.ETH_SS_STATS, got) + body
            else:
                out = struct.pack(f"=II{got}Q", cmd, got, *[1000 + i for i in range(got)])
        else:
            raise OSError(errno.EOPNOTSUPP, "unexpected command")
        ctypes.memmove(address, out, len(out))


def test_reader_decodes_strings_and_values() -> None:
    with FakeKernel([3]) as k:
        assert k.read_stats("eth0") == [
            ("rx_queue_0_bytes", 1000),
            ("rx_queue_1_bytes", 1001),
            ("rx_queue_2_bytes", 1002),
        ]
        assert k.calls == [
            ethtool.ETHTOOL_GSSET_INFO,
            ethtool.ETHTOOL_GSTRINGS,
            ethtool.ETHTOOL_GSTATS,
        ]


def test_reader_retries_when_count_changes_before_strings() -> None:
    # GSSET_INFO says 3, the driver has 5 by GSTRINGS: retry reads 5 consistently.
    with FakeKernel([3, 5]) as k:
        assert [n for n, _ in k.read_stats("eth0")] == [f"rx_queue_{i}_bytes" for i in range(5)]
        assert k.calls.count(ethtool.ETHTOOL_GSSET_INFO) == 2


def test_reader_retries_when_count_changes_before_values() -> None:
    with FakeKernel([4, 4, 2]) as k:
        assert len(k.read_stats("eth0")) == 2
        assert len(k.calls) == 6


def test_reader_gives_up_with_eagain() -> None:
    with FakeKernel([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) as k, pytest.raises(OSError) as e:
        k.read_stats("eth0")
    assert e.value.errno == errno.EAGAIN


def test_reader_retries_after_efault() -> None:
    with FakeKernel([2], efault_once=True) as k:
        assert len(k.read_stats("eth0")) == 2


def test_reader_falls_back_to_drvinfo_count() -> None:
    with FakeKernel([2], gsset_info=False) as k:
        assert len(k.read_stats("eth0")) == 2
        assert ethtool.ETHTOOL_GDRVINFO in k.calls


def test_reader_no_stats_is_eopnotsupp() -> None:
    with FakeKernel([0]) as k, pytest.raises(OSError) as e:
        k.read_stats("eth0")
    assert e.value.errno == errno.EOPNOTSUPP


def test_driver_info_fields() -> None:
    with FakeKernel([1]) as k:
        assert k.driver_info("eth0") == ("fake", "9.9", "0000:00:01.0")


def test_interface_name_too_long_is_enodev() -> None:
    with Ethtool() as et, pytest.raises(OSError) as e:
        et.read_stats("x" * 16)
    assert e.value.errno == errno.ENODEV


def test_struct_layouts() -> None:
    require(struct.calcsize("P") == 8, "layouts checked for LP64 (x86_64)")
    # include/uapi/linux/if.h and ethtool.h on x86_64.
    assert ethtool._IFREQ.size == 40
    assert ethtool._DRVINFO.size == 196
    assert ethtool._SSET_INFO.size == 16
    assert ethtool._GSTRINGS.size == 12
    assert ethtool._STATS.size == 8


def test_buffer_is_followed_by_a_guard_page() -> None:
    require(ethtool._MPROTECT is not None, "no mprotect through ctypes")
    with ethtool._Buffer(100) as buf:
        guard = buf.address + ethtool.mmap.PAGESIZE
        for line in Path("/proc/self/maps").read_text().splitlines():
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo <= guard < hi:
                assert perms.startswith("---")
                break
        else:
            pytest.fail("guard page not mapped")
