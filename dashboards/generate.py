"""wattbit's Grafana dashboards, written as code with grafana-foundation-sdk.

    python dashboards/generate.py            # writes dashboards/json/*.json
    python dashboards/generate.py --out DIR  # writes them elsewhere (the unit test compares)

The generated JSON is committed; tests/unit/test_dashboards.py regenerates it and fails on
any difference. Every panel query reads a metric of docs/exporters/*.md, docs/runs.md or a
recording rule of alerts/wattbit-recording.yml (node_exporter's `node_cpu_seconds_total` and
Prometheus's `ALERTS` are the two documented outside names); docs/dashboards.md says what
each panel shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, heatmap, stat, table, timeseries, xychart
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders.common import (
    ReduceDataOptions,
    VizLegendOptions,
    VizTextDisplayOptions,
)
from grafana_foundation_sdk.builders.dashboard import (
    AnnotationQuery,
    Dashboard,
    DashboardLink,
    DatasourceVariable,
    FieldColor,
    QueryVariable,
    Row,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import xychart as xy
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    FieldColorModeId,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
OUT = HERE / "json"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")

# Selectors every host-scoped query uses. Grafana expands a multi-value variable inside a
# regex matcher to (a|b|c); "All" to the same list of every value.
H = 'host=~"$host"'
HD = 'host=~"$host", device=~"$device"'
HI = 'host=~"$host", interface=~"$interface"'
RI = "[$__rate_interval]"

# Rates in panels use $__rate_interval, never a fixed window: Grafana makes it
# max($__interval + scrape interval, 4 x scrape interval) from the data source's minimum
# interval (provisioning: jsonData.timeInterval = the scrape interval), so a 1 s scrape gets a
# 4 s window and a 15 s scrape a 60 s one, and a stream's start is a step, not a one-minute
# ramp. The recording rules (1m windows, docs/rules.md) stay for alerts and sums of gauges;
# a panel repeats a rule's expression with $__rate_interval where the rule has a rate.


def nic_bits(sel: str, by: str) -> str:
    """bit/s of the agent's interfaces, summed by `by` (both directions kept apart)."""
    return f"sum by ({by}) (rate(wattbit_nic_bytes_total{{{sel}}}{RI})) * 8"


# The site's Gbit/s as site:wattbit_joules_per_gigabit:ratio1m counts it: the larger direction.
ALL_HOSTS = 'host!=""'
SITE_BITS = f"max({nic_bits(ALL_HOSTS, 'direction')})"
# J/Gbit over $__rate_interval: watts averaged over the same window as the traffic rate, and
# nothing below 0.01 Gbit/s (the rules' floor, docs/rules.md).
HOST_JPG = (
    f"avg_over_time(host:wattbit_power_watts:sum{{{H}}}{RI})"
    f" / on (host) group_left () ({nic_bits(H, 'host')} / 1e9 >= 0.01)"
)  # group_left keeps the watts' `source` (docs/rules.md, "Host power and its source")
SITE_JPG = f"avg_over_time(site:wattbit_power_watts:sum{RI}) / on () ({SITE_BITS} / 1e9 >= 0.01)"
# Bytes/s per whole disk (reads + writes) and the info series that brings its controller and
# NUMA node: host_controller: and host_numa:wattbit_disk_bytes_per_second:rate1m over RI.
DISK_BYTES = (
    f'sum by (host, device) (rate(wattbit_disk_io_bytes_total{{{H}, op=~"read|write"}}{RI}))'
)
DISK_INFO = f'wattbit_disk_info{{{H}, parent="", controller!=""}}'
DISK_BUSY = (
    f"clamp_max(max by (host, device) (rate(wattbit_disk_busy_seconds_total{{{HD}}}{RI})), 1)"
)
# What each disk's latency histogram measures (docs/exporters/blockio.md): clock="device", from
# the issue to the device until completion, or clock="queue", from queueing until completion
# (iostat's await). The two never go into one figure: the heatmap shows one clock at a time
# ($clock), the ranking compares a disk only with its host's disks of the same clock.
CLOCK_DESC = (
    "device: from the issue to the device until completion; queue: from queueing until "
    "completion, as iostat's await"
)


def with_clock(expr: str, sel: str) -> str:
    """expr (series with host and device labels) with its disk's `clock` label: one series of
    value 1 per disk, its clock series or, for agents that export none, its wattbit_disk_info
    series (no clock label: such disks are kept, without a clock)."""
    return (
        f"{expr} * on (host, device) group_left (clock) ("
        f"max by (host, device, clock) (wattbit_disk_io_latency_clock_info{{{sel}}})"
        f" or on (host, device) max by (host, device) (wattbit_disk_info{{{sel}}}))"
    )


def energy(watts: str) -> str:
    """Joules in the dashboard's time range: mean watts over the range x its length.

    Integrated from the watts, not from the PDUs' energy registers: those count in steps of
    0.1 kWh (360 kJ) on APC units, so a run of minutes moves them by nothing or by one step.
    """
    return f"avg_over_time({watts}[$__range]) * $__range_s"


# The run annotation of docs/runs.md: every sample above 0 is drawn, samples one step apart
# merge into one region per run. The SDK's AnnotationQuery has no fields for the Prometheus
# data source's step/titleFormat/textFormat/tagKeys: they are added after encoding.
RUN_ANNOTATION_EXPR = "(wattbit_run_active * on (run) group_left (labels) wattbit_run_info) > 0"
# The Grafana of docker-compose.yml, whose XY chart options (mapping, series matchers) the SDK
# writes.
XYCHART_PLUGIN_VERSION = "11.2.2"
RUN_ANNOTATION_EXTRA = {
    "step": "5s",
    "titleFormat": "{{run}}",
    "textFormat": "{{labels}}",
    "tagKeys": "run",
    "useValueForTime": False,
}


# ---- building blocks ----------------------------------------------------------------------


def q(expr: str, legend: str = "", ref: str = "A", fmt: str = "time_series") -> prom.Dataquery:
    """A Prometheus range query."""
    b = prom.Dataquery().expr(expr).ref_id(ref).legend_format(legend or "__auto")
    if fmt == "heatmap":
        b = b.format(PromQueryFormat.HEATMAP)
    return b.range()


def qi(expr: str, ref: str = "A") -> prom.Dataquery:
    """An instant query in table format (for tables and bar gauges)."""
    return prom.Dataquery().expr(expr).ref_id(ref).format(PromQueryFormat.TABLE).instant()


def qv(expr: str, legend: str = "", ref: str = "A") -> prom.Dataquery:
    """An instant query (one value per series at the range's end), for stats and bar gauges."""
    return prom.Dataquery().expr(expr).ref_id(ref).legend_format(legend or "__auto").instant()


def ts(
    title: str, unit: str, queries: list[prom.Dataquery], desc: str = "", w: int = 12, h: int = 8
) -> timeseries.Panel:
    """A time series panel."""
    p = timeseries.Panel().title(title).unit(unit).datasource(DS).span(w).height(h)
    if desc:
        p = p.description(desc)
    for query in queries:
        p = p.with_target(query)
    return p


def letters(queries: list[tuple[str, str]]) -> list[prom.Dataquery]:
    """(expr, legend) pairs as range queries A, B, C..."""
    return [q(e, leg, chr(ord("A") + i)) for i, (e, leg) in enumerate(queries)]


def ds_var() -> DatasourceVariable:
    return DatasourceVariable("datasource").label("Data source").type("prometheus")


def var(name: str, label: str, query: str) -> QueryVariable:
    """A multi-value query variable with All, refreshed when the time range changes."""
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": f"{name}-var"})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
    )


HOST_VAR_QUERY = "label_values(wattbit_exporter_up, host)"
DEVICE_VAR_QUERY = 'label_values(wattbit_disk_info{host=~"$host", parent=""}, device)'
CLOCK_VAR_QUERY = (
    'label_values(wattbit_disk_io_latency_clock_info{host=~"$host", device=~"$device"}, clock)'
)
INTERFACE_VAR_QUERY = 'label_values(wattbit_nic_info{host=~"$host"}, interface)'
RUN_VAR_QUERY = "label_values(wattbit_run_info, run)"


def base(uid: str, title: str, desc: str) -> Dashboard:
    """Common settings: time, refresh, tags, the run annotation, links between dashboards."""
    return (
        Dashboard(title)
        .uid(uid)
        .description(desc)
        .tags(["wattbit"])
        .time("now-30m", "now")
        .refresh("10s")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
        .annotation(
            AnnotationQuery()
            .name("Runs")
            .datasource(DS)
            .enable(True)
            .icon_color("rgba(255, 152, 48, 0.4)")
            .expr(RUN_ANNOTATION_EXPR)
        )
        .link(
            DashboardLink("wattbit")
            .type(DashboardLinkType.DASHBOARDS)
            .tags(["wattbit"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .with_variable(ds_var())
        .with_variable(var("host", "Host", HOST_VAR_QUERY))
    )


def run_picker() -> table.Panel:
    """Runs with start and end; clicking a run zooms the dashboard to its window."""
    start = "wattbit_run_start_time_seconds * 1000"
    # an active run has no end yet: it ends now
    end = "wattbit_run_end_time_seconds * 1000 or on (run) (wattbit_run_active * 0 + time() * 1000)"
    # The run's own from/to only: ${__url_time_range} would put the current range first, and
    # Grafana keeps that. `.numeric` is the field's number (epoch ms); the field alone is its
    # display text, here an ISO date that from= does not take. Grafana's __data macro reads
    # `fields.start.numeric` with lodash property() on getFieldDisplayValuesProxy's values:
    # https://github.com/grafana/grafana/blob/main/packages/grafana-data/src/field/getFieldDisplayValuesProxy.ts
    link = (
        "/d/${__dashboard.uid}/${__dashboard}?${host:queryparam}"
        "&var-run=${__data.fields.run:percentencode}"
        "&from=${__data.fields.start.numeric}&to=${__data.fields.end.numeric}"
    )
    return (
        table.Panel()
        .title("Runs (click a run to zoom to its window)")
        .description("Runs of the site collector's registry (docs/runs.md), newest first.")
        .datasource(DS)
        .unit("dateTimeAsIso")
        .span(24)
        .height(6)
        .with_target(qi(start, "A"))
        .with_target(qi(end, "B"))
        .with_transformation(DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True, "job": True, "instance": True},
                    "renameByName": {"Value #A": "start", "Value #B": "end"},
                },
            )
        )
        .with_transformation(
            DataTransformerConfig(
                id_val="sortBy", options={"sort": [{"field": "start", "desc": True}]}
            )
        )
        .data_links([DashboardLink("Zoom to this run").url(link)])
    )


def bars(
    title: str,
    unit: str,
    expr: str,
    legend: str,
    desc: str = "",
    w: int = 12,
    instant: bool = False,
) -> bargauge.Panel:
    """A bar gauge of the latest value of each series (of an instant query with `instant`)."""
    p = (
        bargauge.Panel()
        .title(title)
        .unit(unit)
        .datasource(DS)
        .span(w)
        .height(8)
        .min(0)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .orientation(common.VizOrientation.HORIZONTAL)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(qv(expr, legend) if instant else q(expr, legend))
    )
    return p.description(desc) if desc else p


# ---- what limits it (the recording rules of docs/rules.md, "What limits it") ---------------

# The Wall's 20 s copies of the rules (alerts/make_wall.py; docs/rules.md "The Wall's
# window"): a phase's limiter shows within seconds, not a minute later. The 1-minute rules stay
# for the alerts and the report.
UTIL = f"max by (host, resource) (host_resource:wattbit_utilisation:ratio20s{{{H}}})"
LIMITER = f"host:wattbit_limiter:ratio20s{{{H}}}"


def limits_table(w: int = 24, h: int = 6) -> table.Panel:
    """Per host: the limiter, its subject, and every resource's utilisation, one row each."""
    return (
        table.Panel()
        .title("What limits it")
        .description(
            "Per host moving data (NICs >= 10 Mbit/s or disks >= 1 MB/s), over the last "
            "20 seconds: the limiter (the resource with the highest utilisation, at least 70 %; "
            "none below: the workload paces itself), its subject (device, PCI address, "
            "interface, CPU) and its utilisation, then each resource's busiest subject: disk "
            "(busy), controller (its PCIe link; its busy disks' wait when those move under "
            "85 % of what each moved alone), pcie, nic (each way against the link speed), cpu "
            "(the busiest moving data), tcp (retransmitted share against 1 %). A controller or "
            "PCIe link at 90 % or more is named ahead of the disks it feeds."
        )
        .datasource(DS)
        .unit("percentunit")
        .span(w)
        .height(h)
        .with_target(qi(LIMITER, "A"))
        .with_target(qi(UTIL, "B"))
        .with_transformation(
            DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "resource", "rowField": "host", "valueField": "Value #B"},
            )
        )
        .with_transformation(
            DataTransformerConfig(
                id_val="joinByField", options={"byField": "host", "mode": "outer"}
            )
        )
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True, "__name__": True},
                    "indexByName": {"host": 0, "resource": 1, "subject": 2, "Value #A": 3},
                    "renameByName": {
                        "host\\resource": "host",
                        "resource": "limited by",
                        "Value #A": "utilisation",
                    },
                },
            )
        )
    )


def limits_row(d: Dashboard) -> Dashboard:
    """The "what limits it" row of the Streaming dashboard."""
    d = d.with_row(Row("What limits it"))
    d = d.with_panel(limits_table())
    return d.with_panel(
        ts(
            "Utilisation of every resource over time",
            "percentunit",
            letters([(UTIL, "{{host}} {{resource}}")]),
            "Per host, each resource's busiest subject over the time range (20-second windows: "
            "a step of load shows as a 20-second ramp). Above 70 % a resource limits the run.",
            w=24,
        ).max(1)
    )


# ---- transfers (the tcp exporter's flow keys, docs/exporters/tcp.md) -----------------------

FLOW_KEY = "host, peer, port, cgroup, process, experiment, activity"


def flow_rate(counter: str, window: str = RI) -> str:
    """Per flow key, the rate of one of the tcp exporter's counters over a window
    ($__rate_interval for what is drawn over time, $__range for the table)."""
    return f"sum by ({FLOW_KEY}) (rate(wattbit_tcp_flow_{counter}_total{{{H}}}{window}))"


def flow_bits(window: str = RI) -> str:
    """Per flow key, bit/s both ways."""
    return f"({flow_rate('sent_bytes', window)} + {flow_rate('received_bytes', window)}) * 8"


FLOW_BITS = flow_bits()
RANGE = "[$__range]"
FLOW_LEGEND = "{{host}} → {{peer}}:{{port}} {{cgroup}} {{process}} {{experiment}} {{activity}}"


def flow_share(counter: str, window: str = RI) -> str:
    """A limited time's share of the busy time, per flow key."""
    return f"{flow_rate(counter, window)} / ({flow_rate('busy_seconds', window)} > 0)"


def top_flows(k: int = 10, w: int = 24, h: int = 8) -> table.Panel:
    """The ``k`` flow keys that moved the most over the range: bit/s, limited shares, srtt."""
    return (
        table.Panel()
        .title("Top flows")
        .description(
            f"The {k} flow keys that moved the most (both directions) over the time range: their "
            "mean bit/s, the shares of their busy time limited by the receiver's window and by "
            "the send buffer (the rest of it: cwnd, pacing, the network), and the smoothed "
            "RTT at the range's end. Keys are the agent's tcp.key; `other` sums the flows "
            "outside its top-K."
        )
        .datasource(DS)
        .unit("bps")
        .span(w)
        .height(h)
        .with_target(qi(f"topk({k}, {flow_bits(RANGE)})", "A"))
        .with_target(qi(flow_share("rwnd_limited_seconds", RANGE), "B"))
        .with_target(qi(flow_share("sndbuf_limited_seconds", RANGE), "C"))
        .with_target(qi(f"max by ({FLOW_KEY}) (wattbit_tcp_flow_srtt_seconds{{{H}}})", "D"))
        .with_transformation(DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": {
                        "Value #A": "bit/s",
                        "Value #B": "window-limited",
                        "Value #C": "send-buffer-limited",
                        "Value #D": "srtt",
                    },
                },
            )
        )
        .override_by_name(
            "window-limited", [DynamicConfigValue(id_val="unit", value="percentunit")]
        )
        .override_by_name(
            "send-buffer-limited", [DynamicConfigValue(id_val="unit", value="percentunit")]
        )
        .override_by_name("srtt", [DynamicConfigValue(id_val="unit", value="s")])
    )


def transfers_row(d: Dashboard) -> Dashboard:
    """Top flows, their rates and what limits them (the Streaming dashboard's row)."""
    d = d.with_row(Row("Transfers"))
    d = d.with_panel(top_flows())
    d = d.with_panel(
        ts(
            "Flow rates",
            "bps",
            letters([(f"topk(10, {FLOW_BITS})", FLOW_LEGEND)]),
            "The 10 busiest flow keys' bit/s (sent and received) over $__rate_interval.",
        )
    )
    return d.with_panel(
        ts(
            "What limits the flows",
            "percentunit",
            letters(
                [
                    (flow_share("rwnd_limited_seconds"), "window {{host}} → {{peer}}:{{port}}"),
                    (
                        flow_share("sndbuf_limited_seconds"),
                        "send buffer {{host}} → {{peer}}:{{port}}",
                    ),
                ]
            ),
            "Per flow key, the share of its busy time (sockets with data to send) limited by "
            "the receiver's advertised window and by the local send buffer. A window-limited "
            "share near 1 with the window below bandwidth x RTT: tune the receiver "
            "(WattbitTransferWindowLimited, docs/alerts.md).",
        ).max(1)
    )


# ---- the dashboards -------------------------------------------------------------------------


def streaming() -> Dashboard:
    d = base(
        "wattbit-streaming",
        "wattbit / Streaming run",
        "Gbit/s, watts and joules per gigabit of a run, the disks and NICs behind it.",
    )
    d = d.with_variable(var("device", "Device", DEVICE_VAR_QUERY))
    d = d.with_variable(var("run", "Run", RUN_VAR_QUERY).multi(False).include_all(False))
    d = d.with_row(Row("Runs")).with_panel(run_picker())
    d = d.with_row(Row("Gbit/s, watts, joules per gigabit"))
    d = d.with_panel(
        ts(
            "Site Gbit/s",
            "bps",
            letters([(nic_bits(ALL_HOSTS, "direction"), "site {{direction}}")]),
            "All hosts' NIC traffic per direction, over $__rate_interval.",
        )
    )
    d = d.with_panel(
        ts(
            "Gbit/s per host",
            "bps",
            letters([(nic_bits(H, "host, direction"), "{{host}} {{direction}}")]),
        )
    )
    d = d.with_panel(
        ts(
            "Watts",
            "watt",
            letters(
                [
                    (f"host:wattbit_power_watts:sum{{{H}}}", "{{host}} ({{source}})"),
                    ("site:wattbit_power_watts:sum", "site"),
                ]
            ),
            "Per host, from one source, named in brackets: its metered outlets, else a PDU, "
            "bank or phase mapped to it, else its BMC (redfish, ipmi). Site: every PDU's unit "
            "reading or outlet sum.",
        )
    )
    d = d.with_panel(
        ts(
            "Joules per gigabit",
            "suffix: J/Gbit",
            letters([(HOST_JPG, "{{host}} ({{source}})"), (SITE_JPG, "site")]),
            "Watts averaged over $__rate_interval over the Gbit/s of the same window (the "
            "site: its larger direction); none below 0.01 Gbit/s.",
        )
    )
    d = limits_row(d)
    d = transfers_row(d)
    d = d.with_row(Row("Disks and NICs"))
    d = d.with_panel(
        bars(
            "Disk busy %",
            "percentunit",
            DISK_BUSY,
            "{{host}} {{device}}",
            "Fraction of the last $__rate_interval with at least one request in flight "
            "(iostat %util).",
        )
    )
    d = d.with_panel(
        ts(
            "NIC utilisation of link speed",
            "percentunit",
            letters(
                [
                    (
                        f"sum by (host, interface, direction) "
                        f"(rate(wattbit_nic_bytes_total{{{H}}}{RI}))"
                        " / on (host, interface) group_left ()"
                        f" max by (host, interface) "
                        f"(wattbit_nic_link_speed_bytes_per_second{{{H}}})",
                        "{{host}} {{interface}} {{direction}}",
                    )
                ]
            ),
            "Each direction against the negotiated speed (full duplex). Interfaces whose "
            "driver reports no speed (veth, virtio-net) are not shown.",
        )
    )
    d = d.with_panel(
        stat.Panel()
        .title("Energy in the time range (zoom to a run)")
        .description(
            "Joules drawn by each host (from its power source, in brackets) and by the site in "
            "the time range: the mean "
            "watts over the range times its length (the PDUs' energy registers count in steps "
            "too coarse for a run of minutes)."
        )
        .datasource(DS)
        .unit("joule")
        .span(24)
        .height(5)
        .graph_mode(common.BigValueGraphMode.NONE)
        .with_target(
            qv(energy(f"host:wattbit_power_watts:sum{{{H}}}"), "{{host}} ({{source}})", "A")
        )
        .with_target(qv(energy("site:wattbit_power_watts:sum"), "site", "B"))
    )
    return d


def disks() -> Dashboard:
    d = base(
        "wattbit-disks",
        "wattbit / Disks",
        "Per-disk latency, throughput, IOPS, bandwidth per controller and NUMA node, outliers.",
    )
    d = d.with_variable(var("device", "Device", DEVICE_VAR_QUERY))
    # one clock at a time: Grafana picks the first ("device") until another is chosen
    d = d.with_variable(
        var("clock", "Latency clock", CLOCK_VAR_QUERY).multi(False).include_all(False)
    )
    bucket = f"rate(wattbit_disk_io_latency_seconds_bucket{{{HD}}}{RI})"
    on_clock = f'max by (host, device) (wattbit_disk_io_latency_clock_info{{{HD}, clock="$clock"}})'
    d = d.with_row(Row("Latency"))
    d = d.with_panel(
        heatmap.Panel()
        .title("I/O latency heatmap")
        .description(
            "Latency until completion of the selected devices whose histogram runs on the "
            f"clock picked in Latency clock ({CLOCK_DESC}), all ops (eBPF histogram). One "
            "clock at a time: the two measure different spans. Disks of agents that export no "
            "wattbit_disk_io_latency_clock_info are not in it."
        )
        .datasource(DS)
        .unit("s")
        .span(12)
        .height(9)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("s"))
        .cell_values(heatmap.CellValues().unit("reqps"))
        .with_target(
            q(
                f"sum by (le) ({bucket} * on (host, device) group_left () {on_clock})",
                "{{le}}",
                fmt="heatmap",
            )
        )
    )
    quantiles = [
        (
            with_clock(f"histogram_quantile({phi}, sum by (host, device, op, le) ({bucket}))", HD),
            f"p{name} {{{{host}}}} {{{{device}}}} {{{{op}}}} {{{{clock}}}}",
        )
        for phi, name in (("0.5", "50"), ("0.99", "99"))
    ]
    d = d.with_panel(
        ts(
            "Latency p50 / p99 per op",
            "s",
            letters(quantiles),
            f"Per device and op; the legend ends with the device's latency clock ({CLOCK_DESC}).",
            h=9,
        )
    )
    # "> 0" drops the NaN of disks without I/O in the range, which would make the median NaN
    p99_range = with_clock(
        "(histogram_quantile(0.99, sum by (host, device, le) "
        f"(rate(wattbit_disk_io_latency_seconds_bucket{{{H}}}[$__range]))) > 0)",
        H,
    )
    d = d.with_panel(
        table.Panel()
        .title("Devices ranked by p99 latency relative to their host's median, per clock")
        .description(
            "Each disk's p99 over the time range divided by the median p99 of the same host's "
            f"disks on the same latency clock ({CLOCK_DESC}): 100 % is typical, a slow or "
            "failing drive stands out at the top. Disks of agents that export no clock are "
            "compared among themselves (empty clock)."
        )
        .datasource(DS)
        .unit("percentunit")
        .span(24)
        .height(7)
        .with_target(
            qi(
                f"sort_desc(({p99_range}) / on (host, clock) group_left () "
                f"quantile by (host, clock) (0.5, {p99_range}))"
            )
        )
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": {"Value": "p99 / median of host and clock"},
                },
            )
        )
    )
    d = d.with_row(Row("Throughput"))
    d = d.with_panel(
        ts(
            "Throughput per device",
            "Bps",
            letters(
                [
                    (
                        f"sum by (host, device, op) "
                        f"(rate(wattbit_disk_io_bytes_total{{{HD}}}{RI}))",
                        "{{host}} {{device}} {{op}}",
                    )
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "IOPS per device",
            "iops",
            letters(
                [
                    (
                        f"sum by (host, device, op) (rate(wattbit_disk_ios_total{{{HD}}}{RI}))",
                        "{{host}} {{device}} {{op}}",
                    )
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "Bandwidth per controller",
            "Bps",
            letters(
                [
                    (
                        f"sum by (host, controller) ({DISK_BYTES}"
                        " * on (host, device) group_left (controller)"
                        f" max by (host, device, controller) ({DISK_INFO}))",
                        "{{host}} {{controller}}",
                    )
                ]
            ),
            "Reads + writes of the whole disks on each controller (PCI address); loop, dm and "
            "md devices have no controller and are not counted.",
        )
    )
    d = d.with_panel(
        ts(
            "Bandwidth per NUMA node",
            "Bps",
            letters(
                [
                    (
                        f"sum by (host, numa_node) ({DISK_BYTES}"
                        " * on (host, device) group_left (numa_node)"
                        f" max by (host, device, numa_node) ({DISK_INFO}))",
                        "{{host}} node {{numa_node}}",
                    )
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "Disk busy %",
            "percentunit",
            letters([(DISK_BUSY, "{{host}} {{device}}")]),
        )
    )
    d = d.with_panel(
        ts(
            "Requests in flight (a stalled disk keeps them)",
            "short",
            letters([(f"wattbit_disk_inflight_requests{{{HD}}}", "{{host}} {{device}}")]),
        )
    )
    d = d.with_row(Row("Drive health (SMART, NVMe)"))
    d = d.with_panel(drive_health())
    d = d.with_panel(
        table.Panel()
        .title("SMART read status")
        .description(
            "Whether the agent's last smartctl read of each drive got health data (1) or not "
            "(0), and why not: no_smart (virtio, loop, RAID volumes, SMART disabled), standby "
            "(a sleeping disk is not woken; its last reading is kept), timeout, error, "
            "no_smartctl (docs/exporters/smart.md)."
        )
        .datasource(DS)
        .unit("short")
        .span(8)
        .height(8)
        .with_target(qi(f"max by (host, device, reason) (wattbit_disk_smart_available{{{HD}}})"))
        .with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={"excludeByName": {"Time": True}, "renameByName": {"Value": "read"}},
            )
        )
    )
    d = d.with_row(Row("Errors and alerts"))
    d = d.with_panel(
        ts(
            "I/O errors",
            "short",
            letters(
                [
                    (
                        f"sum by (host, device, op) "
                        f"(increase(wattbit_disk_io_errors_total{{{HD}}}{RI}))",
                        "{{host}} {{device}} {{op}}",
                    )
                ]
            ),
            "Completions with a non-zero error, per op (eBPF backend only).",
        )
    )
    d = d.with_panel(
        ts(
            "Skipped tracepoint events",
            "short",
            letters(
                [
                    (
                        "sum by (host, event) "
                        f"(increase(wattbit_blockio_bpf_missed_events_total{{{H}}}{RI}))",
                        "{{host}} {{event}}",
                    )
                ]
            ),
            "Events the kernel skipped: those completions are missing from the counts.",
        )
    )
    d = d.with_panel(
        table.Panel()
        .title("Firing disk alerts")
        .datasource(DS)
        .unit("short")
        .span(24)
        .height(6)
        .with_target(
            qi(f'ALERTS{{alertname=~"WattbitDisk.*|WattbitNvme.*", alertstate="firing", {H}}}')
        )
    )
    return d


# The drive-health matrix: one row per disk ("host device"), one column per check, from the
# last SMART read. Every check is a series with a `check` label; ATA attributes are named by
# their id and the drive's name for them. SMART read (wattbit_disk_smart_available) is always
# there, so a disk without SMART still has its row.
HEALTH_CHECKS = [
    ("SMART read", "max by (host, device) (wattbit_disk_smart_available{%s})"),
    ("health passed", "max by (host, device) (wattbit_disk_smart_healthy{%s})"),
    ("°C", "max by (host, device) (wattbit_disk_temperature_celsius{%s})"),
    ("power-on hours", "max by (host, device) (wattbit_disk_power_on_seconds{%s}) / 3600"),
    ("NVMe warning bits set", "sum by (host, device) (wattbit_nvme_critical_warning{%s})"),
    ("NVMe spare %", "max by (host, device) (wattbit_nvme_available_spare_ratio{%s}) * 100"),
    (
        "NVMe spare threshold %",
        "max by (host, device) (wattbit_nvme_available_spare_threshold_ratio{%s}) * 100",
    ),
    ("NVMe used %", "max by (host, device) (wattbit_nvme_percentage_used_ratio{%s}) * 100"),
    ("NVMe media errors", "max by (host, device) (wattbit_nvme_media_errors_total{%s})"),
    ("NVMe error log entries", "max by (host, device) (wattbit_nvme_error_log_entries_total{%s})"),
]


def drive_health() -> table.Panel:
    """A table of every disk's SMART / NVMe health figures (the last read)."""
    parts = [f'label_replace({e % HD}, "check", "{name}", "", "")' for name, e in HEALTH_CHECKS]
    parts.append(
        "label_join(max by (host, device, id, attribute) "
        f'(wattbit_disk_smart_attribute_raw{{{HD}}}), "check", " ", "id", "attribute")'
    )
    expr = "label_join(\n  " + "\n  or ".join(parts) + ',\n  "disk", " ", "host", "device"\n)'
    return (
        table.Panel()
        .title("Drive health (last SMART read)")
        .description(
            "One row per disk, one column per figure of its last SMART read (every 5 minutes): "
            "SMART read (1) or not (0: see SMART read status), overall health passed (1) or "
            "FAILED (0), temperature, power-on hours; ATA attributes 5 (reallocated), 187 "
            "(reported uncorrectable), 188 (command timeouts), 197 (pending), 198 (offline "
            "uncorrectable) as raw counts; NVMe critical warning bits set, available spare and "
            "its threshold, endurance used, media errors, error log entries. Empty cells: the "
            "drive does not report that figure. Alerts: docs/alerts.md (WattbitDiskSmartFailed, "
            "WattbitDiskSectorsReallocating, WattbitNvme*)."
        )
        .datasource(DS)
        .unit("short")
        .span(16)
        .height(8)
        .with_target(qi(expr))
        .with_transformation(
            DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "check", "rowField": "disk", "valueField": "Value"},
            )
        )
    )


def power() -> Dashboard:
    d = base(
        "wattbit-power",
        "wattbit / Power",
        "Watts per outlet, host and component; energy over a run; PDU health.",
    )
    d = d.with_row(Row("Watts"))
    d = d.with_panel(
        ts(
            "Watts per outlet",
            "watt",
            letters(
                [
                    (
                        "wattbit_pdu_outlet_power_watts",
                        "{{pdu}} {{outlet_name}} {{host}} {{component}}",
                    )
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "Watts per host, component and site",
            "watt",
            letters(
                [
                    (f"host:wattbit_power_watts:sum{{{H}}}", "host {{host}} ({{source}})"),
                    ("component:wattbit_power_watts:sum", "component {{component}}"),
                    ("site:wattbit_power_watts:sum", "site"),
                ]
            ),
            "A host's watts come from one source, in brackets: its metered outlets, else a "
            "PDU, bank or phase mapped to it, else its BMC (docs/rules.md).",
        )
    )
    d = d.with_row(Row("Power sources"))
    d = d.with_panel(
        ts(
            "Watts per host by source",
            "watt",
            letters([(f"host_source:wattbit_power_watts:sum{{{H}}}", "{{host}} {{source}}")]),
            "Every source that measures a host: outlets, pdu (a PDU, bank or phase mapped to "
            "it), redfish, ipmi (its BMC), rapl (its CPU packages and DRAM: never the host's "
            "watts, shown beside them).",
            w=12,
        )
    )
    d = d.with_panel(
        ts(
            "BMC against PDU",
            "percentunit",
            letters(
                [
                    (
                        f"host:wattbit_power_bmc_over_pdu:ratio{{{H}}}",
                        "{{host}} {{bmc_source}} / {{pdu_source}}",
                    )
                ]
            ),
            "The BMC's watts over the PDU's, where a host has both (100 %: they agree). "
            "WattbitPowerSourcesDisagree fires beyond 10 % and 20 W for 15 minutes.",
            w=6,
        )
    )
    d = d.with_panel(
        ts(
            "RAPL share of host watts",
            "percentunit",
            letters([(f"host:wattbit_power_rapl_share:ratio{{{H}}}", "{{host}} of {{source}}")]),
            "The CPU packages' and DRAM's watts (RAPL) over the host's watts.",
            w=6,
        )
    )
    d = d.with_row(Row("Energy"))
    d = d.with_panel(
        bars(
            "Energy per outlet in the time range (zoom to a run)",
            "joule",
            f"sort_desc({energy('wattbit_pdu_outlet_power_watts')} > 0)",
            "{{pdu}} {{outlet_name}} {{host}} {{component}}",
            "Each outlet's mean watts over the time range times its length, largest first; "
            "outlets that drew nothing are left out. Not the outlets' "
            "energy registers (wattbit_pdu_outlet_energy_joules_total): APC's count 0.1 kWh "
            "(360 kJ) steps, too coarse for a run of minutes; wattbit report uses a register "
            "where it is fine enough.",
            instant=True,
        )
    )
    d = d.with_panel(
        table.Panel()
        .title("Run durations")
        .datasource(DS)
        .unit("s")
        .span(12)
        .height(8)
        .with_target(qi("wattbit_run_end_time_seconds - wattbit_run_start_time_seconds"))
    )
    d = d.with_row(Row("PDU health"))
    d = d.with_panel(ts("PDU up", "bool_yes_no", letters([("wattbit_pdu_up", "{{pdu}}")]), w=8))
    d = d.with_panel(
        ts(
            "PDU poll time",
            "s",
            letters([("wattbit_pdu_poll_duration_seconds", "{{pdu}}")]),
            w=8,
        )
    )
    d = d.with_panel(
        ts(
            "Invalid values and poll failures",
            "short",
            letters(
                [
                    (
                        f"sum by (pdu, reason) (increase(wattbit_pdu_invalid_values_total{RI}))",
                        "invalid {{pdu}} {{reason}}",
                    ),
                    (
                        f"sum by (pdu, reason) (increase(wattbit_pdu_poll_failures_total{RI}))",
                        "failed {{pdu}} {{reason}}",
                    ),
                ]
            ),
            "Values the collector refused (never exported as 0), and failed polls, by reason.",
            w=8,
        )
    )
    return d


def network() -> Dashboard:
    d = base(
        "wattbit-network",
        "wattbit / Network",
        "Per-interface and per-queue traffic, drops, errors, retransmits, and the CPUs that "
        "take the NICs' interrupts next to their busy %.",
    )
    d = d.with_variable(var("interface", "Interface", INTERFACE_VAR_QUERY))
    d = d.with_row(Row("Traffic"))
    d = d.with_panel(
        ts(
            "Throughput per interface",
            "bps",
            letters(
                [
                    (
                        "sum by (host, interface, direction) "
                        f"(rate(wattbit_nic_bytes_total{{{HI}}}{RI})) * 8",
                        "{{host}} {{interface}} {{direction}}",
                    )
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "Throughput per queue",
            "bps",
            letters(
                [
                    (
                        "sum by (host, interface, queue, direction) "
                        f"(rate(wattbit_nic_queue_bytes_total{{{HI}}}{RI})) * 8",
                        "{{host}} {{interface}} q{{queue}} {{direction}}",
                    )
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "Drops and errors",
            "pps",
            letters(
                [
                    (
                        f"sum by (host, interface, direction) "
                        f"(rate(wattbit_nic_drops_total{{{HI}}}{RI}))",
                        "drops {{host}} {{interface}} {{direction}}",
                    ),
                    (
                        f"sum by (host, interface, direction) "
                        f"(rate(wattbit_nic_errors_total{{{HI}}}{RI}))",
                        "errors {{host}} {{interface}} {{direction}}",
                    ),
                ]
            ),
        )
    )
    d = d.with_panel(
        ts(
            "TCP retransmits",
            "percentunit",
            letters(
                [
                    (
                        f"sum by (host) (rate(wattbit_tcp_retransmitted_segments_total{{{H}}}{RI}))"
                        " / on (host) "
                        f"sum by (host) "
                        f'(rate(wattbit_tcp_segments_total{{{H}, direction="out"}}{RI}))',
                        "{{host}}",
                    )
                ]
            ),
            "Retransmitted segments as a share of the segments sent.",
        )
    )
    d = d.with_row(Row("CPUs: interrupts and softirqs next to busy %"))
    d = d.with_panel(
        ts(
            "NIC interrupts per CPU",
            "cps",
            letters(
                [
                    (
                        f"sum by (host, cpu) (rate(wattbit_nic_cpu_interrupts_total{{{HI}}}{RI}))",
                        "{{host}} cpu{{cpu}}",
                    )
                ]
            ),
            w=8,
        )
    )
    d = d.with_panel(
        ts(
            "Network softirqs per CPU",
            "cps",
            letters(
                [
                    (
                        f"sum by (host, cpu, type) (rate(wattbit_cpu_softirqs_total{{{H}}}{RI}))",
                        "{{host}} cpu{{cpu}} {{type}}",
                    ),
                    (
                        "sum by (host, cpu) "
                        f"(rate(wattbit_softnet_times_squeezed_total{{{H}}}{RI}))",
                        "{{host}} cpu{{cpu}} squeezed",
                    ),
                ]
            ),
            "net_rx/net_tx softirqs run, and times net_rx_action ran out of budget "
            "(squeezed: the core is saturated).",
            w=8,
        )
    )
    d = d.with_panel(
        ts(
            "CPU busy % (node_exporter)",
            "percentunit",
            letters(
                [
                    (
                        "1 - avg by (host, cpu) "
                        f'(rate(node_cpu_seconds_total{{{H}, mode="idle"}}{RI}))',
                        "{{host}} cpu{{cpu}}",
                    )
                ]
            ),
            "A core near 100 % that also takes the NIC's interrupts is the receive ceiling.",
            w=8,
        )
    )
    return d


# ---- the Wall: a few big figures for a screen at the back of a room ------------------------

WALL_BIG_TEXT = VizTextDisplayOptions().title_size(28).value_size(96)
# The fit of watts against Gbit/s over the samples of the picked run ($run) inside the time
# range, as wattbit report's fit (idle watts + marginal J/Gbit): least squares over the
# samples where both series and the run exist, pinned to the range's end with `@ end()` so
# every step draws the same line. Subqueries at $__interval; every name is a plain series.
RUN_ON = '(max(wattbit_run_active{run=~"$run"}) > 0)'
FIT_X = f"({SITE_BITS} and on () site:wattbit_power_watts:sum and on () {RUN_ON})"
FIT_Y = f"(site:wattbit_power_watts:sum and on () {SITE_BITS} and on () {RUN_ON})"


def _range_mean(expr: str) -> str:
    return f"avg_over_time(({expr})[$__range:$__interval] @ end())"


FIT_MX, FIT_MY = _range_mean(FIT_X), _range_mean(FIT_Y)
FIT_SLOPE = (
    f"(({_range_mean(f'{FIT_X} * {FIT_Y}')}) - ({FIT_MX}) * ({FIT_MY}))"
    f" / (({_range_mean(f'{FIT_X} ^ 2')}) - ({FIT_MX}) ^ 2)"
)
FIT_LINE = f"({FIT_MY}) + ({FIT_SLOPE}) * (({SITE_BITS}) - ({FIT_MX}))"


def big(title: str, unit: str, expr: str, color: str, desc: str) -> stat.Panel:
    """A big number (the last value) with its sparkline over the range."""
    return (
        stat.Panel()
        .title(title)
        .description(desc)
        .datasource(DS)
        .unit(unit)
        .span(6)
        .height(7)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .text_mode(common.BigValueTextMode.VALUE)
        .text(WALL_BIG_TEXT)
        .color_scheme(FieldColor().mode(FieldColorModeId.FIXED).fixed_color(color))
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(q(expr, title))
    )


def scatter() -> xychart.Panel:
    """Watts against Gbit/s, one point per step, and the run's fitted line."""
    frame0 = xychart.XychartXYSeriesConfigFrame().matcher(
        xychart.MatcherConfig().id("byIndex").options(0)
    )

    def by_name(name: str) -> xychart.MatcherConfig:
        return xychart.MatcherConfig().id("byName").options(name)

    def series(y: str) -> xychart.XYSeriesConfig:
        return (
            xychart.XYSeriesConfig()
            .frame(frame0)
            .x(xychart.XychartXYSeriesConfigX().matcher(by_name("Gbit/s")))
            .y(xychart.XychartXYSeriesConfigY().matcher(by_name(y)))
        )

    return (
        xychart.Panel()
        .title("Watts against Gbit/s (line: the run's fit)")
        .description(
            "Each point is one moment of the time range: the site's Gbit/s (its larger "
            "direction) and its watts. The line is the least-squares fit over the moments the "
            "picked run was active: where it meets 0 Gbit/s, the idle watts; its slope, the "
            "marginal joules per gigabit (wattbit report gives both in figures)."
        )
        .datasource(DS)
        .unit("watt")
        .span(14)
        .height(14)
        .mapping(xy.SeriesMapping.MANUAL)
        .series([series("watts"), series("fit")])
        .point_size(xychart.XychartFieldConfigPointSize().fixed(7))
        .legend(
            VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
        .with_target(q(SITE_BITS, "Gbit/s", "A"))
        .with_target(q("site:wattbit_power_watts:sum", "watts", "B"))
        .with_target(q(FIT_LINE, "fit", "C"))
        .with_transformation(
            DataTransformerConfig(
                id_val="joinByField", options={"byField": "Time", "mode": "outer"}
            )
        )
        .override_by_name("Gbit/s", [DynamicConfigValue(id_val="unit", value="bps")])
        .override_by_name(
            "fit",
            [
                DynamicConfigValue(id_val="custom.show", value="lines"),
                DynamicConfigValue(id_val="custom.lineWidth", value=4),
            ],
        )
    )


def wall() -> Dashboard:
    d = base(
        "wattbit-wall",
        "wattbit / Wall",
        "For a screen in the room during a demo: Gbit/s, watts, joules per gigabit, disks.",
    )
    d = d.time("now-15m", "now").refresh("5s")
    d = d.with_variable(var("device", "Device", DEVICE_VAR_QUERY))
    d = d.with_variable(var("run", "Run", RUN_VAR_QUERY).multi(False).include_all(False))
    d = d.with_panel(
        big("Gbit/s", "bps", SITE_BITS, "blue",
            "The site's traffic, its larger direction, over $__rate_interval.")
    )  # fmt: skip
    d = d.with_panel(
        big("Site watts", "watt", "site:wattbit_power_watts:sum", "orange",
            "Every PDU's unit reading, or the sum of its outlets.")
    )  # fmt: skip
    d = d.with_panel(
        big("J/Gbit", "suffix: J/Gbit", SITE_JPG, "green",
            "Site watts over site Gbit/s, both over $__rate_interval; none below 0.01 Gbit/s.")
    )  # fmt: skip
    d = d.with_panel(
        big("Disks busy", "percentunit", f"avg({DISK_BUSY})", "purple",
            "The mean busy fraction of the selected disks (iostat %util).")
    )  # fmt: skip
    d = d.with_panel(scatter())
    busy = bars("Busy per disk", "percentunit", DISK_BUSY, "{{host}} {{device}}", w=10)
    d = d.with_panel(
        busy.height(14)
        .max(1)
        .text(VizTextDisplayOptions().title_size(22).value_size(36))
        .description("Fraction of the last $__rate_interval each disk had a request in flight.")
    )
    d = d.with_panel(run_picker().height(5))
    # what limits it: one table, a row per host (the Wall stays at a few panels)
    d = d.with_panel(limits_table(h=5))
    return wall_transfers(d)


def wall_transfers(d: Dashboard) -> Dashboard:
    """The Streaming dashboard's Transfers, cut to the Wall's size: the 5 busiest flows' bit/s
    in big bars, and the same flows with what limits them (window, send buffer) and srtt."""
    rates = bars(
        "Flow rates",
        "bps",
        f"topk(5, {FLOW_BITS})",
        "{{host}} → {{peer}}:{{port}} {{process}}",
        "The 5 busiest flow keys' bit/s (sent and received) over $__rate_interval.",
        w=10,
    )
    d = d.with_panel(rates.height(7).text(VizTextDisplayOptions().title_size(18).value_size(36)))
    return d.with_panel(top_flows(k=5, w=14, h=7))


DASHBOARDS = {
    "wall": wall,
    "streaming": streaming,
    "disks": disks,
    "power": power,
    "network": network,
}


# ---- output ---------------------------------------------------------------------------------


def build_all() -> dict[str, dict[str, Any]]:
    """{file stem: dashboard JSON (as a dict)}."""
    out = {}
    for name, fn in DASHBOARDS.items():
        doc = json.loads(JSONEncoder(sort_keys=True).encode(fn().build()))
        for ann in doc.get("annotations", {}).get("list", []):
            if ann.get("expr") == RUN_ANNOTATION_EXPR:
                ann.update(RUN_ANNOTATION_EXTRA)
        for panel in doc.get("panels", []):
            # Grafana runs its XY chart migration on a panel without a pluginVersion and
            # would read these options as the old (pre-11) format; the SDK sets none.
            if panel.get("type") == "xychart":
                panel["pluginVersion"] = XYCHART_PLUGIN_VERSION
        out[name] = doc
    return out


def render_json(doc: dict[str, Any]) -> str:
    """The committed byte form: sorted keys, 2-space indent, final newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_all(out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, doc in build_all().items():
        path = out / f"{name}.json"
        path.write_text(render_json(doc))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="output directory")
    args = ap.parse_args(argv)
    for p in write_all(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
