"""IPMI DCMI Get Power Reading over RMCP+ (lanplus), through FreeIPMI's `ipmi-raw`.

Why FreeIPMI (docs/exporters/bmc.md "Library"): a maintained C implementation of RMCP+
(Debian freeipmi-tools), run as one short process per poll, so a BMC that never answers, or
answers nonsense, is killed at its deadline and holds nothing of the collector's: no thread,
no socket, no shared session table. pyghmi was tried first: its sessions live in one
process-wide table and an I/O loop shared by all threads; in tests/integration/test_bmc_ipmi.py's
setting (several BMCs logging in at once, one with a wrong password) its logins raced
(AttributeError inside pyghmi), a failed session stayed cached and failed every later poll of a
healthy BMC, and a dead BMC held a worker 20-30 s. Its client also returns 0 W when the
measurement is not active. python-ipmi has no DCMI power reading.

`ipmi-raw` sends the raw DCMI command and prints the answer's bytes; wattbit decodes them itself
(parse_power_reading, a pure function) to honour the "power measurement active" bit
(`ipmi-dcmi --get-system-power-statistics` prints it too, but as text meant for people).
The password never reaches a command line, the environment or a file: the FreeIPMI
configuration (user, password) is written into a pipe the child reads as /dev/fd/N.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import struct
from dataclasses import dataclass

from .types import BmcError, BmcReading, ChassisPower

NETFN_DCMI = 0x2C
CMD_GET_POWER_READING = 0x02
DCMI_GROUP = 0xDC
# DCMI 1.5, table 6-16: mode 1 = system power statistics
POWER_READING_REQUEST = (DCMI_GROUP, 0x01, 0x00, 0x00)
ACTIVE_BIT = 0x40  # byte 18 of the answer ("power reading state"), bit 6: measurement active
INVALID_COMMAND = 0xC1
# IPMI completion codes (IPMI 2.0 table 5-2): "this BMC does not do that" (invalid command,
# not supported in present state) and "not with this privilege"
UNSUPPORTED_CODES = frozenset({0xC1, 0xD5})
PRIVILEGE_CODES = frozenset({0xD4})


@dataclass(frozen=True)
class PowerReading:
    """DCMI Get Power Reading, decoded (DCMI 1.5 section 6.6.1)."""

    current: int
    minimum: int
    maximum: int
    average: int
    timestamp: int
    period_ms: int
    active: bool


def parse_power_reading(data: bytes) -> PowerReading:
    """The answer's data (completion code stripped: group id first) to a PowerReading."""
    if len(data) < 18 or data[0] != DCMI_GROUP:
        raise BmcError("garbage", f"DCMI power reading: {len(data)} bytes, not the 18 expected")
    cur, lo, hi, avg, ts, period = struct.unpack_from("<HHHHII", data, 1)
    return PowerReading(cur, lo, hi, avg, ts, period, bool(data[17] & ACTIVE_BIT))


def reading_of(answer: PowerReading) -> BmcReading:
    """The exported reading: the current watts only while the measurement is active."""
    reading = BmcReading()
    power = ChassisPower(chassis="", name="")
    if answer.active:
        power.power_watts, power.source = float(answer.current), "DCMI current power"
    else:
        reading.drop("inactive")  # ipmitool prints 0 W here; 0 would be a lie
    reading.chassis.append(power)
    return reading


# IPMI Get Device ID (netfn 6, cmd 1), IPMI 2.0 section 20.1: manufacturer IANA number
MANUFACTURERS = {
    674: "Dell",
    11: "HPE",
    2: "IBM",
    19046: "Lenovo",
    10876: "Supermicro",
    343: "Intel",
    15370: "Gigabyte",
    20974: "AMI",
    7244: "Quanta",
}


def parse_device_id(data: bytes) -> dict[str, str]:
    """vendor and firmware from Get Device ID's answer (data without the completion code)."""
    if len(data) < 11:
        return {}
    major = data[2] & 0x7F
    minor = data[3]
    iana = data[6] | data[7] << 8 | data[8] << 16
    product = data[9] | data[10] << 8
    return {
        "vendor": MANUFACTURERS.get(iana, f"IANA {iana}"),
        "model": f"product {product:#06x}",
        "firmware": f"{major}.{minor:02x}",
    }


@dataclass(frozen=True)
class IpmiTarget:
    """One IPMI BMC (lanplus)."""

    host: str
    port: int = 623
    username: str = ""
    password: str = ""
    privilege: str = "USER"  # DCMI Get Power Reading needs no more (DCMI 1.5 table 6-2)
    timeout: float = 5.0  # FreeIPMI's session timeout
    workarounds: tuple[str, ...] = ()  # FreeIPMI's workaround flags (freeipmi.conf(5))

    def __repr__(self) -> str:  # never the password
        return f"IpmiTarget({self.host!r}, {self.port})"


IPMI_RAW = "ipmi-raw"
# Two requests in one session, one a line: LUN, netfn, command, data (ipmi-raw(8) --file)
COMMANDS = (
    "0x00 0x2c 0x02 " + " ".join(f"{b:#04x}" for b in POWER_READING_REQUEST) + "\n0x00 0x06 0x01\n"
).encode()
MAX_OUTPUT = 64 * 1024

# ipmi-raw's messages (stderr) -> failure reason; the messages are FreeIPMI's fixed texts
# (libfreeipmi/api/ipmi-api-util.c ipmi_ctx_errormsg), never a secret.
STDERR_REASONS = (
    ("password invalid", "auth"),
    ("username invalid", "auth"),
    ("privilege level insufficient", "auth"),
    ("privilege level cannot be obtained", "auth"),
    ("k_g invalid", "auth"),
    ("authentication type unavailable", "auth"),
    ("cipher suite id unavailable", "auth"),
    ("session timeout", "timeout"),
    ("connection timeout", "timeout"),
    ("bmc busy", "timeout"),
)


def parse_raw_output(text: str) -> list[bytes]:
    """`rcvd: 02 00 DC ...` lines of ipmi-raw to the answers' bytes (command, code, data)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("rcvd:"):
            continue
        try:
            out.append(bytes(int(h, 16) for h in line[5:].split()))
        except ValueError:
            raise BmcError("garbage", "undecodable ipmi-raw output") from None
    return out


def reading_from_raw(answers: list[bytes], identity: bool) -> BmcReading:
    """The poll's reading from ipmi-raw's answers: power reading first, Get Device ID second."""
    if not answers or len(answers[0]) < 2 or answers[0][0] != CMD_GET_POWER_READING:
        raise BmcError("garbage", "no answer to DCMI Get Power Reading")
    code = answers[0][1]
    if code in UNSUPPORTED_CODES:
        raise BmcError("unsupported", f"DCMI Get Power Reading not supported (code {code:#x})")
    if code in PRIVILEGE_CODES:
        raise BmcError("auth", "DCMI Get Power Reading: insufficient privilege (code 0xd4)")
    if code != 0:
        raise BmcError("error", f"DCMI Get Power Reading: completion code {code:#x}")
    reading = reading_of(parse_power_reading(answers[0][2:]))
    if identity and len(answers) > 1 and len(answers[1]) > 2 and answers[1][1] == 0:
        reading.identity = parse_device_id(answers[1][2:])
    return reading


def stderr_reason(text: str) -> str:
    """The failure reason of ipmi-raw's error message."""
    low = text.lower()
    for needle, reason in STDERR_REASONS:
        if needle in low:
            return reason
    return "error"


async def _drain(stream: asyncio.StreamReader) -> bytes:
    """A child's output to its end, keeping at most MAX_OUTPUT bytes (the rest discarded)."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        kept += chunk[: max(0, MAX_OUTPUT - len(kept))]
    return bytes(kept)


class IpmiClient:
    """Polls one BMC by running ipmi-raw (one RMCP+ session per poll)."""

    def __init__(self, target: IpmiTarget, program: str = IPMI_RAW) -> None:
        self.t = target
        self.program = program

    def _config(self) -> bytes:
        # FreeIPMI configuration file syntax (freeipmi.conf(5)): "key value" lines; a value
        # holding a space or a quote cannot be given there (refused by the config loader).
        return (
            f"username {self.t.username}\n"
            f"password {self.t.password}\n"
            "driver-type LAN_2_0\n"
            f"privilege-level {self.t.privilege}\n"
            + (f"workaround-flags {' '.join(self.t.workarounds)}\n" if self.t.workarounds else "")
        ).encode()

    async def read(self, identity: bool) -> BmcReading:
        """One poll; the caller's deadline cancels it (the child is then killed)."""
        exe = shutil.which(self.program)
        if exe is None:
            raise BmcError("error", f"{self.program} is not installed (Debian freeipmi-tools)")
        cfg_r, cfg_w = os.pipe()
        cmd_r, cmd_w = os.pipe()
        try:
            os.write(cfg_w, self._config())  # a few hundred bytes: within the pipe's buffer
            os.write(cmd_w, COMMANDS)
        finally:
            os.close(cfg_w)
            os.close(cmd_w)
        host = f"[{self.t.host}]" if ":" in self.t.host else self.t.host
        try:
            proc = await asyncio.create_subprocess_exec(
                exe,
                f"--config-file=/dev/fd/{cfg_r}",
                f"--hostname={host}:{self.t.port}",
                f"--file=/dev/fd/{cmd_r}",
                f"--session-timeout={int(self.t.timeout * 1000)}",
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(cfg_r, cmd_r),
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            )
        finally:
            os.close(cfg_r)
            os.close(cmd_r)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            out, err = await asyncio.gather(_drain(proc.stdout), _drain(proc.stderr))
            await proc.wait()
        finally:
            if proc.returncode is None:  # cancelled by the deadline: no child left behind
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        answers = parse_raw_output(out.decode("ascii", "replace"))
        if proc.returncode != 0 and not answers:
            raise BmcError(stderr_reason(err.decode("ascii", "replace")), "ipmi-raw: no session")
        return reading_from_raw(answers, identity)

    def close(self) -> None:
        """Nothing is held between polls."""
