"""Write a report as JSON, Markdown and self-contained HTML (charts as embedded PNGs)."""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from .analyse import Result
from .document import RESOURCES, DiskSummary, LimitedBy, Report, Scope
from .power import BMC_KINDS, HostPower
from .verdict import left_out

T = TypeVar("T")

# --- formatting ---------------------------------------------------------------------------


def num(v: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits (thousands kept whole); "—" for None."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, bool):
        return str(v)
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 10**digits:
        return f"{v:,.0f}".replace(",", " ")
    return f"{v:.{digits}g}"


def si(v: Any, unit: str, base: float = 1000.0) -> str:
    """``12.3 kJ`` style; "—" for None."""
    if v is None:
        return "—"
    v = float(v)
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(v) < base or prefix == "P":
            return f"{num(v)} {prefix}{unit}"
        v /= base
    return f"{num(v)} {unit}"  # pragma: no cover


def pct(v: Any) -> str:
    """A ratio as a percentage; "—" for None."""
    return "—" if v is None else f"{float(v) * 100:.1f} %"


def seconds(v: Any) -> str:
    """A duration as ``1h 02m 03s``."""
    if v is None:
        return "—"
    s = round(float(v))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h {m:02d}m {sec:02d}s" if h else f"{m}m {sec:02d}s" if m else f"{sec}s"


def matched(match: dict[str, str]) -> str:
    """`` (series with site="a")`` for --match's labels, nothing without."""
    if not match:
        return ""
    return " (series with " + ", ".join(f'{k}="{v}"' for k, v in sorted(match.items())) + ")"


def safe_name(name: str) -> str:
    """A run name usable as a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "report"


def finite(obj: T) -> T:
    """The document (typed or JSON) with NaN and infinities replaced by None (JSON has neither).

    In a typed document a float field may then hold None; every formatter here shows it as "—".
    """
    return _finite(obj)  # type: ignore[no-any-return]


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if is_dataclass(obj) and not isinstance(obj, type):
        return replace(obj, **{f.name: _finite(getattr(obj, f.name)) for f in fields(obj)})
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


# --- tables -------------------------------------------------------------------------------

SCOPE_COLUMNS: list[tuple[str, Callable[[Scope], Any], Callable[[Any], str]]] = [
    ("energy", lambda s: s.energy_joules, lambda v: si(v, "J")),
    ("source", lambda s: s.energy_source, str),
    ("W mean", lambda s: s.watts_mean, num),
    ("sent", lambda s: s.bytes_tx, lambda v: si(v, "B")),
    ("received", lambda s: s.bytes_rx, lambda v: si(v, "B")),
    ("Gbit/s mean", lambda s: s.gbit_per_second_mean, num),
    ("Gbit/s peak", lambda s: s.gbit_per_second_peak, num),
    ("J/Gbit", lambda s: s.joules_per_gigabit, num),
    ("idle W", lambda s: s.idle_watts, num),
    ("marginal J/Gbit", lambda s: s.marginal_joules_per_gigabit, num),
    ("r²", lambda s: s.r_squared, num),
    ("Pearson r", lambda s: s.pearson_r, num),
    ("lag s", lambda s: s.lag_seconds, num),
    ("coverage", lambda s: s.coverage, pct),
]


def scope_rows(doc: Report) -> list[tuple[str, Scope]]:
    """(label, scope) for the site, every host and every component."""
    rows = [("site", doc.site)]
    rows += [(f"host {h}", d) for h, d in doc.hosts.items()]
    rows += [(f"component {c}", d) for c, d in doc.components.items()]
    return rows


def table_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the summary table."""
    head = ["scope", "duration"] + [c[0] for c in SCOPE_COLUMNS]
    body = []
    for label, d in scope_rows(doc):
        row = [label, seconds(d.duration_seconds)]
        row += [fmt(get(d)) if get(d) is not None else "—" for _, get, fmt in SCOPE_COLUMNS]
        body.append(row)
    return head, body


def disk_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Per-disk table: busy ratio and throughput."""
    head = ["host", "device", "busy", "busy peak", "read", "write", "read MB/s", "write MB/s",
            "coverage"]  # fmt: skip
    body = []
    for h, hd in doc.hosts.items():
        for dev, d in hd.disks.items():
            b = d.bytes
            m = d.bytes_per_second_mean
            body.append(
                [
                    h,
                    dev,
                    pct(d.busy_ratio),
                    pct(d.busy_ratio_peak),
                    si(b.get("read"), "B"),
                    si(b.get("write"), "B"),
                    num(m["read"] / 1e6) if "read" in m else "—",
                    num(m["write"] / 1e6) if "write" in m else "—",
                    pct(d.coverage),
                ]
            )
    return head, body


def outlet_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Per-outlet table."""
    head = ["pdu", "outlet", "name", "host", "component", "energy", "source", "resets",
            "peak W", "coverage"]  # fmt: skip
    body = [
        [
            o.pdu,
            o.outlet,
            o.outlet_name,
            o.host or "—",
            o.component or "—",
            si(o.energy_joules, "J"),
            o.energy_source,
            num(o.energy_counter_resets),
            num(o.watts_peak),
            pct(o.coverage),
        ]
        for o in doc.outlets
    ]
    return head, body


def power_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Per host: the source of its energy, each source's mean watts, the BMC against the PDU,
    and RAPL's share of the host's energy (collector/report/power.py)."""
    head = ["host", "energy from", "outlets W", "PDU/bank/phase W", "BMC W", "BMC − PDU W",
            "BMC/PDU", "RAPL W", "RAPL share"]  # fmt: skip

    def w(p: HostPower, kind: str | None) -> str:
        s = p.sources.get(kind or "")
        return num(s.watts_mean) if s else ""

    body = []
    for h, p in doc.power.items():
        bmc = next((k for k in BMC_KINDS if k in p.sources), None)
        r = p.reconciliation
        body.append(
            [
                h,
                p.source or "none",
                w(p, "outlets"),
                w(p, "pdu"),
                f"{w(p, bmc)} ({bmc})" if bmc else "",
                f"{r.difference_watts:+.0f}" if r else "",
                (num(r.ratio) + (" — disagree" if r.disagree else "")) if r else "",
                num(p.rapl.watts_mean) if p.rapl else "",
                pct(p.rapl.share) if p.rapl and p.rapl.share is not None else "",
            ]
        )
    return head, body


POWER_NOTE = (
    "A host's energy comes from one source, the first it has of: its metered outlets, a PDU, "
    "bank or phase mapped to it, its BMC (Redfish, then IPMI). Where it has a PDU's and a "
    "BMC's, both are shown; they disagree when they differ by more than 20 W and 10 % "
    "(WattbitPowerSourcesDisagree). RAPL (CPU packages and DRAM) is never a host's energy: "
    "its share of it is shown."
)


def transfer_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Per host and flow key: bytes, Gbit/s, limit, share of the host's active energy, J/Gbit."""
    head = ["host", "flow key", "sent", "received", "Gbit/s", "limit", "share of bytes",
            "active energy", "J/Gbit", "host idle energy (kept apart)"]  # fmt: skip
    body = [
        [
            t.host,
            t.key,
            si(t.bytes_sent, "B"),
            si(t.bytes_received, "B"),
            num(t.gbit_per_second),
            t.limit,
            pct(t.share_of_bytes),
            si(t.active_joules, "J") if t.active_joules is not None else "",
            num(t.joules_per_gigabit),
            si(t.host_idle_joules, "J") if t.host_idle_joules is not None else "",
        ]
        for t in doc.transfers
    ]
    return head, body


TRANSFERS_NOTE = (
    "Per flow key of the agents' tcp exporter: a host's active energy (its energy less its "
    "idle watts × the window) is split among its keys by the bytes each moved; the idle "
    "energy is attributed to no key. limit: what TCP recorded (receive_window, send_buffer, "
    "congestion at 70 % or more of busy time), application (TCP sat waiting for data), "
    "receiving (judged at the sender), none. Methods: docs/report.md#transfers."
)


def transfer_lines(doc: Report) -> list[str]:
    """One summary line per flow key."""
    return [
        f"  transfer {t.host} {t.key}: {si(t.bytes_sent + t.bytes_received, 'B')}, "
        f"{num(t.gbit_per_second)} Gbit/s, limit {t.limit}, {pct(t.share_of_bytes)} of the "
        f"bytes, {si(t.active_joules, 'J') if t.active_joules is not None else '? J'} active "
        f"({num(t.joules_per_gigabit)} J/Gbit)"
        for t in doc.transfers
    ]


def power_lines(doc: Report) -> list[str]:
    """One summary line per host with more than one source, or with RAPL."""
    lines = []
    for h, p in doc.power.items():
        r = p.reconciliation
        if r is None and p.rapl is None:
            continue
        parts = [f"energy from {p.source or 'none'}"]
        if r is not None:
            parts.append(
                f"{r.bmc_source} BMC {num(r.bmc_watts_mean)} W vs {r.pdu_source} "
                f"{num(r.pdu_watts_mean)} W (BMC/PDU {num(r.ratio)}"
                f"{', disagree' if r.disagree else ''})"
            )
        if p.rapl is not None:
            parts.append(f"RAPL {num(p.rapl.watts_mean)} W ({pct(p.rapl.share)} of it)")
        lines.append(f"  power of {h}: " + "; ".join(parts))
    return lines


def source_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Coverage per source."""
    head = ["source", "series", "scrape interval", "coverage", "longest gap"]
    body = [
        [
            src,
            str(s.series),
            num(s.interval_seconds) + " s",
            pct(s.coverage),
            seconds(s.longest_gap_seconds),
        ]
        for src, s in doc.sources.items()
    ]
    return head, body


def compare_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """Two runs side by side (the report must have a comparison)."""
    cmp = doc.compare
    assert cmp is not None
    head = ["scope", "figure", doc.run, cmp.run, "change"]
    body = []
    scopes = [("site", cmp.site)]
    scopes += [(f"host {h}", v) for h, v in cmp.hosts.items()]
    scopes += [(f"component {c}", v) for c, v in cmp.components.items()]
    for label, rows in scopes:
        for key, r in rows.items():
            ch = r.change
            body.append(
                [
                    label,
                    key,
                    num(r.this, 4),
                    num(r.other, 4),
                    "—" if ch is None else f"{ch * 100:+.1f} %",
                ]
            )
    return head, body


def busy_sentence(s: DiskSummary | None) -> str | None:
    """'4 disks were 96 % busy on average (min 94 %, max 98 % on sdc)'; None without busy time."""
    if s is None or s.busiest is None:
        return None
    assert s.busy_ratio_mean is not None
    assert s.busy_ratio_min is not None and s.busy_ratio_max is not None
    n = s.devices
    return (
        f"{'1 disk was' if n == 1 else f'{n} disks were'} {s.busy_ratio_mean * 100:.0f} % "
        f"busy on average (min {s.busy_ratio_min * 100:.0f} %, max "
        f"{s.busy_ratio_max * 100:.0f} % on {s.busiest})"
    )


def idle_origin(s: Scope) -> str:
    """Where a scope's idle watts come from, in a few words."""
    if s.idle_watts_source == "idle_phases":
        return f"idle phases, {s.idle_steps} steps"
    return "fit"


def phase_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """The runs marked as phases of this one, with the site's figures over each."""
    head = ["run", "phase", "start", "duration", "steps", "Gbit/s mean", "W mean"]
    body = [
        [
            p.run,
            p.phase,
            p.start_iso,
            seconds(p.duration_seconds),
            str(p.steps),
            num(p.gbit_per_second_mean),
            num(p.watts_mean),
        ]
        for p in doc.phases
    ]
    return head, body


def verdict_line(lb: LimitedBy | None) -> str | None:
    """'disk nvme0n1 (96 %): disk nvme0n1 96 % busy; ...: disk-bound'; None without one."""
    if lb is None:
        return None
    if lb.resource == "none":
        return f"none: {lb.evidence}"
    who = f" {lb.subject}" if lb.subject else ""
    return f"{lb.resource}{who} ({pct(lb.utilisation)}): {lb.evidence}"


def limits_cells(doc: Report) -> tuple[list[str], list[list[str]]]:
    """What limited each host, over the whole window and in each phase."""
    head = ["host", "steps of", "limited by", "subject", "utilisation", "evidence"]
    body: list[list[str]] = []
    for h, hd in doc.hosts.items():
        rows = [("whole window", hd.limited_by)]
        rows += [(f"phase {p.run}", p.limited_by.get(h)) for p in doc.phases]
        for where, lb in rows:
            if lb is not None:
                body.append(
                    [h, where, lb.resource, lb.subject or "", pct(lb.utilisation), lb.evidence]
                )
    return head, body


def energy_sentence(doc: Report) -> str | None:
    """'31 % of the 12.4 kJ was idle power; at demo-full's 16.2 J/Gbit the data would have
    cost 3.1 kJ'; None without energy."""
    v = doc.energy_view
    if v is None or v.energy_joules is None:
        return None
    parts = []
    if v.idle_share is not None:
        parts.append(
            f"{pct(v.idle_share)} of the site's {si(v.energy_joules, 'J')} was idle power "
            f"({si(v.idle_joules, 'J')})"
        )
    else:
        parts.append(f"the site drew {si(v.energy_joules, 'J')} (no idle watts known)")
    if v.joules_at_best_phase is not None:
        parts.append(
            f"at the best phase's {num(v.best_phase_joules_per_gigabit)} J/Gbit "
            f"({v.best_phase}) the data would have cost {si(v.joules_at_best_phase, 'J')}"
        )
    return "; ".join(parts)


LIMITS_NOTE = (
    "Utilisation over the steps in which the host moved data (NICs ≥ 10 Mbit/s or disks ≥ "
    "1 MB/s): disks busy; controllers against their PCIe link, or their busy disks' wait when "
    "those move under 85 % of what each moved alone; PCIe links against their usable bytes/s; "
    "NICs each way against their link speed; the busiest CPU moving data; TCP retransmits "
    "against 1 %. Below 70 % nothing limited it: none. Methods: docs/report.md."
)


IDLE_NOTE = (
    "Idle W: the median of the watts of the steps inside idle phases when the run has them "
    "(docs/report.md), else the intercept of the least-squares line of watts on Gbit/s per "
    "step; marginal J/Gbit is that line's slope (through the measured idle watts when there "
    "are idle phases)."
)

# --- summary ------------------------------------------------------------------------------


def summary_lines(doc: Report) -> list[str]:
    """The few lines printed after a report is written."""
    w = doc.window
    lines = [
        f"run {doc.run}: {w.start_iso} → {w.end_iso} ({seconds(w.duration_seconds)}"
        f"), step {num(doc.step_seconds)} s{matched(doc.match)}"
    ]
    for label, d in scope_rows(doc):
        parts = []
        if d.gigabits is not None:
            parts.append(
                f"{si((d.bytes_tx or 0) + (d.bytes_rx or 0), 'B')} moved, "
                f"{num(d.gbit_per_second_mean)} Gbit/s mean, "
                f"{num(d.gbit_per_second_peak)} peak"
            )
        if d.energy_joules is not None:
            parts.append(
                f"{si(d.energy_joules, 'J')} ({d.energy_source}), {num(d.watts_mean)} W mean"
            )
        if d.joules_per_gigabit is not None:
            parts.append(f"{num(d.joules_per_gigabit)} J/Gbit")
        if d.idle_watts is not None:
            parts.append(
                f"idle {num(d.idle_watts)} W ({idle_origin(d)}) + "
                f"{num(d.marginal_joules_per_gigabit)} J/Gbit (r² {num(d.r_squared)}), "
                f"r {num(d.pearson_r)}, lag {num(d.lag_seconds)} s"
            )
        lines.append(f"  {label}: " + ("; ".join(parts) or "no data"))
    for p in doc.phases:
        lines.append(
            f"  phase {p.run} ({p.phase}): {seconds(p.duration_seconds)}, "
            f"{num(p.gbit_per_second_mean)} Gbit/s mean, {num(p.watts_mean)} W mean"
        )
    lines += power_lines(doc)
    for h, hd in doc.hosts.items():
        sentence = busy_sentence(hd.disk_summary)
        if sentence is not None and hd.disk_summary is not None:
            mb = sum(hd.disk_summary.bytes_per_second_mean.values()) / 1e6
            lines.append(f"  disks of {h}: {sentence}, {num(mb)} MB/s")
    for h, hd in doc.hosts.items():
        if (line := verdict_line(hd.limited_by)) is not None:
            lines.append(f"  limited {h}: {line}")
        for p in doc.phases:
            if (line := verdict_line(p.limited_by.get(h))) is not None:
                lines.append(f"    in {p.run}: {line}")
    lines += transfer_lines(doc)
    if (energy := energy_sentence(doc)) is not None:
        lines.append(f"  energy: {energy}")
    if doc.compare is not None:
        c = doc.compare.site
        jpg, gbps = c["joules_per_gigabit"], c["gbit_per_second_mean"]
        lines.append(
            f"  vs {doc.compare.run}: site J/Gbit {num(jpg.other)} → {num(jpg.this)}, Gbit/s "
            f"{num(gbps.other)} → {num(gbps.this)}"
        )
    lines += [f"WARNING: {w}" for w in doc.warnings]
    return lines


# --- Markdown -----------------------------------------------------------------------------


def _md_table(head: list[str], body: list[list[str]]) -> str:
    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return "\n".join(out)


def markdown(doc: Report, html_name: str) -> str:
    """The Markdown report (tables; the charts are in the HTML one)."""
    w = doc.window
    parts = [
        f"# wattbit report: {doc.run}",
        "",
        f"Window {w.start_iso} → {w.end_iso} ({seconds(w.duration_seconds)}, from "
        f"{'the run registry' if w.source == 'run' else '--start/--end'}), analysis step "
        f"{num(doc.step_seconds)} s, Prometheus {doc.prometheus}{matched(doc.match)}. "
        f"Charts: [{html_name}]({html_name}).",
        "",
    ]
    if doc.warnings:
        parts += ["## Warnings", ""] + [f"* **{x}**" for x in doc.warnings] + [""]
    parts += ["## Summary", "", _md_table(*table_cells(doc)), ""]
    parts += [
        "Bits are (tx + rx) bytes × 8 of every interface each host's agent exports; traffic "
        "between two monitored hosts counts at both. J/Gbit = energy ÷ those gigabits. "
        + IDLE_NOTE
        + " Methods: docs/report.md.",
        "",
    ]
    if doc.power:
        parts += ["## Power sources", "", _md_table(*power_cells(doc)), "", POWER_NOTE, ""]
    if doc.phases:
        parts += ["## Phases", "", _md_table(*phase_cells(doc)), ""]
    head, body = limits_cells(doc)
    if body:
        parts += ["## What limited it", "", _md_table(head, body), "", LIMITS_NOTE, ""]
    if doc.transfers:
        parts += ["## Transfers", "", _md_table(*transfer_cells(doc)), "", TRANSFERS_NOTE, ""]
    if (energy := energy_sentence(doc)) is not None:
        parts += ["## Energy", "", energy[0].upper() + energy[1:] + ".", ""]
    head, body = disk_cells(doc)
    if body:
        parts += ["## Disks", ""]
        for h, hd in doc.hosts.items():
            sentence = busy_sentence(hd.disk_summary)
            if sentence is not None:
                parts.append(f"* {h}: {sentence}")
        parts += ["", _md_table(head, body), ""]
    parts += ["## Outlets", "", _md_table(*outlet_cells(doc)), ""]
    parts += ["## Coverage by source", "", _md_table(*source_cells(doc)), ""]
    if doc.compare is not None:
        parts += [f"## Compared with {doc.compare.run}", ""]
        parts += [_md_table(*compare_cells(doc)), ""]
    return "\n".join(parts)


# --- charts -------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


MAX_LINE_POINTS = 1200  # a chart is ~900 px wide: more points draw nothing more
MAX_SCATTER_POINTS = 3000


def _minutes(result: Result) -> list[float]:
    g = result.grid
    return [(t - g.start) / 60 for t in g.edges[1:]]


def decimate(
    x: Sequence[float], *series: Sequence[float | None], max_points: int = MAX_LINE_POINTS
) -> tuple[list[float], ...]:
    """Average consecutive points into at most ``max_points`` buckets (NaN where all missing).

    Keeps the drawing cost of a 24-hour line at 1 s the same as a short run's; a bucket with
    no value stays a gap in the line.
    """
    n = len(x)
    per = max(1, math.ceil(n / max_points))
    xs: list[float] = []
    outs: list[list[float]] = [[] for _ in series]
    for i in range(0, n, per):
        xs.append(x[min(n - 1, i + per // 2)])
        for out, s in zip(outs, series, strict=True):
            vals = [v for v in s[i : i + per] if v is not None]
            out.append(math.fsum(vals) / len(vals) if vals else math.nan)
    return (xs, *outs)


def _shade_gaps(ax: Any, x: Sequence[float], *series: Sequence[float]) -> None:
    """Grey bands where any of the series has no data."""
    if len(x) < 2:
        return
    half = (x[1] - x[0]) / 2
    start = None
    for i, _ in enumerate([*x, math.nan]):
        missing = i < len(x) and any(math.isnan(s[i]) for s in series)
        if missing and start is None:
            start = i
        elif not missing and start is not None:
            ax.axvspan(x[start] - half, x[i - 1] + half, color="#999", alpha=0.2, lw=0)
            start = None


PHASE_COLOURS = {"idle": "#2ca02c"}  # other phases share one colour


def _mark_phases(ax: Any, result: Result) -> None:
    """A faint band and the run's name over each phase."""
    start = result.grid.start
    for p in result.doc.phases:
        a, b = (p.start - start) / 60, (p.end - start) / 60
        ax.axvspan(a, b, color=PHASE_COLOURS.get(p.phase, "#ff7f0e"), alpha=0.08, lw=0)
        ax.text((a + b) / 2, 0.98, p.run, transform=ax.get_xaxis_transform(), ha="center",
                va="top", fontsize=6, color="#555")  # fmt: skip


def chart_timeline(result: Result, key: str, title: str) -> str:
    """Gbit/s and watts of one scope against time."""
    plt = _plt()
    tl = result.timelines[key]
    x, gbps, watts = decimate(_minutes(result), tl.gbps, tl.watts)
    fig, ax = plt.subplots(figsize=(11, 3.2))
    _shade_gaps(ax, x, gbps, watts)
    _mark_phases(ax, result)
    ax.plot(x, gbps, color="#1f77b4", lw=1, label="Gbit/s")
    ax.set_xlabel("minutes from start")
    ax.set_ylabel("Gbit/s", color="#1f77b4")
    ax2 = ax.twinx()
    ax2.plot(x, watts, color="#d62728", lw=1, label="W")
    ax2.set_ylabel("W", color="#d62728")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.06, right=0.93, top=0.89, bottom=0.16)
    return _png(fig)


def chart_scatter(
    result: Result, key: str, scope: Scope, title: str, other: Result | None = None
) -> str:
    """Watts against Gbit/s per step, with the least-squares line."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    series: list[tuple[Result, Scope | None, str, str]] = [
        (result, scope, "#1f77b4", result.doc.run)
    ]
    if other is not None and key in other.timelines:
        # only the site's line of the other run is drawn: its hosts' scopes are not passed
        series.append((other, other.doc.site if key == "site" else None, "#ff7f0e", other.doc.run))
    for res, sc, color, label in series:
        tl = res.timelines[key]
        pts = [
            (g, w)
            for g, w in zip(tl.gbps, tl.watts, strict=True)
            if g is not None and w is not None
        ]
        pts = pts[:: max(1, math.ceil(len(pts) / MAX_SCATTER_POINTS))]
        if pts:
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax.scatter(xs, ys, s=6, alpha=0.5, color=color, label=label)
        a = sc.idle_watts if sc else None
        b = sc.marginal_joules_per_gigabit if sc else None
        if pts and sc and a is not None and b is not None:
            ends = [0.0, max(p[0] for p in pts)]
            fit = f"{num(a)} W + {num(b)} J/Gbit (r² {num(sc.r_squared)})"
            ax.plot(ends, [a + b * x for x in ends], color=color, lw=1.5, label=fit)
    ax.set_xlabel("Gbit/s")
    ax.set_ylabel("W")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(left=0.14, right=0.97, top=0.91, bottom=0.14)
    return _png(fig)


def chart_disks(result: Result, host: str) -> str | None:
    """Busy % of a host's disks against time (a band for many disks)."""
    busy = result.disk_busy.get(host) or {}
    if not busy:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 2.8))
    if len(busy) <= 12:
        x, *lines = decimate(_minutes(result), *busy.values())
        for dev, vals in zip(busy, lines, strict=True):
            ax.plot(x, [v * 100 for v in vals], lw=1, label=dev)
        ax.legend(fontsize=7, ncol=6, loc="lower right")
    else:
        cols = list(zip(*busy.values(), strict=True))
        lo_, hi_, mean_ = [], [], []
        for c in cols:
            vals = [v for v in c if v is not None]
            lo_.append(min(vals) if vals else None)
            hi_.append(max(vals) if vals else None)
            mean_.append(math.fsum(vals) / len(vals) if vals else None)
        x, lo, hi, mean = decimate(_minutes(result), lo_, hi_, mean_)
        lo, hi, mean = ([v * 100 for v in s] for s in (lo, hi, mean))
        ax.fill_between(x, lo, hi, alpha=0.3, label="min–max")
        ax.plot(x, mean, lw=1, label=f"mean of {len(busy)} disks")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_ylim(0, 105)
    ax.set_ylabel("busy %")
    ax.set_xlabel("minutes from start")
    ax.set_title(f"disks of {host}")
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.18)
    return _png(fig)


def chart_left_out(result: Result, host: str) -> dict[tuple[str, str], str]:
    """The subjects the host's verdict left out (a NIC or link that moved more than its stated
    capacity: that capacity is wrong), with the evidence's words: never drawn, since their
    utilisation against a wrong capacity would show as 100 % (the series are capped)."""
    if result.usage is None:
        return {}
    return left_out(result.usage, host, range(result.grid.n))


def resource_lines(result: Result, host: str) -> dict[str, list[float | None]]:
    """Per resource, the utilisation of its busiest subject in each step (the chart's lines),
    of the subjects the verdict judged (chart_left_out)."""
    if result.usage is None:
        return {}
    out: dict[str, list[float | None]] = {}
    skip = chart_left_out(result, host)
    for (res, subj), b in sorted(result.usage.util.get(host, {}).items()):
        if (res, subj) in skip:
            continue
        line = out.setdefault(res, [None] * len(b))
        for k, v in enumerate(b):
            if v is not None:
                line[k] = v if line[k] is None else max(v, line[k] or 0.0)
    return {r: out[r] for r in RESOURCES if r in out}


def chart_limits(result: Result, host: str) -> str | None:
    """Every resource's utilisation against time, the 70 % line, and the phases."""
    lines = resource_lines(result, host)
    if not lines:
        return None
    plt = _plt()
    x, *ys = decimate(_minutes(result), *lines.values())
    fig, ax = plt.subplots(figsize=(11, 2.8))
    for res, vals in zip(lines, ys, strict=True):
        ax.plot(x, [v * 100 for v in vals], lw=1, label=res)
    ax.axhline(70, color="#999", lw=0.8, ls="--")
    _mark_phases(ax, result)
    ax.set_ylim(0, 105)
    ax.set_ylabel("utilisation %")
    ax.set_xlabel("minutes from start")
    ax.set_title(f"{host}: utilisation of every resource (busiest subject of each)")
    ax.legend(fontsize=7, ncol=6, loc="lower right")
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.18)
    return _png(fig)


def chart_components(result: Result) -> str | None:
    """Watts of every component against time."""
    keys = [k for k in result.timelines if k.startswith("component:")]
    if not keys:
        return None
    plt = _plt()
    x, *lines = decimate(_minutes(result), *(result.timelines[k].watts for k in keys))
    fig, ax = plt.subplots(figsize=(11, 2.8))
    for k, vals in zip(keys, lines, strict=True):
        ax.plot(x, vals, lw=1, label=k.split(":", 1)[1])
    ax.set_ylabel("W")
    ax.set_xlabel("minutes from start")
    ax.set_title("watts by component")
    ax.legend(fontsize=7, ncol=6, loc="lower right")
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.18)
    return _png(fig)


# --- HTML ---------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
.warn { background: #fff0f0; border: 1px solid #d33; padding: 8px 12px; color: #900; }
.charts img { display: block; margin: 6px 0; max-width: 100%; }
.note { color: #555; font-size: 12px; }
"""


def _html_table(head: list[str], body: list[list[str]]) -> str:
    e = html.escape
    rows = ["<tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    rows += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in body]
    return "<table>" + "".join(rows) + "</table>"


def _img(png: str | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img class="chart" alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'


def html_report(result: Result, other: Result | None = None) -> str:
    """The self-contained HTML report."""
    doc = result.doc
    e = html.escape
    w = doc.window
    out = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>wattbit report: {e(doc.run)}</title><style>{CSS}</style></head><body>",
        f"<h1>wattbit report: {e(doc.run)}</h1>",
        f"<p>{e(w.start_iso)} → {e(w.end_iso)} ({e(seconds(w.duration_seconds))}); "
        f"analysis step {e(num(doc.step_seconds))} s; Prometheus {e(doc.prometheus)}"
        f"{e(matched(doc.match))}</p>",
    ]
    if doc.warnings:
        out.append(
            '<div class="warn"><b>Warnings</b><ul>'
            + "".join(f"<li>{e(x)}</li>" for x in doc.warnings)
            + "</ul></div>"
        )
    out += ["<h2>Summary</h2>", _html_table(*table_cells(doc))]
    out.append(
        '<p class="note">Bits: (tx + rx) bytes × 8 of every interface each host\'s agent '
        "exports (traffic between two monitored hosts counts at both). J/Gbit = energy ÷ "
        "those gigabits. " + e(IDLE_NOTE) + " r²: of that line; lag: the shift (positive: "
        "power follows traffic) that maximises Pearson's r.</p>"
    )
    if doc.power:
        out += ["<h2>Power sources</h2>", _html_table(*power_cells(doc))]
        out.append(f'<p class="note">{e(POWER_NOTE)}</p>')
    if doc.phases:
        out += ["<h2>Phases</h2>", _html_table(*phase_cells(doc))]
    head, body = limits_cells(doc)
    if body:
        out += ["<h2>What limited it</h2>", _html_table(head, body)]
        out.append(f'<p class="note">{e(LIMITS_NOTE)}</p>')
    if doc.transfers:
        out += ["<h2>Transfers</h2>", _html_table(*transfer_cells(doc))]
        out.append(f'<p class="note">{e(TRANSFERS_NOTE)}</p>')
    if (energy := energy_sentence(doc)) is not None:
        out += ["<h2>Energy</h2>", f"<p>{e(energy[0].upper() + energy[1:])}.</p>"]
    out.append('<div class="charts">')
    out.append("<h2>Site</h2>")
    out.append(_img(chart_timeline(result, "site", "site: Gbit/s and W"), "site timeline"))
    out.append(
        _img(chart_scatter(result, "site", doc.site, "site: W vs Gbit/s", other), "site fit")
    )
    out.append(_img(chart_components(result), "watts by component"))
    for h, hd in doc.hosts.items():
        out.append(f"<h2>Host {e(h)}</h2>")
        key = "host:" + h
        out.append(_img(chart_timeline(result, key, f"{h}: Gbit/s and W"), f"{h} timeline"))
        if hd.idle_watts is not None:
            out.append(_img(chart_scatter(result, key, hd, f"{h}: W vs Gbit/s"), f"{h} fit"))
        sentence = busy_sentence(hd.disk_summary)
        if sentence is not None:
            out.append(f"<p>{e(sentence)}.</p>")
        out.append(_img(chart_disks(result, h), f"{h} disks"))
        out.append(_img(chart_limits(result, h), f"{h} utilisation of every resource"))
        skipped = chart_left_out(result, h)
        if skipped:
            why = "; ".join(skipped[k] for k in sorted(skipped))
            out.append(
                f'<p class="note">Not in the utilisation chart, as in the verdict: {e(why)}.</p>'
            )
    out.append("</div>")
    head, body = disk_cells(doc)
    if body:
        out += ["<h2>Disks</h2>", _html_table(head, body)]
    out += ["<h2>Outlets</h2>", _html_table(*outlet_cells(doc))]
    out += ["<h2>Coverage by source</h2>", _html_table(*source_cells(doc))]
    if doc.compare is not None:
        out += [f"<h2>Compared with {e(doc.compare.run)}</h2>"]
        out += [_html_table(*compare_cells(doc))]
    out.append("</body></html>")
    return "\n".join(out)


def _replace(path: Path, text: str) -> None:
    """Write ``path`` as a new file (temporary file in its directory, then os.replace).

    A symlink planted at ``path`` is replaced by the file, never written through: ``--out``
    may be a shared directory. Mode 0644: a report is meant to be read by others.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write(result: Result, out_dir: Path, other: Result | None = None) -> list[Path]:
    """Write ``RUN.json``, ``RUN.md`` and ``RUN.html`` into ``out_dir`` (see _replace)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = safe_name(result.doc.run)
    pj, pm, ph = (out_dir / f"{base}.{ext}" for ext in ("json", "md", "html"))
    _replace(pj, json.dumps(finite(result.doc.to_json()), indent=2, allow_nan=False) + "\n")
    # the Markdown is made from the finite document and the HTML from the document as
    # computed, as they always were: the same in every case but a NaN or infinite energy
    _replace(pm, markdown(finite(result.doc), ph.name))
    _replace(ph, html_report(result, other))
    return [pj, pm, ph]
