"""The SNMP client of the PDU poller: GET and GETBULK subtree walks, SNMPv2c and SNMPv3 (asyncio).

One `SnmpClient` is shared by every concurrent poll in one event loop. SNMPv3 requests go
through one pysnmp 7 `SnmpEngine` for the client's lifetime (USM, engine discovery, SHA-2 and
AES), via pysnmp's command generator applications (`pysnmp.entity.rfc3413.cmdgen`, the layer
under `hlapi`'s `bulk_cmd`) with numeric OIDs, so there is no MIB resolution either way.
SNMPv2c requests, where there is no security processing, go over one plain UDP socket (udp.py)
with a minimal BER codec (ber.py): pyasn1's generic decoder, under pysnmp, costs 65-70 µs of CPU
per var-bind, more than the poller's whole budget per value (docs/benchmarks.md). Both paths
return the same `Value`s; tests read every recording through the v2c path and the v3 path and
compare both with net-snmp.

The walk loop is ours rather than `bulk_walk_cmd`, because that helper ends a walk at the first
Null *value* (real agents return Null rows, e.g. CyberPower), retries timeouts forever, cannot
change max-repetitions half way, and walks one subtree per request. `walk_many` walks several
subtrees side by side in one GETBULK (RFC 3416 section 4.2.3: one repeater var-bind per
subtree) and sizes each request from the lengths seen in the previous poll, so a poll asks
for little more than it uses.

References: GETBULK semantics, RFC 3416 section 4.2.3; USM, RFC 3414 and RFC 7860 (SHA-2);
pysnmp 7 docs, https://docs.lextudio.com/pysnmp/ .
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from pyasn1.type import univ
from pysnmp.carrier.asyncio.dgram import udp, udp6
from pysnmp.entity import config
from pysnmp.entity.engine import SnmpEngine
from pysnmp.entity.rfc3413 import cmdgen
from pysnmp.error import PySnmpError
from pysnmp.hlapi.v3arch.asyncio import auth as hauth
from pysnmp.hlapi.v3arch.asyncio.lcd import CommandGeneratorLcdConfigurator
from pysnmp.hlapi.v3arch.asyncio.transport import Udp6TransportTarget, UdpTransportTarget
from pysnmp.proto import errind, rfc1902, rfc1905
from pysnmp.proto.error import StatusInformation

from . import ber
from .types import Value, Walk
from .udp import Garbage, RequestTimeout, V2cTransport, client_socket

log = logging.getLogger(__name__)

# Error reasons. "refused" is reserved: one unconnected UDP socket cannot tell which agent an
# ICMP port-unreachable was about, so a closed port reads as "timeout".
REASONS = frozenset({"timeout", "auth", "too_big", "garbage", "refused", "error"})

_AUTH_PROTOCOLS: dict[str | None, Any] = {
    None: hauth.USM_AUTH_NONE,
    "MD5": hauth.USM_AUTH_HMAC96_MD5,
    "SHA": hauth.USM_AUTH_HMAC96_SHA,
    "SHA224": hauth.USM_AUTH_HMAC128_SHA224,
    "SHA256": hauth.USM_AUTH_HMAC192_SHA256,
    "SHA384": hauth.USM_AUTH_HMAC256_SHA384,
    "SHA512": hauth.USM_AUTH_HMAC384_SHA512,
}
# AES-192/256 are not standardised. "AES192"/"AES256" use the Blumenthal key extension
# (draft-blumenthal-aes-usm-04), which net-snmp (and so most PDU firmware) implements as
# AES-192/AES-256; "AES192C"/"AES256C" are the Reeder extension used by Cisco. The two agree
# when the auth protocol's localized key is already long enough (SHA-256 and up for AES-256).
_PRIV_PROTOCOLS: dict[str | None, Any] = {
    None: hauth.USM_PRIV_NONE,
    "DES": hauth.USM_PRIV_CBC56_DES,
    "AES128": hauth.USM_PRIV_CFB128_AES,
    "AES192": hauth.USM_PRIV_CFB192_AES_BLUMENTHAL,
    "AES256": hauth.USM_PRIV_CFB256_AES_BLUMENTHAL,
    "AES192C": hauth.USM_PRIV_CFB192_AES,
    "AES256C": hauth.USM_PRIV_CFB256_AES,
}

# pysnmp errorIndication -> reason. Anything else is "error".
_AUTH_INDICATIONS = (
    errind.UnknownUserName,
    errind.WrongDigest,
    errind.DecryptionError,
    errind.UnknownEngineID,
    errind.NotInTimeWindow,
    errind.AuthenticationFailure,
    errind.AuthenticationError,
    errind.UnknownSecurityName,
    errind.UnsupportedSecurityLevel,
    errind.UnsupportedAuthProtocol,
    errind.UnsupportedPrivProtocol,
    errind.UnknownCommunityName,
    errind.NoAuthentication,
)
_GARBAGE_INDICATIONS = (
    errind.DeserializationError,  # includes ParseError
    errind.EmptyResponse,
    errind.DataMismatch,
    errind.OidNotIncreasing,
    errind.InvalidMsg,
)
# RFC 3416 section 3 error-status names, for messages.
_ERROR_STATUS = [
    "noError",
    "tooBig",
    "noSuchName",
    "badValue",
    "readOnly",
    "genErr",
    "noAccess",
    "wrongType",
    "wrongLength",
    "wrongEncoding",
    "wrongValue",
    "noCreation",
    "inconsistentValue",
    "resourceUnavailable",
    "commitFailed",
    "undoFailed",
    "authorizationError",
    "notWritable",
    "inconsistentName",
]


def _octets(v: Any) -> bytes:
    return bytes(v.asOctets())


def _ip(v: Any) -> str:
    return ".".join(str(b) for b in v.asOctets())


def _none(v: Any) -> None:
    return None


# Wire tag -> (SMI type name, converter). Unsigned32 and Gauge32 share one tag (RFC 2578
# section 7.1.11), so both read as Gauge32, as net-snmp prints them.
_CONVERT: dict[Any, tuple[str, Any]] = {
    univ.Integer.tagSet: ("Integer32", int),
    univ.OctetString.tagSet: ("OctetString", _octets),
    univ.Null.tagSet: ("Null", _none),
    univ.ObjectIdentifier.tagSet: ("ObjectIdentifier", str),
    rfc1902.IpAddress.tagSet: ("IpAddress", _ip),
    rfc1902.Counter32.tagSet: ("Counter32", int),
    rfc1902.Gauge32.tagSet: ("Gauge32", int),
    rfc1902.TimeTicks.tagSet: ("TimeTicks", int),
    rfc1902.Opaque.tagSet: ("Opaque", _octets),
    rfc1902.Counter64.tagSet: ("Counter64", int),
    rfc1905.NoSuchObject.tagSet: ("noSuchObject", _none),
    rfc1905.NoSuchInstance.tagSet: ("noSuchInstance", _none),
    rfc1905.EndOfMibView.tagSet: ("endOfMibView", _none),
}
_NULL = univ.Null("")
_SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)  # any answer to a GET of it shows the agent is up
_V3_PROBE_USER = "wattbit-engine-id-probe"  # never on the wire: see _engine_id()


@dataclass(frozen=True)
class Auth:
    """SNMP credentials: v2c community, or a v3 USM user (secrets never in repr)."""

    version: str  # "2c" or "3"
    community: str | None = field(default=None, repr=False)
    user: str | None = None
    auth_protocol: str | None = None  # MD5 SHA SHA224 SHA256 SHA384 SHA512
    auth_key: str | None = field(default=None, repr=False)
    priv_protocol: str | None = None  # DES AES128 AES192 AES256 (AES192C AES256C: Cisco)
    priv_key: str | None = field(default=None, repr=False)
    context_name: str = ""

    def __post_init__(self) -> None:
        if self.version == "2c":
            if not self.community:
                raise ValueError("SNMPv2c needs a community")
            return
        if self.version != "3":
            raise ValueError(f"SNMP version must be '2c' or '3', not {self.version!r}")
        if not self.user:
            raise ValueError("SNMPv3 needs a user name")
        if self.auth_protocol not in _AUTH_PROTOCOLS:
            raise ValueError(f"unknown SNMPv3 auth protocol {self.auth_protocol!r}")
        if self.priv_protocol not in _PRIV_PROTOCOLS:
            raise ValueError(f"unknown SNMPv3 privacy protocol {self.priv_protocol!r}")
        if self.priv_protocol and not self.auth_protocol:
            raise ValueError("SNMPv3 privacy needs authentication (RFC 3414 section 3.1.1)")
        # RFC 3414 section 11.2: pass phrases of at least 8 octets
        if self.auth_protocol and len(self.auth_key or "") < 8:
            raise ValueError(f"SNMPv3 auth key of user {self.user!r} is shorter than 8")
        if self.priv_protocol and len(self.priv_key or "") < 8:
            raise ValueError(f"SNMPv3 privacy key of user {self.user!r} is shorter than 8")


@dataclass(frozen=True)
class Target:
    """One SNMP agent: address, credentials and request tuning."""

    host: str
    port: int = 161
    auth: Auth = field(default=None)  # type: ignore[assignment]  # required: no "public"
    timeout: float = 2.0
    retries: int = 1
    max_repetitions: int = 25  # the most var-binds one GETBULK asks for, all subtrees together

    def __post_init__(self) -> None:
        if not isinstance(self.auth, Auth):
            raise TypeError("Target needs auth=Auth(...)")
        if not 0 < self.port < 65536:
            raise ValueError(f"bad UDP port {self.port}")
        if self.timeout <= 0 or self.retries < 0 or self.max_repetitions < 1:
            raise ValueError("timeout must be > 0, retries >= 0, max_repetitions >= 1")

    @property
    def endpoint(self) -> str:
        """host:port."""
        return f"{self.host}:{self.port}"

    @property
    def label(self) -> str:
        """host:port, and the v3 user name: what messages call the target."""
        if self.auth.version == "3":
            return f"{self.host}:{self.port} (SNMPv3 user {self.auth.user})"
        return f"{self.host}:{self.port} (SNMPv2c)"


class SnmpError(Exception):
    """An SNMP request failed; `reason` is one short fixed label (see REASONS)."""

    def __init__(self, reason: str, target: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown SNMP error reason {reason!r}")
        super().__init__(reason, target, detail)
        self.reason = reason
        self.target = target
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def _oid_tuple(oid: str) -> tuple[int, ...]:
    text = oid.strip().lstrip(".")
    try:
        parts = tuple(int(x) for x in text.split("."))
    except ValueError:
        raise ValueError(f"not a numeric OID: {oid!r}") from None
    if len(parts) < 2 or min(parts) < 0:
        raise ValueError(f"not a numeric OID: {oid!r}")
    return parts


def _to_value(v: Any) -> Value:
    kind, conv = _CONVERT.get(v.tagSet, ("Opaque", _octets))
    return Value(kind, conv(v))


# One var-bind of a response: the OID's arcs (for ordering), the dotted OID, the value.
VarBind = tuple[tuple[int, ...], str, Value]


class _Misordered(Exception):
    """A GETBULK answer for several subtrees is not laid out repetition by repetition."""


@dataclass(eq=False)
class _Column:
    """One subtree being walked: where its walk stands."""

    root: tuple[int, ...]
    name: str
    cursor: tuple[int, ...]
    got: int = 0  # var-binds inside the subtree so far
    done: bool = False


class SnmpClient:
    """GET and GETBULK walks against many agents: SNMPv2c over one socket, v3 over one engine."""

    def __init__(self) -> None:
        self._engine: SnmpEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._v2c: dict[int, V2cTransport] = {}  # address family -> socket
        self._addresses: dict[tuple[str, int], tuple[int, tuple[str, int]]] = {}
        self._lcd = CommandGeneratorLcdConfigurator()
        self._get_app = cmdgen.GetCommandGenerator()
        # stops at the engine ID discovery Report instead of retrying with a user
        self._probe_app = cmdgen.GetCommandGenerator(discoveryRetries=0)
        self._bulk_app = cmdgen.BulkCommandGeneratorSingleRun()
        self._transports: dict[tuple[str, int, float, int], Any] = {}  # Udp(6)TransportTarget
        self._auth_data: dict[tuple[Auth, bytes | None], Any] = {}
        self._engine_ids: dict[tuple[str, int], bytes] = {}
        self._discovery_locks: dict[tuple[str, int], asyncio.Lock] = {}
        # working GETBULK size (var-binds per request) per (host, port), once a bigger one failed
        self.bulk_sizes: dict[tuple[str, int], int] = {}
        # (host, port, credentials, subtree) -> var-binds its last walk took, the one past its
        # end included. Per credentials too: one agent can show other data per community or
        # v3 context (a console server fronting several PDUs, or snmpsim).
        self._lengths: dict[tuple[str, int, Auth, str], int] = {}
        self._answered: set[tuple[str, int]] = set()  # agents that ever answered
        # agents whose GETBULK answers for several subtrees were misordered: one per request
        self._one_at_a_time: set[tuple[str, int]] = set()
        self._v3_var_binds = 0
        self._garbage_at: dict[tuple[str, int], float] = {}  # address -> last undecodable (v3)
        self._pending: set[asyncio.Future[Any]] = set()
        self._closed = False

    # -- engine, socket and per-target configuration ------------------------------------------

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise RuntimeError("SnmpClient is closed")
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("SnmpClient is bound to the event loop it first ran in")
        return loop

    def _ensure_engine(self) -> SnmpEngine:
        loop = self._bind_loop()
        if self._engine is None:
            # pysnmp's asyncio dispatcher binds to the loop it is created in: create it here
            engine = SnmpEngine()
            transport = udp.UdpAsyncioTransport(loop=loop).open_server_mode(sock=client_socket())
            config.add_transport(engine, udp.DOMAIN_NAME, transport)
            try:
                sock6 = client_socket(socket.AF_INET6)
            except OSError:  # IPv6 disabled on this host: IPv4 agents only
                log.debug("no IPv6 socket for SNMPv3", exc_info=True)
            else:
                transport6 = udp6.Udp6AsyncioTransport(loop=loop).open_server_mode(sock=sock6)
                config.add_transport(engine, udp6.DOMAIN_NAME, transport6)
            self._watch_parse_errors(engine)
            self._engine = engine
        return self._engine

    async def _ensure_v2c(self, family: int) -> V2cTransport:
        self._bind_loop()
        if family not in self._v2c:
            transport = V2cTransport(family)
            await transport.open()
            if family not in self._v2c:  # another poll may have opened one meanwhile
                self._v2c[family] = transport
            else:
                transport.close()
        return self._v2c[family]

    def _watch_parse_errors(self, engine: SnmpEngine) -> None:
        # pysnmp drops an undecodable datagram silently (RFC 3412 section 4.2.1, counting it in
        # snmpInASNParseErrs), so a PDU answering garbage looks like a timeout. Remember which
        # address sent it, to report "garbage" and to fall back to smaller GETBULKs.
        (counter,) = engine.get_mib_builder().import_symbols("__SNMPv2-MIB", "snmpInASNParseErrs")
        dispatcher = engine.message_dispatcher
        receive = dispatcher.receive_message

        def receive_message(snmp_engine: Any, domain: Any, address: Any, whole: Any) -> Any:
            before = int(counter.syntax)
            try:
                return receive(snmp_engine, domain, address, whole)
            finally:
                if int(counter.syntax) != before:
                    self._garbage_at[(str(address[0]), int(address[1]))] = time.monotonic()

        dispatcher.receive_message = receive_message

    async def _address(self, target: Target) -> tuple[int, tuple[str, int]]:
        """The target's address family and (address, port), resolved once (first answer)."""
        key = (target.host, target.port)
        found = self._addresses.get(key)
        if found is None:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)
            except OSError:
                infos = []
            infos = [i for i in infos if i[0] in (socket.AF_INET, socket.AF_INET6)]
            if not infos:
                raise SnmpError(
                    "error", target.endpoint, f"cannot resolve {target.host!r} ({target.label})"
                )
            family, _, _, _, sockaddr = infos[0]
            found = (int(family), (str(sockaddr[0]), int(sockaddr[1])))
            self._addresses[key] = found
        return found

    async def _transport(self, target: Target) -> Any:
        """pysnmp's transport target (IPv4 or IPv6) for an SNMPv3 agent."""
        key = (target.host, target.port, float(target.timeout), int(target.retries))
        tt = self._transports.get(key)
        if tt is None:
            family, address = await self._address(target)
            kind = Udp6TransportTarget if family == socket.AF_INET6 else UdpTransportTarget
            try:
                tt = await kind.create(address, timeout=target.timeout, retries=target.retries)
            except PySnmpError:
                raise SnmpError(
                    "error", target.endpoint, f"cannot resolve {target.host!r} ({target.label})"
                ) from None
            self._transports[key] = tt
        return tt

    def _auth_object(self, auth: Auth, engine_id: bytes | None) -> Any:
        key = (auth, engine_id)
        obj = self._auth_data.get(key)
        if obj is None:
            obj = hauth.UsmUserData(
                auth.user,
                authKey=auth.auth_key if auth.auth_protocol else None,
                privKey=auth.priv_key if auth.priv_protocol else None,
                authProtocol=_AUTH_PROTOCOLS[auth.auth_protocol],
                privProtocol=_PRIV_PROTOCOLS[auth.priv_protocol],
                securityEngineId=(univ.OctetString(engine_id) if engine_id is not None else None),
            )
            self._auth_data[key] = obj
        return obj

    async def _engine_id(self, target: Target, tt: Any) -> bytes | None:
        """The agent's snmpEngineID (RFC 3414 section 4), discovered once per agent.

        pysnmp keeps one USM row per (engine ID, user name). Configured without an engine ID,
        a user's keys live in one shared row that is replaced whenever another PDU has the
        same user name with other keys, which breaks requests already in flight. Keyed by the
        agent's own engine ID, every PDU gets its own row.
        """
        key = (target.host, target.port)
        engine_id = self._engine_ids.get(key)
        if engine_id is not None:
            return engine_id
        # concurrent first requests to one agent share one discovery
        async with self._discovery_locks.setdefault(key, asyncio.Lock()):
            engine_id = self._engine_ids.get(key)
            if engine_id is None:
                engine_id = await self._discover_engine_id(target, tt)
            return engine_id

    async def _discover_engine_id(self, target: Target, tt: Any) -> bytes | None:
        key = (target.host, target.port)
        engine = self._ensure_engine()
        mp = engine.message_processing_subsystems[3]
        found = mp.get_peer_engine_info(tt.TRANSPORT_DOMAIN, tt.transport_address)[0]
        if not found:
            # RFC 3414 section 4 discovery: for an unknown peer pysnmp first sends a blank
            # noAuthNoPriv message (no user name) whose Report carries the agent's engine ID,
            # cached by pysnmp's message processing. The probe application stops there
            # (discoveryRetries=0), so the probe's own user name never leaves this host.
            probe = Auth("3", user=_V3_PROBE_USER)
            await self._request_v3(target, tt, probe, "get", [_oid_tuple("1.3.6.1.2.1.1.2.0")], 0)
            found = mp.get_peer_engine_info(tt.TRANSPORT_DOMAIN, tt.transport_address)[0]
        if not found:
            return None
        engine_id = bytes(found.asOctets())
        self._engine_ids[key] = engine_id
        return engine_id

    # -- one request ----------------------------------------------------------------------------

    async def _request(
        self, target: Target, kind: str, oids: list[tuple[int, ...]], max_repetitions: int
    ) -> list[VarBind]:
        """One GET or GETBULK (non-repeaters 0); the response var-binds, or SnmpError."""
        if target.auth.version == "2c":
            return await self._request_v2c(target, kind, oids, max_repetitions)
        tt = await self._transport(target)
        raw = await self._request_v3(target, tt, target.auth, kind, oids, max_repetitions)
        self._v3_var_binds += len(raw)
        return [(tuple(name), str(name), _to_value(value)) for name, value in raw]

    async def _request_v2c(
        self, target: Target, kind: str, oids: list[tuple[int, ...]], max_repetitions: int
    ) -> list[VarBind]:
        family, address = await self._address(target)
        transport = await self._ensure_v2c(family)
        assert target.auth.community is not None
        pdu_type = ber.GETBULK if kind == "bulk" else ber.GET
        what = f"{kind} to {target.label}"
        try:
            response = await transport.request(
                address,
                target.auth.community.encode(),
                pdu_type,
                oids,
                max_repetitions,
                target.timeout,
                target.retries,
            )
        except Garbage:
            raise SnmpError("garbage", target.endpoint, f"{what}: undecodable response") from None
        except RequestTimeout:
            raise self._timeout(target, what) from None
        except OSError as exc:  # e.g. no route to the host's network
            raise SnmpError("error", target.endpoint, f"{what}: {exc.strerror}") from None
        self._answered.add((target.host, target.port))
        if response.error_status:
            raise self._status_error(
                target, kind, response.error_status, response.error_index, max_repetitions
            )
        return response.var_binds

    @staticmethod
    def _timeout(target: Target, what: str) -> SnmpError:
        tries = target.retries + 1
        return SnmpError(
            "timeout",
            target.endpoint,
            f"{what}: no response in {tries} tries of {target.timeout:g} s",
        )

    @staticmethod
    def _status_error(
        target: Target, kind: str, code: int, index: int, max_repetitions: int
    ) -> SnmpError:
        name = _ERROR_STATUS[code] if 0 <= code < len(_ERROR_STATUS) else str(code)
        reason = "too_big" if code == 1 else "error"
        where = f" at var-bind {index}" if index else ""
        detail = f"{kind} to {target.label}: agent answered {name}({code}){where}"
        if kind == "bulk":
            detail += f" for max-repetitions {max_repetitions}"
        return SnmpError(reason, target.endpoint, detail)

    async def _request_v3(
        self,
        target: Target,
        tt: Any,
        auth: Auth,
        kind: str,
        oids: list[tuple[int, ...]],
        max_repetitions: int,
    ) -> list[tuple[Any, Any]]:
        """One SNMPv3 GET or GETBULK through pysnmp; the response var-binds, or SnmpError."""
        engine = self._ensure_engine()
        probing = auth.user == _V3_PROBE_USER
        engine_id = None
        if not probing:
            engine_id = await self._engine_id(target, tt)
        context = auth.context_name
        address = (str(tt.transport_address[0]), int(tt.transport_address[1]))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(
            snmp_engine: Any,
            handle: Any,
            error_indication: Any,
            error_status: Any,
            error_index: Any,
            var_binds: Any,
            cb_ctx: Any,
        ) -> None:
            if not future.done():
                future.set_result((error_indication, error_status, error_index, var_binds))

        var_binds = [(rfc1902.ObjectName(oid), _NULL) for oid in oids]
        started = time.monotonic()
        try:
            auth_data = self._auth_object(auth, engine_id)
            addr_name, _ = self._lcd.configure(engine, auth_data, tt, context)
            if kind == "bulk":
                self._bulk_app.send_varbinds(
                    engine, addr_name, None, context, 0, max_repetitions, var_binds, done
                )
            else:
                app = self._probe_app if probing else self._get_app
                app.send_varbinds(engine, addr_name, None, context, var_binds, done)
        except StatusInformation as exc:
            # raised before anything was sent, e.g. a USM user that cannot be used
            if not future.done():
                future.set_result((exc.get("errorIndication") or errind.otherError, 0, 0, ()))
        except PySnmpError as exc:
            # pysnmp's text may quote configuration: keep only the class name
            raise SnmpError(
                "error", target.endpoint, f"{kind} to {target.label}: {type(exc).__name__}"
            ) from None
        self._pending.add(future)
        # pysnmp times requests out itself; this only guards against a lost callback
        guard = target.timeout * (target.retries + 1) * 2 + 5
        try:
            indication, status, index, var_binds = await asyncio.wait_for(future, guard)
        except TimeoutError:
            indication, status, index, var_binds = errind.requestTimedOut, 0, 0, []
        finally:
            self._pending.discard(future)
        if indication is not None:
            error = self._indication_error(target, address, kind, indication, started)
            if not (probing and error.reason == "auth"):  # the probe ends in unknownEngineID
                raise error
        if probing:
            return []
        self._answered.add((target.host, target.port))
        if status and int(status):
            raise self._status_error(target, kind, int(status), int(index or 0), max_repetitions)
        return list(var_binds)

    def _indication_error(
        self,
        target: Target,
        address: tuple[str, int],
        kind: str,
        indication: Any,
        started: float,
    ) -> SnmpError:
        what = f"{kind} to {target.label}"
        if isinstance(indication, errind.RequestTimedOut):
            if self._garbage_at.get(address, 0.0) >= started:
                return SnmpError("garbage", target.endpoint, f"{what}: undecodable response")
            return self._timeout(target, what)
        if isinstance(indication, _AUTH_INDICATIONS):
            # a replaced agent (new engine ID) is found again on the next request
            self._engine_ids.pop((target.host, target.port), None)
            return SnmpError("auth", target.endpoint, f"{what}: {indication}")
        if isinstance(indication, (*_GARBAGE_INDICATIONS, str)):  # str: pysnmp's badResponse
            return SnmpError("garbage", target.endpoint, f"{what}: {indication}")
        if isinstance(indication, errind.TooBig):
            return SnmpError("too_big", target.endpoint, f"{what}: {indication}")
        return SnmpError("error", target.endpoint, f"{what}: {indication}")

    # -- public API -----------------------------------------------------------------------------

    async def get(self, target: Target, oids: list[str]) -> Walk:
        """GET the given OIDs; absent ones come back as noSuchObject/noSuchInstance Values."""
        wanted = [_oid_tuple(o) for o in oids]
        result: Walk = {}
        chunk = 32  # var-binds per GET; halved on tooBig (RFC 3416 section 4.2.1)
        i = 0
        while i < len(wanted):
            part = wanted[i : i + chunk]
            try:
                var_binds = await self._request(target, "get", part, 0)
            except SnmpError as exc:
                if exc.reason == "too_big" and chunk > 1:
                    chunk = max(1, chunk // 2)
                    continue
                raise
            for _, name, value in var_binds:
                result[name] = value
            i += len(part)
        return result

    async def walk(self, target: Target, root: str) -> Walk:
        """GETBULK walk of one subtree (RFC 3416 section 4.2.3), ending where the subtree ends."""
        return await self.walk_many(target, [root])

    async def walk_many(self, target: Target, roots: list[str]) -> Walk:
        """Walk several subtrees, side by side where that saves requests; merged.

        One PDU's requests go one after the other (gentle on slow agents). Each GETBULK asks
        for at most the target's max_repetitions var-binds in all: one subtree at a time with
        that many repetitions while its length is unknown or longer, else as many subtrees of
        the same known, shorter length as fit, with the repetitions their last walk needed
        (their rows plus the one var-bind that shows where each ends).
        """
        key = (target.host, target.port)
        budget = max(1, min(target.max_repetitions, self.bulk_sizes.get(key, 1 << 30)))
        columns: list[_Column] = []
        seen: set[tuple[int, ...]] = set()
        for root in roots:
            arcs = _oid_tuple(root)
            if arcs not in seen:
                seen.add(arcs)
                columns.append(_Column(arcs, ".".join(map(str, arcs)), arcs))
        result: Walk = {}
        shrunk = False
        while active := [c for c in columns if not c.done]:
            batch, reps = self._plan(target, active, budget)
            try:
                var_binds = await self._request(target, "bulk", [c.cursor for c in batch], reps)
            except SnmpError as exc:
                # Some PDUs answer big GETBULKs with tooBig, with garbage, or not at all.
                size = len(batch) * reps
                if size <= 1 or not await self._bulk_is_the_problem(target, exc):
                    raise
                budget = max(1, size // 2)
                log.info(
                    "%s: GETBULK of %d var-binds failed (%s), trying %d",
                    target.label,
                    size,
                    exc.reason,
                    budget,
                )
                shrunk = True
                continue
            if shrunk:  # remember only a size that worked
                self.bulk_sizes[key] = budget
                shrunk = False
            before = [(c.cursor, c.got, c.done) for c in batch]
            try:
                self._take(target, batch, var_binds, result)
            except _Misordered as exc:
                # Walk these subtrees again from where they stood, one per request. Values
                # taken meanwhile are right (each is stored under its own OID).
                for c, (cursor, got, done) in zip(batch, before, strict=True):
                    c.cursor, c.got, c.done = cursor, got, done
                self._one_at_a_time.add(key)
                log.warning(
                    "%s: GETBULK answer for %d subtrees is not in RFC 3416 order (at %s);"
                    " walking one subtree per request from now on",
                    target.label,
                    len(batch),
                    exc,
                )
        return result

    def _need(self, target: Target, c: _Column) -> int | None:
        """Var-binds expected to finish c's walk, from its last walk; None when unknown."""
        length = self._lengths.get((target.host, target.port, target.auth, c.name))
        if length is None or length <= c.got:
            return None
        return length - c.got

    def _plan(
        self, target: Target, active: list[_Column], budget: int
    ) -> tuple[list[_Column], int]:
        """The subtrees for the next GETBULK and its max-repetitions."""
        needs = [(self._need(target, c), c) for c in active]
        known = sorted(
            ((n, c) for n, c in needs if n is not None and n < budget), key=lambda nc: -nc[0]
        )
        alone = (target.host, target.port) in self._one_at_a_time
        if len(known) < 2 or alone:  # the first subtree alone
            need, first = needs[0]
            return [first], budget if need is None else min(need, budget)
        # Subtrees of the same length share a request, so none reads past its end more than
        # once; in OID order, so that an agent laying the answer out wrongly shows as OIDs
        # going back.
        reps = known[0][0]
        same = [c for n, c in known if n == reps][: budget // reps]
        return sorted(same, key=lambda c: c.root), reps

    def _take(
        self,
        target: Target,
        batch: list[_Column],
        var_binds: list[VarBind],
        result: Walk,
    ) -> None:
        """Add a GETBULK answer to result, advancing (or ending) each subtree's walk."""
        k = len(batch)
        if not var_binds:  # an empty answer: nothing more (RFC 3416 section 4.2.3)
            for c in batch:
                self._finish(target, c)
            return
        for i, (arcs, name, value) in enumerate(var_binds):
            c = batch[i % k]  # repetition i // k of subtree i % k
            if c.done:
                continue  # past the end of its subtree already
            if value.type == "endOfMibView":
                self._finish(target, c)
                continue
            if arcs <= c.cursor:
                if k > 1:  # not the layout RFC 3416 section 4.2.3 prescribes
                    raise _Misordered(name)
                # a broken agent going round in circles: never walk forever
                raise SnmpError(
                    "garbage",
                    target.endpoint,
                    f"walk of {c.name} on {target.label}: OID {name} does not increase",
                )
            if arcs[: len(c.root)] != c.root:
                self._finish(target, c)
                continue
            c.cursor = arcs
            c.got += 1
            result[name] = value

    def _finish(self, target: Target, c: _Column) -> None:
        c.done = True
        self._lengths[(target.host, target.port, target.auth, c.name)] = c.got + 1

    async def _bulk_is_the_problem(self, target: Target, exc: SnmpError) -> bool:
        """Whether a smaller GETBULK may succeed where this one failed."""
        if exc.reason in ("too_big", "garbage"):
            return True
        if exc.reason != "timeout" or (target.host, target.port) not in self._answered:
            # a PDU never heard from costs one timeout, not one per halving
            return False
        # It answered before: is it gone (rebooting) or choking on big GETBULKs only? A small
        # GET decides, so that a dead agent neither costs a timeout per halving nor leaves a
        # shrunken size behind.
        try:
            await self._request(target, "get", [_SYS_UPTIME], 0)
        except SnmpError:
            return False
        return True

    def counts(self) -> dict[str, int]:
        """Messages sent and received and var-binds received so far, SNMPv2c and v3 together."""
        out = {"sent": 0, "received": 0, "var_binds": 0}
        for v2c in self._v2c.values():
            out["sent"] += v2c.sent
            out["received"] += v2c.received
            out["var_binds"] += v2c.var_binds
        if self._engine is not None:
            mib = self._engine.get_mib_builder()
            (sent, received) = mib.import_symbols("__SNMPv2-MIB", "snmpOutPkts", "snmpInPkts")
            out["sent"] += int(sent.syntax)
            out["received"] += int(received.syntax)
            out["var_binds"] += self._v3_var_binds
        return out

    def close(self) -> None:
        """Close the socket and the engine's transports and dispatcher; pending requests fail."""
        self._closed = True
        for future in list(self._pending):
            if not future.done():
                future.set_result((errind.otherError, 0, 0, ()))
        self._pending.clear()
        for v2c in self._v2c.values():
            v2c.close()
        self._v2c.clear()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close_dispatcher()

    async def __aenter__(self) -> SnmpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
