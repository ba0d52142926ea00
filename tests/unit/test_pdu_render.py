"""exporters/pdu/exporter.py's render(): the pdu families of a hand-made snapshot, no poller and
no SNMP (blockio, nic and smart are tested the same way); the whole collector's output is
tests/unit/test_site_golden.py's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from exporters.pdu.exporter import PduSnapshot, render
from exporters.pdu.poller import PduState, PduTarget
from exporters.pdu.types import OutletReading, Reading
from exporters.snmp.client import Auth, Target


class _Fixed:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _text(snap: PduSnapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(render(snap))))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def _snapshot() -> PduSnapshot:
    reading = Reading(
        outlets=[
            OutletReading("1", "db01-psu1", power_watts=212.0, energy_joules=3.6e9),
            OutletReading("2", "spare", current_amperes=None, voltage_volts=230.5),
        ],
        unit_power_watts=212.0,
        identity={"vendor": "APC", "model": "AP8641", "firmware": "6.7.2", "serial": "X1"},
        phases=[OutletReading("1", "L1", power_watts=212.0)],
    )
    target = PduTarget(
        "a",
        Target("127.0.0.1", 161, Auth(version="2c", community="public")),
        labels=lambda i, n: ("db01", "server") if i == "1" else ("", "spare"),
        feeds=(("phase:1", "rack-a", "switches"),),
    )
    return PduSnapshot(
        states={
            "b": PduState("b", False, 3.0, error="timeout"),
            "a": PduState("a", True, 0.25, "apc_rpdu2", reading),
        },
        last_poll={"a": 1_764_000_000.0, "b": 1_764_000_003.0},
        targets={"a": target},
        failures={("b", "timeout"): 2, ("a", "timeout"): 0},
        invalid={("a", "missing"): 1},
        shard=(2, 3),
        polled=2,
        configured=5,
        snmp={"sent": 10, "received": 9, "stray": 1},
    )


def test_render_is_the_snapshot_and_nothing_else() -> None:
    text = _text(_snapshot())
    lines = set(text.splitlines())
    for line in (
        'wattbit_pdu_outlet_power_watts{component="server",host="db01",outlet="1",'
        'outlet_name="db01-psu1",pdu="a"} 212.0',
        'wattbit_pdu_outlet_energy_joules_total{component="server",host="db01",outlet="1",'
        'outlet_name="db01-psu1",pdu="a"} 3.6e+09',
        'wattbit_pdu_outlet_voltage_volts{component="spare",host="",outlet="2",'
        'outlet_name="spare",pdu="a"} 230.5',
        'wattbit_pdu_feed_power_watts{component="switches",feed="phase:1",host="rack-a",'
        'pdu="a"} 212.0',
        'wattbit_pdu_power_watts{pdu="a"} 212.0',
        'wattbit_pdu_up{pdu="a"} 1.0',
        'wattbit_pdu_up{pdu="b"} 0.0',
        'wattbit_pdu_poll_duration_seconds{pdu="b"} 3.0',
        'wattbit_pdu_last_poll_timestamp_seconds{pdu="b"} 1.764000003e+09',
        'wattbit_pdu_info{firmware="6.7.2",model="AP8641",pdu="a",profile="apc_rpdu2",'
        'serial="X1",vendor="APC"} 1.0',
        'wattbit_pdu_poll_failures_total{pdu="a",reason="timeout"} 0.0',
        'wattbit_pdu_poll_failures_total{pdu="b",reason="timeout"} 2.0',
        'wattbit_pdu_invalid_values_total{pdu="a",reason="missing"} 1.0',
        'wattbit_pdu_shard_info{shard="2",shards="3"} 1.0',
        "wattbit_pdu_polled_pdus 2.0",
        "wattbit_pdu_configured_pdus 5.0",
        "wattbit_snmp_messages_sent_total 10.0",
        'wattbit_snmp_datagrams_discarded_total{reason="stray"} 1.0',
    ):
        assert line in lines, line
    # never a silent 0: outlet 2 reads no power or current; a PDU that is down has no
    # readings and no identity; the client's counts it does not report give no sample
    assert 'outlet="2",outlet_name="spare",pdu="a"} 0' not in text
    assert "wattbit_pdu_outlet_current_amperes{" not in text
    assert 'pdu="b"' not in "".join(
        line for line in lines if line.startswith(("wattbit_pdu_outlet_", "wattbit_pdu_info"))
    )
    assert not any(line.startswith("wattbit_snmp_var_binds_received_total") for line in lines)
    assert 'wattbit_snmp_datagrams_discarded_total{reason="garbage"}' not in text


def test_render_of_the_same_snapshot_is_the_same() -> None:
    snap = _snapshot()
    assert _text(snap) == _text(snap)
    empty = _text(PduSnapshot(states={}))
    assert "wattbit_pdu_up{" not in empty and "wattbit_pdu_configured_pdus 0.0" in empty
