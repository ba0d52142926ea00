"""The SNMP client of the PDU poller: GET and GETBULK subtree walks, SNMPv2c and SNMPv3 (asyncio).

One `SnmpClient` is shared by every concurrent poll in one event loop. SNMPv3 requests go
through one pysnmp 7 `SnmpEngine` for the client's lifetime, plus one more per further key set
of a user name on one agent, which one USM cannot hold (v3.py). SNMPv2c requests, where
there is no security processing, go over one plain UDP socket (udp.py) with a minimal BER codec
(ber.py): pyasn1's generic decoder, under pysnmp, costs 65-70 µs of CPU per var-bind, more than
the poller's whole budget per value (docs/benchmarks.md). Both paths return the same `Value`s;
tests read every recording through both and compare them with net-snmp.

The walk loop is ours rather than `bulk_walk_cmd`, because that helper ends a walk at the first
Null *value* (real agents return Null rows, e.g. CyberPower), retries timeouts forever, cannot
change max-repetitions half way, and walks one subtree per request. `walk_many` walks several
subtrees side by side in one GETBULK (RFC 3416 section 4.2.3: one repeater var-bind per
subtree) and sizes each request from the lengths seen in the previous poll, so a poll asks
for little more than it uses.

References: GETBULK semantics, RFC 3416 section 4.2.3. Credentials, targets and errors are in
target.py; the v2c transport in udp.py and ber.py, the v3 one in v3.py.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass

from .oid import oid_arcs, under
from .target import (
    REASONS,
    Auth,
    SnmpError,
    Target,
    VarBind,
    status_error,
)
from .types import EXCEPTIONS, Value, Walk
from .udp import V2cClient
from .v3 import V3Client

log = logging.getLogger(__name__)

_SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)  # any answer to a GET of it shows the agent is up


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
    """GET and GETBULK walks against many agents: SNMPv2c over one socket, v3 through pysnmp."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._v2c = V2cClient()
        self._v3 = V3Client()
        self._addresses: dict[tuple[str, int], tuple[int, tuple[str, int]]] = {}
        # working GETBULK size (var-binds per request) per (host, port), once a bigger one failed
        self.bulk_sizes: dict[tuple[str, int], int] = {}
        # (host, port, credentials, subtree) -> var-binds its last walk took, the one past its
        # end included. Per credentials too: one agent can show other data per community or
        # v3 context (a console server fronting several PDUs, or snmpsim).
        self._lengths: dict[tuple[str, int, Auth, str], int] = {}
        self._answered: set[tuple[str, int]] = set()  # agents that ever answered
        # agents whose GETBULK answers for several subtrees were misordered: one per request
        self._one_at_a_time: set[tuple[str, int]] = set()
        self._shrink_logged: set[tuple[str, int]] = set()  # agents whose GETBULK shrank, logged
        self._closed = False

    # -- sockets and addresses ----------------------------------------------------------------

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise RuntimeError("SnmpClient is closed")
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError("SnmpClient is bound to the event loop it first ran in")
        return loop

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

    # -- one request ----------------------------------------------------------------------------

    async def _request(
        self, target: Target, kind: str, oids: list[tuple[int, ...]], max_repetitions: int
    ) -> list[VarBind]:
        """One GET or GETBULK (non-repeaters 0); the response var-binds, or SnmpError."""
        self._bind_loop()
        family, address = await self._address(target)
        backend = self._v2c if target.auth.version == "2c" else self._v3
        status, index, var_binds = await backend.request(
            target, family, address, kind, oids, max_repetitions
        )
        self._answered.add((target.host, target.port))
        if status:
            raise status_error(target, kind, status, index, max_repetitions)
        # RFC 3416 section 4.2: never more var-binds than asked for. ber.py already stops
        # decoding a v2c answer there; this holds the v3 path (pysnmp) to the same bound.
        most = len(oids) * max_repetitions if kind == "bulk" else len(oids)
        if len(var_binds) > most:
            raise SnmpError(
                "garbage",
                target.endpoint,
                f"{kind} to {target.label}: {len(var_binds)} var-binds, {most} asked for",
            )
        return var_binds

    # -- public API -----------------------------------------------------------------------------

    async def get(self, target: Target, oids: list[str]) -> Walk:
        """GET the given OIDs; absent ones come back as noSuchObject/noSuchInstance Values."""
        wanted = [oid_arcs(o) for o in oids]
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

    async def first_rows(self, target: Target, columns: list[str]) -> dict[str, tuple[str, Value]]:
        """Each column's first instance and value, where it has one: one GETBULK of one each."""
        prefixes = [".".join(map(str, oid_arcs(c))) for c in columns]
        var_binds = await self._request(target, "bulk", [oid_arcs(p) for p in prefixes], 1)
        found: dict[str, tuple[str, Value]] = {}
        for prefix, (_, name, value) in zip(prefixes, var_binds, strict=False):
            if value.type not in EXCEPTIONS and name != prefix and under(name, prefix):
                found[prefix] = (name, value)
        return found

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
            arcs = oid_arcs(root)
            if arcs not in seen:
                seen.add(arcs)
                columns.append(_Column(arcs, ".".join(map(str, arcs)), arcs))
        result: Walk = {}
        shrunk = False
        received = 0  # var-binds this walk received: at most target.max_var_binds
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
                # INFO the first time for an agent, then DEBUG: an agent that fails every
                # size (random bytes) would otherwise log lines on every poll, for ever.
                level = logging.DEBUG if key in self._shrink_logged else logging.INFO
                self._shrink_logged.add(key)
                log.log(
                    level,
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
            received += len(var_binds)
            if received > target.max_var_binds:
                raise SnmpError(
                    "over_limit",
                    target.endpoint,
                    f"walk of {len(columns)} subtree(s) on {target.label}: more than "
                    f"{target.max_var_binds} var-binds (max_var_binds)",
                )
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

    @property
    def v3_engines(self) -> int:
        """How many SNMPv3 engines run (more than 1 only where key sets clash on one agent)."""
        return self._v3.engines

    def counts(self) -> dict[str, int]:
        """Messages sent and received and var-binds received so far, SNMPv2c and v3 together;
        SNMPv2c datagrams dropped unread (dropped: not from an agent polled; stray: no request
        waits for them) and undecodable answers (garbage)."""
        v2c, v3 = self._v2c.counts(), self._v3.counts()
        return {k: v2c[k] + v3.get(k, 0) for k in v2c}

    def close(self) -> None:
        """Close the sockets and the v3 engines; pending requests fail."""
        self._closed = True
        self._v2c.close()
        self._v3.close()

    async def __aenter__(self) -> SnmpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


__all__ = ["REASONS", "Auth", "SnmpClient", "SnmpError", "Target"]
