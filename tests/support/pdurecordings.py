"""Reading the PDU recordings in tests: where each lives, its walk, LibreNMS's opinion of it.

One set of helpers for every profile test (tests/unit/test_pdu_profiles*.py, test_pdu_detect.py):
a recording is looked up among the company's shared ones, then the project's own
(tests/fixtures/pdu/recordings), and LibreNMS's expected JSON beside it (`expected/<stem>.json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collector.pdu.snmprec import read_recording
from exporters.pdu.decode import decode
from exporters.pdu.detect import detect_in_walk
from exporters.pdu.profile import Profile
from exporters.pdu.types import OutletReading, Reading
from exporters.snmp.types import Walk
from tests.support.env import OWN_RECORDINGS, RECORDINGS, require


def recording_path(name: str) -> Path:
    """Where a recording lives: the shared set, else the project's own."""
    own = OWN_RECORDINGS / name
    return own if own.exists() and not (RECORDINGS / name).exists() else RECORDINGS / name


def read_walk(path: Path) -> Walk:
    """A recording file parsed by the matching parser (.snmprec or snmpwalk text)."""
    return read_recording(path)


def recording(name: str) -> Walk:
    """One recording by file name (skipped locally / failed in CI when absent)."""
    path = recording_path(name)
    require(path.is_file(), f"recording {path} not present")
    return read_walk(path)


def raw(walk: Walk, oid: str) -> int:
    """The recorded integer at oid."""
    value = walk[oid]
    assert isinstance(value.value, int) and not isinstance(value.value, bool), (oid, value)
    return value.value


def librenms_sensors(name: str) -> list[dict[str, Any]]:
    """LibreNMS's discovered sensors for one recording (its tests/data JSON)."""
    path = recording_path(name).parent / "expected" / f"{Path(name).stem}.json"
    require(path.is_file(), f"expected file {path} not present")
    data = json.loads(path.read_text())
    return list(data.get("sensors", {}).get("discovery", {}).get("sensors", []))


def librenms_by_oid(name: str) -> dict[str, dict[str, Any]]:
    """LibreNMS's sensors for one recording, by sensor OID (no leading dot)."""
    return {s["sensor_oid"].lstrip("."): s for s in librenms_sensors(name)}


def librenms_value(walk: Walk, sensor: dict[str, Any]) -> float:
    """LibreNMS's value, checked to be its own arithmetic (raw x multiplier / divisor)."""
    oid = sensor["sensor_oid"].lstrip(".")
    value = raw(walk, oid) * sensor["sensor_multiplier"] / sensor["sensor_divisor"]
    assert value == pytest.approx(sensor["sensor_current"], abs=1e-9), oid
    return float(value)


def decoded(profiles: list[Profile], walk: Walk) -> tuple[Profile, Reading]:
    """Detect the profile as the poller does (family, then signature), then decode."""
    profile = detect_in_walk(profiles, walk).profile
    return profile, decode(profile, walk)


def outlet(reading: Reading, index: str) -> OutletReading:
    """The outlet with this row index."""
    return next(o for o in reading.outlets if o.index == index)
