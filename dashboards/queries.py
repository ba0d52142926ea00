"""Run every panel query of the generated dashboards against a Prometheus, as Grafana would.

Used by dashboards/render.py (the static pictures) and tests/integration/test_dashboards_real.py.

Substitution rules (what Grafana sends for these dashboards with every variable at All, the
data source's minimum interval, jsonData.timeInterval, being the scrape interval):

* `label_values(SELECTOR, LABEL)` variables: `/api/v1/label/LABEL/values?match[]=SELECTOR`
  over the window, after substituting the variables before them (host before device); a
  multi-value variable inside a regex matcher becomes `(v1|v2|...)`, each value regex-escaped
  (Grafana's regex formatting of a multi-value variable); a single-value variable takes one
  value: `run` the run that started last in the window, unless the caller pins it (render.py
  --run pins the run it draws), any other (the Disks dashboard's latency `clock`) its first
  value in alphabetical order, the one Grafana selects when nothing was chosen;
* `$__interval` = the step (at least the scrape interval); `$__rate_interval` =
  max(`$__interval` + scrape interval, 4 x scrape interval) (Grafana's definition);
* `$__range` = the window's length in whole seconds with an `s`, `$__range_s` the number;
* range queries (`range: true`) go to `/api/v1/query_range` over the window at the step;
  instant queries to `/api/v1/query` at the window's end.

`extra`: query parameters sent with every request besides these, for a store that takes
them: VictoriaMetrics' `extra_label=site=a` (only one site's series, as a Grafana data source
with that custom query parameter sees them) and `nocache=1` (points where asked, not moved to
multiples of the step): docs/longterm-store.md.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

JSON_DIR = Path(__file__).resolve().parent / "json"
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)
DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def api(
    url: str,
    path: str,
    params: dict[str, Any],
    timeout: float = 60.0,
    extra: dict[str, str] | None = None,
) -> Any:
    """GET an API path of the Prometheus at `url` (with the `extra` parameters); its `data`."""
    query = urllib.parse.urlencode({**(extra or {}), **params}, doseq=True)
    full = url.rstrip("/") + path + "?" + query
    with urllib.request.urlopen(full, timeout=timeout) as resp:
        doc = json.load(resp)
    if doc.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {doc}")
    return doc["data"]


def seconds(duration: str) -> float:
    """A simple Prometheus duration ("5s", "1m") in seconds."""
    m = DURATION.match(duration.strip())
    if not m:
        raise ValueError(f"not a simple duration: {duration!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def scrape_interval(url: str) -> float:
    """The global scrape interval of the Prometheus at `url` (its default is 1m)."""
    cfg = yaml.safe_load(api(url, "/api/v1/status/config", {})["yaml"])
    return seconds(str((cfg.get("global") or {}).get("scrape_interval", "1m")))


def run_window(url: str, run: str, margin: float = 0.0) -> tuple[float, float]:
    """The run's start and end (now, for an active run), widened by `margin` on both sides."""
    sel = f'{{run="{run}"}}'
    start = api(url, "/api/v1/query", {"query": f"wattbit_run_start_time_seconds{sel}"})
    end = api(url, "/api/v1/query", {"query": f"wattbit_run_end_time_seconds{sel}"})
    if not start["result"]:
        raise ValueError(f"no run {run!r} in {url}")
    t0 = float(start["result"][0]["value"][1])
    t1 = (
        float(end["result"][0]["value"][1])
        if end["result"]
        else float(start["result"][0]["value"][0])
    )
    return t0 - margin, t1 + margin


def regex_value(values: list[str]) -> str:
    """A multi-value variable in a regex matcher, as Grafana formats it."""
    escaped = [re.sub(r"[\\^$.|?*+()\[\]{}]", lambda m: "\\\\" + m.group(0), v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def fmt_seconds(s: float) -> str:
    return f"{int(s)}s" if s >= 1 and s == int(s) else f"{round(s * 1000)}ms"


def builtins(start: float, end: float, step: float, scrape: float) -> dict[str, str]:
    interval = max(step, scrape)
    return {
        "__rate_interval": fmt_seconds(max(interval + scrape, 4 * scrape)),
        "__interval": fmt_seconds(interval),
        "__range_s": str(int(end - start)),
        "__range": f"{int(end - start)}s",
    }


def substitute(expr: str, variables: dict[str, str], fixed: dict[str, str]) -> str:
    """Grafana's variables in a query; fails on one it does not know."""
    # longest names first, so $__rate_interval is not read as $__range... or $host as $h
    for name, value in sorted({**fixed, **variables}.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
    if "$" in expr:
        raise ValueError(f"unexpanded variable in {expr}")
    return expr


def newest_run(
    url: str, runs: list[str], end: float, extra: dict[str, str] | None = None
) -> list[str]:
    """Of `runs`, the one that started last before `end` (a single-value variable's pick)."""
    res = api(
        url, "/api/v1/query", {"query": "wattbit_run_start_time_seconds", "time": end}, extra=extra
    )
    starts = {s["metric"].get("run"): float(s["value"][1]) for s in res["result"]}
    known = [r for r in runs if r in starts]
    return [max(known, key=lambda r: starts[r])] if known else runs[-1:]


def expand_variables(
    doc: dict[str, Any],
    url: str,
    start: float,
    end: float,
    fixed: dict[str, str],
    pinned: dict[str, list[str]] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    variables: dict[str, str] = {}
    values: dict[str, list[str]] = {}
    for var in doc["templating"]["list"]:
        if var["type"] != "query":
            continue
        if pinned and var["name"] in pinned:
            values[var["name"]] = pinned[var["name"]]
            variables[var["name"]] = regex_value(pinned[var["name"]])
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = LABEL_VALUES.match(query)
        if not m:
            raise ValueError(f"{doc['uid']}: variable {var['name']} is not label_values(): {query}")
        selector = substitute(m.group(1), variables, fixed)
        got = sorted(
            api(
                url,
                f"/api/v1/label/{m.group(2)}/values",
                {"match[]": selector, "start": start, "end": end},
                extra=extra,
            )
        )
        if got and not var.get("multi"):
            got = newest_run(url, got, end, extra) if var["name"] == "run" else got[:1]
        values[var["name"]] = got
        variables[var["name"]] = regex_value(got) if got else "$^"
    return {"regex": variables, "values": values}


def run_dashboard(
    doc: dict[str, Any],
    url: str,
    start: float,
    end: float,
    step: float,
    scrape: float,
    pinned: dict[str, list[str]] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Every panel query and annotation of one dashboard over [start, end].

    `pinned`: variables given values (e.g. {"run": ["demo-stream"]}) instead of asking
    Prometheus for them; `extra`: query parameters for every request (module docstring).
    """
    fixed = builtins(start, end, step, scrape)
    expanded = expand_variables(doc, url, start, end, fixed, pinned, extra)
    out: dict[str, Any] = {
        "uid": doc["uid"],
        "title": doc["title"],
        "start": start,
        "end": end,
        "step": step,
        "scrape_interval": scrape,
        "builtins": fixed,
        "variables": expanded["values"],
        "annotations": [],
        "panels": [],
    }
    rng = {"start": start, "end": end, "step": step}
    for ann in doc["annotations"]["list"]:
        if "expr" not in ann:
            continue
        expr = substitute(ann["expr"], expanded["regex"], fixed)
        res = api(url, "/api/v1/query_range", {"query": expr, **rng}, extra=extra)["result"]
        out["annotations"].append({"name": ann["name"], "expr": expr, "result": res})
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        entry = {
            "title": panel["title"],
            "type": panel["type"],
            "gridPos": panel.get("gridPos"),
            "unit": defaults.get("unit"),
            "max": defaults.get("max"),
            "color": (defaults.get("color") or {}).get("fixedColor", ""),
            "queries": [],
        }
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], expanded["regex"], fixed)
            if target.get("instant"):
                data = api(url, "/api/v1/query", {"query": expr, "time": end}, extra=extra)
            else:
                data = api(url, "/api/v1/query_range", {"query": expr, **rng}, extra=extra)
            entry["queries"].append(
                {
                    "refId": target["refId"],
                    "expr": target["expr"],
                    "expanded": expr,
                    "instant": bool(target.get("instant")),
                    "format": target.get("format", "time_series"),
                    "legend": target.get("legendFormat", ""),
                    "resultType": data["resultType"],
                    "result": data["result"],
                }
            )
        out["panels"].append(entry)
    return out


def default_step(start: float, end: float, scrape: float, points: int = 400) -> float:
    """Grafana's $__interval for a panel about `points` pixels wide, at least the scrape."""
    return float(max(scrape, math.ceil((end - start) / points)))


def run_all(
    url: str,
    start: float,
    end: float,
    step: float | None = None,
    scrape: float | None = None,
    json_dir: Path = JSON_DIR,
    pinned: dict[str, list[str]] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """{dashboard file stem: run_dashboard(...)} for every dashboard in json_dir.

    `scrape`: the scrape interval ($__rate_interval is made of it); by default the global
    scrape_interval of that Prometheus' configuration.
    """
    scrape = scrape if scrape is not None else scrape_interval(url)
    step = step if step is not None else default_step(start, end, scrape)
    return {
        p.stem: run_dashboard(
            json.loads(p.read_text()), url, start, end, step, scrape, pinned, extra
        )
        for p in sorted(json_dir.glob("*.json"))
    }
