"""Pure functions from Redfish documents (bytes, dicts) to a chassis' power.

Which property wattbit reads, in order (docs/exporters/bmc.md "Which property"):

1. `EnvironmentMetrics.PowerWatts.Reading` of the chassis (EnvironmentMetrics schema, 2021.1+):
   the chassis' power consumption, what DMTF points to since `Power` was deprecated (2020.4).
2. `Power.PowerControl[].PowerConsumedWatts` (Power schema): the first entry that is not a
   sub-domain (a CPU's, the memory's: their PhysicalContext says so); entries are never summed.
3. The sum of the supplies' *input* power (`PowerSupplyMetrics.InputPowerWatts.Reading`, or
   `Power.PowerSupplies[].PowerInputWatts`), only when the chassis has no figure of its own:
   supplies that each repeat the chassis total (HPE's LastPowerOutputWatts on an XL675d) would
   double-count. Output power (`PowerOutputWatts`, `LastPowerOutputWatts`,
   `OutputPowerWatts`) is never the server's input power; it is exported per supply as kind
   "output" only.

Schemas: https://redfish.dmtf.org/schemas/v1/EnvironmentMetrics.json, Power.json,
PowerSubsystem.json, PowerSupply.json, PowerSupplyMetrics.json, Chassis.json.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from exporters.base import clean_text

from .types import BmcError, BmcReading, ChassisPower, SupplyPower

MAX_WATTS = 1_000_000.0  # a chassis drawing more than 1 MW is a garbled value, not a reading
MAX_KWH = 1e9
KWH = 3.6e6  # joules per kWh

# PowerControl entries whose PhysicalContext names a part of the server, not the server
# (Lenovo XCC lists "CPU" and "Memory" power domains beside the server's own entry).
# Redfish PhysicalContext enum: https://redfish.dmtf.org/schemas/v1/PhysicalContext.json
SUBDOMAINS = frozenset(
    {
        "CPU",
        "CPUSubsystem",
        "Memory",
        "MemorySubsystem",
        "GPU",
        "GPUSubsystem",
        "Accelerator",
        "ASIC",
        "FPGA",
        "StorageDevice",
        "StorageSubsystem",
        "NetworkingDevice",
        "Fan",
        "Backplane",
        "VoltageRegulator",
        "Transceiver",
        "Chipset",
    }
)


# A JSON string, escapes included; an unterminated one runs to the end of the body, so the
# pattern never fails once a quote is seen (a lone backslash may end the body), so a body of
# unterminated strings stays linear rather than quadratic.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Objects and arrays one document may hold: the largest resource of the real mockups
# (tests/fixtures/bmc, Gigabyte's Power, 29 kB) has 161, an enclosure's collection of 1,024
# chassis about 1,030. A body of max_body bytes can otherwise hold over a million ([{},{},…]
# in 4 MiB decoded to ~150 MB; 33 of them took the collector to 4.3 GB, issue 34).
MAX_CONTAINERS = 10_000


def check_depth(body: bytes, max_depth: int, max_containers: int = MAX_CONTAINERS) -> None:
    """Raise BmcError if JSON arrays/objects nest deeper than max_depth ("too_deep") or are
    more than max_containers ("too_big": what the body would expand to, not its bytes).

    Scanned on the bytes before json.loads, so a hostile body costs one linear pass in C (the
    strings cut out by a regular expression, the brackets counted) and never the parser's
    recursion nor its objects; only the brackets, at most 2 * max_containers, are walked here.
    """
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in brackets[: 2 * max_containers + 2]:  # past that it is too_big anyway
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                raise BmcError("too_deep", f"JSON nested deeper than {max_depth} levels")
        else:
            depth -= 1
    opened = brackets.count(b"[") + brackets.count(b"{")
    if opened > max_containers:
        raise BmcError("too_big", f"JSON with more than {max_containers} objects and arrays")


def parse_document(
    body: bytes, max_depth: int = 32, max_containers: int = MAX_CONTAINERS
) -> dict[str, Any]:
    """A Redfish resource (a JSON object) from a body; BmcError too_deep/too_big/garbage."""
    check_depth(body, max_depth, max_containers)
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise BmcError("garbage", "the answer is not JSON") from None
    if not isinstance(doc, dict):
        raise BmcError("garbage", "the answer is not a JSON object")
    return doc


def link(doc: Mapping[str, Any] | None, key: str) -> str | None:
    """The @odata.id of doc[key] if it is a path under /redfish/v1 (else None: never followed).

    A link to another host or scheme is not followed: the BMC must not send the poller
    elsewhere (a redirect is refused the same way, exporters/bmc/redfish.py).
    """
    if not isinstance(doc, Mapping):
        return None
    value = doc.get(key)
    if not isinstance(value, Mapping):
        return None
    return odata_path(value.get("@odata.id"))


def odata_path(value: object) -> str | None:
    """A resource path if value is one under /redfish/v1 (no fragment, no host), else None."""
    if not isinstance(value, str) or len(value) > 1024:
        return None
    path = value.split("#", 1)[0]
    if not (path == "/redfish/v1" or path.startswith("/redfish/v1/")):
        return None
    # Not printable (ESC, a newline, a lone surrogate): never requested, never logged.
    if not path.isprintable() or any(c in path for c in "\\? ") or "/../" in path + "/":
        return None
    return path.rstrip("/") or "/"


def members(collection: Mapping[str, Any] | None, limit: int) -> list[str]:
    """The member paths of a Redfish collection, at most `limit`, in the BMC's order."""
    if not isinstance(collection, Mapping):
        return []
    items = collection.get("Members")
    if not isinstance(items, list):
        return []
    out: list[str] = []
    for item in items:
        path = odata_path(item.get("@odata.id")) if isinstance(item, Mapping) else None
        if path is not None and path not in out:
            out.append(path)
        if len(out) >= limit:
            break
    return out


def number(value: object, reading: BmcReading, limit: float = MAX_WATTS) -> float | None:
    """A finite, non-negative number up to limit; else None, counted as null or out_of_range."""
    if value is None:
        reading.drop("null")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        reading.drop("out_of_range")  # a string ("100") or an object: not what the schema says
        return None
    try:
        v = float(value)
    except OverflowError:  # a 400-digit integer is valid JSON: out of range, not a crash
        reading.drop("out_of_range")
        return None
    if not math.isfinite(v) or v < 0 or v > limit:
        reading.drop("out_of_range")
        return None
    return v


def sensor(doc: Mapping[str, Any] | None, key: str, reading: BmcReading) -> float | None:
    """doc[key].Reading of a SensorExcerpt (absent key: None, not counted)."""
    if not isinstance(doc, Mapping) or key not in doc:
        return None
    excerpt = doc[key]
    if not isinstance(excerpt, Mapping):
        reading.drop("out_of_range")
        return None
    if "Reading" not in excerpt:
        return None
    limit = MAX_KWH if key == "EnergykWh" else MAX_WATTS
    return number(excerpt["Reading"], reading, limit)


def _present(item: Mapping[str, Any]) -> bool:
    status = item.get("Status")
    return not (isinstance(status, Mapping) and status.get("State") == "Absent")


def _label(item: Mapping[str, Any], fallback: str) -> str:
    for key in ("MemberId", "Id", "Name"):
        value = item.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return clean_text(str(value), 64) or fallback
    return fallback


def power_control(power: Mapping[str, Any], reading: BmcReading) -> float | None:
    """PowerConsumedWatts of the first PowerControl entry that is the chassis, not a part."""
    entries = power.get("PowerControl")
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if not isinstance(entry, Mapping) or "PowerConsumedWatts" not in entry:
            continue
        if entry.get("PhysicalContext") in SUBDOMAINS:
            continue
        return number(entry["PowerConsumedWatts"], reading)
    return None


def legacy_supplies(power: Mapping[str, Any], reading: BmcReading) -> list[SupplyPower]:
    """Power.PowerSupplies[]: input (PowerInputWatts) and output (PowerOutputWatts, or the
    older LastPowerOutputWatts) per present supply."""
    items = power.get("PowerSupplies")
    if not isinstance(items, list):
        return []
    out: list[SupplyPower] = []
    for i, item in enumerate(items[:64]):
        if not isinstance(item, Mapping) or not _present(item):
            continue
        name = _label(item, str(i))
        if "PowerInputWatts" in item:
            watts = number(item["PowerInputWatts"], reading)
            if watts is not None:
                out.append(SupplyPower(name, "input", watts))
        key = "PowerOutputWatts" if "PowerOutputWatts" in item else "LastPowerOutputWatts"
        if key in item:
            watts = number(item[key], reading)
            if watts is not None:
                out.append(SupplyPower(name, "output", watts))
    return out


def metrics_supply(
    supply: Mapping[str, Any], metrics: Mapping[str, Any] | None, reading: BmcReading
) -> list[SupplyPower]:
    """A PowerSubsystem supply's input and output power from its PowerSupplyMetrics."""
    if not _present(supply) or metrics is None:
        return []
    name = _label(supply, "?")
    out = []
    for key, kind in (("InputPowerWatts", "input"), ("OutputPowerWatts", "output")):
        watts = sensor(metrics, key, reading)
        if watts is not None:
            out.append(SupplyPower(name, kind, watts))
    return out


def _unique(supplies: list[SupplyPower]) -> list[SupplyPower]:
    """One figure per (supply, kind): two supplies with one label keep the first."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s in supplies:
        if (s.supply, s.kind) not in seen:
            seen.add((s.supply, s.kind))
            out.append(s)
    return out


# Links.Contains entries read per chassis: an enclosure lists its blades, more than
# max_chassis are never read anyway.
MAX_CONTAINS = 1024


def link_id(link: object) -> str:
    """The Id a Redfish link ({"@odata.id": "/redfish/v1/Chassis/X"}) names: its last segment.

    A chassis' Id is the last segment of its URI (Redfish spec DSP0266, "Resource URI
    patterns"); some BMCs end their links with "/" (HPE iLO 5), some give ContainedBy as an
    array of one link though the schema has one object (Intel BMC 1.93). "" for anything else.
    """
    if isinstance(link, list) and link:
        link = link[0]
    if not isinstance(link, Mapping):
        return ""
    uri = link.get("@odata.id")
    if not isinstance(uri, str):
        return ""
    return clean_text(uri.rstrip("/").rsplit("/", 1)[-1], 64)


def chassis_power(
    chassis: Mapping[str, Any],
    power: Mapping[str, Any] | None,
    environment: Mapping[str, Any] | None,
    supplies: list[SupplyPower],
    reading: BmcReading,
) -> ChassisPower:
    """One chassis' power from its documents (None for a resource that answered 404).

    `supplies` are the PowerSubsystem supplies' figures (metrics_supply); the Power
    resource's own supplies are read here and used where PowerSubsystem has none.
    """
    cid = clean_text(str(chassis.get("Id") or ""), 64)
    links = chassis.get("Links")
    contained = isinstance(links, Mapping) and bool(links.get("ContainedBy"))
    by = link_id(links.get("ContainedBy")) if isinstance(links, Mapping) else ""
    held = links.get("Contains") if isinstance(links, Mapping) else None
    contains = [link_id(x) for x in held[:MAX_CONTAINS]] if isinstance(held, list) else []
    result = ChassisPower(
        chassis=cid,
        name=clean_text(str(chassis.get("Name") or ""), 128),
        contained=contained,
        contained_by=by,
        contains=tuple(x for x in contains if x),
    )
    if not supplies and isinstance(power, Mapping):
        supplies = legacy_supplies(power, reading)
    result.supplies = _unique(supplies)
    watts = sensor(environment, "PowerWatts", reading)
    if watts is not None:
        result.power_watts, result.source = watts, "EnvironmentMetrics.PowerWatts"
    elif isinstance(power, Mapping) and (watts := power_control(power, reading)) is not None:
        result.power_watts, result.source = watts, "PowerControl.PowerConsumedWatts"
    else:
        inputs = [s.watts for s in result.supplies if s.kind == "input"]
        if inputs:
            result.power_watts, result.source = sum(inputs), "PowerSupplies.InputPower"
    kwh = sensor(environment, "EnergykWh", reading)
    if kwh is not None:
        result.energy_joules = kwh * KWH
    return result


def is_error(doc: Mapping[str, Any]) -> bool:
    """A Redfish error body ({"error": {...}}) served where a resource was expected."""
    return "error" in doc and "@odata.id" not in doc
