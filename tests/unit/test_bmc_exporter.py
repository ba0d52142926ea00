"""The bmc exporter's rendering: failure reasons at 0 from the start, no power series when a
BMC gives none or is down, supplies and energy with their labels (states built by hand)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from exporters.bmc.exporter import BmcExporter
from exporters.bmc.ipmi import IpmiTarget
from exporters.bmc.poller import (
    INVALID_REASONS,
    IPMI_REASONS,
    REDFISH_REASONS,
    BmcPoller,
    BmcState,
    BmcTarget,
    Mapped,
)
from exporters.bmc.redfish import RedfishTarget
from exporters.bmc.types import ChassisPower, SupplyPower
from tests.support.realparts import parse_samples

TARGETS = [
    BmcTarget("rf", "redfish", redfish=RedfishTarget("https://10.0.0.1")),
    BmcTarget("ipmi", "ipmi", ipmi=IpmiTarget("10.0.0.2")),
]


def render(poller: BmcPoller) -> dict:
    registry = CollectorRegistry()
    registry.register(BmcExporter(poller))
    return parse_samples(generate_latest(registry).decode())


def test_every_reason_at_zero_before_any_poll() -> None:
    s = render(BmcPoller(TARGETS))
    for bmc, reasons in (("rf", REDFISH_REASONS), ("ipmi", IPMI_REASONS)):
        for reason in reasons:
            assert s[("wattbit_bmc_poll_failures_total", (("bmc", bmc), ("reason", reason)))] == 0
        for reason in INVALID_REASONS:
            assert s[("wattbit_bmc_invalid_values_total", (("bmc", bmc), ("reason", reason)))] == 0
    assert not any(k[0] in ("wattbit_bmc_up", "wattbit_bmc_power_watts") for k in s)


def test_power_supplies_energy_and_absence() -> None:
    poller = BmcPoller(TARGETS)
    full = ChassisPower(
        "1U",
        power_watts=374.0,
        energy_joules=7.2e6,
        supplies=[SupplyPower("Bay1", "input", 190.0), SupplyPower("Bay1", "output", 170.0)],
    )
    poller.states = {
        "rf": BmcState("rf", "redfish", True, 0.2, (Mapped("n1", "", full),), (("vendor", "X"),)),
        # up, but the measurement is not active: no power series, never 0
        "ipmi": BmcState("ipmi", "ipmi", True, 0.1, (Mapped("n2", "", ChassisPower("")),)),
    }
    s = render(poller)
    power = {k: v for k, v in s.items() if k[0] == "wattbit_bmc_power_watts"}
    labels = (("bmc", "rf"), ("component", ""), ("host", "n1"), ("protocol", "redfish"))
    assert power == {("wattbit_bmc_power_watts", labels): 374.0}
    supply = (
        ("bmc", "rf"),
        ("component", ""),
        ("host", "n1"),
        ("kind", "output"),
        ("supply", "Bay1"),
    )
    assert s[("wattbit_bmc_supply_power_watts", supply)] == 170.0
    assert s[("wattbit_bmc_energy_joules_total", labels[:3])] == 7.2e6
    info = (
        ("bmc", "rf"),
        ("firmware", ""),
        ("model", ""),
        ("protocol", "redfish"),
        ("vendor", "X"),
    )
    assert s[("wattbit_bmc_info", info)] == 1.0
    # the BMC stops answering: its readings go at once, its identity and health stay
    poller.states = {
        **poller.states,
        "rf": BmcState("rf", "redfish", False, 5.0, (), (), "timeout"),
    }
    s = render(poller)
    assert not any(
        k[0].startswith("wattbit_bmc_power") or k[0].startswith("wattbit_bmc_supply") for k in s
    )
    assert s[("wattbit_bmc_up", (("bmc", "rf"),))] == 0.0


def test_several_chassis_with_power_unmapped_is_said_once(caplog) -> None:  # type: ignore[no-untyped-def]
    """Unmapped, a BMC whose chassis all report power exports its main one and says, once,
    which others it leaves (a blade enclosure wants chassis: rules)."""
    import asyncio

    from exporters.bmc.types import BmcReading

    poller = BmcPoller([TARGETS[0]])

    async def read(t: BmcTarget, identity: bool) -> BmcReading:  # a fake BMC (unit tier)
        return BmcReading(
            chassis=[
                ChassisPower("Enclosure", power_watts=900.0),
                ChassisPower("Blade1", power_watts=300.0),
            ]
        )

    poller._read = read  # type: ignore[method-assign]

    async def twice() -> None:
        await poller.poll_all()
        await poller.poll_all()

    asyncio.run(twice())
    said = [r.getMessage() for r in caplog.records if "chassis report power" in r.getMessage()]
    assert said == [
        "bmc rf: 2 chassis report power (Enclosure, Blade1); exporting Enclosure as the "
        "server's: map the others with chassis: rules (docs/exporters/bmc.md)"
    ]
    assert [m.power.chassis for m in poller.states["rf"].mapped] == ["Enclosure"]


def test_a_chassis_without_power_says_what_is_exported_instead(caplog) -> None:  # type: ignore[no-untyped-def]
    """An enclosure whose supplies report only output watts: the log says those are exported
    (not as the server's power), not that nothing is; a chassis with nothing says nothing."""
    import asyncio

    from exporters.bmc.types import BmcReading

    answers = {
        "rf": [ChassisPower("Enclosure", supplies=[SupplyPower("PSU1", "output", 1450.0)])],
        "ipmi": [ChassisPower("")],
    }
    poller = BmcPoller(TARGETS)

    async def read(t: BmcTarget, identity: bool) -> BmcReading:  # a fake BMC (unit tier)
        return BmcReading(chassis=answers[t.name])

    poller._read = read  # type: ignore[method-assign]
    asyncio.run(poller.poll_all())
    said = sorted(r.getMessage() for r in caplog.records if "no chassis" in r.getMessage())
    assert said == [
        "bmc ipmi: no chassis with a power reading is mapped (chassis: (the system)); nothing "
        "is exported as its power",
        "bmc rf: no chassis with a power reading is mapped (chassis: Enclosure); its supplies' "
        "output watts are exported, not as the server's power (docs/exporters/bmc.md)",
    ]
    s = render(poller)
    assert s[("wattbit_bmc_supply_power_watts", (("bmc", "rf"), ("component", ""),
              ("host", ""), ("kind", "output"), ("supply", "PSU1")))] == 1450.0  # fmt: skip
