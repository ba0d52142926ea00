"""Every real Redfish mockup in tests/fixtures/bmc, served by sushy-static, polled by the BMC
poller and rendered by its exporter: each exported value must equal what the mockup holds by
the DMTF schemas.

The expected values are read here from the mockup's files on disk with this file's own code
(never the poller's parser), following the documented order (docs/exporters/bmc.md "Which
property"), and the headline figure of each server is also pinned as a literal read by eye.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporters.bmc.exporter import BmcExporter
from exporters.bmc.poller import BmcPoller, BmcTarget
from exporters.bmc.redfish import RedfishTarget
from tests.support.bmcs import MOCKUPS, SushyStatic, mockups, sushy_static_path
from tests.support.env import require
from tests.support.realparts import parse_samples

# The server's input power as each mockup holds it, read by eye from the files named.
HEADLINE: dict[str, float | None] = {
    # Chassis/1U/EnvironmentMetrics PowerWatts.Reading (Power's PowerConsumedWatts says 344)
    "dmtf-public-rackmount1": 374.0,
    "dell-poweredge-r750": 234.0,  # Chassis/System.Embedded.1/Power PowerControl[0]
    "gigabyte-h262-z63": 100.0,  # Chassis/Self/Power PowerControl[0].PowerConsumedWatts
    "hpe-dl325-gen10plus": 97.0,  # Chassis/1/Power PowerControl[0] (supplies: output 51 + 46)
    "hpe-xl675d-gen10plus": 894.0,  # Chassis/1/Power PowerControl[0] (4 supplies repeat 894)
    "intel-s2600bpb": 148.0,  # Chassis/RackMount/Baseboard/Power: a board in a chassis
    "openbmc-stock": None,  # Chassis/chassis/Power PowerControl[0] has no PowerConsumedWatts
    "hpe-cray-ex4252": None,  # blades and enclosure: voltages only, no watts anywhere
    # HPE Cray EX chassis controller (CMM): 8 compute and 8 switch blades listed before the
    # Enclosure, no Contains/ContainedBy links; the enclosure's Power has rectifiers without
    # figures (its watts are Sensors only, not read): nothing to export
    "hpe-cray-ex-cmm": None,
    # DMTF's blade enclosure: MultiBladeEncl's Power has two supplies with output figures
    # (LastPowerOutputWatts 650, 635) and PowerCapacityWatts 1450, no PowerControl; the four
    # blades (Links.ContainedBy) have no Power at all: no input figure anywhere
    "dmtf-public-bladed": None,
    # DMTF's NVMe-oF JBOF: Chassis/1/Power PowerControl[0] "System Input Power", no
    # PhysicalContext (supplies: output 900 + 895)
    "dmtf-public-nvmeof-jbof": 1795.0,
}

SUBDOMAIN_CONTEXTS = {"CPU", "Memory", "GPU", "StorageDevice", "VoltageRegulator", "Fan"}


def _doc(mockup: str, odata_id: str) -> dict[str, Any] | None:
    """A resource of the mockup as sushy-static serves it; None where it would be a 404."""
    rel = odata_id.split("#")[0].removeprefix("/redfish/v1").strip("/")
    path = MOCKUPS / mockup / rel / "index.json"
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    return None if "error" in doc and "@odata.id" not in doc else doc


def _reading(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def expected(mockup: str) -> dict[str, dict[str, Any]]:
    """{chassis Id: {"power": watts or None, "supplies": {(supply, kind): watts}}}."""
    root = _doc(mockup, "/redfish/v1")
    assert root is not None
    collection = _doc(mockup, root["Chassis"]["@odata.id"])
    assert collection is not None
    out: dict[str, dict[str, Any]] = {}
    for member in collection["Members"]:
        chassis = _doc(mockup, member["@odata.id"])
        if chassis is None:
            continue
        env = (
            _doc(mockup, chassis["EnvironmentMetrics"]["@odata.id"])
            if "EnvironmentMetrics" in chassis
            else None
        )
        power = _doc(mockup, chassis["Power"]["@odata.id"]) if "Power" in chassis else None
        supplies: dict[tuple[str, str], float] = {}
        # PowerSubsystem -> PowerSupplies -> each supply's Metrics (PowerSupplyMetrics)
        sub = (
            _doc(mockup, chassis["PowerSubsystem"]["@odata.id"])
            if "PowerSubsystem" in chassis
            else None
        )
        if sub is not None and "PowerSupplies" in sub:
            coll = _doc(mockup, sub["PowerSupplies"]["@odata.id"]) or {"Members": []}
            for m in coll["Members"]:
                ps = _doc(mockup, m["@odata.id"])
                if ps is None or ps.get("Status", {}).get("State") == "Absent":
                    continue
                metrics = _doc(mockup, ps["Metrics"]["@odata.id"]) if "Metrics" in ps else None
                for key, kind in (("InputPowerWatts", "input"), ("OutputPowerWatts", "output")):
                    v = _reading((metrics or {}).get(key, {}).get("Reading"))
                    if v is not None:
                        supplies[(ps["Id"], kind)] = v
        if not supplies and power is not None:
            for ps in power.get("PowerSupplies", []):
                if ps.get("Status", {}).get("State") == "Absent":
                    continue
                name = str(ps.get("MemberId") or ps.get("Id") or ps.get("Name"))
                v = _reading(ps.get("PowerInputWatts"))
                if v is not None:
                    supplies[(name, "input")] = v
                out_key = "PowerOutputWatts" if "PowerOutputWatts" in ps else "LastPowerOutputWatts"
                v = _reading(ps.get(out_key))
                if v is not None:
                    supplies[(name, "output")] = v
        watts = _reading((env or {}).get("PowerWatts", {}).get("Reading"))
        if watts is None and power is not None:
            for pc in power.get("PowerControl", []):
                if (
                    "PowerConsumedWatts" in pc
                    and pc.get("PhysicalContext") not in SUBDOMAIN_CONTEXTS
                ):
                    watts = _reading(pc["PowerConsumedWatts"])
                    break
        if watts is not None:
            # issue 32: a supply said to draw more than its whole chassis is no measurement
            # (DMTF's public-rackmount1: Bay1 "937.4 W" in a 374 W chassis)
            supplies = {k: v for k, v in supplies.items() if not (k[1] == "input" and v > watts)}
        if watts is None:
            inputs = [v for (_, kind), v in supplies.items() if kind == "input"]
            watts = sum(inputs) if inputs else None
        out[chassis["Id"]] = {
            "power": watts,
            "supplies": supplies,
            "contained": bool(chassis.get("Links", {}).get("ContainedBy")),
        }
    return out


def poll(url: str, name: str, mapper: Any = None) -> dict:
    """One poll of one BMC through the poller and the exporter; the exposition's samples."""
    target = BmcTarget(
        name=name,
        protocol="redfish",
        redfish=RedfishTarget(url, "wattbit", "not-a-real-password", timeout=10),
        mapper=mapper,
        labels=("server1", "psu"),
        deadline=30,
    )
    return poll_target(target)


def poll_target(target: BmcTarget) -> dict:
    """One poll of target through the poller and the exporter; the exposition's samples."""
    poller = BmcPoller([target], interval=60)

    async def once() -> None:
        await poller.poll_all()
        await poller.close()

    asyncio.run(once())
    registry = CollectorRegistry()
    registry.register(BmcExporter(poller))
    return parse_samples(generate_latest(registry).decode())


def values(samples: dict, metric: str) -> dict[tuple, float]:
    """{sorted labels: value} of one metric."""
    return {labels: v for (name, labels), v in samples.items() if name == metric}


@pytest.fixture(scope="module")
def sushy() -> None:
    """sushy-static must be installed (tests extra)."""
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")


def test_at_least_six_servers_of_three_vendors() -> None:
    """The corpus the issue asks for: 6 servers, 3 vendors, both Power and PowerSubsystem."""
    names = mockups()
    assert set(HEADLINE) == set(names), "every mockup has its headline figure pinned"
    vendors = {n.split("-")[0] for n in names} - {"dmtf", "openbmc"}
    assert len(names) >= 6 and len(vendors) >= 3, (names, vendors)
    trees = [p.relative_to(MOCKUPS).as_posix() for p in MOCKUPS.rglob("index.json")]
    assert any("/PowerSubsystem/" in t for t in trees) and any("/Power/" in t for t in trees)


@pytest.mark.parametrize("mockup", mockups())
def test_mockup_values_equal_the_schema(mockup: str, tmp_path: Path, sushy: None) -> None:
    """Unmapped (the primary chassis): the headline figure, its supplies, nothing invented."""
    exp = expected(mockup)
    with SushyStatic(MOCKUPS / mockup, tmp_path) as srv:
        samples = poll(srv.url, mockup)
    labels = (("bmc", mockup), ("component", "psu"), ("host", "server1"))
    assert values(samples, "wattbit_bmc_up") == {(("bmc", mockup),): 1.0}
    power = values(samples, "wattbit_bmc_power_watts")
    headline = HEADLINE[mockup]
    if headline is None:
        assert power == {}, "no reading in the mockup: no series, never 0"
        assert all(e["power"] is None for e in exp.values())
        return
    assert power == {(*labels[:2], labels[2], ("protocol", "redfish")): headline}
    # the chassis it came from: the first with a figure that no other chassis contains
    with_power = [cid for cid, e in exp.items() if e["power"] is not None]
    top = [cid for cid in with_power if not exp[cid]["contained"]]
    chosen = (top or with_power)[0]
    assert exp[chosen]["power"] == headline
    supplies = {
        (dict(k)["supply"], dict(k)["kind"]): v
        for k, v in values(samples, "wattbit_bmc_supply_power_watts").items()
    }
    assert supplies == exp[chosen]["supplies"]
    assert values(samples, "wattbit_bmc_energy_joules_total") == {}  # no mockup has EnergykWh
    info = values(samples, "wattbit_bmc_info")
    assert len(info) == 1 and dict(next(iter(info)))["protocol"] == "redfish"


def test_every_chassis_mapped(tmp_path: Path, sushy: None) -> None:
    """Several chassis per BMC mapped to hosts: each exported chassis has its own figure, and
    chassis without a reading (the XL675d's enclosure) have no series."""
    mockup = "intel-s2600bpb"
    exp = expected(mockup)

    def mapper(cid: str, name: str) -> tuple[str, str] | None:
        return (f"host-{cid}", "") if cid in exp else None

    with SushyStatic(MOCKUPS / mockup, tmp_path) as srv:
        samples = poll(srv.url, mockup, mapper)
    power = {dict(k)["host"]: v for k, v in values(samples, "wattbit_bmc_power_watts").items()}
    assert power == {f"host-{cid}": e["power"] for cid, e in exp.items() if e["power"] is not None}
    assert power == {"host-Baseboard": 148.0}


@pytest.mark.parametrize("mockup", mockups())
def test_every_chassis_on_one_host_counted_once(mockup: str, tmp_path: Path, sushy: None) -> None:
    """Every chassis of a BMC mapped to one host (each its own component): a chassis inside
    another chassis with a figure (Links.ContainedBy / Contains, read here from the files) is
    not exported, so the host's BMC watts are never counted twice."""
    exp = expected(mockup)
    root = _doc(mockup, "/redfish/v1")
    assert root is not None
    collection = _doc(mockup, root["Chassis"]["@odata.id"]) or {}
    members = [_doc(mockup, m["@odata.id"]) for m in collection["Members"]]
    docs = {d["Id"]: d for d in members if d is not None}
    parent: dict[str, str] = {}
    for cid, doc in docs.items():
        links = doc.get("Links", {})
        by = links.get("ContainedBy")
        if by:  # one link (the schema), or a list of one (Intel's BMC)
            by = by[0] if isinstance(by, list) else by
            parent[cid] = by["@odata.id"].rstrip("/").rsplit("/", 1)[-1]
        for inner in links.get("Contains", []):
            parent.setdefault(inner["@odata.id"].rstrip("/").rsplit("/", 1)[-1], cid)

    def inside_powered(cid: str) -> bool:
        seen = []
        while cid in parent and parent[cid] not in seen:
            cid = parent[cid]
            seen.append(cid)
            if exp.get(cid, {}).get("power") is not None:
                return True
        return False

    def mapper(cid: str, name: str) -> tuple[str, str] | None:
        return ("one", cid) if cid in exp else None

    with SushyStatic(MOCKUPS / mockup, tmp_path) as srv:
        samples = poll(srv.url, mockup, mapper)
    power = {dict(k)["component"]: v for k, v in values(samples, "wattbit_bmc_power_watts").items()}
    assert power == {
        cid: e["power"]
        for cid, e in exp.items()
        if e["power"] is not None and not inside_powered(cid)
    }
    if mockup == "hpe-xl675d-gen10plus":  # the server inside an enclosure without a figure
        assert parent == {"1": "EnclosureChassis"} and power == {"1": 894.0}
    if mockup == "intel-s2600bpb":  # the board inside the rack-mount chassis (an error body)
        assert parent["Baseboard"] == "RackMount" and power == {"Baseboard": 148.0}


def test_supplies_repeating_the_total_are_not_summed(tmp_path: Path, sushy: None) -> None:
    """HPE XL675d: four supplies each report 894 W (LastPowerOutputWatts, output power): the
    server's figure stays 894 W, and the supplies are exported as output, not input."""
    mockup = "hpe-xl675d-gen10plus"
    with SushyStatic(MOCKUPS / mockup, tmp_path) as srv:
        samples = poll(srv.url, mockup)
    assert list(values(samples, "wattbit_bmc_power_watts").values()) == [894.0]
    kinds = {dict(k)["kind"] for k in values(samples, "wattbit_bmc_supply_power_watts")}
    assert kinds == {"output"}
    assert sum(values(samples, "wattbit_bmc_supply_power_watts").values()) == 4 * 894.0


def test_linked_resources_that_answer_404(tmp_path: Path, sushy: None) -> None:
    """DMTF's rackmount with its EnvironmentMetrics and Power files removed (sushy-static then
    answers 404 for those links, as a BMC does): the figure falls to the supplies' input power
    (PowerSupplyMetrics InputPowerWatts); with the PowerSubsystem gone too, no series, not 0 W.
    """
    import shutil

    tree = tmp_path / "rackmount-404"
    shutil.copytree(MOCKUPS / "dmtf-public-rackmount1", tree)
    shutil.rmtree(tree / "Chassis/1U/EnvironmentMetrics")
    shutil.rmtree(tree / "Chassis/1U/Power")
    metrics = json.loads(
        (tree / "Chassis/1U/PowerSubsystem/PowerSupplies/Bay1/Metrics/index.json").read_text()
    )
    with SushyStatic(tree, tmp_path) as srv:
        samples = poll(srv.url, "rm404")
        assert list(values(samples, "wattbit_bmc_power_watts").values()) == [
            metrics["InputPowerWatts"]["Reading"]
        ]
        assert (
            values(samples, "wattbit_bmc_invalid_values_total")[
                (("bmc", "rm404"), ("reason", "missing"))
            ]
            == 2.0
        )
        shutil.rmtree(tree / "Chassis/1U/PowerSubsystem")
        samples = poll(srv.url, "rm404")
    assert values(samples, "wattbit_bmc_up") == {(("bmc", "rm404"),): 1.0}
    assert values(samples, "wattbit_bmc_power_watts") == {}
    assert values(samples, "wattbit_bmc_supply_power_watts") == {}


def test_error_bodies_where_resources_should_be(tmp_path: Path, sushy: None) -> None:
    """HPE Cray EX4252 and Intel's mockups hold Redfish error bodies (ResourceMissingAtURI)
    where a chassis or its Power resource is linked: counted as missing, no series."""
    for mockup in ("hpe-cray-ex4252", "intel-s2600bpb"):
        with SushyStatic(MOCKUPS / mockup, tmp_path) as srv:
            samples = poll(srv.url, mockup)
        missing = values(samples, "wattbit_bmc_invalid_values_total")[
            (("bmc", mockup), ("reason", "missing"))
        ]
        assert missing >= 1.0, mockup


def test_an_enclosure_listed_after_its_blades_beyond_max_chassis(
    tmp_path: Path, sushy: None
) -> None:
    """HPE Cray EX's CMM lists Blade7, Perif2 and Perif0 before its Enclosure (4th of 17). With
    max_chassis 3 the enclosure and 13 others are left unread: counted ``capped`` (never a
    blade taken for the server), and no power series; unmapped or mapped, the same."""
    mockup = "hpe-cray-ex-cmm"
    collection = _doc(mockup, "/redfish/v1/Chassis")
    assert collection is not None
    ids = [m["@odata.id"].rsplit("/", 1)[-1] for m in collection["Members"]]
    assert ids[:4] == ["Blade7", "Perif2", "Perif0", "Enclosure"] and len(ids) == 17
    types = {
        cid: (_doc(mockup, f"/redfish/v1/Chassis/{cid}") or {}).get("ChassisType") for cid in ids
    }
    assert types["Enclosure"] == "Enclosure" and types["Blade7"] == "Blade"
    for max_chassis, capped in ((3, 14), (32, 0)):
        (tmp_path / str(max_chassis)).mkdir()
        with SushyStatic(MOCKUPS / mockup, tmp_path / str(max_chassis)) as srv:
            redfish = RedfishTarget(
                srv.url, "wattbit", "not-a-real-password", timeout=10, max_chassis=max_chassis
            )
            target = BmcTarget(
                name=mockup,
                protocol="redfish",
                redfish=redfish,
                labels=("server1", ""),
                deadline=30,
            )
            samples = poll_target(target)
        assert values(samples, "wattbit_bmc_up") == {(("bmc", mockup),): 1.0}
        assert values(samples, "wattbit_bmc_power_watts") == {}
        invalid = {
            dict(k)["reason"]: v
            for k, v in values(samples, "wattbit_bmc_invalid_values_total").items()
        }
        assert invalid["capped"] == capped, max_chassis


def test_blade_enclosure_supplies_are_output_only(tmp_path: Path, sushy: None) -> None:
    """DMTF's public-bladed: the enclosure (first in the collection, Links.Contains the four
    blades) has supplies rated 1450 W reporting only what they deliver (LastPowerOutputWatts
    650 and 635 W), no PowerControl; the blades have no Power. Mapped chassis by chassis: the
    enclosure's supplies are exported as output, no chassis gets a power series (output is
    never the input power: 1,285 W is not exported as the enclosure's draw), the blades none."""
    mockup = "dmtf-public-bladed"
    encl = _doc(mockup, "/redfish/v1/Chassis/MultiBladeEncl")
    power = _doc(mockup, "/redfish/v1/Chassis/MultiBladeEncl/Power")
    assert encl is not None and power is not None
    assert encl["ChassisType"] == "Enclosure" and len(encl["Links"]["Contains"]) == 4
    assert "PowerControl" not in power
    assert [ps["PowerCapacityWatts"] for ps in power["PowerSupplies"]] == [1450, 1450]
    for blade in ("Blade1", "Blade2", "Blade3", "Blade4"):
        doc = _doc(mockup, f"/redfish/v1/Chassis/{blade}")
        assert doc is not None and "Power" not in doc and doc["Links"]["ContainedBy"]

    def mapper(cid: str, name: str) -> tuple[str, str] | None:
        return ("one", cid)

    with SushyStatic(MOCKUPS / mockup, tmp_path) as srv:
        samples = poll(srv.url, mockup, mapper)
    assert values(samples, "wattbit_bmc_up") == {(("bmc", mockup),): 1.0}
    assert values(samples, "wattbit_bmc_power_watts") == {}
    supplies = {
        (dict(k)["component"], dict(k)["supply"], dict(k)["kind"]): v
        for k, v in values(samples, "wattbit_bmc_supply_power_watts").items()
    }
    assert supplies == {
        ("MultiBladeEncl", "0", "output"): 650.0,
        ("MultiBladeEncl", "1", "output"): 635.0,
    }
    invalid = values(samples, "wattbit_bmc_invalid_values_total")
    assert sum(invalid.values()) == 0.0, invalid
