"""Static renderings of the dashboards: every panel's query results drawn with matplotlib.

    python dashboards/render.py RESULTS.json OUTDIR

RESULTS.json is what tests/integration/test_dashboards_real.py saves (every panel query of
every dashboard run against a real Prometheus); one PNG per dashboard is written to OUTDIR
(docs/dashboards/ in the repository). This is not Grafana: it shows what each panel's queries
return, with the panel's title and unit, so a reader sees the dashboards without running one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")

# unit -> (label, [(divisor, prefix)...]) for the axis
SCALES = {
    "bps": ("bit/s", [(1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")]),
    "Bps": ("B/s", [(2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"), (1, "")]),
    "watt": ("W", [(1e3, "k"), (1, "")]),
    "joule": ("J", [(1e6, "M"), (1e3, "k"), (1, "")]),
    "s": ("s", [(1, ""), (1e-3, "m"), (1e-6, "µ")]),
    "iops": ("IO/s", [(1e3, "k"), (1, "")]),
    "pps": ("packets/s", [(1e3, "k"), (1, "")]),
    "cps": ("per s", [(1e3, "k"), (1, "")]),
}


def legend(fmt: str, metric: dict[str, str]) -> str:
    if not fmt or fmt == "__auto":
        return ",".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or "value"
    return LEGEND.sub(lambda m: metric.get(m.group(1), ""), fmt).strip()


def scale(unit: str | None, peak: float) -> tuple[float, str]:
    """(divisor, axis label) for the panel's unit and the largest value drawn."""
    if unit == "percentunit":
        return 0.01, "%"
    if unit in SCALES:
        label, steps = SCALES[unit]
        for div, prefix in steps:
            if abs(peak) >= div:
                return div, prefix + label
        return steps[-1][0], steps[-1][1] + label
    if unit and unit.startswith("suffix:"):
        return 1.0, unit.split(":", 1)[1].strip()
    return 1.0, unit or ""


def finite(v: str) -> float | None:
    x = float(v)
    return x if math.isfinite(x) else None


def draw_matrix(ax: Any, panel: dict[str, Any], start: float) -> None:
    lines = []
    for query in panel["queries"]:
        for s in query["result"]:
            pts = [(float(t) - start, finite(v)) for t, v in s["values"]]
            lines.append((legend(query["legend"], s["metric"]), pts))
    peak = max((abs(v) for _, pts in lines for _, v in pts if v is not None), default=0.0)
    div, label = scale(panel["unit"], peak)
    for name, pts in lines[:12]:
        ax.plot([t for t, _ in pts], [v / div if v is not None else math.nan for _, v in pts],
                label=name[:48], linewidth=1.2)  # fmt: skip
    ax.set_ylabel(label)
    ax.set_xlabel("seconds into the window")
    if lines:
        ax.legend(fontsize=6, loc="upper left", ncol=1 if len(lines) < 6 else 2)
    if len(lines) > 12:
        ax.text(0.99, 0.01, f"+{len(lines) - 12} more series", transform=ax.transAxes,
                ha="right", fontsize=6)  # fmt: skip


def draw_heatmap(ax: Any, panel: dict[str, Any], start: float) -> None:
    series = panel["queries"][0]["result"]
    buckets = sorted(((float(s["metric"]["le"]), s["values"]) for s in series), key=lambda b: b[0])
    if not buckets:
        return
    times = [float(t) - start for t, _ in buckets[0][1]]
    cum = [[finite(v) or 0.0 for _, v in vals][: len(times)] for _, vals in buckets]
    rows = [cum[0]] + [[max(b - a, 0.0) for a, b in zip(cum[i - 1], cum[i], strict=False)]
                       for i in range(1, len(cum))]  # fmt: skip
    used = [i for i, r in enumerate(rows) if any(r)] or [0]
    lo, hi = used[0], used[-1] + 1
    ax.imshow(rows[lo:hi], aspect="auto", origin="lower", cmap="inferno",
              extent=(times[0], times[-1], lo - 0.5, hi - 0.5))  # fmt: skip
    les = [b[0] for b in buckets]
    ticks = list(range(lo, hi, max(1, (hi - lo) // 6)))
    ax.set_yticks(ticks)
    ax.set_yticklabels(
        ["+Inf" if math.isinf(les[i]) else f"≤{les[i] * 1e6:g} µs" for i in ticks], fontsize=6
    )
    ax.set_xlabel("seconds into the window")
    ax.set_ylabel("latency bucket (requests/s: colour)")


def draw_vector(ax: Any, panel: dict[str, Any]) -> None:
    bars = []
    for query in panel["queries"]:
        for s in query["result"]:
            value = s["value"][1] if "value" in s else s["values"][-1][1]
            name = legend(query["legend"], s["metric"]) if query["legend"] else ",".join(
                f"{k}={v}" for k, v in sorted(s["metric"].items())
                if k not in ("__name__", "job", "instance")
            )  # fmt: skip
            bars.append((f"{query['refId']} {name}"[:60], finite(value)))
    if panel["unit"] == "dateTimeAsIso":
        ax.axis("off")
        text = "\n".join(
            f"{n}: {datetime.fromtimestamp(v / 1000, UTC).isoformat(timespec='seconds')}"
            for n, v in bars if v is not None
        )  # fmt: skip
        ax.text(0.0, 1.0, text, va="top", fontsize=7, family="monospace", transform=ax.transAxes)
        return
    peak = max((abs(v) for _, v in bars if v is not None), default=0.0)
    div, label = scale(panel["unit"], peak)
    names = [n for n, _ in bars][:15]
    ax.barh(names, [(v or 0.0) / div for _, v in bars][:15])
    ax.tick_params(axis="y", labelsize=6)
    ax.set_xlabel(label)
    ax.invert_yaxis()


def render_dashboard(dash: dict[str, Any], out: Path) -> Path:
    panels = dash["panels"]
    cols = 3
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 6.2, rows * 3.6), squeeze=False)
    start = dash["start"]
    run_windows = []
    for ann in dash.get("annotations", []):
        for s in ann["result"]:
            ts = [float(t) - start for t, _ in s["values"]]
            if ts:
                run_windows.append((min(ts), max(ts), s["metric"].get("run", "")))
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(panel["title"], fontsize=9)
        has_data = any(q["result"] for q in panel["queries"])
        if not has_data:
            ax.text(0.5, 0.5, "no data in this test\n(see docs/dashboards.md)", ha="center",
                    va="center", transform=ax.transAxes, fontsize=8, color="grey")  # fmt: skip
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        first = panel["queries"][0]
        if first["format"] == "heatmap":
            draw_heatmap(ax, panel, start)
        elif first["resultType"] == "matrix" and panel["type"] not in ("bargauge", "stat"):
            draw_matrix(ax, panel, start)
            for lo, hi, run in run_windows:
                ax.axvspan(lo, hi, color="orange", alpha=0.12, label=None)
                ax.text(lo, 1.0, f" run {run}", transform=ax.get_xaxis_transform(),
                        fontsize=6, va="top", color="darkorange")  # fmt: skip
        else:  # tables, bar gauges, stats: one value per series (the last, as lastNotNull)
            draw_vector(ax, panel)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    when = datetime.fromtimestamp(start, UTC).isoformat(timespec="seconds")
    fig.suptitle(f"{dash['title']} — real data, {int(dash['end'] - start)} s from {when}",
                 fontsize=12)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dash['uid'].removeprefix('wattbit-')}.png"
    fig.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(fig)
    return path


def render_file(results: Path, out: Path) -> list[Path]:
    data = json.loads(results.read_text())
    return [render_dashboard(d, out) for k, d in sorted(data.items()) if not k.startswith("_")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    for p in render_file(args.results, args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
