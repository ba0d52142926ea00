"""Per-queue NIC counters from the driver's ethtool statistics, curated to a bounded set.

Reading: the classic SIOCETHTOOL ioctl (what ``ethtool -S IFACE`` does), from Python with
``fcntl.ioctl`` and ``struct``; no ethtool binary, no netlink library. Layouts are those of
https://github.com/torvalds/linux/blob/master/include/uapi/linux/ethtool.h for x86_64 (and
any LP64 Linux: every field is a fixed-width integer or char array).

Curation: a driver's statistics are a free-form list of names, often hundreds per queue
(mlx5 prints 70 to 100 per channel). Exporting them raw is what gives node_exporter's ethtool
collector its 10k series on one host. :func:`queue_stats` keeps only per-queue bytes and
packets, recognised by a table of name patterns (data, not per-driver code), and at most
:data:`MAX_QUEUES` queues per direction.

Drivers whose per-queue traffic counters are recognised (names checked against each
driver's ethtool source):

- mlx5_core, mlx4_en, ibmvnic, ibmveth: ``rx3_bytes`` ``tx3_packets`` (never the
  ``rx3_xdp_*``, ``rx3_xsk_*``, ``tx3_xdp_*``, ``ch3_*``, ``ptp_*`` or ``qos_tx3_*`` ones).
  mlx5 numbers tx queues ``channel + tc * channels``, so with several traffic classes tx
  indices run past the channel count.
- ixgbe, igb, igc, ice, hv_netvsc, wangxun, virtio_net up to 6.9: ``rx_queue_3_bytes``
  ``tx_queue_3_packets``.
- i40e and iavf (``rx-3.bytes``; before 4.18 ``rx-3.rx_bytes``), sfc (``rx-3.rx_packets``,
  packets only; the ``tx-xdp-cpu-N`` queues are XDP and left out).
- ena: ``queue_3_rx_cnt`` (packets) and ``queue_3_rx_bytes``; ``queue_N_xdp_tx_*`` left out.
- bnxt_en: ``[3]: rx_ucast_packets`` + ``mcast`` + ``bcast`` summed, bytes likewise. The
  index is bnxt's completion ring: the queue index with combined channels (the default);
  with separate rx/tx channels tx rings are numbered after the rx rings.

Known to yield nothing here: veth (only XDP counters per queue: ``rx_queue_0_xdp_packets``
is not traffic), virtio_net from 6.10 on (per-queue packets/bytes moved out of ``ethtool
-S`` into the netdev netlink family's qstats), and drivers not listed above (nfp
``rvec_N_*``, hns3 ``txqN_*``, gve ``tx_bytes[N]``, ...), whose names are not verified.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import re
import socket
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

# https://github.com/torvalds/linux/blob/master/include/uapi/linux/sockios.h
SIOCETHTOOL = 0x8946
# https://github.com/torvalds/linux/blob/master/include/uapi/linux/ethtool.h
ETHTOOL_GDRVINFO = 0x00000003
ETHTOOL_GSTRINGS = 0x0000001B
ETHTOOL_GSTATS = 0x0000001D
ETHTOOL_GSSET_INFO = 0x00000037
ETH_SS_STATS = 1  # enum ethtool_stringset
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16  # include/uapi/linux/if.h
NETLINK_GENERIC = 16  # include/uapi/linux/netlink.h
PROT_NONE = 0  # include/uapi/asm-generic/mman-common.h (the mmap module lacks it)

# struct ifreq (include/uapi/linux/if.h): char ifr_name[16], then a 24-byte union whose
# ifr_data member (a pointer) sits at its start: 40 bytes on LP64 (never less than the
# kernel's sizeof(struct ifreq), which is what it copies in).
_IFREQ = struct.Struct("@16sP16x")  # native: P is a pointer
# struct ethtool_drvinfo: cmd; driver[32] version[32] fw_version[32] bus_info[32]
# erom_version[32] reserved2[12]; n_priv_flags n_stats testinfo_len eedump_len regdump_len.
_DRVINFO = struct.Struct("=I32s32s32s32s32s12s5I")
# struct ethtool_sset_info: cmd, reserved, u64 sset_mask, then u32 data[] (one per set bit).
_SSET_INFO = struct.Struct("=IIQ")
# struct ethtool_gstrings: cmd, string_set, len, then u8 data[len * ETH_GSTRING_LEN].
_GSTRINGS = struct.Struct("=III")
# struct ethtool_stats: cmd, n_stats, then u64 data[n_stats] (8-aligned: header is 8 bytes).
_STATS = struct.Struct("=II")

MAX_QUEUES = 64
"""Queues at or past this index are dropped: the series budget. Per interface that is at
most 2 directions x 2 kinds x 64 queues = 256 series, whatever the core count (ixgbe, for
one, lists a counter pair for every possible queue, used or not)."""

_ATTEMPTS = 3  # reads of a string set that changed size under us before giving up


def _load_mprotect() -> Callable[[int, int, int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).mprotect
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_MPROTECT = _load_mprotect()


class _Buffer:
    """Zeroed memory for the kernel to fill, followed by an inaccessible guard page.

    Kernels before a December 2025 fix to net/ethtool/ioctl.c
    (https://patch.msgid.link/20251208121901.3203692-1-gal@nvidia.com, sent to stable)
    ignore the length user space passes to GSTRINGS and GSTATS and copy as many entries as
    the driver has *now*: a driver reconfigured between our count and our read would write
    past a plain buffer. Past this one the copy faults
    (EFAULT) instead of corrupting the heap. Fixed kernels answer a length mismatch with
    zero entries. Both cases lead to a retry in :meth:`Ethtool.read_stats`.
    """

    def __init__(self, size: int) -> None:
        page = mmap.PAGESIZE
        span = -(-size // page) * page
        self._map = mmap.mmap(
            -1,
            span + page,
            flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
        )
        # The ctypes view is a temporary: its buffer export ends with this statement.
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        if _MPROTECT is not None:
            # Best effort: on failure the buffer is only unguarded, as ethtool's own is.
            _MPROTECT(self.address + span, page, PROT_NONE)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._map.close()

    def write(self, offset: int, data: bytes) -> None:
        """Copy data in at offset."""
        self._map[offset : offset + len(data)] = data

    def read(self, offset: int, length: int) -> bytes:
        """Copy length bytes out from offset."""
        return self._map[offset : offset + length]


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class Ethtool:
    """A socket for SIOCETHTOOL requests, reusable across interfaces and calls."""

    def __init__(self) -> None:
        try:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        except OSError:
            # Kernels built without IPv4: any socket reaches dev_ioctl; ethtool does the same.
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)

    def close(self) -> None:
        """Close the socket."""
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _ioctl(self, ifname: str, address: int) -> None:
        """Run SIOCETHTOOL on ifname with ifr_data = address (the command is in the buffer)."""
        name = os.fsencode(ifname)
        if not name or len(name) >= IFNAMSIZ or b"\0" in name:
            raise OSError(errno.ENODEV, f"not an interface name: {ifname!r}")
        fcntl.ioctl(self._sock.fileno(), SIOCETHTOOL, _IFREQ.pack(name, address))

    def _drvinfo(self, ifname: str) -> tuple[str, str, str, int]:
        with _Buffer(_DRVINFO.size) as buf:
            buf.write(0, struct.pack("=I", ETHTOOL_GDRVINFO))
            self._ioctl(ifname, buf.address)
            fields = _DRVINFO.unpack(buf.read(0, _DRVINFO.size))
        # fields: cmd, driver, version, fw_version, bus_info, erom_version, reserved2,
        # n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len
        return _cstr(fields[1]), _cstr(fields[2]), _cstr(fields[4]), fields[8]

    def driver_info(self, ifname: str) -> tuple[str, str, str]:
        """(driver, version, bus_info) from ETHTOOL_GDRVINFO, as ``ethtool -i`` shows them."""
        driver, version, bus_info, _ = self._drvinfo(ifname)
        return driver, version, bus_info

    def _stats_count(self, ifname: str) -> int:
        """Length of the ETH_SS_STATS string set; 0 when the driver has none."""
        with _Buffer(_SSET_INFO.size + 4) as buf:
            buf.write(0, _SSET_INFO.pack(ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS))
            try:
                self._ioctl(ifname, buf.address)
            except OSError as e:
                if e.errno != errno.EOPNOTSUPP:
                    raise
                # Kernels/drivers without GSSET_INFO: n_stats of GDRVINFO, as ethtool does.
                return self._drvinfo(ifname)[3]
            _, _, mask = _SSET_INFO.unpack(buf.read(0, _SSET_INFO.size))
            if not mask & (1 << ETH_SS_STATS):
                return 0
            (count,) = struct.unpack("=I", buf.read(_SSET_INFO.size, 4))
            return int(count)

    def _strings(self, ifname: str, count: int) -> list[str] | None:
        """The count stat names, or None when the driver no longer has count of them."""
        with _Buffer(_GSTRINGS.size + count * ETH_GSTRING_LEN) as buf:
            buf.write(0, _GSTRINGS.pack(ETHTOOL_GSTRINGS, ETH_SS_STATS, count))
            try:
                self._ioctl(ifname, buf.address)
            except OSError as e:
                if e.errno == errno.EFAULT:  # an older kernel overran into the guard page
                    return None
                raise
            _, _, got = _GSTRINGS.unpack(buf.read(0, _GSTRINGS.size))
            if got != count:
                return None
            raw = buf.read(_GSTRINGS.size, count * ETH_GSTRING_LEN)
        return [_cstr(raw[i : i + ETH_GSTRING_LEN]) for i in range(0, len(raw), ETH_GSTRING_LEN)]

    def _values(self, ifname: str, count: int) -> list[int] | None:
        """The count stat values, or None when the driver no longer has count of them."""
        with _Buffer(_STATS.size + count * 8) as buf:
            buf.write(0, _STATS.pack(ETHTOOL_GSTATS, count))
            try:
                self._ioctl(ifname, buf.address)
            except OSError as e:
                if e.errno == errno.EFAULT:
                    return None
                raise
            _, got = _STATS.unpack(buf.read(0, _STATS.size))
            if got != count:
                return None
            return list(struct.unpack(f"={count}Q", buf.read(_STATS.size, count * 8)))

    def read_stats(self, ifname: str) -> list[tuple[str, int]]:
        """(name, value) of every driver statistic, in the driver's order (``ethtool -S``).

        Raises OSError: EOPNOTSUPP when the driver has no statistics, ENODEV for no such
        interface, EAGAIN when the set kept changing size between reads (a driver being
        reconfigured; the next scrape will do).
        """
        for _ in range(_ATTEMPTS):
            count = self._stats_count(ifname)
            if count == 0:
                raise OSError(errno.EOPNOTSUPP, f"{ifname}: driver has no ethtool statistics")
            names = self._strings(ifname, count)
            if names is None:
                continue
            values = self._values(ifname, count)
            if values is None:
                continue
            return list(zip(names, values, strict=True))
        raise OSError(errno.EAGAIN, f"{ifname}: ethtool statistics kept changing size")


def read_stats(ifname: str) -> list[tuple[str, int]]:
    """:meth:`Ethtool.read_stats` on a socket of its own."""
    with Ethtool() as et:
        return et.read_stats(ifname)


def driver_info(ifname: str) -> tuple[str, str, str]:
    """:meth:`Ethtool.driver_info` on a socket of its own."""
    with Ethtool() as et:
        return et.driver_info(ifname)


@dataclass(frozen=True)
class QueueStat:
    """One per-queue traffic counter."""

    direction: str  # "rx" or "tx"
    queue: int
    kind: str  # "bytes" or "packets"
    value: int


@dataclass(frozen=True)
class _Rule:
    """Names one driver family gives per-queue traffic counters (groups dir, queue, kind)."""

    drivers: str
    pattern: re.Pattern[str]
    kinds: Mapping[str, str] = field(default_factory=dict)  # driver's word -> our kind


# Matched with fullmatch, first rule wins (they do not overlap). Sources:
# drivers/net/ethernet/mellanox/mlx5/core/en_stats.c, mlx4/en_ethtool.c,
# intel/{ixgbe,igb,igc,ice,i40e,iavf}/*_ethtool.c, wangxun/libwx/wx_ethtool.c,
# net/virtio_net.c, hyperv/netvsc_drv.c, ibm/ibmvnic.c, ibm/ibmveth.c,
# sfc/ethtool_common.c, amazon/ena/ena_ethtool.c, broadcom/bnxt/bnxt_ethtool.c.
_RULES: tuple[_Rule, ...] = (
    _Rule(
        "mlx5_core mlx4_en ibmvnic ibmveth",
        re.compile(r"(?P<dir>rx|tx)(?P<q>\d+)_(?P<kind>bytes|packets)"),
    ),
    _Rule(
        "ixgbe igb igc ice hv_netvsc ngbe txgbe virtio_net<6.10",
        re.compile(r"(?P<dir>rx|tx)_queue_(?P<q>\d+)_(?P<kind>bytes|packets)"),
    ),
    _Rule(
        "i40e iavf sfc",
        re.compile(r"(?P<dir>rx|tx)-(?P<q>\d+)\.(?:(?P=dir)_)?(?P<kind>bytes|packets)"),
    ),
    _Rule(
        "ena",
        re.compile(r"queue_(?P<q>\d+)_(?P<dir>rx|tx)_(?P<kind>bytes|cnt)"),
        {"cnt": "packets"},
    ),
    _Rule(
        "bnxt_en",
        re.compile(r"\[(?P<q>\d+)\]: (?P<dir>rx|tx)_(?:ucast|mcast|bcast)_(?P<kind>bytes|packets)"),
    ),
)


def _classify(name: str) -> tuple[str, int, str] | None:
    for rule in _RULES:
        m = rule.pattern.fullmatch(name)
        if m is not None:
            kind = m["kind"]
            return m["dir"], int(m["q"]), rule.kinds.get(kind, kind)
    return None


def queue_stats(pairs: Iterable[tuple[str, int]]) -> list[QueueStat]:
    """Per-queue rx/tx bytes/packets out of a driver's (name, value) statistics.

    Unrecognised names are ignored; counters naming the same (direction, queue, kind) are
    summed (bnxt's unicast, multicast and broadcast); queues >= MAX_QUEUES are dropped.
    Sorted by direction, queue, kind.
    """
    totals: dict[tuple[str, int, str], int] = {}
    for name, value in pairs:
        key = _classify(name)
        if key is None or key[1] >= MAX_QUEUES:
            continue
        totals[key] = totals.get(key, 0) + value
    return [QueueStat(d, q, k, v) for (d, q, k), v in sorted(totals.items())]


__all__ = [
    "MAX_QUEUES",
    "Ethtool",
    "QueueStat",
    "driver_info",
    "queue_stats",
    "read_stats",
]
