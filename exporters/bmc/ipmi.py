"""IPMI DCMI Get Power Reading over RMCP+ (lanplus), through pyghmi's session.

Why pyghmi (docs/exporters/bmc.md "Library"): a maintained (OpenStack) pure-Python RMCP+
implementation, so no subprocess per poll and no password on a command line or in the
environment of a child; its client does send DCMI Get Power Reading
(pyghmi/ipmi/oem/generic.py get_system_power_watts) but returns the current watts even when
the BMC says the measurement is not active (and then that is 0). wattbit sends the same raw
command through pyghmi's session and decodes the answer itself (parse_power_reading) to honour
the "power measurement active" bit. FreeIPMI's ipmi-dcmi and python-ipmi were the
alternatives: the former is a subprocess per poll, the latter has no DCMI power reading.

pyghmi is synchronous; each poll runs in a worker thread of a bounded pool and the poller's
deadline bounds the wait (pyghmi's own retries end a dead BMC's session within seconds).
"""

from __future__ import annotations

import contextlib
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
# IPMI completion codes meaning "this BMC does not do that" (IPMI 2.0 table 5-2)
UNSUPPORTED_CODES = frozenset({0xC1, 0xC9, 0xCC, 0xD4, 0xD5})


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
    timeout: float = 5.0

    def __repr__(self) -> str:  # never the password
        return f"IpmiTarget({self.host!r}, {self.port})"


class IpmiClient:
    """One pyghmi RMCP+ session per BMC, kept between polls (synchronous: run in a thread)."""

    def __init__(self, target: IpmiTarget) -> None:
        self.t = target
        self._cmd: object | None = None

    def _command(self) -> object:
        from pyghmi.exceptions import IpmiException
        from pyghmi.ipmi import command

        if self._cmd is None:
            try:
                self._cmd = command.Command(
                    bmc=self.t.host,
                    userid=self.t.username,
                    password=self.t.password,
                    port=self.t.port,
                    keepalive=False,
                )
            except IpmiException as exc:
                raise _classify(exc) from None
        return self._cmd

    def read(self, identity: bool) -> BmcReading:
        """One poll (blocking): Get Power Reading, and Get Device ID when asked."""
        from pyghmi.exceptions import IpmiException

        cmd = self._command()
        try:
            rsp = cmd.xraw_command(  # type: ignore[attr-defined]
                netfn=NETFN_DCMI, command=CMD_GET_POWER_READING, data=POWER_READING_REQUEST
            )
            reading = reading_of(parse_power_reading(bytes(rsp["data"])))
            if identity:
                dev = cmd.xraw_command(netfn=6, command=1)  # type: ignore[attr-defined]
                reading.identity = parse_device_id(bytes(dev["data"]))
            return reading
        except IpmiException as exc:
            self.close()  # a fresh session next time
            raise _classify(exc) from None
        except (KeyError, TypeError, IndexError):
            self.close()
            raise BmcError("garbage", "undecodable IPMI answer") from None

    def close(self) -> None:
        """Log out of the session."""
        cmd, self._cmd = self._cmd, None
        if cmd is not None:
            with contextlib.suppress(Exception):  # best effort: the BMC may be gone
                cmd.ipmi_session.logout()  # type: ignore[attr-defined]


def _classify(exc: Exception) -> BmcError:
    """pyghmi's exception to a failure reason; its text names no secret (checked in tests)."""
    code = getattr(exc, "ipmicode", 0) or 0
    text = str(exc)
    if code in UNSUPPORTED_CODES:
        return BmcError("unsupported", f"DCMI Get Power Reading not supported (code {code:#x})")
    low = text.lower()
    # pyghmi ends a login that never got an answer with the text "None"
    if low in ("", "none") or "timeout" in low or "timed out" in low:
        return BmcError("timeout", "no answer from the BMC")
    if any(w in low for w in ("password", "unauthorized", "user", "auth", "privilege")):
        return BmcError("auth", "IPMI session refused")
    return BmcError("error", f"IPMI: {type(exc).__name__}")
