"""Redfish over aiohttp: one client per BMC, its connections reused, every answer bounded.

Why aiohttp rather than DMTF's `redfish` or OpenStack's `sushy` (docs/exporters/bmc.md
"Library"): both are synchronous (requests), so 200 BMCs would need 200 threads; neither caps
a body's size, a JSON document's depth or a request's whole duration (a slow drip passes
requests' per-read timeout forever); and both follow redirects to other hosts by default.
The poller needs four GETs per chassis, which aiohttp (already the project's HTTP server) does
with these limits in a few lines.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import aiohttp

from exporters.base import clean_text

from .redfish_parse import (
    chassis_power,
    is_error,
    link,
    members,
    metrics_supply,
    odata_path,
    parse_document,
)
from .types import BmcError, BmcReading, ChassisPower, SupplyPower

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_REDIRECTS = 3
CONNECTIONS = 4  # requests in flight to one BMC (many BMCs serve few at once)
CHUNK = 64 * 1024
MAX_LISTED = 1024  # chassis collection members looked at (read: max_chassis, and containers)
MAX_OUTER = 4  # levels of containers read beyond max_chassis (blade, enclosure, rack …)


@dataclass(frozen=True)
class RedfishTarget:
    """One Redfish BMC as the poller sees it (built from the collector's config)."""

    base_url: str  # https://host:port (no path)
    username: str = ""
    password: str = ""
    auth: str = "session"  # "session" (falls back to Basic without a token) | "basic"
    verify_tls: bool = True
    ca_file: str | None = None  # where ca_data came from (or read here when it is None)
    ca_data: str | None = None  # the CA file's PEM text
    timeout: float = 5.0  # per request (connect and answer)
    # A login of its own: a BMC making a session can take longer than a GET, and a login
    # given up while the BMC still makes the session leaks that session (issue 34).
    login_timeout: float = 15.0
    # A Redfish resource is kilobytes (the largest real one in tests/fixtures/bmc: 29 kB).
    max_body: int = 1024 * 1024
    max_depth: int = 32
    max_chassis: int = 32
    max_supplies: int = 16

    def __repr__(self) -> str:  # never the password
        return f"RedfishTarget({self.base_url!r})"


def ssl_context(t: RedfishTarget) -> ssl.SSLContext | bool:
    """Verification on (system CAs, or the CA file alone); False only on the explicit opt-out.

    One context per trust setting for the whole process: building one loads the system's CAs
    (~20 ms of CPU), and a client is made per BMC and again after a failure (issue 34: 1,000
    unreachable BMCs took a whole CPU)."""
    if not t.base_url.startswith("https:"):
        return True  # plain HTTP: no TLS at all (config logs it)
    if not t.verify_tls:
        return False
    # The collector passes the CA file's text (read bounded at start: collector/site/bmcs.py);
    # a target built with a path only (tests, benches) has it read by OpenSSL here.
    return _context(t.ca_data, None if t.ca_data is not None else t.ca_file)


@functools.lru_cache(maxsize=64)
def _context(ca_data: str | None, ca_file: str | None) -> ssl.SSLContext:
    """A verifying context trusting ca_data (or ca_file) alone, or the system's CAs."""
    if ca_data is not None:
        return ssl.create_default_context(cadata=ca_data)
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return ssl.create_default_context()


@dataclass(frozen=True)
class _Ident:
    """What the identity needs of one chassis: its manager's path, its model and maker."""

    manager: str | None = None
    model: str = ""
    vendor: str = ""

    @classmethod
    def of(cls, chassis: dict[str, Any]) -> _Ident:
        """From a Chassis resource (Links.ManagedBy[0], Model, Manufacturer)."""
        links = chassis.get("Links")
        by = links.get("ManagedBy") if isinstance(links, dict) else None
        manager = None
        if isinstance(by, list) and by and isinstance(by[0], dict):
            manager = odata_path(by[0].get("@odata.id"))
        model, vendor = chassis.get("Model"), chassis.get("Manufacturer")
        return cls(manager, str(model) if model else "", str(vendor) if vendor else "")


class RedfishClient:
    """GETs against one BMC: same-origin only, size/depth/type checked, session or Basic."""

    def __init__(self, target: RedfishTarget) -> None:
        self.t = target
        self._origin = urlsplit(target.base_url)
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None
        self._session_uri: str | None = None
        self._basic = "Basic " + base64.b64encode(
            f"{target.username}:{target.password}".encode()
        ).decode("ascii")
        # Redfish sessions (DSP0266 "Session management"): at most one live per BMC, a new
        # login only once the BMC has invalidated the last (issue 34: sessions leaked).
        self._use_sessions = target.auth == "session" and bool(target.username or target.password)
        self._no_sessions = False  # a login answered without a token: Basic from then on
        self._login_task: asyncio.Task[None] | None = None
        self._login_lock = asyncio.Lock()
        self._alive: str | None = None  # the token whose session this poll found live
        self._closed = False
        self._slots = asyncio.Semaphore(CONNECTIONS)
        self._root: dict[str, Any] = {}

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=CONNECTIONS, ssl=ssl_context(self.t), enable_cleanup_closed=True
            )
            timeout = aiohttp.ClientTimeout(
                total=self.t.timeout, sock_connect=self.t.timeout, sock_read=self.t.timeout
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                auto_decompress=False,  # a small gzip body must not inflate past max_body
                headers={"Accept": "application/json", "OData-Version": "4.0"},
                skip_auto_headers=("Accept-Encoding",),
            )
        return self._session

    def _auth_headers(self) -> dict[str, str]:
        if self._token is not None:
            return {"X-Auth-Token": self._token}
        if self._use_sessions and not self._no_sessions:
            # Before the login only the service root is read, which needs no credentials
            # (DSP0266 "Service root request"): the password goes into the login's body only.
            return {}
        if self.t.username or self.t.password:
            return {"Authorization": self._basic}
        return {}

    def _same_origin(self, url: str) -> bool:
        u = urlsplit(url)
        return (u.scheme, u.hostname, u.port) == (
            self._origin.scheme,
            self._origin.hostname,
            self._origin.port,
        )

    async def _request(
        self,
        method: str,
        path: str,
        body: dict[str, str] | None = None,
        auth: bool = True,
        timeout: float | None = None,
        token: str | None = None,
    ) -> tuple[int, dict[str, Any] | None, Any]:
        """(status, document or None, headers); redirects followed on this origin only.

        `timeout`: this request's own (a login's); `token`: this session's, not the current."""
        url = urljoin(self.t.base_url, path)
        http = self._http()
        kw: dict[str, Any] = {}
        if timeout is not None:
            kw["timeout"] = aiohttp.ClientTimeout(
                total=timeout, sock_connect=timeout, sock_read=timeout
            )
        for _ in range(MAX_REDIRECTS + 1):
            headers = self._auth_headers() if auth else {}
            if token is not None:
                headers = {"X-Auth-Token": token}
            try:
                # The slot is taken before the request's timeout starts: aiohttp counts the
                # wait for a pooled connection in `total`, and requests queued behind a slow
                # BMC's other chassis must not time out while it is answering.
                async with (
                    self._slots,
                    http.request(
                        method, url, json=body, headers=headers, allow_redirects=False, **kw
                    ) as resp,
                ):
                    status = resp.status
                    if status in (301, 302, 303, 307, 308):
                        location = resp.headers.get("Location", "")
                        nxt = urljoin(url, location)
                        if not location or not self._same_origin(nxt):
                            raise BmcError("redirect", f"{path}: redirect to another host refused")
                        url = nxt
                        continue
                    ctype = resp.headers.get("Content-Type", "")
                    json_body = ctype.split(";")[0].strip().lower() == "application/json"
                    if method == "POST" and json_body and status < 300 and status != 204:
                        # A login's answer: the Session resource, whose @odata.id names it
                        # where the Location header is missing (DSP0266).
                        return status, await self._body(resp, path), resp.headers
                    if status >= 400 or status == 204 or method != "GET":
                        return status, None, resp.headers
                    if not json_body:
                        raise BmcError("content_type", f"{path}: not application/json")
                    return status, await self._body(resp, path), resp.headers
            except BmcError:
                raise
            except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
                raise BmcError("tls", f"{path}: TLS: {_why(exc)}") from None
            except aiohttp.ClientConnectorError as exc:
                refused = isinstance(exc.os_error, ConnectionRefusedError)
                reason = "refused" if refused else "timeout"
                raise BmcError(reason, f"{path}: cannot connect: {_why(exc.os_error)}") from None
            except TimeoutError:
                after = timeout if timeout is not None else self.t.timeout
                raise BmcError("timeout", f"{path}: no answer within {after:g}s") from None
            except aiohttp.ClientError as exc:
                raise BmcError("garbage", f"{path}: {type(exc).__name__}") from None
        raise BmcError("redirect", f"{path}: more than {MAX_REDIRECTS} redirects")

    async def _body(self, resp: aiohttp.ClientResponse, path: str) -> dict[str, Any]:
        cap = self.t.max_body
        if resp.content_length is not None and resp.content_length > cap:
            raise BmcError("too_big", f"{path}: body over {cap} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await resp.content.read(CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > cap:
                raise BmcError("too_big", f"{path}: body over {cap} bytes")
            chunks.append(chunk)
        doc = parse_document(b"".join(chunks), self.t.max_depth)
        return doc

    async def _login(self) -> None:
        """A Redfish session (X-Auth-Token); without a token in the answer, Basic stays.

        Runs as a task of its own (_relogin): a poll that reaches its deadline meanwhile
        leaves it running, so a session the BMC makes late is kept (and used, and logged out)
        rather than leaked."""
        links = self._root.get("Links")
        sessions = link(links, "Sessions") if isinstance(links, dict) else None
        sessions = sessions or "/redfish/v1/SessionService/Sessions"
        status, doc, headers = await self._request(
            "POST",
            sessions,
            {"UserName": self.t.username, "Password": self.t.password},
            auth=False,
            timeout=max(self.t.login_timeout, self.t.timeout),
        )
        if status in (401, 403):
            raise BmcError("auth", "session login refused (401/403)")
        token = headers.get("X-Auth-Token") if status < 400 else None
        if not (token and len(token) <= 4096 and token.isprintable()):
            # The service gave no token (sushy-static answers 204): Basic on every request.
            self._no_sessions = True
            return
        uri = self._session_path(headers.get("Location"), doc)
        if self._closed:  # closed while the BMC was making it: log it out at once
            await self._logout(token, uri)
            return
        self._token, self._session_uri = token, uri

    def _session_path(self, location: str | None, doc: dict[str, Any] | None) -> str | None:
        """The session's own path: the Location header, else the body's @odata.id."""
        if location and self._same_origin(urljoin(self.t.base_url, location)):
            return urlsplit(urljoin(self.t.base_url, location)).path
        return odata_path(doc.get("@odata.id")) if doc is not None else None

    async def _logout(self, token: str | None, uri: str | None) -> None:
        """DELETE a session (best effort, 2 s at most: a stop must not wait on a dead BMC)."""
        if token is None or uri is None or self._session is None or self._session.closed:
            return
        with contextlib.suppress(BmcError, TimeoutError):
            await asyncio.wait_for(self._request("DELETE", uri, token=token), 2.0)

    async def get(self, path: str, optional: bool = False) -> dict[str, Any] | None:
        """A resource; None if optional and it answers 404 (or a Redfish error body), or 401
        to a session that is live (a resource this account may not read)."""
        token = self._token
        status, doc, _ = await self._request("GET", path)
        # A 401: the session expired (or the service wants one even for its root, against
        # DSP0266): log in again once, however many requests in flight saw the 401; a
        # session still live is not replaced (this resource alone refuses it).
        relogin = status == 401 and self._use_sessions and not self._no_sessions
        if relogin and await self._relogin(token):
            status, doc, _ = await self._request("GET", path)
        if status in (401, 403):
            if optional:
                return None
            raise BmcError("auth", f"{path}: {status}")
        if status in (404, 410) and optional:
            return None
        if status >= 300 or doc is None:
            raise BmcError("http", f"{path}: HTTP {status}")
        if is_error(doc):
            if optional:
                return None
            raise BmcError("http", f"{path}: a Redfish error body")
        return doc

    async def _relogin(self, stale: str | None) -> bool:
        """Make sure of a session after a 401 seen with token `stale`; True: retry with it.

        One login at a time, and only when the BMC no longer knows `stale` (its Session
        resource refuses it): a 401 on one resource with a live session must not open a
        second session beside it (issue 34: 61 sessions leaked over 60 polls)."""
        async with self._login_lock:
            if self._token is not None and self._token != stale:
                return True  # another request has logged in again meanwhile
            if stale is not None:
                if self._alive == stale or await self._session_live(stale):
                    self._alive = stale
                    return False
                self._token = self._session_uri = None  # the BMC invalidated it
            task = self._login_task
            if task is None or task.done():
                task = self._login_task = asyncio.create_task(self._login())
                # Its failure is raised to whoever awaits it; a poll cancelled meanwhile
                # does not, and asyncio would log "Task exception was never retrieved".
                task.add_done_callback(_retrieved)
            # Shielded: a poll's deadline cancels the wait, never the login (see _login).
            await asyncio.shield(task)
            return self._token is not None or self._no_sessions

    async def _session_live(self, token: str) -> bool:
        """Whether the BMC still knows the session (GET its own Session resource with it)."""
        if self._session_uri is None:
            return False
        try:
            status, _doc, _ = await self._request("GET", self._session_uri, token=token)
        except BmcError:
            return False
        return status < 300

    async def read(self, identity: bool) -> BmcReading:
        """One poll: every chassis' power (and the identity when asked)."""
        reading = BmcReading()
        self._alive = None  # a session found live is asked again in the next poll
        root = await self.get("/redfish/v1")
        assert root is not None
        self._root = root
        if self._use_sessions and not self._no_sessions and self._token is None:
            await self._relogin(None)
        chassis_path = link(root, "Chassis")
        if chassis_path is None:
            raise BmcError("garbage", "the service root links no Chassis collection")
        collection = await self.get(chassis_path)
        # Chassis read side by side (at most CONNECTIONS requests in flight to one BMC): a
        # blade enclosure's dozens of chassis must fit in one interval. Their order is kept.
        listed = members(collection, MAX_LISTED)
        del collection  # what a poll keeps is its figures, never the documents (issue 34)
        found = await _all([self._chassis(path, reading) for path in listed[: self.t.max_chassis]])
        found += await self._outer(listed[self.t.max_chassis :], found, reading)
        manager: str | None = None
        for power, ident in found:
            if power is None:
                continue
            reading.chassis.append(power)
            if identity and manager is None:
                manager = ident.manager
                if not reading.identity.get("model") and ident.model:
                    reading.identity["model"] = ident.model
                if not reading.identity.get("vendor") and ident.vendor:
                    reading.identity["vendor"] = ident.vendor
        if identity:
            # The server's maker (the chassis' Manufacturer) first: the service root's
            # Vendor is often the BMC firmware's (AMI on a Gigabyte board).
            vendor = root.get("Vendor")
            if not reading.identity.get("vendor") and isinstance(vendor, str) and vendor:
                reading.identity["vendor"] = vendor
            if manager is not None:
                doc = await self.get(manager, optional=True)
                if doc is not None and isinstance(doc.get("FirmwareVersion"), str):
                    reading.identity["firmware"] = doc["FirmwareVersion"]
            for key, value in list(reading.identity.items()):
                reading.identity[key] = clean_text(value, 128)
        return reading

    async def _outer(
        self,
        unread: list[str],
        found: list[tuple[ChassisPower | None, _Ident]],
        reading: BmcReading,
    ) -> list[tuple[ChassisPower | None, _Ident]]:
        """The chassis max_chassis left unread that contain a chassis read (an enclosure
        listed after its blades: issue 32), outermost included, up to MAX_OUTER levels; the
        rest counted "capped" (the poller logs it): never a blade guessed to be the server."""
        if not unread:
            return []
        by_id = {path.rsplit("/", 1)[-1]: path for path in unread}
        have = {p.chassis for p, _ in found if p is not None}
        out: list[tuple[ChassisPower | None, _Ident]] = []
        level = [p for p, _ in found if p is not None]
        for _ in range(MAX_OUTER):
            wanted = {p.contained_by for p in level if p.contained_by in by_id} - have
            if not wanted:
                break
            more = await _all([self._chassis(by_id.pop(cid), reading) for cid in sorted(wanted)])
            have |= wanted
            out += more
            level = [p for p, _ in more if p is not None]
        if by_id:
            reading.drop("capped", len(by_id))
        return out

    async def _chassis(self, path: str, reading: BmcReading) -> tuple[ChassisPower | None, _Ident]:
        """One chassis' power from its resources (Power, EnvironmentMetrics, PowerSubsystem)
        and what identity needs of it; the documents are dropped here."""
        chassis = await self.get(path, optional=True)
        if chassis is None:
            reading.drop("missing")
            return None, _Ident()
        try:
            async with asyncio.TaskGroup() as group:
                power = group.create_task(self._optional(chassis, "Power", reading))
                env = group.create_task(self._optional(chassis, "EnvironmentMetrics", reading))
                supplies = group.create_task(self._subsystem_supplies(chassis, reading))
        except BaseExceptionGroup as eg:
            raise _first(eg) from None
        return chassis_power(
            chassis, power.result(), env.result(), supplies.result(), reading
        ), _Ident.of(chassis)

    async def _optional(
        self, doc: dict[str, Any], key: str, reading: BmcReading
    ) -> dict[str, Any] | None:
        path = link(doc, key)
        if path is None:
            return None
        found = await self.get(path, optional=True)
        if found is None:
            reading.drop("missing")  # linked, yet 404: no value, never 0 W
        return found

    async def _subsystem_supplies(
        self, chassis: dict[str, Any], reading: BmcReading
    ) -> list[SupplyPower]:
        subsystem = await self._optional(chassis, "PowerSubsystem", reading)
        if subsystem is None:
            return []
        collection = await self._optional(subsystem, "PowerSupplies", reading)
        out: list[SupplyPower] = []
        for path in members(collection, self.t.max_supplies):
            supply = await self.get(path, optional=True)
            if supply is None:
                reading.drop("missing")
                continue
            metrics = await self._optional(supply, "Metrics", reading)
            out.extend(metrics_supply(supply, metrics, reading))
        return out

    async def close(self) -> None:
        """Log the session out (best effort) and close the connections.

        A login still running gets 2 s to finish so its session is logged out too."""
        self._closed = True
        task = self._login_task
        if task is not None and not task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), 2.0)
            task.cancel()
        token, uri, self._token = self._token, self._session_uri, None
        await self._logout(token, uri)
        if self._session is not None and not self._session.closed:
            await self._session.close()


async def _all(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """The coroutines' results, run side by side; the first failure cancels the others and is
    raised as itself (a BmcError keeps its reason), not as an ExceptionGroup."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as eg:
        raise _first(eg) from None
    return [t.result() for t in tasks]


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark a task's exception as seen (its awaiter, if any, got it already)."""
    if not task.cancelled():
        task.exception()


def _first(eg: BaseExceptionGroup[BaseException]) -> BaseException:
    """The failure to raise from a group: a BmcError (it has the reason) before anything else."""
    errors: list[BaseException] = list(eg.exceptions)
    return next((e for e in errors if isinstance(e, BmcError)), errors[0])


def _why(exc: BaseException | None) -> str:
    """An exception's reason without its arguments' repr (no URL, no header)."""
    if exc is None:
        return "unknown"
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None)
    return str(reason) if reason else type(exc).__name__
