"""Real Redfish documents of single resources (tests/fixtures/bmc/documents, provenance in
tests/fixtures/bmc/README.md) through the BMC poller's parser: where only a chassis and its
Power resource were published, not a whole /redfish/v1 tree for sushy-static."""

from __future__ import annotations

import json
from typing import Any

from exporters.bmc.redfish_parse import chassis_power
from exporters.bmc.types import BmcReading, SupplyPower
from tests.support.env import FIXTURES

DOCS = FIXTURES / "bmc" / "documents"


def load(name: str) -> Any:
    return json.loads((DOCS / name).read_bytes())


def test_dell_r640_supply_reporting_its_maximum_input_as_input() -> None:
    """Dell PowerEdge R640 (iDRAC 9, Power.v1_5_0, telegraf's test data): the chassis draws
    429 W (`PowerControl[0]` "System Power Control"), while its one present supply reports
    `PowerInputWatts` 900 — the supply's maximum input (Dell's own `Range1MaxInputPowerWatts`
    900 beside it), not a measurement: more than the whole chassis. wattbit reads the chassis'
    429 W, drops the 900 W input as `implausible` and keeps the supply's output (203 W)."""
    chassis = load("dell-poweredge-r640-telegraf/chassis-System.Embedded.1.json")
    power = load("dell-poweredge-r640-telegraf/power-System.Embedded.1.json")
    # cross-check against the documents themselves (DMTF Power.v1_5_0 PowerSupply)
    (psu,) = power["PowerSupplies"]
    assert (chassis["Model"], chassis["PowerState"]) == ("PowerEdge R640", "On")
    assert (psu["PowerInputWatts"], psu["PowerCapacityWatts"], psu["PowerOutputWatts"]) == (
        900,
        750,
        203,
    )
    view = psu["Oem"]["Dell"]["DellPowerSupplyView"]
    assert view["Range1MaxInputPowerWatts"] == psu["PowerInputWatts"]
    assert psu["PowerInputWatts"] > power["PowerControl"][0]["PowerConsumedWatts"] == 429

    reading = BmcReading()
    got = chassis_power(chassis, power, None, [], reading)
    assert (got.chassis, got.power_watts, got.source) == (
        "System.Embedded.1",
        429.0,
        "PowerControl.PowerConsumedWatts",
    )
    assert got.supplies == [SupplyPower("PSU.Slot.1", "output", 203.0)]
    assert reading.invalid == {"implausible": 1}
    # the drive enclosure the chassis Contains is kept as a link, never read for power here
    assert got.contains == ("Enclosure.Internal.0-1:RAID.Integrated.1-1",)
