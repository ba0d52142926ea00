"""Per-queue NIC counters from the kernel's netdev netlink family (``qstats-get``, Linux >= 6.9).

Drivers are moving per-queue traffic counters out of their free-form ethtool statistics into
this standard interface (kernel commit ab63a2387cb9, "netdev: add per-queue statistics"):
virtio_net from 6.10 on (d888f04c09bb, "virtio-net: support queue stat") keeps only XDP and
kick counters in ethtool, and mlx5, bnxt, ice, gve, idpf and others answer here too. One dump
returns every queue of every device: ~330 µs of CPU through pyroute2 on a 1-NIC VM, against
~100 µs for one NIC's ethtool read (bench/nic_queue_read.py), a cost paid once per scrape.

Spec: Documentation/netlink/specs/netdev.yaml. Counters are ``uint`` attributes (4 or 8
bytes, host order). Queues that are not active are not listed (the kernel folds their counts
into the device's "base" stats), so per-queue sums can be lower than the totals in /sys.
"""

from __future__ import annotations

import concurrent.futures
import errno
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

from .ethtool import MAX_QUEUES, QueueStat

# netdev.yaml enums and attribute numbers (include/uapi/linux/netdev.h)
CMD_QSTATS_GET = 12
SCOPE_QUEUE = 1  # per-queue records, not device totals
QUEUE_TYPES = {0: "rx", 1: "tx"}
ATTRS = {
    1: "ifindex",
    2: "queue-type",
    3: "queue-id",
    4: "scope",
    8: ("rx", "packets"),
    9: ("rx", "bytes"),
    10: ("tx", "packets"),
    11: ("tx", "bytes"),
}


def queue_stats_by_ifindex(records: Iterable[Mapping[int, int]]) -> dict[int, list[QueueStat]]:
    """Per-queue rx/tx bytes/packets out of qstats records (attribute number -> value).

    Records without an interface, queue type or queue id are not per-queue and are skipped; a
    counter of the other direction than the record's queue type is ignored; queues numbered
    MAX_QUEUES and up are dropped, as for ethtool. Sorted by direction, queue, kind.
    """
    out: dict[int, list[QueueStat]] = {}
    for rec in records:
        ifindex, qtype, qid = rec.get(1), rec.get(2), rec.get(3)
        if ifindex is None or qid is None or qtype not in QUEUE_TYPES or qid >= MAX_QUEUES:
            continue
        direction = QUEUE_TYPES[qtype]
        for attr in (8, 9, 10, 11):
            name = ATTRS[attr]
            if attr in rec and isinstance(name, tuple) and name[0] == direction:
                out.setdefault(ifindex, []).append(QueueStat(direction, qid, name[1], rec[attr]))
    for stats in out.values():
        stats.sort(key=lambda s: (s.direction, s.queue, s.kind))
    return out


def _import_netlink() -> tuple[Any, Any, Any]:
    """Import pyroute2's netlink core without the package's __init__, when nothing has yet.

    pyroute2/__init__.py imports every subsystem (NDB with sqlite, IPDB, nftables, wireguard:
    163 modules, +21 MB RSS in the agent) where this reader needs pyroute2.netlink and its
    generic socket (16 modules, +12 MB): measured, the agent's RSS falls from 61 to ~52 MB
    (the blockio issue's goal is 60). The package is stood in by a bare module for the import
    only; the real one is loaded as usual by whoever imports `pyroute2` afterwards (the
    submodules are shared through sys.modules).
    """
    names = ("pyroute2.netlink", "pyroute2.netlink.exceptions", "pyroute2.netlink.generic")
    if "pyroute2" in sys.modules:
        return tuple(importlib.import_module(n) for n in names)  # type: ignore[return-value]
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("no pyroute2")
    stub = types.ModuleType("pyroute2")
    stub.__path__ = list(spec.submodule_search_locations)
    stub.__spec__ = spec
    sys.modules["pyroute2"] = stub
    try:
        return tuple(importlib.import_module(n) for n in names)  # type: ignore[return-value]
    finally:
        if sys.modules.get("pyroute2") is stub:
            del sys.modules["pyroute2"]


class QstatsUnavailable(OSError):
    """This kernel has no netdev netlink family or no qstats-get (older than Linux 6.10)."""


class NetdevQstats:
    """Reads every device's per-queue counters with one netlink dump (pyroute2).

    Every pyroute2 call runs in one thread of its own. pyroute2 (0.9) keeps an asyncio event
    loop and a datagram transport per socket *per thread* (threading.local in
    pyroute2/netlink/core.py) and closes only the calling thread's: read from the HTTP
    server's 8 route threads, one socket grew up to 8 loops and 8 transports over its fd, and
    close() at stop closed none of them (ResourceWarning "unclosed transport" and "unclosed
    event loop" at every agent exit under `python -X dev`; issue 34's stray asyncio errors).
    """

    def __init__(self) -> None:
        self._sock: Any = None
        self._msg: Any = None
        self._netlink: Any = None
        self._exceptions: Any = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    def _in_thread(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qstats")
        return self._thread

    def _open(self) -> None:
        try:  # a dependency; a broken install costs per-queue netlink counters, not the agent
            netlink, exceptions, generic = _import_netlink()
        except ImportError as exc:
            raise QstatsUnavailable(errno.ENOSYS, f"pyroute2 cannot be imported ({exc})") from exc

        genlmsg, GenericNetlinkSocket = netlink.genlmsg, generic.GenericNetlinkSocket
        NetlinkError = exceptions.NetlinkError
        self._netlink, self._exceptions = netlink, exceptions

        class QstatsMsg(genlmsg):  # type: ignore[misc,valid-type]
            # counters are "cdata": 4 or 8 bytes (NLA_UINT), decoded below
            nla_map = (
                (1, "IFINDEX", "uint32"),
                (2, "QUEUE_TYPE", "uint32"),
                (3, "QUEUE_ID", "uint32"),
                (4, "SCOPE", "uint32"),
                (8, "RX_PACKETS", "cdata"),
                (9, "RX_BYTES", "cdata"),
                (10, "TX_PACKETS", "cdata"),
                (11, "TX_BYTES", "cdata"),
            )

        sock = GenericNetlinkSocket()
        try:
            sock.bind("netdev", QstatsMsg)
        except NetlinkError as exc:
            sock.close()
            raise QstatsUnavailable(errno.ENOENT, "no netdev netlink family") from exc
        self._sock, self._msg = sock, QstatsMsg

    def read(self) -> dict[int, list[QueueStat]]:
        """ifindex -> per-queue counters; QstatsUnavailable when the kernel cannot say."""
        return self._in_thread().submit(self._read).result()

    def _read(self) -> dict[int, list[QueueStat]]:
        if self._sock is None:
            self._open()
        NLM_F_DUMP, NLM_F_REQUEST = self._netlink.NLM_F_DUMP, self._netlink.NLM_F_REQUEST
        NetlinkError = self._exceptions.NetlinkError

        msg = self._msg()
        msg["cmd"] = CMD_QSTATS_GET
        msg["version"] = 1
        msg["attrs"] = [("SCOPE", SCOPE_QUEUE)]
        numbers = {"IFINDEX": 1, "QUEUE_TYPE": 2, "QUEUE_ID": 3, "SCOPE": 4}
        numbers |= {"RX_PACKETS": 8, "RX_BYTES": 9, "TX_PACKETS": 10, "TX_BYTES": 11}
        records = []
        try:
            for reply in self._sock.nlm_request(
                msg, msg_type=self._sock.prid, msg_flags=NLM_F_REQUEST | NLM_F_DUMP
            ):
                rec: dict[int, int] = {}
                for name, value in reply["attrs"]:
                    num = numbers.get(name)
                    if num is None:
                        continue
                    if isinstance(value, bytes | bytearray):
                        value = int.from_bytes(value, sys.byteorder)
                    rec[num] = int(value)
                records.append(rec)
        except NetlinkError as exc:
            if exc.code in (errno.EOPNOTSUPP, errno.EINVAL):  # family without qstats-get
                raise QstatsUnavailable(exc.code, "netdev netlink has no qstats-get") from exc
            raise OSError(exc.code, f"qstats-get: {exc}") from exc
        return queue_stats_by_ifindex(records)

    def close(self) -> None:
        """Close the netlink socket, its event loop and transport, in the thread they live in."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.submit(self._close).result()
            thread.shutdown(wait=True)

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
