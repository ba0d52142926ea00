"""SNMPv3 requests through pysnmp 7 SnmpEngines that live as long as the client (USM, discovery).

The v3 half of `SnmpClient` (client.py). Requests go through pysnmp's command generator
applications (`pysnmp.entity.rfc3413.cmdgen`, the layer under `hlapi`'s `bulk_cmd`) with
numeric OIDs, so there is no MIB resolution either way. USM: RFC 3414, SHA-2: RFC 7860;
pysnmp 7 docs, https://docs.lextudio.com/pysnmp/ .

One engine serves every target unless two targets have the same user name on the same agent
(same snmpEngineID) with different keys. One USM cannot hold both: RFC 3414 indexes
usmUserTable by (usmUserEngineID, usmUserName) (section 5) and finds the keys of an incoming
message by msgAuthoritativeEngineID and msgUserName alone (section 3.2 step 4), so there is no
column that could tell the two key sets apart; the securityName column cannot either, it is
never on the wire. pysnmp 7 does not even get that far (7.1.30): `config.add_v3_user` writes
the row at index (engine ID, securityName) (pysnmp/entity/config.py line 216, in
`__cook_v3_user_info`) while its USM reads it at (engine ID, userName)
(pysnmp/proto/secmod/rfc3414/service.py line 212, `__get_user_info`), so a securityName other
than the user name fails with unknownSecurityName. And its LCD configurator deletes and
re-adds a row whose keys changed (pysnmp/hlapi/v3arch/asyncio/lcd.py lines 63-71), so one key
set replaced the other under requests already in flight, whose answers then failed their
digest check. So each further key set of one (agent, user name) gets an engine of its own
(`_slot`), created when first needed: ~65 ms CPU and ~0.8 MiB each (docs/exporters/pdu.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
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

from .oid import oid_arcs
from .target import Answer, Auth, SnmpError, Target, timeout_error
from .types import Value
from .udp import client_socket

log = logging.getLogger(__name__)

_AUTH_PROTOCOLS: dict[str | None, Any] = {
    None: hauth.USM_AUTH_NONE,
    "MD5": hauth.USM_AUTH_HMAC96_MD5,
    "SHA": hauth.USM_AUTH_HMAC96_SHA,
    "SHA224": hauth.USM_AUTH_HMAC128_SHA224,
    "SHA256": hauth.USM_AUTH_HMAC192_SHA256,
    "SHA384": hauth.USM_AUTH_HMAC256_SHA384,
    "SHA512": hauth.USM_AUTH_HMAC384_SHA512,
}
# see target.PRIV_PROTOCOLS for the two AES-192/256 key extensions
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
_V3_PROBE_USER = "wattbit-engine-id-probe"  # never on the wire: see _engine_id()


def to_value(v: Any) -> Value:
    """A pysnmp/pyasn1 value as the plain Value the decoder reads."""
    kind, conv = _CONVERT.get(v.tagSet, ("Opaque", _octets))
    return Value(kind, conv(v))


@dataclass(eq=False)
class _Engine:
    """One pysnmp SnmpEngine (its own sockets and USM table) and the applications sending on it."""

    engine: SnmpEngine
    get_app: Any = field(default_factory=cmdgen.GetCommandGenerator)
    # stops at the engine ID discovery Report instead of retrying with a user
    probe_app: Any = field(default_factory=lambda: cmdgen.GetCommandGenerator(discoveryRetries=0))
    bulk_app: Any = field(default_factory=cmdgen.BulkCommandGeneratorSingleRun)


class V3Client:
    """SNMPv3 GET and GETBULK over pysnmp SnmpEngines, created in the first request's loop."""

    def __init__(self) -> None:
        # index = slot (see _slot); engine 0 serves every target but a clashing key set
        self._engines: list[_Engine] = []
        self._lcd = CommandGeneratorLcdConfigurator()  # keeps its state in each engine
        self._transports: dict[tuple[str, int, float, int], Any] = {}  # Udp(6)TransportTarget
        self._auth_data: dict[tuple[Auth, bytes | None], Any] = {}
        # (agent engine ID, user name) -> its key sets in order of first use (context_name
        # cleared); a key set's position is the engine that holds it
        self._key_sets: dict[tuple[bytes | None, str], list[Auth]] = {}
        self._slots: dict[tuple[bytes | None, Auth], int] = {}  # _slot's answers
        self._engine_ids: dict[tuple[str, int], bytes] = {}
        self._discovery_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._garbage_at: dict[tuple[str, int], float] = {}  # address -> last undecodable
        self._pending: set[asyncio.Future[Any]] = set()
        self.var_binds = 0  # var-binds received

    def _ensure_engine(self, slot: int = 0) -> _Engine:
        """Engine number `slot`, created (with the ones before it) when first needed."""
        while len(self._engines) <= slot:
            # pysnmp's asyncio dispatcher binds to the loop it is created in: create it here
            loop = asyncio.get_running_loop()
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
            self._engines.append(_Engine(engine))
            if len(self._engines) > 1:
                log.debug("SNMPv3 engine %d started for a clashing key set", len(self._engines) - 1)
        return self._engines[slot]

    def _slot(self, engine_id: bytes | None, auth: Auth) -> int:
        """The engine whose USM table holds this user's keys for this agent (see the module doc)."""
        slot = self._slots.get((engine_id, auth))
        if slot is None:
            keys = dataclasses.replace(auth, context_name="")  # contexts share one USM row
            held = self._key_sets.setdefault((engine_id, str(auth.user)), [])
            if keys not in held:
                held.append(keys)
            slot = self._slots[(engine_id, auth)] = held.index(keys)
        return slot

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

    async def _transport(self, target: Target, family: int, address: tuple[str, int]) -> Any:
        """pysnmp's transport target (IPv4 or IPv6) for an agent."""
        key = (target.host, target.port, float(target.timeout), int(target.retries))
        tt = self._transports.get(key)
        if tt is None:
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

        USM rows are per (engine ID, user name). Configured without an engine ID, a user's
        keys would live in one row shared by all agents; keyed by the agent's own engine ID,
        PDUs on different agents get rows of their own, and `_slot` sees which key sets of
        one agent clash.
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
        # always engine 0: the engine ID is needed to choose the engine for the real request
        mp = self._ensure_engine().engine.message_processing_subsystems[3]
        found = mp.get_peer_engine_info(tt.TRANSPORT_DOMAIN, tt.transport_address)[0]
        if not found:
            # RFC 3414 section 4 discovery: for an unknown peer pysnmp first sends a blank
            # noAuthNoPriv message (no user name) whose Report carries the agent's engine ID,
            # cached by pysnmp's message processing. The probe application stops there
            # (discoveryRetries=0), so the probe's own user name never leaves this host.
            probe = Auth("3", user=_V3_PROBE_USER)
            await self._request(target, tt, probe, "get", [oid_arcs("1.3.6.1.2.1.1.2.0")], 0)
            found = mp.get_peer_engine_info(tt.TRANSPORT_DOMAIN, tt.transport_address)[0]
        if not found:
            return None
        engine_id = bytes(found.asOctets())
        self._engine_ids[key] = engine_id
        return engine_id

    # -- one request ----------------------------------------------------------------------------

    async def request(
        self,
        target: Target,
        family: int,
        address: tuple[str, int],
        kind: str,
        oids: list[tuple[int, ...]],
        max_repetitions: int,
    ) -> Answer:
        """One GET or GETBULK (non-repeaters 0): the agent's answer, or SnmpError."""
        tt = await self._transport(target, family, address)
        status, index, raw = await self._request(
            target, tt, target.auth, kind, oids, max_repetitions
        )
        self.var_binds += len(raw)
        return status, index, [(tuple(n), str(n), to_value(v)) for n, v in raw]

    async def _request(
        self,
        target: Target,
        tt: Any,
        auth: Auth,
        kind: str,
        oids: list[tuple[int, ...]],
        max_repetitions: int,
    ) -> tuple[int, int, list[tuple[Any, Any]]]:
        """One request through pysnmp: (error-status, error-index, raw var-binds)."""
        probing = auth.user == _V3_PROBE_USER
        engine_id = None
        slot = 0
        if not probing:
            engine_id = await self._engine_id(target, tt)
            slot = self._slot(engine_id, auth)
        eng = self._ensure_engine(slot)
        engine = eng.engine
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
                eng.bulk_app.send_varbinds(
                    engine, addr_name, None, context, 0, max_repetitions, var_binds, done
                )
            else:
                app = eng.probe_app if probing else eng.get_app
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
            return 0, 0, []
        return int(status or 0), int(index or 0), list(var_binds)

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
            return timeout_error(target, what)
        if isinstance(indication, _AUTH_INDICATIONS):
            # a replaced agent (new engine ID) is found again on the next request
            self._engine_ids.pop((target.host, target.port), None)
            return SnmpError("auth", target.endpoint, f"{what}: {indication}")
        if isinstance(indication, (*_GARBAGE_INDICATIONS, str)):  # str: pysnmp's badResponse
            return SnmpError("garbage", target.endpoint, f"{what}: {indication}")
        if isinstance(indication, errind.TooBig):
            return SnmpError("too_big", target.endpoint, f"{what}: {indication}")
        return SnmpError("error", target.endpoint, f"{what}: {indication}")

    @property
    def engines(self) -> int:
        """How many pysnmp engines run: 1, plus one per further clashing key set."""
        return len(self._engines)

    def counts(self) -> dict[str, int]:
        """Messages sent and received by the engines and var-binds received so far."""
        sent = received = 0
        for eng in self._engines:
            mib = eng.engine.get_mib_builder()
            out, into = mib.import_symbols("__SNMPv2-MIB", "snmpOutPkts", "snmpInPkts")
            sent += int(out.syntax)
            received += int(into.syntax)
        return {"sent": sent, "received": received, "var_binds": self.var_binds}

    def close(self) -> None:
        """Close the engines' transports and dispatchers; pending requests fail."""
        for future in list(self._pending):
            if not future.done():
                future.set_result((errind.otherError, 0, 0, ()))
        self._pending.clear()
        engines, self._engines = self._engines, []
        for eng in engines:
            eng.engine.close_dispatcher()
