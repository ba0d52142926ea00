"""The bmc exporter: renders the BMC poller's last completed polls as metrics."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.polling import PollFamilies, reason_counter

from .poller import BmcPoller


class BmcExporter(Exporter):
    """Servers' input power, per supply power, energy, health and identity from their BMCs."""

    name = "bmc"

    def __init__(self, poller: BmcPoller) -> None:
        self.poller = poller

    def collect(self) -> Iterator[Metric]:
        """Render the last completed poll of every BMC (never a poll in progress)."""
        states = self.poller.states  # one consistent snapshot
        polled_at = self.poller.last_poll
        power = GaugeMetricFamily(
            "wattbit_bmc_power_watts",
            "The server's input power as its BMC reports it (absent when it gives none).",
            labels=["bmc", "host", "component", "protocol"],
        )
        supply = GaugeMetricFamily(
            "wattbit_bmc_supply_power_watts",
            "A power supply's input or output power as the BMC reports it (kind).",
            labels=["bmc", "host", "component", "supply", "kind"],
        )
        energy = CounterMetricFamily(
            "wattbit_bmc_energy_joules",
            "The chassis' energy from Redfish EnvironmentMetrics.EnergykWh.",
            labels=["bmc", "host", "component"],
        )
        polls = PollFamilies(
            "bmc",
            "BMC",
            up="wattbit_bmc_up",
            duration="wattbit_bmc_poll_duration_seconds",
            last_poll="wattbit_bmc_last_poll_timestamp_seconds",
        )
        info = GaugeMetricFamily(
            "wattbit_bmc_info",
            "The BMC's identity as it reports it.",
            labels=["bmc", "protocol", "vendor", "model", "firmware"],
        )
        for name in sorted(states):
            st = states[name]
            polls.add(name, st.up, st.duration, polled_at)
            if st.identity:
                ident = dict(st.identity)
                info.add_metric(
                    [
                        name,
                        st.protocol,
                        ident.get("vendor", ""),
                        ident.get("model", ""),
                        ident.get("firmware", ""),
                    ],
                    1.0,
                )
            if not st.up:
                continue  # a BMC that stopped answering loses its readings at once
            for m in st.mapped:
                p = m.power
                if p.power_watts is not None:  # never a silent 0
                    power.add_metric([name, m.host, m.component, st.protocol], p.power_watts)
                if p.energy_joules is not None:
                    energy.add_metric([name, m.host, m.component], p.energy_joules)
                for s in p.supplies:
                    supply.add_metric([name, m.host, m.component, s.supply, s.kind], s.watts)
        yield from (power, supply, energy, *polls, info)
        yield reason_counter(
            "wattbit_bmc_poll_failures",
            "Failed polls by reason (docs/exporters/bmc.md); every reason exported from 0.",
            "bmc",
            self.poller.failures,
        )
        yield reason_counter(
            "wattbit_bmc_invalid_values",
            "Values a BMC answered that are not readings, by reason; those series are absent.",
            "bmc",
            self.poller.invalid,
        )
