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
        # Redfish is UTF-8 (DSP0266 "JSON format"): a byte that is not (a Latin-1 model name
        # from a BMC's FRU) costs that string's character, never the whole document (issue 34).
        doc = json.loads(body.decode("utf-8-sig", "replace"))
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


# Without PhysicalContext a PowerControl entry is told apart by its Name, MemberId and
# RelatedItem links (issue 32: the first entry may be a CPU or memory domain, or each entry
# one power supply). Words naming a part of the server, and words naming the whole.
_PART = re.compile(
    r"(?<![a-z])(cpu|cpus|processor|processors|socket|memory|dimm|dimms|gpu|gpus|"
    r"accelerator|fan|fans|storage|drive|disk|pcie|nic|vr|voltage regulator|chipset|"
    r"backplane|asic|fpga)(?![a-z])",
    re.IGNORECASE,
)
_SUPPLY = re.compile(r"(?<![a-z])(psu\d*|power supply|powersupply)(?![a-z])", re.IGNORECASE)
_WHOLE = re.compile(
    r"(?<![a-z])(system|server|chassis|total|node|platform|host|input)(?![a-z])", re.IGNORECASE
)
_PART_LINKS = ("/Processors/", "/Memory/", "/PCIeDevices/", "/Drives/", "/Fans", "/Storage/")


def _related(entry: Mapping[str, Any]) -> list[str]:
    items = entry.get("RelatedItem")
    if not isinstance(items, list):
        return []
    return [
        i["@odata.id"]
        for i in items[:16]
        if isinstance(i, Mapping) and isinstance(i.get("@odata.id"), str)
    ]


def _role(entry: Mapping[str, Any]) -> str:
    """ "part", "supply", "whole" or "" (unknown) for one PowerControl entry."""
    context = entry.get("PhysicalContext")
    if context in SUBDOMAINS:
        return "part"
    if context == "PowerSupply":
        return "supply"
    related = _related(entry)
    if related and all("/PowerSupplies" in r for r in related):
        return "supply"
    if related and all(any(p in r + "/" for p in _PART_LINKS) for r in related):
        return "part"
    words = " ".join(str(entry.get(k) or "") for k in ("Name", "MemberId"))
    if _PART.search(words):
        return "part"
    if _SUPPLY.search(words):
        return "supply"
    if isinstance(context, str) or _WHOLE.search(words):
        return "whole"  # a context not a part (Intake, SystemBoard, Chassis …) names it
    if related and all(r.rstrip("/").count("/") == 4 and "/Chassis/" in r for r in related):
        return "whole"  # RelatedItem: the chassis itself (/redfish/v1/Chassis/X)
    return ""


def power_control(power: Mapping[str, Any], reading: BmcReading) -> tuple[float | None, str]:
    """The chassis' power from Power.PowerControl, and the source it came from.

    The entry that is the chassis (not a CPU's or the memory's domain: PhysicalContext, else
    Name, MemberId and RelatedItem say so); else the sum of entries that are each one power
    supply; entries whose Status is Absent are no reading. Several entries none of which can
    be told to be the whole: none, counted "ambiguous" (never a part as the server).
    """
    entries = power.get("PowerControl")
    if not isinstance(entries, list):
        return None, ""
    whole: list[Mapping[str, Any]] = []
    unknown: list[Mapping[str, Any]] = []
    supplies: list[Mapping[str, Any]] = []
    for entry in entries[:64]:
        if not isinstance(entry, Mapping) or "PowerConsumedWatts" not in entry:
            continue
        if not _present(entry):
            continue
        role = _role(entry)
        {"whole": whole, "": unknown, "supply": supplies}.get(role, []).append(entry)
    if whole or len(unknown) == 1:
        return number((whole or unknown)[0]["PowerConsumedWatts"], reading), "PowerControl"
    if unknown:
        reading.drop("ambiguous")
        return None, "ambiguous"
    if supplies:
        watts = [number(e["PowerConsumedWatts"], reading) for e in supplies]
        if all(w is not None for w in watts):
            return sum(w for w in watts if w is not None), "PowerControl.PowerSupplies"
    return None, ""


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
            if watts is not None and _at_rating(watts, item.get("PowerCapacityWatts")):
                reading.drop("implausible")
                out.append(SupplyPower(name, "implausible", watts))
            elif watts is not None:
                out.append(SupplyPower(name, "input", watts))
        key = "PowerOutputWatts" if "PowerOutputWatts" in item else "LastPowerOutputWatts"
        if key in item:
            watts = number(item[key], reading)
            if watts is not None:
                out.append(SupplyPower(name, "output", watts))
    return out


def _at_rating(watts: float, capacity: object) -> bool:
    """A supply's input equal to its rating: the rating repeated, not a measurement (a supply
    drawing exactly its nameplate watts at the wall would be over its rating: losses)."""
    return (
        isinstance(capacity, int | float)
        and not isinstance(capacity, bool)
        and capacity > 0
        # int == float compares exactly without float(), which overflows on a 400-digit
        # rating (valid JSON) and failed the whole poll (issue 34)
        and watts == capacity
    )


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
        if (
            watts is not None
            and kind == "input"
            and _at_rating(watts, supply.get("PowerCapacityWatts"))
        ):
            reading.drop("implausible")
            kind = "implausible"
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
    supplies = _unique(supplies)
    watts = sensor(environment, "PowerWatts", reading)
    if watts is not None:
        result.power_watts, result.source = watts, "EnvironmentMetrics.PowerWatts"
    ambiguous = False
    if watts is None and isinstance(power, Mapping):
        watts, source = power_control(power, reading)
        ambiguous = source == "ambiguous"
        if watts is not None:
            result.power_watts, result.source = watts, f"{source}.PowerConsumedWatts"
    if result.power_watts is None and not ambiguous:
        inputs = [s.watts for s in supplies if s.kind == "input"]
        if inputs and not any(s.kind == "implausible" for s in supplies):
            # a supply's figure that is not a measurement leaves the sum unknown
            result.power_watts, result.source = sum(inputs), "PowerSupplies.InputPower"
    elif result.power_watts is not None:
        for i, s in enumerate(supplies):  # a supply drawing more than its whole chassis
            if s.kind == "input" and s.watts > result.power_watts:
                reading.drop("implausible")
                supplies[i] = SupplyPower(s.supply, "implausible", s.watts)
    # The only reading 0 W while the chassis is on: no meter behind it, not a reading.
    if result.power_watts == 0 and chassis.get("PowerState") == "On":
        reading.drop("no_meter")
        result.power_watts, result.source = None, ""
    result.supplies = [s for s in supplies if s.kind != "implausible"]
    kwh = sensor(environment, "EnergykWh", reading)
    if kwh is not None:
        result.energy_joules = kwh * KWH
    return result


def is_error(doc: Mapping[str, Any]) -> bool:
    """A Redfish error body ({"error": {...}}) served where a resource was expected."""
    return "error" in doc and "@odata.id" not in doc
