"""The one SNMPv2c command responder: GET, GETNEXT and GETBULK over a view of recorded rows.

The simulated PDU (collector/demo/pdusim.py) serves a recording through it and writes its
modelled watts into the view once a second; the tests serve recordings through it, some with
faults switched on (`Faults`: a GETBULK above a size answered with tooBig, cut in half or not at
all; side-by-side answers laid out subtree by subtree; OIDs that stop increasing). The rows are
`Value`s as snmprec.read_snmprec returns them, keyed by OID arcs.

Messages are decoded and encoded by pysnmp's SNMPv2c protocol module (pyasn1's BER codec), not by
exporters/snmp/ber.py: that codec is the client's half only (it builds requests and reads
responses), and an agent sharing its codec with the client under test could not catch its bugs.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import select
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporters.snmp.oid import oid_arcs
from exporters.snmp.types import Value

Arcs = tuple[int, ...]
Row = tuple[Arcs, Value]
FAULTS = ("tooBig", "garbage", "silent")


@dataclass(frozen=True)
class Faults:
    """How a responder misbehaves on purpose (the fault tests); by default it does not."""

    # A GETBULK with max-repetitions above `max_bulk`, or asking for more than `max_response`
    # var-binds in all (max-repetitions x subtrees), gets `fault`: "tooBig" (a Response with
    # error-status tooBig(1), which snmpsim never sends), "garbage" (the response cut in half,
    # undecodable) or "silent" (no answer: a timeout on bulk only).
    max_bulk: int | None = None
    max_response: int | None = None
    fault: str = "tooBig"
    # GETBULK answers for several subtrees laid out subtree by subtree instead of repetition by
    # repetition (RFC 3416 section 4.2.3)
    column_major: bool = False
    # every GETNEXT/GETBULK answered from the start of the view again: OIDs stop increasing
    loop: bool = False

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}")

    def too_big(self, repetitions: int, width: int) -> bool:
        """True when a GETBULK of `width` subtrees x `repetitions` is to fail."""
        return (self.max_bulk is not None and repetitions > self.max_bulk) or (
            self.max_response is not None and repetitions * width > self.max_response
        )


@dataclass
class Stats:
    """What a responder saw: requests with its community, and the shape of each GETBULK."""

    requests: int = 0
    bulk_sizes: list[int] = field(default_factory=list)  # max-repetitions of each GETBULK
    bulk_widths: list[int] = field(default_factory=list)  # var-binds (subtrees) of each GETBULK
    faults: int = 0


# Value types without a value -> their pysnmp class names; the others have the SMI type's name.
_EMPTY = {
    "Null": "Null",
    "noSuchObject": "NoSuchObject",
    "noSuchInstance": "NoSuchInstance",
    "endOfMibView": "EndOfMibView",
}


@functools.cache
def _v2c() -> Any:
    from pysnmp.proto import api

    return api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]


def _wire(value: Value) -> Any:
    """The pysnmp object that encodes `value` (Null for a variation row without a value)."""
    p = _v2c()
    if value.type in _EMPTY or value.value is None:
        return getattr(p, _EMPTY.get(value.type, "Null"))("")
    return getattr(p, value.type)(value.value)


class Responder:
    """An SNMPv2c agent on a UDP socket: `with Responder(walk, community) as agent:` serves it
    in a thread on agent.host:agent.port; answer() is the same without a socket."""

    def __init__(
        self,
        walk: Mapping[str, Value],
        community: str = "public",
        *,
        faults: Faults | None = None,
        max_repetitions: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.community = community
        self.faults = faults or Faults()
        self.max_repetitions = max_repetitions  # a GETBULK is answered with at most this many
        self.host = host
        self.port = port
        self.stats = Stats()
        self.lock = threading.Lock()
        self._values: dict[Arcs, Value] = {}
        self._keys: list[Arcs] = []
        self._encoded: dict[Arcs, Any] = {}
        self.rows = [(oid_arcs(oid), v) for oid, v in walk.items()]
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the view --------------------------------------------------------------------------

    @property
    def rows(self) -> list[Row]:
        """The view in OID order; assign to serve other rows from the next request on."""
        with self.lock:
            return [(k, self._values[k]) for k in self._keys]

    @rows.setter
    def rows(self, rows: Iterable[Row]) -> None:
        values = dict(rows)
        with self.lock:
            self._values, self._keys, self._encoded = values, sorted(values), {}

    def set(self, values: Mapping[str, Value]) -> None:
        """Set (or add) the rows at these OIDs, all at once for the requests that follow."""
        with self.lock:
            for oid, value in values.items():
                key = oid_arcs(oid)
                if key not in self._values:
                    bisect.insort(self._keys, key)
                self._values[key] = value
                self._encoded.pop(key, None)

    def _encoded_at(self, key: Arcs) -> Any:
        hit = self._encoded.get(key)
        if hit is None:
            hit = self._encoded[key] = _wire(self._values[key])
        return hit

    def _get(self, name: Arcs) -> tuple[Arcs, Any]:
        if name in self._values:
            return name, self._encoded_at(name)
        return name, _v2c().NoSuchInstance("")

    def _next(self, name: Arcs) -> tuple[Arcs, Any]:
        i = 0 if self.faults.loop else bisect.bisect_right(self._keys, name)
        if i < len(self._keys):
            return self._keys[i], self._encoded_at(self._keys[i])
        return name, _v2c().EndOfMibView("")

    def _bulk(self, names: list[Arcs], non_repeaters: int, repetitions: int) -> list[Any]:
        out = [self._next(n) for n in names[:non_repeaters]]
        cursors = names[non_repeaters:]
        if self.faults.column_major:  # a broken agent: each subtree's repetitions together
            for n in cursors:
                for _ in range(repetitions):
                    out.append(self._next(n))
                    n = out[-1][0]
            return out
        end = _v2c().EndOfMibView
        for _ in range(repetitions):
            if not cursors:
                break
            step = [self._next(n) for n in cursors]
            out.extend(step)
            cursors = [s[0] for s in step]
            if all(isinstance(s[1], end) for s in step):
                break
        return out

    # --- one message -----------------------------------------------------------------------

    def answer(self, data: bytes) -> bytes | None:
        """The response to one request datagram; None when there is to be none (garbage, a
        wrong community, a PDU type other than GET/GETNEXT/GETBULK, a silent fault)."""
        from pyasn1.codec.ber import decoder, encoder

        p = _v2c()
        try:
            req, _ = decoder.decode(data, asn1Spec=p.Message())
        except Exception:
            return None
        if str(p.apiMessage.get_community(req)) != self.community:
            return None  # like a real agent: a wrong community gets no answer
        pdu = p.apiMessage.get_pdu(req)
        rsp = p.apiMessage.get_response(req)
        rsp_pdu = p.apiMessage.get_pdu(rsp)
        names = [tuple(vb[0]) for vb in p.apiPDU.get_varbinds(pdu)]
        too_big = False
        with self.lock:
            self.stats.requests += 1
            if pdu.isSameTypeWith(p.GetRequestPDU()):
                out = [self._get(n) for n in names]
            elif pdu.isSameTypeWith(p.GetNextRequestPDU()):
                out = [self._next(n) for n in names]
            elif pdu.isSameTypeWith(p.GetBulkRequestPDU()):
                reps = int(p.apiBulkPDU.get_max_repetitions(pdu))
                non_rep = int(p.apiBulkPDU.get_non_repeaters(pdu))
                self.stats.bulk_sizes.append(reps)
                self.stats.bulk_widths.append(len(names) - non_rep)
                too_big = self.faults.too_big(reps, len(names) - non_rep)
                if too_big:
                    self.stats.faults += 1
                    if self.faults.fault == "silent":
                        return None
                    if self.faults.fault == "tooBig":
                        p.apiPDU.set_error_status(rsp_pdu, 1)
                        p.apiPDU.set_error_index(rsp_pdu, 0)
                        p.apiPDU.set_varbinds(rsp_pdu, [])
                        return bytes(encoder.encode(rsp))
                if self.max_repetitions is not None:
                    reps = min(reps, self.max_repetitions)
                out = self._bulk(names, non_rep, max(reps, 0))
            else:
                return None
        p.apiPDU.set_varbinds(rsp_pdu, out)
        whole = bytes(encoder.encode(rsp))
        return whole[: len(whole) // 2] if too_big else whole  # too big here: "garbage"

    # --- on a socket -----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """host:port."""
        return f"{self.host}:{self.port}"

    def start(self) -> Responder:
        """Bind host:port (port 0: a free one, then in self.port) and answer in a thread."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.bind((self.host, self.port))
        self.port = int(self._sock.getsockname()[1])
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="snmp-responder", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and close the socket (its port is closed from then on)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Responder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._stop.is_set():
            if not select.select([sock], [], [], 0.05)[0]:
                continue
            try:
                data, peer = sock.recvfrom(65535)
            except OSError:
                continue
            reply = self.answer(data)
            if reply is not None:
                with contextlib.suppress(OSError):
                    sock.sendto(reply, peer)
