"""smartctl's JSON output (``smartctl --json``) to a SmartReading: a pure function of the bytes.

Every input is hostile: the output may be truncated, not JSON, nested without end, hold numbers
of thousands of digits, strings where numbers belong, or keys smartctl never writes. Nothing
here raises: whatever cannot be read is absent from the reading, and output that says nothing
usable is a reading with status ``error`` (or ``no_smart``/``standby`` when smartctl says so).

What smartctl writes, and under which key, is taken from its source (smartmontools 7.3-7.5,
https://github.com/smartmontools/smartmontools/tree/master/src): ``ataprint.cpp`` (ATA
attributes, ``power_mode`` and the standby message), ``nvmeprint.cpp`` (the NVMe SMART/Health
log, ``smart_status.nvme``), ``scsiprint.cpp`` (SCSI health, temperature, power-on time,
``scsi_grown_defect_list``), ``smartctl.cpp`` (device type detection) and the exit status
bits documented in smartctl(8) "RETURN VALUES".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

MAX_OUTPUT = 4 << 20  # bytes: a full `smartctl -x --json` of a SATA drive is ~100 KiB

Status = Literal["ok", "standby", "no_smart", "error"]

# ATA attributes exported (Backblaze's five failure predictors, smartmontools' default names):
# 5 Reallocated_Sector_Ct, 187 Reported_Uncorrect, 188 Command_Timeout,
# 197 Current_Pending_Sector, 198 Offline_Uncorrectable.
ATA_ATTRIBUTES = (5, 187, 188, 197, 198)
COMMAND_TIMEOUT = 188

# NVMe SMART/Health log byte 0, "Critical Warning" (NVMe Base Specification 2.0, Figure 207),
# bit -> the `bit` label. smartctl prints the same bits (nvmeprint.cpp print_critical_warning).
NVME_CRITICAL_WARNING_BITS = (
    (0, "spare"),  # available spare below threshold
    (1, "temperature"),  # a temperature above an over- or below an under-temperature threshold
    (2, "reliability"),  # NVM subsystem reliability degraded (media or internal errors)
    (3, "read_only"),  # media placed in read-only mode
    (4, "volatile_backup"),  # volatile memory backup device failed
    (5, "pmr_read_only"),  # persistent memory region read-only or unreliable
)

# smartctl(8) RETURN VALUES, bit 1: "Device open failed, device did not return an IDENTIFY
# DEVICE structure, or device is in a low-power mode (see '-n' option above)".
EXIT_OPEN_FAILED_OR_LOW_POWER = 1 << 1

# smartctl(8) "EXIT STATUS" bits 2-7, bit -> the `bit` label of wattbit_disk_smartctl_exit_bit
# (bits 0 and 1, a command line or device open that failed, are wattbit_disk_smart_available's
# "error"). smartctl_exporter exports the whole number (smartctl_device_smartctl_exit_status).
EXIT_STATUS_BITS = (
    (2, "command_failed"),  # a SMART or other ATA/SCSI command failed, or a checksum error
    (3, "disk_failing"),  # SMART status check returned "DISK FAILING"
    (4, "prefail_below_threshold"),  # "DISK OK", but prefail attributes are <= threshold
    (5, "past_below_threshold"),  # "DISK OK", but attributes were <= threshold in the past
    (6, "error_log"),  # the device error log contains records of errors
    (7, "self_test_log"),  # the device self-test log contains records of errors
)

# The SCSI Error Counter log pages (SPC-4 7.3: Read 03h, Write 02h, Verify 05h) as smartctl
# prints them (scsiprint.cpp scsiPrintErrorCounterLog: scsi_error_counter_log.{read,write,verify}).
SCSI_ERROR_OPERATIONS = ("read", "write", "verify")

# NVMe "Data Units Read/Written" count thousands of 512-byte units (NVMe Base Specification 2.0,
# Figure 207: "reported in thousands (i.e., a value of 1 corresponds to 1,000 units of 512
# bytes)"), rounded up.
NVME_DATA_UNIT_BYTES = 512_000

# The last self-test's result code -> passed (True) / failed (False); codes not listed (aborted,
# interrupted, in progress, reserved) say nothing about the drive. SCSI: SPC-4 Table 360
# (self-test results log parameter, SELF-TEST RESULTS field), scsiprint.cpp scsiPrintSelfTest.
# NVMe: NVMe Base Specification 2.0 Figure 260 (Device Self-test Status, bits 3:0).
_SCSI_SELF_TEST = {0: True, 3: False, 4: False, 5: False, 6: False, 7: False}
_NVME_SELF_TEST = {0: True, 5: False, 6: False, 7: False}

# `-n standby` skipping a sleeping drive: "Device is in STANDBY mode, exit(2)" (ATA also
# SLEEP, STANDBY_Y; SCSI "STANDBY BY TIMER" ...; smartctl.cpp "STANDBY (OS)"), printed with
# severity "information" from ataprint.cpp / scsiprint.cpp / smartctl.cpp.
_STANDBY = re.compile(r"^Device is in [A-Z_ ()]{1,40} mode, exit\(\d{1,3}\)$")
# No SMART to read behind this name (smartctl.cpp: get_smart_device failed): virtio, loop,
# zram, or a USB bridge smartctl does not know.
_NO_SMART = re.compile(r": (Unable to detect device type|Unknown USB bridge\b)")

_U64 = 1 << 64
_U128 = 1 << 128  # NVMe counters are 128-bit (smartctl prints them as JSON numbers too)
_MAX_MESSAGES = 16
_MAX_TEXT = 200
_MAX_NAME = 64


@dataclass(frozen=True)
class AtaAttribute:
    """One exported ATA SMART attribute: its id, smartctl's name for it, its count."""

    id: int
    name: str  # smartctl's name from its drive database ("Reallocated_Sector_Ct", ...)
    raw: int


@dataclass(frozen=True)
class NvmeHealth:
    """The NVMe SMART/Health Information log page (02h) fields wattbit exports."""

    critical_warning: int | None = None
    media_errors: int | None = None
    error_log_entries: int | None = None
    percentage_used: int | None = None
    available_spare: int | None = None
    available_spare_threshold: int | None = None
    data_units_read: int | None = None  # thousands of 512-byte units (NVME_DATA_UNIT_BYTES)
    data_units_written: int | None = None


@dataclass(frozen=True)
class SmartReading:
    """What one smartctl run said about one device."""

    status: Status
    detail: str = ""  # for the log: smartctl's first message, or why the output is unusable
    exit_status: int | None = None
    protocol: str = ""  # smartctl's device.protocol: "ATA", "NVMe", "SCSI" ("" unknown)
    healthy: bool | None = None  # smart_status.passed
    temperature_celsius: int | None = None
    power_on_seconds: int | None = None
    attributes: tuple[AtaAttribute, ...] = ()
    nvme: NvmeHealth | None = None
    grown_defects: int | None = None  # SCSI: elements in the grown defect list
    # SCSI error counter log: operation ("read", "write", "verify") -> (corrected, uncorrected)
    scsi_errors: tuple[tuple[str, int | None, int | None], ...] = ()
    power_cycles: int | None = None  # ATA attribute 12 / NVMe Power Cycles (power_cycle_count)
    self_test_passed: bool | None = None  # the last completed self-test (None: none, aborted)


def parse_smartctl(data: bytes, exit_code: int | None = None) -> SmartReading:
    """The reading in smartctl's JSON output; never raises (see the module docstring).

    exit_code is the process's exit status, used when the output does not carry its own
    (smartctl.exit_status).
    """
    if len(data) > MAX_OUTPUT:
        return SmartReading("error", f"output larger than {MAX_OUTPUT} bytes", exit_code)
    try:
        # ValueError covers malformed JSON and integers past Python's digit limit. Bytes that
        # are not UTF-8 (smartctl copies a drive's IDENTIFY strings as they are) cost their own
        # characters, never the disk's reading (issue 34).
        doc = json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return SmartReading("error", "output is not JSON", exit_code)
    if not isinstance(doc, dict):
        return SmartReading("error", "output is not a JSON object", exit_code)
    return _reading(doc, exit_code)


def _reading(doc: dict[str, Any], exit_code: int | None) -> SmartReading:
    tool = _dict(doc.get("smartctl"))
    status_bits = _int(tool.get("exit_status"), 0, 255)
    exit_status = status_bits if status_bits is not None else exit_code
    messages = _messages(tool.get("messages"))
    first = messages[0] if messages else ""
    protocol = _text(_dict(doc.get("device")).get("protocol"), 16)

    if exit_status is not None and exit_status & EXIT_OPEN_FAILED_OR_LOW_POWER:
        for m in messages:
            if _STANDBY.match(m):
                return SmartReading("standby", m, exit_status, protocol)

    support = _dict(doc.get("smart_support"))
    if support.get("available") is False:
        return SmartReading("no_smart", "the device has no SMART", exit_status, protocol)
    if support.get("enabled") is False and protocol != "SCSI":
        # wattbit never changes a drive's settings; `smartctl -s on DEVICE` would. On SCSI,
        # "disabled" is only the DEXCPT bit of the Informational Exceptions mode page (SPC-4
        # 7.5.10: exception *reporting* off): the drive still answers health, temperature,
        # power-on time, the defect list and its logs, and smartctl prints them (scsiprint.cpp
        # reads them whatever DEXCPT says).
        return SmartReading("no_smart", "SMART is disabled on the device", exit_status, protocol)

    passed = _dict(doc.get("smart_status")).get("passed")
    healthy = passed if isinstance(passed, bool) else None
    table = _dict(doc.get("ata_smart_attributes")).get("table")
    has_table = isinstance(table, list) and len(table) > 0
    nvme = _nvme(doc.get("nvme_smart_health_information_log"))
    grown = _int(doc.get("scsi_grown_defect_list"), 0, _U64 - 1)
    scsi_errors = _scsi_errors(doc.get("scsi_error_counter_log"))

    if healthy is None and not has_table and nvme is None and grown is None and not scsi_errors:
        for m in messages:
            if _NO_SMART.search(m):
                return SmartReading("no_smart", m, exit_status, protocol)
        if isinstance(doc.get("device"), dict) and not (
            exit_status is not None and exit_status & EXIT_OPEN_FAILED_OR_LOW_POWER
        ):
            # Opened and identified, but no health in any form: a RAID volume, a virtual LUN.
            return SmartReading("no_smart", first or "no SMART data", exit_status, protocol)
        if not first:
            first = (
                f"smartctl exit status {exit_status}, no SMART data"
                if exit_status
                else "no SMART data in the output"
            )
        return SmartReading("error", first, exit_status, protocol)

    return SmartReading(
        "ok",
        first,
        exit_status,
        protocol,
        healthy=healthy,
        temperature_celsius=_int(_dict(doc.get("temperature")).get("current"), -60, 200),
        power_on_seconds=_power_on_seconds(doc.get("power_on_time")),
        attributes=_attributes(table) if isinstance(table, list) else (),
        nvme=nvme,
        grown_defects=grown,
        scsi_errors=scsi_errors,
        power_cycles=_int(doc.get("power_cycle_count"), 0, _U64 - 1),
        self_test_passed=_self_test_passed(doc),
    )


def attribute_count(attr_id: int, raw: object) -> int | None:
    """The count in an ATA attribute's ``raw`` ({value, string}); None when unreadable.

    ``raw.value`` is the attribute's 48 raw bits as one number; ``raw.string`` is how
    smartctl formats them for this drive (lib/atacmds.cpp ata_format_attr_raw_value, the
    format chosen by its drive database). Formats that pack several numbers into the raw
    bits print them apart, so the string says which part is the count:

    - "N" (raw48, raw56, raw64): N.
    - "N (a b)", "N (Average a)", "N (a b c)" (raw16(raw16), raw16(avg16), raw24(raw8)):
      the leading N is the counter; the parenthesised words are vendor data. The DEFAULT
      format of attribute 5 is raw16(raw16).
    - "a b c" (raw16: the three 16-bit words, high first) or six bytes (raw8): the largest.
    - anything else (hex48, "a/b"): raw.value.

    Attribute 188, Command_Timeout, gets one more rule. Seagate packs three 16-bit counters
    into it: word 0 the total number of command timeouts (held at FFFFh), word 1 those over
    5 s, word 2 those over 7.5 s; newer drive databases format it as raw16 ("1 1 1") but many
    drives are not in them and show raw48 4295032833 (0x0001_0001_0001) instead
    (https://github.com/smartmontools/smartmontools/issues/184, issues/319). So for 188, a
    raw value above 0xFFFF is read as three 16-bit words and the largest one is the count:
    Seagate's total is never below its two subsets, and a drive that keeps its count in
    another word ("0 5 0", https://github.com/AnalogJ/scrutiny/issues/774) still reads as
    non-zero. A genuine 48-bit count above 65535 command timeouts would be under-read; any
    non-zero value is already a failing sign.
    """
    if not isinstance(raw, dict):
        return None
    string = raw.get("string")
    count: int | None = None
    if isinstance(string, str) and len(string) <= 80:
        words = string.strip().split(" (", 1)[0].split()
        if words and all(w.isascii() and w.isdigit() and len(w) <= 20 for w in words):
            numbers = [int(w) for w in words]
            count = numbers[0] if len(numbers) == 1 else max(numbers)
            if len(numbers) > 1 and "(" in string:
                count = None  # "a b (c)": no format smartctl prints; fall back to raw.value
    if count is None:
        count = _int(raw.get("value"), 0, _U64 - 1)
    if count is None or count >= _U64:
        return None
    if attr_id == COMMAND_TIMEOUT and count > 0xFFFF:
        count = max((count >> shift) & 0xFFFF for shift in (0, 16, 32))
    return count


def _attributes(table: list[Any]) -> tuple[AtaAttribute, ...]:
    found: dict[int, AtaAttribute] = {}
    for entry in table[:256]:  # an ATA attribute table has 30 slots; 256 ids exist at most
        if not isinstance(entry, dict):
            continue
        attr_id = _int(entry.get("id"), 1, 255)
        if attr_id not in ATA_ATTRIBUTES or attr_id in found:
            continue
        raw = attribute_count(attr_id, entry.get("raw"))
        if raw is None:
            continue
        name = _text(entry.get("name"), _MAX_NAME) or "Unknown_Attribute"
        found[attr_id] = AtaAttribute(attr_id, name, raw)
    return tuple(found[i] for i in sorted(found))


def _nvme(log: object) -> NvmeHealth | None:
    if not isinstance(log, dict):
        return None
    return NvmeHealth(
        critical_warning=_int(log.get("critical_warning"), 0, 255),
        media_errors=_int(log.get("media_errors"), 0, _U128 - 1),
        error_log_entries=_int(log.get("num_err_log_entries"), 0, _U128 - 1),
        percentage_used=_int(log.get("percentage_used"), 0, 255),  # may exceed 100 (spec)
        available_spare=_int(log.get("available_spare"), 0, 255),
        available_spare_threshold=_int(log.get("available_spare_threshold"), 0, 255),
        data_units_read=_int(log.get("data_units_read"), 0, _U128 - 1),
        data_units_written=_int(log.get("data_units_written"), 0, _U128 - 1),
    )


def _scsi_errors(log: object) -> tuple[tuple[str, int | None, int | None], ...]:
    """(operation, corrected, uncorrected) of each counter page smartctl could read."""
    if not isinstance(log, dict):
        return ()
    out = []
    for op in SCSI_ERROR_OPERATIONS:
        page = log.get(op)
        if not isinstance(page, dict):
            continue  # a drive without a verify page (many SSDs) or a page that failed
        corrected = _int(page.get("total_errors_corrected"), 0, _U64 - 1)
        uncorrected = _int(page.get("total_uncorrected_errors"), 0, _U64 - 1)
        if corrected is not None or uncorrected is not None:
            out.append((op, corrected, uncorrected))
    return tuple(out)


def _self_test_passed(doc: dict[str, Any]) -> bool | None:
    """Whether the newest entry of the self-test log passed (None: no completed test)."""
    # ATA: ataprint.cpp writes status.passed only for a test that ran to an end (completed
    # without error: true; a failed element: false), never for an aborted or running one.
    ata = _dict(_dict(doc.get("ata_smart_self_test_log")).get("standard")).get("table")
    if isinstance(ata, list) and ata:
        passed = _dict(_dict(ata[0]).get("status")).get("passed")
        return passed if isinstance(passed, bool) else None
    scsi = _dict(doc.get("scsi_self_test_0"))  # entry 0 is the newest (SPC-4 7.3.19)
    if scsi:
        code = _int(_dict(scsi.get("result")).get("value"), 0, 15)
        return _SCSI_SELF_TEST.get(code) if code is not None else None
    nvme = _dict(doc.get("nvme_self_test_log")).get("table")
    if isinstance(nvme, list) and nvme:
        code = _int(_dict(_dict(nvme[0]).get("self_test_result")).get("value"), 0, 15)
        return _NVME_SELF_TEST.get(code) if code is not None else None
    return None


def _power_on_seconds(value: object) -> int | None:
    pot = _dict(value)
    hours = _int(pot.get("hours"), 0, 1 << 40)
    if hours is None:
        return None
    minutes = _int(pot.get("minutes"), 0, 59) or 0
    return hours * 3600 + minutes * 60


def _messages(value: object) -> list[str]:
    if not isinstance(value, list):
        return []
    out = []
    for m in value[:_MAX_MESSAGES]:
        text = _text(_dict(m).get("string"), _MAX_TEXT)
        if text:
            out.append(text)
    return out


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: object, lo: int, hi: int) -> int | None:
    """value if it is an integer (not a bool, not a float) in lo..hi, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        return None
    return value


def _text(value: object, limit: int) -> str:
    """A printable, single-line, bounded rendering of a string from the output ("" if none)."""
    if not isinstance(value, str):
        return ""
    text = "".join(c if c.isprintable() else " " for c in value[: limit * 2]).strip()
    return text[:limit]


# --- smartctl --scan-open ---------------------------------------------------------------------

_N = r"(?:0|[1-9][0-9]{0,3})"  # a small decimal number, no sign, no leading zeros
# smartctl's own bounds (lib/os_linux.cpp get_custom_device): cciss,N and 3ware,N 0..127;
# areca,N/E N 1..128, E 1..8; hpt,L/M/N L 1..8, M 1..128, N 1..15. Past them smartctl
# refuses the option, so they are refused here before any run.
_0_127 = r"(?:[0-9]|[1-9][0-9]|1[01][0-9]|12[0-7])"
_1_128 = r"(?:[1-9]|[1-9][0-9]|1[01][0-9]|12[0-8])"
_1_15 = r"(?:[1-9]|1[0-5])"
# The RAID device types of smartctl(8) -d (the same table as the root helper's TYPES,
# packaging/libexec/smartctl-helper): controller -> the pattern of its slot, what follows the
# name ("megaraid,N": the disk's device id; "cciss,N" and "3ware,N": the port;
# "aacraid,H,L,ID": host, LUN, id; "areca,N[/E]": port and enclosure; "hpt,L/M[/N]":
# controller, channel, pmport; "sssraid,E,S": enclosure, slot). A SATA disk behind one is
# written "sat+TYPE" once opened. On Linux smartctl's scan lists only megaraid and sssraid
# members (lib/os_linux.cpp scan_smart_devices: get_dev_megasas, get_dev_sssraid); the other
# types are taken when a scan lists them, never guessed.
RAID_SLOTS = {
    name: re.compile(rf"^{pattern}$")
    for name, pattern in (
        ("megaraid", _N),
        ("cciss", _0_127),
        ("3ware", _0_127),
        ("aacraid", rf"{_N},{_N},{_N}"),
        ("areca", rf"{_1_128}(?:/[1-8])?"),
        ("hpt", rf"[1-8]/{_1_128}(?:/{_1_15})?"),
        ("sssraid", rf"{_N},{_N}"),
    )
}
_RAID_TYPE = re.compile(r"^(?:sat\+)?(?P<controller>[a-z0-9]{1,16}),(?P<slot>[0-9,/]{1,32})$")


def raid_type(dtype: str) -> tuple[str, str] | None:
    """(controller, slot) of a RAID -d type ("sat+megaraid,3" -> ("megaraid", "3")), else None."""
    m = _RAID_TYPE.match(dtype)
    if m is None:
        return None
    slot = RAID_SLOTS.get(m["controller"])
    if slot is None or not slot.match(m["slot"]):
        return None
    return m["controller"], m["slot"]


# The device path a scan names (/dev/bus/0, /dev/sda, /dev/twa0, /dev/sg2, /dev/cciss/c0d0).
SCAN_PATH = re.compile(r"^/dev/(?:[a-z][a-z0-9_-]{0,31}/){0,2}[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")
MAX_SCANNED = 512  # RAID members kept from one scan (a 4-controller, 128-bay host at most)


@dataclass(frozen=True)
class RaidMember:
    """A disk behind a RAID controller, as smartctl's scan names it."""

    path: str  # what smartctl opens: "/dev/bus/0"
    dtype: str  # its -d TYPE: "megaraid,0", "sat+megaraid,0"
    controller: str  # the -d type's name: "megaraid"
    slot: str  # the rest: "0", "0,0,1", "1/2"


def parse_scan(data: bytes) -> tuple[RaidMember, ...] | None:
    """The RAID members in a ``smartctl --scan-open --json`` output (None: not a scan output).

    Disks that /sys/block lists (``-d scsi``, ``-d nvme``, ``-d sat``) are left out: the
    exporter reads those by their kernel name. Malformed entries are skipped, at most
    MAX_SCANNED kept, each (path, type) once."""
    if len(data) > MAX_OUTPUT:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("smartctl"), dict):
        return None
    devices = doc.get("devices")  # absent when nothing was found (tests/fixtures/smart)
    seen: dict[tuple[str, str], RaidMember] = {}
    for entry in devices[:4096] if isinstance(devices, list) else []:
        path, dtype = _dict(entry).get("name"), _dict(entry).get("type")
        if not isinstance(path, str) or not isinstance(dtype, str) or ".." in path:
            continue
        kind = raid_type(dtype)
        if kind is None or not SCAN_PATH.match(path) or (path, dtype) in seen:
            continue
        seen[(path, dtype)] = RaidMember(path, dtype, *kind)
        if len(seen) >= MAX_SCANNED:
            break
    return tuple(seen.values())
