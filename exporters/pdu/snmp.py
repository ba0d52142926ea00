"""The SNMP client of the PDU poller: GET and GETBULK subtree walks over pysnmp 7 (asyncio).

One `SnmpClient` owns one pysnmp `SnmpEngine` (one UDP socket, one request-id space) and is
shared by every concurrent poll in one event loop. Requests go through pysnmp's command
generator applications (`pysnmp.entity.rfc3413.cmdgen`, the layer under `hlapi`'s `bulk_cmd`)
with numeric OIDs, so there is no MIB resolution on the way out or back in. The walk loop is
ours rather than `bulk_walk_cmd` because that helper ends a walk at the first Null *value*
(real agents return Null rows, e.g. CyberPower), retries timeouts forever, and cannot change
max-repetitions half way.

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
from pysnmp.carrier.asyncio.dgram import udp
from pysnmp.entity import config
from pysnmp.entity.engine import SnmpEngine
from pysnmp.entity.rfc3413 import cmdgen
from pysnmp.error import PySnmpError
from pysnmp.hlapi.v3arch.asyncio import auth as hauth
from pysnmp.hlapi.v3arch.asyncio.lcd import CommandGeneratorLcdConfigurator
from pysnmp.hlapi.v3arch.asyncio.transport import UdpTransportTarget
from pysnmp.proto import errind, rfc1902, rfc1905
from pysnmp.proto.error import StatusInformation

from exporters.pdu.types import Value, Walk

log = logging.getLogger(__name__)

# Error reasons. "refused" is reserved: one unconnected UDP socket cannot tell which agent an
# ICMP port-unreachable was about, so a closed port reads as "timeout".
REASONS = frozenset({"timeout", "auth", "too_big", "garbage", "refused", "error"})
RECEIVE_BUFFER = 4 << 20  # bytes asked for the client socket's SO_RCVBUF

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
_END_OF_MIB = rfc1905.EndOfMibView.tagSet
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
    max_repetitions: int = 25

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


class SnmpClient:
    """GET and GETBULK walks against many agents over one shared pysnmp SnmpEngine."""

    def __init__(self) -> None:
        self._engine: SnmpEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lcd = CommandGeneratorLcdConfigurator()
        self._get_app = cmdgen.GetCommandGenerator()
        # stops at the engine ID discovery Report instead of retrying with a user
        self._probe_app = cmdgen.GetCommandGenerator(discoveryRetries=0)
        self._bulk_app = cmdgen.BulkCommandGeneratorSingleRun()
        self._transports: dict[tuple[str, int, float, int], UdpTransportTarget] = {}
        self._auth_data: dict[tuple[Auth, bytes | None], Any] = {}
        self._engine_ids: dict[tuple[str, int], bytes] = {}
        self._discovery_locks: dict[tuple[str, int], asyncio.Lock] = {}
        # working GETBULK max-repetitions per (host, port), once a bigger one failed
        self.bulk_sizes: dict[tuple[str, int], int] = {}
        self._answered: set[tuple[str, int]] = set()  # agents that ever answered
        self._garbage_at: dict[tuple[str, int], float] = {}  # address -> last undecodable
        self._pending: set[asyncio.Future[Any]] = set()
        self._closed = False

    # -- engine and per-target configuration --------------------------------------------------

    def _ensure_engine(self) -> SnmpEngine:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise RuntimeError("SnmpClient is closed")
        if self._engine is None:
            # pysnmp's asyncio dispatcher binds to the loop it is created in: create it here
            engine = SnmpEngine()
            config.add_transport(engine, udp.DOMAIN_NAME, self._open_socket(loop))
            self._watch_parse_errors(engine)
            self._engine, self._loop = engine, loop
        elif loop is not self._loop:
            raise RuntimeError("SnmpClient is bound to the event loop it first ran in")
        return self._engine

    @staticmethod
    def _open_socket(loop: asyncio.AbstractEventLoop) -> Any:
        # All agents answer on this one socket. 100 PDUs answering a poll round at once
        # overflow the default receive buffer (about 200 KiB: some 90 datagrams of 25
        # var-binds) while the loop is busy decoding, and every drop costs a timeout. The
        # kernel caps the size at net.core.rmem_max.
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.bind(("0.0.0.0", 0))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return udp.UdpAsyncioTransport(loop=loop).open_server_mode(sock=sock)

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

    async def _transport(self, target: Target) -> UdpTransportTarget:
        key = (target.host, target.port, float(target.timeout), int(target.retries))
        tt = self._transports.get(key)
        if tt is None:
            try:
                tt = await UdpTransportTarget.create(
                    (target.host, target.port), timeout=target.timeout, retries=target.retries
                )
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
            if auth.version == "2c":
                obj = hauth.CommunityData(auth.community, mpModel=1)
            else:
                obj = hauth.UsmUserData(
                    auth.user,
                    authKey=auth.auth_key if auth.auth_protocol else None,
                    privKey=auth.priv_key if auth.priv_protocol else None,
                    authProtocol=_AUTH_PROTOCOLS[auth.auth_protocol],
                    privProtocol=_PRIV_PROTOCOLS[auth.priv_protocol],
                    securityEngineId=(
                        univ.OctetString(engine_id) if engine_id is not None else None
                    ),
                )
            self._auth_data[key] = obj
        return obj

    async def _engine_id(self, target: Target, tt: UdpTransportTarget) -> bytes | None:
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

    async def _discover_engine_id(self, target: Target, tt: UdpTransportTarget) -> bytes | None:
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
            await self._request(target, tt, probe, "get", [_oid_tuple("1.3.6.1.2.1.1.2.0")], 0)
            found = mp.get_peer_engine_info(tt.TRANSPORT_DOMAIN, tt.transport_address)[0]
        if not found:
            return None
        engine_id = bytes(found.asOctets())
        self._engine_ids[key] = engine_id
        return engine_id

    # -- one request ----------------------------------------------------------------------------

    async def _request(
        self,
        target: Target,
        tt: UdpTransportTarget,
        auth: Auth,
        kind: str,
        oids: list[tuple[int, ...]],
        max_repetitions: int,
    ) -> list[tuple[Any, Any]]:
        """One GET or GETBULK; the response var-binds, or SnmpError."""
        engine = self._ensure_engine()
        probing = auth.user == _V3_PROBE_USER
        engine_id = None
        if auth.version == "3" and not probing:
            engine_id = await self._engine_id(target, tt)
        context = auth.context_name if auth.version == "3" else ""
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
            code = int(status)
            name = _ERROR_STATUS[code] if 0 <= code < len(_ERROR_STATUS) else str(code)
            reason = "too_big" if code == 1 else "error"
            where = f" at var-bind {int(index)}" if index and int(index) else ""
            detail = f"{kind} to {target.label}: agent answered {name}({code}){where}"
            if kind == "bulk":
                detail += f" for max-repetitions {max_repetitions}"
            raise SnmpError(reason, target.endpoint, detail)
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
            tries = target.retries + 1
            return SnmpError(
                "timeout",
                target.endpoint,
                f"{what}: no response in {tries} tries of {target.timeout:g} s",
            )
        if isinstance(indication, _AUTH_INDICATIONS):
            if target.auth.version == "3":
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
        tt = await self._transport(target)
        wanted = [_oid_tuple(o) for o in oids]
        result: Walk = {}
        chunk = 32  # var-binds per GET; halved on tooBig (RFC 3416 section 4.2.1)
        i = 0
        while i < len(wanted):
            part = wanted[i : i + chunk]
            try:
                var_binds = await self._request(target, tt, target.auth, "get", part, 0)
            except SnmpError as exc:
                if exc.reason == "too_big" and chunk > 1:
                    chunk = max(1, chunk // 2)
                    continue
                raise
            for name, value in var_binds:
                result[str(name)] = _to_value(value)
            i += len(part)
        return result

    async def walk(self, target: Target, root: str) -> Walk:
        """GETBULK walk of one subtree (RFC 3416 section 4.2.3), ending where the subtree ends."""
        tt = await self._transport(target)
        root_t = _oid_tuple(root)
        n = len(root_t)
        key = (target.host, target.port)
        reps = max(1, min(target.max_repetitions, self.bulk_sizes.get(key, 1 << 30)))
        result: Walk = {}
        cursor = root_t
        while True:
            var_binds, reps = await self._bulk_step(target, tt, cursor, reps)
            if not var_binds:
                return result  # an empty answer: nothing more (RFC 3416 section 4.2.3)
            for name, value in var_binds:
                oid = tuple(name)
                if oid[:n] != root_t or value.tagSet == _END_OF_MIB:
                    return result
                if oid <= cursor:
                    # a broken agent going round in circles: never walk forever
                    raise SnmpError(
                        "garbage",
                        target.endpoint,
                        f"walk of {root} on {target.label}: OID {name} does not increase",
                    )
                cursor = oid
                kind, conv = _CONVERT.get(value.tagSet, ("Opaque", _octets))
                result[str(name)] = Value(kind, conv(value))

    async def _bulk_step(
        self, target: Target, tt: UdpTransportTarget, cursor: tuple[int, ...], reps: int
    ) -> tuple[list[tuple[Any, Any]], int]:
        """One GETBULK from cursor, halving max-repetitions while the agent cannot answer it."""
        key = (target.host, target.port)
        shrunk = False
        while True:
            try:
                var_binds = await self._request(target, tt, target.auth, "bulk", [cursor], reps)
            except SnmpError as exc:
                # Some PDUs answer big GETBULKs with tooBig, with garbage, or not at all.
                if reps <= 1 or not await self._bulk_is_the_problem(target, tt, exc):
                    raise
                smaller = max(1, reps // 2)
                log.info(
                    "%s: GETBULK with max-repetitions %d failed (%s), trying %d",
                    target.label,
                    reps,
                    exc.reason,
                    smaller,
                )
                reps, shrunk = smaller, True
                continue
            if shrunk:  # remember only a size that worked
                self.bulk_sizes[key] = reps
            return var_binds, reps

    async def _bulk_is_the_problem(
        self, target: Target, tt: UdpTransportTarget, exc: SnmpError
    ) -> bool:
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
            await self._request(target, tt, target.auth, "get", [_SYS_UPTIME], 0)
        except SnmpError:
            return False
        return True

    async def walk_many(self, target: Target, roots: list[str]) -> Walk:
        """Walk several subtrees one after the other (gentle on slow agents); merged."""
        result: Walk = {}
        for root in roots:
            result.update(await self.walk(target, root))
        return result

    def close(self) -> None:
        """Close the engine's transports and dispatcher; pending requests fail."""
        self._closed = True
        for future in list(self._pending):
            if not future.done():
                future.set_result((errind.otherError, 0, 0, ()))
        self._pending.clear()
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close_dispatcher()

    async def __aenter__(self) -> SnmpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
