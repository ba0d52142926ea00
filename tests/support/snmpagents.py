"""Real SNMP agents for tests: snmpsim serving recordings, fault agents, net-snmp reads.

RawAgent is the demo's SNMPv2c responder (collector/pdu/responder.py) serving a recording,
with its faults switched on as a test asks.

How snmpsim is started (snmpsim 1.2.2, `snmpsim-command-responder` from this venv):

    snmpsim-command-responder --process-user=nobody --process-group=nogroup \
        --cache-dir=TMP/cache --log-level=error \
        --v3-engine-id=auto --data-dir=TMP/data --agent-udpv4-endpoint=127.0.0.1:PORT \
        --v3-user=U --v3-auth-proto=SHA256 --v3-auth-key=K --v3-priv-proto=AES256 --v3-priv-key=P

* The order matters: every option after `--v3-engine-id` configures that engine. Put
  `--data-dir` or `--agent-udpv4-endpoint` *before* it and snmpsim silently builds a second
  engine with the default data directories and no endpoint.
* As root it refuses to run without `--process-user/--process-group`. It reads the data files
  and writes its index (`--cache-dir`) as that user, so the data dir must be readable and the
  cache dir writable by nobody.
* Data files are selected by community = path relative to `--data-dir` without the extension
  (`apc_ap8641.snmprec` -> community `apc_ap8641`). `.snmpwalk` files (net-snmp text) are parsed
  by snmpsim's walk grammar; `cyberpower_pdu44005.snmpwalk` is served as is (untyped values
  become TimeTicks, `= NULL` becomes Null), so no conversion to .snmprec is needed.
* SNMPv3 context: snmpsim registers every data file under two context names, the community
  (file stem, when it is at most 32 characters) and md5(community) as hex. A v3 request must
  name one of them (`-n apc_ap8641`); the empty default context is unregistered, and snmpsim
  then drops the request without answering (the manager sees a timeout, not an error).
* `--max-var-binds` has no effect in snmpsim 1.2.2 (it sets `maxVarBinds`, pysnmp 7 reads
  `max_varbinds`); the responder caps GETBULK answers at 64 var-binds and never says tooBig.
  `RawAgent` below plays the agents that do.
* snmpsim's `AES192`/`AES256` are the "Reeder" key extension (Cisco); net-snmp's `AES-192`/
  `AES-256` are "Blumenthal" (snmpsim `AES192BLMT`/`AES256BLMT`). The two agree whenever the
  auth protocol's localized key is already long enough (SHA-256 and up for AES-256).
* Each agent is single-threaded: a `delay` variation (`2:delay|value=5,wait=1500`) stalls the
  whole process, so a slow agent gets an snmpsim of its own.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.demo.procs import free_port
from collector.pdu.responder import Faults, Responder
from collector.pdu.snmprec import read_snmprec
from exporters.snmp import ber
from exporters.snmp.oid import oid_arcs
from exporters.snmp.types import Value
from tests.support.env import FIXTURES

SNMPSIM_BIN = Path(sys.executable).parent / "snmpsim-command-responder"
SNMP_FIXTURES = FIXTURES / "snmp"
SYS_OBJECT_ID = "1.3.6.1.2.1.1.2.0"
PROCESS_USER, PROCESS_GROUP = "nobody", "nogroup"


def have_snmpsim() -> bool:
    """True when the snmpsim responder is installed next to this interpreter."""
    return SNMPSIM_BIN.exists()


def have_netsnmp() -> bool:
    """True when net-snmp's command line tools are on PATH."""
    return all(shutil.which(c) for c in ("snmpget", "snmpbulkwalk"))


# net-snmp's names for snmpsim's protocol names.
_NETSNMP_AUTH = {
    "MD5": "MD5",
    "SHA": "SHA",
    "SHA224": "SHA-224",
    "SHA256": "SHA-256",
    "SHA384": "SHA-384",
    "SHA512": "SHA-512",
}
_NETSNMP_PRIV = {
    "DES": "DES",
    "AES": "AES",
    "AES128": "AES",
    "AES192BLMT": "AES-192",
    "AES256BLMT": "AES-256",
}
# Reeder and Blumenthal key extension give the same key when no extension is needed.
_LONG_ENOUGH = {
    "AES192": {"SHA224", "SHA256", "SHA384", "SHA512"},
    "AES256": {"SHA256", "SHA384", "SHA512"},
}


@dataclass(frozen=True)
class V3User:
    """An SNMPv3 USM user of a simulated agent, with snmpsim's protocol names."""

    user: str
    auth_proto: str = "NONE"  # MD5 SHA SHA224 SHA256 SHA384 SHA512 NONE
    auth_key: str | None = field(default=None, repr=False)
    priv_proto: str = "NONE"  # DES AES128 AES192 AES256 AES192BLMT AES256BLMT NONE
    priv_key: str | None = field(default=None, repr=False)

    def snmpsim_args(self) -> list[str]:
        """The responder options that create this user."""
        args = [f"--v3-user={self.user}"]
        if self.auth_proto != "NONE":
            args += [f"--v3-auth-proto={self.auth_proto}", f"--v3-auth-key={self.auth_key}"]
        if self.priv_proto != "NONE":
            args += [f"--v3-priv-proto={self.priv_proto}", f"--v3-priv-key={self.priv_key}"]
        return args

    def netsnmp_args(self, context: str) -> list[str]:
        """net-snmp options to talk to this user in SNMPv3 context `context`."""
        args = ["-v3", "-u", self.user, "-n", context]
        if self.auth_proto == "NONE":
            return [*args, "-l", "noAuthNoPriv"]
        args += ["-a", _NETSNMP_AUTH[self.auth_proto], "-A", str(self.auth_key)]
        if self.priv_proto == "NONE":
            return [*args, "-l", "authNoPriv"]
        priv = _NETSNMP_PRIV.get(self.priv_proto)
        if priv is None and self.auth_proto in _LONG_ENOUGH.get(self.priv_proto, ()):
            priv = "AES-" + self.priv_proto[3:]
        if priv is None:
            raise ValueError(f"net-snmp has no equivalent of {self.priv_proto}/{self.auth_proto}")
        return [*args, "-l", "authPriv", "-x", priv, "-X", str(self.priv_key)]


def clean_snmpwalk(text: bytes) -> bytes:
    """A net-snmp walk capture without the capture tool's trailing "End of MIB" marker."""
    # Centreon's captures (cyberpower_pdu44005.snmpwalk) end with
    # `.1.3.6.1.6.3.15.1.1.6.0 = Counter32: 0 End of MIB`. snmpsim parses everything else in
    # that file as is, but cannot coerce "0 End of MIB" to a Counter32: it then answers
    # noSuchInstance for that OID and ends walks one row early. Only that marker goes.
    lines = text.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            stripped = lines[i].rstrip(b"\r\n")
            if stripped.endswith(b" End of MIB"):
                lines[i] = stripped[: -len(b" End of MIB")] + b"\n"
            break
    return b"".join(lines)


class SnmpSim:
    """snmpsim-command-responder serving recordings on 127.0.0.1:<free port> (context manager)."""

    def __init__(
        self,
        recordings: Iterable[Path | str] | Mapping[str, Path | str],
        *,
        v3_users: Sequence[V3User] = (),
        host: str = "127.0.0.1",
        startup_timeout: float = 30.0,
        log_level: str = "error",
    ) -> None:
        if isinstance(recordings, Mapping):
            files = {str(c): Path(p) for c, p in recordings.items()}
        else:
            files = {Path(p).stem: Path(p) for p in recordings}
        if not files:
            raise ValueError("no recordings")
        for community, path in files.items():
            if path.suffix not in (".snmprec", ".snmpwalk"):
                raise ValueError(f"{path}: not a .snmprec or .snmpwalk file")
            if "=" in community or "/" in community:
                raise ValueError(f"bad community {community!r}")
        for u in v3_users:
            for value in (u.user, u.auth_key or "", u.priv_key or ""):
                if "=" in value or " " in value:  # snmpsim splits its options on "="
                    raise ValueError("snmpsim options cannot hold '=' or spaces")
        self.files = files
        self.communities = list(files)
        self.v3_users = list(v3_users)
        self.host = host
        self.startup_timeout = startup_timeout
        self.log_level = log_level
        self.port = 0
        self._tmp: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def endpoint(self) -> str:
        """host:port, as net-snmp takes it (udp6:[host]:port for IPv6)."""
        if ":" in self.host:
            return f"udp6:[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    def __enter__(self) -> SnmpSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> SnmpSim:
        """Copy the recordings into a private dir, start snmpsim and wait until it answers."""
        if not SNMPSIM_BIN.exists():
            raise RuntimeError(f"{SNMPSIM_BIN} is not installed")
        try:
            self._tmp = Path(tempfile.mkdtemp(prefix="wattbit-snmpsim-"))
            data, cache = self._tmp / "data", self._tmp / "cache"
            data.mkdir()
            cache.mkdir()
            for community, src in self.files.items():
                dst = data / f"{community}{src.suffix}"
                if src.suffix == ".snmpwalk":
                    dst.write_bytes(clean_snmpwalk(src.read_bytes()))
                else:
                    shutil.copyfile(src, dst)
                dst.chmod(0o644)
            # snmpsim reads data and writes its index as nobody (mkdtemp makes 0700 dirs)
            for d in (self._tmp, data):
                d.chmod(0o755)
            if os.geteuid() == 0:
                shutil.chown(cache, PROCESS_USER, PROCESS_GROUP)
            last_error = ""
            for _ in range(3):  # the free port may be taken between probe and bind
                self.port = free_port(socket.SOCK_DGRAM, self.host)
                if self._launch(data, cache):
                    return self
                last_error = self.log_text()
                self._kill()
            raise RuntimeError(f"snmpsim did not start: {last_error[-2000:]}")
        except BaseException:
            self.stop()
            raise

    def _launch(self, data: Path, cache: Path) -> bool:
        assert self._tmp is not None
        # as root snmpsim insists on dropping privileges; as anyone else it must not be asked to
        drop = [f"--process-user={PROCESS_USER}", f"--process-group={PROCESS_GROUP}"]
        cmd = [
            str(SNMPSIM_BIN),
            *(drop if os.geteuid() == 0 else []),
            f"--cache-dir={cache}",
            f"--log-level={self.log_level}",
            # per engine, in this order: engine first, then its data, endpoint and users
            "--v3-engine-id=auto",
            f"--data-dir={data}",
            (
                f"--agent-udpv6-endpoint=[{self.host}]:{self.port}"
                if ":" in self.host
                else f"--agent-udpv4-endpoint={self.host}:{self.port}"
            ),
        ]
        for u in self.v3_users:
            cmd += u.snmpsim_args()
        self._log = open(self._tmp / "snmpsim.log", "ab")  # noqa: SIM115 (closed in _kill)
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            if raw_get(self.host, self.port, self.communities[0], SYS_OBJECT_ID, 0.2) is not None:
                return True
        return False

    def log_text(self) -> str:
        """What snmpsim wrote so far (errors only, at the default log level)."""
        if self._tmp is None or not (self._tmp / "snmpsim.log").exists():
            return ""
        return (self._tmp / "snmpsim.log").read_text(errors="replace")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Stop snmpsim (terminate, wait, kill) and remove its files."""
        self._kill()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


# --- a readiness probe and the fault agent ------------------------------------------------------


def raw_get(host: str, port: int, community: str, oid: str, timeout: float) -> Value | None:
    """One SNMPv2c GET; the value, or None when nothing (decodable) answered in time."""
    request_id = random.randrange(1, 2**31)
    request = ber.encode_request(ber.GET, community.encode(), request_id, [oid_arcs(oid)])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.sendto(request, (host, port))
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([s], [], [], left)[0]:
                return None
            try:
                rsp = ber.decode_response(s.recv(65535))
            except (OSError, ber.BerError):
                continue
            if rsp.request_id == request_id and rsp.var_binds:
                return rsp.var_binds[0][2]
    return None


class RawAgent(Responder):
    """The demo's SNMPv2c responder serving a recording on 127.0.0.1, playing a faulty PDU.

    Faults (max_bulk, max_response, fault, column_major, loop) as in responder.Faults; rows
    (the view, (OID arcs, Value) in order) may be swapped while it serves; stats counts what
    it saw.
    """

    def __init__(
        self,
        recording: Path,
        community: str = "public",
        *,
        host: str = "127.0.0.1",
        **faults: Any,
    ) -> None:
        super().__init__(read_snmprec(recording), community, faults=Faults(**faults), host=host)


def closed_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port nothing listens on: the kernel answers with ICMP port unreachable."""
    return free_port(socket.SOCK_DGRAM, host)


@contextlib.contextmanager
def silent_udp_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A bound UDP port that swallows every datagram (a host whose agent is dead)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        yield int(s.getsockname()[1])


# --- the independent reader: net-snmp's snmpbulkwalk -------------------------------------------

_NETSNMP_EXCEPTIONS = {
    "No Such Object available on this agent at this OID": "noSuchObject",
    "No Such Instance currently exists at this OID": "noSuchInstance",
    "No more variables left in this MIB View (It is past the end of the MIB tree)": "endOfMibView",
}


def snmpwalk_values(
    endpoint: str,
    community_or_v3_args: str | Sequence[str],
    root: str,
    *,
    timeout: float = 5.0,
    retries: int = 1,
    max_repetitions: int = 10,
) -> dict[str, tuple[str, str]]:
    """net-snmp's view of a subtree: {oid: (net-snmp type word, raw value text)}."""
    # The reader is `snmpbulkwalk -m "" -On -Oe -Ox -OU`: no MIBs (-m ""), numeric OIDs (-On),
    # numbers not enum labels (-Oe), every OCTET STRING as hex bytes (-Ox, so binary names and
    # NUL bytes survive), no units (-OU). Not -Ot: it prints TimeTicks as a bare number without
    # their type, so the "(N) d:h:m:s" form is parsed instead. Types are net-snmp's words:
    # INTEGER, Hex-STRING, OID, IpAddress, Counter32, Gauge32, Timeticks, Counter64, Opaque,
    # NULL, and noSuchObject/noSuchInstance for exception values. OIDs lose their leading dot;
    # OID values keep it; hex is upper case bytes joined by single spaces ("" when empty).
    # net-snmp stops a bulk walk after a response that holds an exception value: use a large
    # max_repetitions to read such a table in one response.
    if isinstance(community_or_v3_args, str):
        auth = ["-v2c", "-c", community_or_v3_args]
    else:
        auth = list(community_or_v3_args)
    cmd = [
        "snmpbulkwalk",
        *auth,
        "-m",
        "",
        "-On",
        "-Oe",
        "-Ox",
        "-OU",
        "-t",
        str(timeout),
        "-r",
        str(retries),
        f"-Cr{max_repetitions}",
        endpoint,
        root,
    ]
    env = {**os.environ, "MIBS": "", "MIBDIRS": "/nonexistent"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"snmpbulkwalk failed ({proc.returncode}): {proc.stderr.strip()}")
    out: dict[str, tuple[str, str]] = {}
    last = ""
    for line in proc.stdout.splitlines():
        if line.startswith(".") and " = " in line:
            oid, rest = line.split(" = ", 1)
            last = oid.lstrip(".")
            if _NETSNMP_EXCEPTIONS.get(rest) == "endOfMibView":
                # snmpbulkwalk prints the end-of-view rows of its last response, under the
                # OID of the last real row: skip them, never overwrite that row
                last = ""
            elif rest in _NETSNMP_EXCEPTIONS:
                out[last] = (_NETSNMP_EXCEPTIONS[rest], "")
            elif rest == "NULL":
                out[last] = ("NULL", "")
            elif rest == '""':
                out[last] = ("Hex-STRING", "")
            else:
                kind, _, value = rest.partition(": ")
                if kind == "Timeticks":  # "(165528150) 19 days, 3:48:01.50": keep the number
                    value = value[1 : value.index(")")]
                out[last] = (kind, value.strip())
        elif last and line.strip():  # net-snmp wraps long hex strings onto further lines
            kind, value = out[last]
            out[last] = (kind, f"{value} {line.strip()}".strip())
    return out
