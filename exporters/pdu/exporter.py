"""The pdu exporter: renders the poller's last completed polls as metrics."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.polling import PollFamilies, reason_counter

from .poller import PduPoller, PduState, PduTarget
from .types import Reading, feed_values

__all__ = ["FEED_LABELS", "OUTLET_LABELS", "PduExporter", "feed_values", "render"]

OUTLET_LABELS = ["pdu", "outlet", "outlet_name", "host", "component"]
FEED_LABELS = ["pdu", "feed", "host", "component"]


class PduExporter(Exporter):
    """Per-outlet and per-unit power, health and identity of every configured PDU."""

    name = "pdu"

    def __init__(
        self, poller: PduPoller, shard: tuple[int, int] = (1, 1), configured: int | None = None
    ) -> None:
        """`shard`: (K, N) of a collector polling shard K of N; `configured`: PDUs in its
        configuration, every shard's (default: the poller's own, unsharded)."""
        self.poller = poller
        self.shard = shard
        self.configured = len(poller.targets) if configured is None else configured
        self._targets: dict[str, PduTarget] = {t.name: t for t in poller.targets}

    def close(self) -> None:
        """Close the poller's SNMP client: its sockets and v3 engines (idempotent)."""
        self.poller.client.close()

    def snapshot(self) -> PduSnapshot:
        """What the poller holds now: its last completed polls (never one in progress)."""
        return PduSnapshot(
            states=self.poller.states,  # replaced whole by each poll: one consistent dict
            last_poll=dict(self.poller.last_poll),
            targets=self._targets,
            failures=dict(self.poller.failures),
            invalid=dict(self.poller.invalid),
            shard=self.shard,
            polled=len(self.poller.targets),
            configured=self.configured,
            snmp=self.poller.client.counts(),
        )

    def collect(self) -> Iterator[Metric]:
        """Render the last completed poll of every PDU."""
        yield from render(self.snapshot())


@dataclass(frozen=True)
class PduSnapshot:
    """What one scrape renders: the poller's results and counts, and this collector's shard."""

    states: Mapping[str, PduState]  # by PDU name
    last_poll: Mapping[str, float] = field(default_factory=dict)  # unix time of the last poll
    targets: Mapping[str, PduTarget] = field(default_factory=dict)  # outlet -> host mapping
    failures: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (pdu, reason)
    invalid: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (pdu, reason)
    shard: tuple[int, int] = (1, 1)  # (K, N)
    polled: int = 0  # PDUs of this collector's shard
    configured: int = 0  # PDUs of the configuration, every shard's
    snmp: Mapping[str, int] = field(default_factory=dict)  # SnmpClient.counts()


def render(snap: PduSnapshot) -> Iterator[Metric]:
    """The pdu metric families of one snapshot (pure)."""
    states = snap.states
    outlet: Families = {
        "power": GaugeMetricFamily(
            "wattbit_pdu_outlet_power_watts",
            "Active power of the outlet.",
            labels=OUTLET_LABELS,
        ),
        "current": GaugeMetricFamily(
            "wattbit_pdu_outlet_current_amperes",
            "Current of the outlet.",
            labels=OUTLET_LABELS,
        ),
        "voltage": GaugeMetricFamily(
            "wattbit_pdu_outlet_voltage_volts", "Voltage at the outlet.", labels=OUTLET_LABELS
        ),
        "energy": CounterMetricFamily(
            "wattbit_pdu_outlet_energy_joules",
            "Energy through the outlet, from the PDU's energy register.",
            labels=OUTLET_LABELS,
        ),
        "apparent": GaugeMetricFamily(
            "wattbit_pdu_outlet_apparent_power_voltamperes",
            "Apparent power of the outlet (VA), where the PDU's MIB meters no watts.",
            labels=OUTLET_LABELS,
        ),
        "on": GaugeMetricFamily(
            "wattbit_pdu_outlet_on",
            "1 when the outlet is switched on, 0 when off (switched PDUs that say so).",
            labels=OUTLET_LABELS,
        ),
    }
    parts = _part_families()
    feed_power = GaugeMetricFamily(
        "wattbit_pdu_feed_power_watts",
        "Active power of a whole PDU, bank or phase mapped to one host (collector.yml "
        "feeds): feed is unit, bank:N or phase:N.",
        labels=FEED_LABELS,
    )
    feed_energy = CounterMetricFamily(
        "wattbit_pdu_feed_energy_joules",
        "Energy through a whole PDU, bank or phase mapped to one host, from its register.",
        labels=FEED_LABELS,
    )
    unit: Families = {
        "power": GaugeMetricFamily(
            "wattbit_pdu_power_watts", "Active power of the whole PDU.", labels=["pdu"]
        ),
        "energy": CounterMetricFamily(
            "wattbit_pdu_energy_joules", "Energy through the whole PDU.", labels=["pdu"]
        ),
        "current": GaugeMetricFamily(
            "wattbit_pdu_current_amperes", "Current of the whole PDU (input).", labels=["pdu"]
        ),
        "voltage": GaugeMetricFamily(
            "wattbit_pdu_voltage_volts", "Input voltage of the PDU.", labels=["pdu"]
        ),
    }
    polls = PollFamilies(
        "pdu",
        "PDU",
        up="wattbit_pdu_up",
        duration="wattbit_pdu_poll_duration_seconds",
        last_poll="wattbit_pdu_last_poll_timestamp_seconds",
    )
    polled_at = snap.last_poll
    info = GaugeMetricFamily(
        "wattbit_pdu_info",
        "The PDU's identity and the profile that reads it.",
        labels=["pdu", "vendor", "model", "firmware", "serial", "profile"],
    )
    for name in sorted(states):
        st = states[name]
        polls.add(name, st.up, st.duration, polled_at)
        r = st.reading
        if not st.up or r is None:
            continue  # a PDU that stopped answering loses its readings at once
        ident = r.identity
        info.add_metric(
            [
                name,
                ident.get("vendor", ""),
                ident.get("model", ""),
                ident.get("firmware", ""),
                ident.get("serial", ""),
                st.profile,
            ],
            1.0,
        )
        _readings(name, r, snap.targets.get(name), outlet, (feed_power, feed_energy), unit)
        _parts(name, r, parts)
    yield from outlet.values()
    yield from parts
    yield from (feed_power, feed_energy)
    yield from unit.values()
    yield from (*polls, info)
    yield reason_counter(
        "wattbit_pdu_poll_failures",
        "Failed polls by reason (timeout, auth, too_big, garbage, over_limit, deadline, "
        "no_profile, refused, error).",
        "pdu",
        snap.failures,
    )
    yield reason_counter(
        "wattbit_pdu_invalid_values",
        "Values the PDU answered that were not readings, by reason; those series are absent.",
        "pdu",
        snap.invalid,
    )
    yield from _shard_metrics(snap)
    yield from snmp_counters(snap.snmp)


Families = dict[str, GaugeMetricFamily | CounterMetricFamily]


def _readings(
    name: str,
    r: Reading,
    target: PduTarget | None,
    outlet: Families,
    feed: tuple[GaugeMetricFamily, CounterMetricFamily],
    unit: Families,
) -> None:
    """One PDU's outlet, feed and unit readings into their families (never a silent 0)."""
    for o in r.outlets:
        host, component = target.labels(o.index, o.name) if target else ("", "")
        lv = [name, o.index, o.name, host, component]
        for key, value in (
            ("power", o.power_watts),
            ("current", o.current_amperes),
            ("voltage", o.voltage_volts),
            ("energy", o.energy_joules),
            ("apparent", o.apparent_power_voltamperes),
            ("on", None if o.on is None else float(o.on)),
        ):
            if value is not None:
                outlet[key].add_metric(lv, value)
    for feed_name, host, component in target.feeds if target else ():
        watts, joules = feed_values(r, feed_name)
        if watts is not None:
            feed[0].add_metric([name, feed_name, host, component], watts)
        if joules is not None:
            feed[1].add_metric([name, feed_name, host, component], joules)
    for key, value in (
        ("power", r.unit_power_watts),
        ("energy", r.unit_energy_joules),
        ("current", r.unit_current_amperes),
        ("voltage", r.unit_voltage_volts),
    ):
        if value is not None:
            unit[key].add_metric([name], value)


def _part_families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    """The phase and bank current families."""
    return (
        GaugeMetricFamily(
            "wattbit_pdu_phase_current_amperes",
            "Current of one input phase of the PDU, as its MIB numbers the phases.",
            labels=["pdu", "phase"],
        ),
        GaugeMetricFamily(
            "wattbit_pdu_bank_current_amperes",
            "Current of one outlet bank (breaker group) of the PDU, as its MIB numbers them.",
            labels=["pdu", "bank"],
        ),
    )


def _parts(name: str, r: Reading, parts: tuple[GaugeMetricFamily, GaugeMetricFamily]) -> None:
    """Each phase's and bank's current, labelled with its number (never a silent 0)."""
    for family, rows in zip(parts, (r.phases, r.banks), strict=True):
        for row in rows:
            if row.current_amperes is not None:
                family.add_metric([name, row.index], row.current_amperes)


def _shard_metrics(snap: PduSnapshot) -> Iterator[Metric]:
    """Which shard this collector polls and how many PDUs that is (docs/scaling.md)."""
    info = GaugeMetricFamily(
        "wattbit_pdu_shard_info",
        "This collector's PDU polling shard: shard of shards (1 of 1 when not sharded).",
        labels=["shard", "shards"],
    )
    info.add_metric([str(snap.shard[0]), str(snap.shard[1])], 1.0)
    polled = GaugeMetricFamily(
        "wattbit_pdu_polled_pdus", "PDUs this collector polls: those of its shard."
    )
    polled.add_metric([], float(snap.polled))
    configured = GaugeMetricFamily(
        "wattbit_pdu_configured_pdus",
        "PDUs in this collector's configuration, every shard's.",
    )
    configured.add_metric([], float(snap.configured))
    yield from (info, polled, configured)


# SnmpClient.counts() key -> the `reason` of wattbit_snmp_datagrams_discarded_total
DISCARD_REASONS = {"dropped": "not_polled", "stray": "stray", "garbage": "garbage"}


def snmp_counters(counts: Mapping[str, int]) -> Iterator[Metric]:
    """The SNMP client's own counters (one client per process: no pdu label).

    Only what the client counts: a key it does not report gives no sample, never a 0.
    """
    families = {
        "sent": CounterMetricFamily(
            "wattbit_snmp_messages_sent",
            "SNMP requests sent to PDUs, resends included (SNMPv2c and v3).",
        ),
        "received": CounterMetricFamily(
            "wattbit_snmp_messages_received",
            "SNMP messages received, discarded ones included (SNMPv2c and v3).",
        ),
        "var_binds": CounterMetricFamily(
            "wattbit_snmp_var_binds_received",
            "Var-binds in the answers matched to a request (SNMPv2c and v3).",
        ),
    }
    for key, family in families.items():
        if key in counts:
            family.add_metric([], float(counts[key]))
    discarded = CounterMetricFamily(
        "wattbit_snmp_datagrams_discarded",
        "Datagrams on the SNMPv2c socket discarded by reason: not_polled (from an address no "
        "request is in flight to, unread), stray (no request waits for its request-id and "
        "community, header read only), garbage (undecodable, from a polled address).",
        labels=["reason"],
    )
    for key, reason in DISCARD_REASONS.items():
        if key in counts:
            discarded.add_metric([reason], float(counts[key]))
    yield from families.values()
    yield discarded
