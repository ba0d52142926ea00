"""Static renderings of the dashboards: every panel's query results drawn with matplotlib.

    python dashboards/render.py OUTDIR --prometheus URL --run RUN [--margin 20] [--save FILE]
                                       [--scrape-interval S] [--step S] [--wall-until RUN]
    python dashboards/render.py OUTDIR --prometheus URL --start T0 --end T1 [--save FILE]
    python dashboards/render.py OUTDIR --results FILE

With --prometheus, every panel query of every dashboard in dashboards/json/ is run against
that Prometheus over the run's window (its start and end, widened by --margin seconds) or
[T0, T1] (Unix seconds), as dashboards/queries.py describes (with --run, the run variable is
that run), and the results are saved to --save if given; with --results, saved results are
drawn again. One PNG per dashboard is written to OUTDIR (docs/dashboards/ in the repository),
its panels placed as in Grafana (the 24-column grid of gridPos). This is not Grafana: it
shows what each panel's queries return, with the panel's title and unit, so a reader sees the
dashboards without running one.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import queries

LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
COL_INCHES, ROW_INCHES, DPI = 0.75, 0.4, 80
COLOURS = {"blue": "#3274d9", "orange": "#ff780a", "green": "#37872d", "purple": "#8f3bb8"}

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
    return " ".join(LEGEND.sub(lambda m: metric.get(m.group(1), ""), fmt).split())


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


def fmt_value(v: float | None, unit: str | None) -> str:
    """A value as a big number shows it: three significant digits and its unit."""
    if v is None:
        return "–"
    if unit in ("short", "bool_yes_no", None):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    div, label = scale(unit, v)
    x = v / div
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return f"{text} {label}".strip() if label != "%" else f"{text} %"


def finite(v: str) -> float | None:
    x = float(v)
    return x if math.isfinite(x) else None


def series_of(panel: dict[str, Any]) -> list[tuple[str, list[tuple[float, float | None]]]]:
    """(legend, [(t, value)...]) of every series of every query of the panel."""
    out = []
    for query in panel["queries"]:
        for s in query["result"]:
            pts = [
                (float(t), finite(v)) for t, v in (s["values"] if "values" in s else [s["value"]])
            ]
            out.append((legend(query["legend"], s["metric"]), pts))
    return out


def draw_matrix(ax: Any, panel: dict[str, Any], start: float, length: float) -> None:
    lines = [(n, [(t - start, v) for t, v in pts]) for n, pts in series_of(panel)]

    def peak_of(pts: list[tuple[float, float | None]]) -> float:
        return max((abs(v) for _, v in pts if v is not None), default=0.0)

    # the largest first: they are drawn, the first eight named in the legend
    lines.sort(key=lambda line: -peak_of(line[1]))
    peak = max((peak_of(pts) for _, pts in lines), default=0.0)
    div, label = scale(panel["unit"], peak)
    named = [n for n, pts in lines if peak_of(pts) > 0][:8] or [n for n, _ in lines[:8]]
    for name, pts in lines[:12]:
        ax.plot([t for t, _ in pts], [v / div if v is not None else math.nan for _, v in pts],
                label=name[:48] if name in named else None, linewidth=1.4)  # fmt: skip
    ax.set_xlim(0, length)
    if panel["unit"] == "bool_yes_no":
        ax.set_ylim(-0.1, 1.1)
        ax.set_yticks([0, 1], ["no", "yes"])
        label = ""
    ax.set_ylabel(label)
    ax.set_xlabel("seconds into the window", fontsize=7)
    if lines:
        ax.legend(fontsize=6, loc="upper left", ncol=1 if len(named) < 5 else 2)
    if len(lines) > len(named):
        ax.text(0.99, 0.01, f"+{len(lines) - len(named)} smaller series",
                transform=ax.transAxes, ha="right", fontsize=6)  # fmt: skip


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
    ax.set_xlabel("seconds into the window", fontsize=7)
    ax.set_ylabel("latency bucket (requests/s: colour)", fontsize=7)


def last_values(panel: dict[str, Any]) -> list[tuple[str, float | None, float | None]]:
    """(name, the last non-null value, the peak of a range query's values) per series."""
    out = []
    for query in panel["queries"]:
        for s in query["result"]:
            vals = [finite(v) for _, v in ([s["value"]] if "value" in s else s["values"])]
            last = next((v for v in reversed(vals) if v is not None), None)
            peak = max((v for v in vals if v is not None), default=None) if len(vals) > 1 else None
            name = legend(query["legend"], s["metric"]) if query["legend"] else ",".join(
                f"{k}={v}" for k, v in sorted(s["metric"].items())
                if k not in ("__name__", "job", "instance")
            )  # fmt: skip
            out.append((name, last, peak))
    return out


def draw_vector(ax: Any, panel: dict[str, Any], big: bool = False) -> None:
    """One bar per series (its last value), the name above the bar as a bar gauge has it.

    For a range query whose last value is under half its peak in the window (a run that has
    ended), a pale bar shows the peak behind it.
    """
    bars = last_values(panel)
    if panel["unit"] == "dateTimeAsIso":  # the run picker: start and end of each run
        ax.axis("off")
        times: dict[str, list[float]] = {}
        for name, v, _ in bars:
            if v is not None:
                times.setdefault(name.removeprefix("run="), []).append(v / 1000)
        rows = sorted(times.items(), key=lambda kv: -kv[1][0])[:8]
        text = "\n".join(
            f"{n:<16} {datetime.fromtimestamp(ts[0], UTC):%Y-%m-%d %H:%M:%S} → "
            f"{datetime.fromtimestamp(ts[-1], UTC):%H:%M:%S} UTC ({ts[-1] - ts[0]:.0f} s)"
            for n, ts in rows
        )
        ax.text(0.0, 1.0, text, va="top", fontsize=13 if big else 8, family="monospace",
                transform=ax.transAxes)  # fmt: skip
        return
    peak = max((abs(x) for _, v, p in bars for x in (v, p) if x is not None), default=0.0)
    div, label = scale(panel["unit"], peak)
    shown = bars[:15]
    top = panel["max"] / div if panel.get("max") is not None else (peak / div * 1.2 or 1.0)
    size = 15 if big else 6
    for y, (name, v, p) in enumerate(shown):
        # each row: the name on its upper half, the bar on its lower half
        if p is not None and (v or 0.0) < p / 2:
            ax.barh(y + 0.22, p / div, height=0.4, color="#3274d9", alpha=0.2)
        ax.barh(y + 0.22, (v or 0.0) / div, height=0.4, color="#3274d9")
        ax.text(0, y, name[:70], va="bottom", ha="left", fontsize=size)
        value = fmt_value(v, panel["unit"])
        if p is not None and (v or 0.0) < p / 2:
            value += f" (peak {fmt_value(p, panel['unit'])})"
        ax.text(top, y, value, va="bottom", ha="right", fontsize=size, fontweight="bold")
    ax.set_xlim(0, top)
    ax.set_ylim(len(shown) - 0.3, -0.75)
    ax.set_yticks([])
    ax.set_xlabel(label if label not in ("short", "bool_yes_no") else "", fontsize=12 if big else 7)
    if len(bars) > 15:
        ax.text(0.99, 0.01, f"+{len(bars) - 15} more", transform=ax.transAxes, ha="right",
                fontsize=6)  # fmt: skip


def draw_stat(ax: Any, panel: dict[str, Any], start: float, length: float) -> None:
    """Big numbers (the last value of each series) over their sparklines."""
    lines = series_of(panel)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    h = (panel.get("gridPos") or {}).get("h", 5)
    size = min(44.0, 6.5 * h) / max(1, len(lines)) ** 0.5
    colour = COLOURS.get(panel.get("color", ""), "#3274d9")
    for i, (name, pts) in enumerate(lines[:4]):
        last = next((v for _, v in reversed(pts) if v is not None), None)
        y = 0.55 if len(lines) == 1 else 0.85 - i * 0.8 / max(1, min(len(lines), 4))
        label = fmt_value(last, panel["unit"])
        if len(lines) > 1:
            label = f"{name}: {label}"
        ax.text(0.5, y, label, transform=ax.transAxes, ha="center", va="center",
                fontsize=size, color=colour, fontweight="bold")  # fmt: skip
    if len(lines) == 1 and len(lines[0][1]) > 1:
        pts = lines[0][1]
        spark = ax.inset_axes((0.0, 0.0, 1.0, 0.3))
        xs = [t - start for t, _ in pts]
        ys = [v if v is not None else math.nan for _, v in pts]
        known = [v for v in ys if v == v] or [0.0]
        lo, hi = min(known), max(known)
        lo -= (hi - lo) * 0.05 or 1.0  # as Grafana's sparkline: the data's own range
        spark.fill_between(xs, ys, lo, color=colour, alpha=0.25, linewidth=0)
        spark.plot(xs, ys, color=colour, linewidth=1.5)
        spark.set_ylim(lo, hi + (hi - lo) * 0.05)
        spark.set_xlim(0, length)
        spark.axis("off")


def draw_xy(ax: Any, panel: dict[str, Any]) -> None:
    """XY chart: query A on x, the others on y at the same instants (joinByField on Time)."""
    by_ref = {q["refId"]: q for q in panel["queries"]}
    xs = {float(t): finite(v) for s in by_ref["A"]["result"] for t, v in s["values"]}
    peak_x = max((abs(v) for v in xs.values() if v is not None), default=0.0)
    xdiv, xlabel = scale("bps", peak_x)
    ydiv, ylabel = scale(panel["unit"], 1.0)
    for ref, style in (("B", "points"), ("C", "line")):
        q = by_ref.get(ref)
        for s in q["result"] if q else []:
            pts = sorted(
                (xs[float(t)] / xdiv, y / ydiv)
                for t, v in s["values"]
                if (y := finite(v)) is not None and xs.get(float(t)) is not None
            )
            name = legend(q["legend"], s["metric"])
            if style == "points":
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=28, alpha=0.6,
                           color="#ff780a", label=name)  # fmt: skip
            elif pts:
                ax.plot([pts[0][0], pts[-1][0]], [pts[0][1], pts[-1][1]], color="#3274d9",
                        linewidth=3, label=name)  # fmt: skip
    ax.set_xlabel(xlabel, fontsize=12)
    ax.set_ylabel(ylabel, fontsize=12)
    ax.tick_params(labelsize=11)
    ax.legend(fontsize=11, loc="upper left")
    ax.grid(alpha=0.3)


def layout(panels: list[dict[str, Any]]) -> list[tuple[int, int, int, int]]:
    """(x, y, w, h) on Grafana's 24-column grid; panels without gridPos in rows of three."""
    out = []
    for i, p in enumerate(panels):
        g = p.get("gridPos")
        out.append((g["x"], g["y"], g["w"], g["h"]) if g else ((i % 3) * 8, (i // 3) * 8, 8, 8))
    # close the gaps the left-out row panels leave (one grid unit each)
    shift, squeezed, prev_end = 0, {}, 0
    for y in sorted({y for _, y, _, _ in out}):
        if y > prev_end:
            shift += y - prev_end
        squeezed[y] = y - shift
        prev_end = max(prev_end, max(y0 + h for _, y0, _, h in out if y0 == y))
    return [(x, squeezed[y], w, h) for x, y, w, h in out]


# inches kept free inside a panel's box: left, right, top (title), bottom (axis labels)
PADS = {
    "plot": (0.75, 0.2, 0.4, 0.55),
    "bars": (0.2, 0.2, 0.4, 0.5),
    "text": (0.15, 0.15, 0.45, 0.1),
}


def render_dashboard(dash: dict[str, Any], out: Path) -> Path:
    panels = dash["panels"]
    big = dash["uid"] == "wattbit-wall"
    boxes = layout(panels)
    rows = max(y + h for _, y, _, h in boxes)
    row_in = ROW_INCHES * (1.25 if big else 1.0)
    head = 0.7
    width, height = 24 * COL_INCHES, rows * row_in + head
    fig = plt.figure(figsize=(width, height))
    start = dash["start"]
    length = dash["end"] - start
    run_windows = []
    for ann in dash.get("annotations", []):
        for s in ann["result"]:
            ts = [float(t) - start for t, _ in s["values"]]
            if ts:
                run_windows.append((min(ts), max(ts), s["metric"].get("run", "")))
    run_windows.sort()
    for panel, (x, y, w, h) in zip(panels, boxes, strict=True):
        first = panel["queries"][0] if panel["queries"] else {}
        kind = (
            "text"
            if panel["type"] == "stat" or panel["unit"] == "dateTimeAsIso"
            else "bars"
            if panel["type"] in ("bargauge", "table") or first.get("resultType") == "vector"
            else "plot"
        )
        pl, pr, pt, pb = PADS[kind]
        if big and kind == "plot":
            pl, pb = 1.0, 0.75
        if first.get("format") == "heatmap":
            pl = 1.2
        left = x * COL_INCHES + pl
        ax = fig.add_axes(
            (
                left / width,
                1 - (head + (y + h) * row_in - pb) / height,
                (w * COL_INCHES - pl - pr) / width,
                (h * row_in - pt - pb) / height,
            )
        )
        ax.set_title(panel["title"], fontsize=20 if big else 9, pad=6)
        has_data = any(q["result"] for q in panel["queries"])
        if not has_data:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes,
                    fontsize=9, color="grey")  # fmt: skip
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        if first["format"] == "heatmap":
            draw_heatmap(ax, panel, start)
            ax.set_xlim(0, length)
        elif panel["type"] == "xychart":
            draw_xy(ax, panel)
        elif panel["type"] == "stat":
            draw_stat(ax, panel, start, length)
        elif kind == "plot":
            draw_matrix(ax, panel, start, length)
            for i, (lo, hi, run) in enumerate(run_windows):
                ax.axvspan(lo, hi, color="orange", alpha=0.07, label=None)
                # runs inside runs (a demo's phases) start together: one label a line
                ax.text(lo, 0.99 - 0.06 * i, f" {run}", transform=ax.get_xaxis_transform(),
                        fontsize=6, va="top", color="darkorange")  # fmt: skip
        else:  # tables, bar gauges: one value per series (the last, as lastNotNull)
            draw_vector(ax, panel, big=big)
        if not big:
            ax.tick_params(labelsize=7)
    when = datetime.fromtimestamp(start, UTC).isoformat(timespec="seconds")
    source = dash.get("source", "real data")
    fig.text(0.5, 1 - 0.3 / height,
             f"{dash['title']} — {source}, {int(dash['end'] - start)} s from {when}",
             ha="center", va="center", fontsize=18 if big else 13)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dash['uid'].removeprefix('wattbit-')}.png"
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def render_results(data: dict[str, Any], out: Path) -> list[Path]:
    return [render_dashboard(d, out) for k, d in sorted(data.items()) if not k.startswith("_")]


def render_file(results: Path, out: Path) -> list[Path]:
    return render_results(json.loads(results.read_text()), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="directory for the PNGs")
    ap.add_argument("--results", type=Path, help="draw saved query results")
    ap.add_argument("--prometheus", help="run the queries against this Prometheus URL")
    ap.add_argument("--run", help="the window: this run's start and end")
    ap.add_argument("--margin", type=float, default=20.0, help="seconds around the run")
    ap.add_argument("--start", type=float, help="the window's start (Unix seconds)")
    ap.add_argument("--end", type=float, help="the window's end (Unix seconds)")
    ap.add_argument("--step", type=float, help="query step (default: ~400 points, >= scrape)")
    ap.add_argument(
        "--scrape-interval",
        type=float,
        help="seconds, for $__rate_interval (default: that Prometheus' global scrape_interval; "
        "give it for a Prometheus that only serves kept data)",
    )
    ap.add_argument(
        "--wall-until",
        metavar="RUN",
        help="draw the Wall from the window's start to the end of this run (e.g. a phase), "
        "as the screen showed it then: its big numbers are the last values",
    )
    ap.add_argument("--source", default="real data", help="said in each picture's title")
    ap.add_argument("--save", type=Path, help="also write the query results here")
    args = ap.parse_args(argv)
    if args.results:
        data = json.loads(args.results.read_text())
    elif args.prometheus:
        if args.run:
            start, end = queries.run_window(args.prometheus, args.run, args.margin)
        elif args.start is not None and args.end is not None:
            start, end = args.start, args.end
        else:
            ap.error("--prometheus needs --run, or --start and --end")
        pinned = {"run": [args.run]} if args.run else None
        scrape = args.scrape_interval or queries.scrape_interval(args.prometheus)
        step = args.step or queries.default_step(start, end, scrape)
        data = queries.run_all(args.prometheus, start, end, step, scrape, pinned=pinned)
        if args.wall_until:
            # the Wall as the screen showed it when that run (a phase) ended
            wall_end = queries.run_window(args.prometheus, args.wall_until)[1]
            doc = json.loads((queries.JSON_DIR / "wall.json").read_text())
            data["wall"] = queries.run_dashboard(
                doc, args.prometheus, start, wall_end, step, scrape, pinned
            )
        for d in data.values():
            d["source"] = args.source
        if args.save:
            args.save.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        ap.error("give --results FILE or --prometheus URL")
    for p in render_results(data, args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
