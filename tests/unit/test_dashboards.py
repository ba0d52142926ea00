"""The dashboards: generated JSON up to date, units everywhere, only documented metrics."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.env import ROOT

sys.path.insert(0, str(ROOT / "dashboards"))
import generate

JSON_DIR = ROOT / "dashboards" / "json"
DOCS = [*sorted((ROOT / "docs" / "exporters").glob("*.md")), ROOT / "docs" / "runs.md"]
RULES = ROOT / "alerts" / "wattbit-recording.yml"
# Names that no wattbit exporter or rule produces but that are documented dependencies
# (docs/dashboards.md): node_exporter's CPU time, and the series Prometheus keeps for alerts.
EXTERNAL = {"node_cpu_seconds_total": "node_exporter", "ALERTS": "Prometheus"}
PROMQL_WORDS = {
    "sum", "avg", "max", "min", "by", "on", "group_left", "rate", "increase", "histogram_quantile",
    "quantile", "sort_desc", "time", "or", "and", "unless", "le", "offset", "bool",
}  # fmt: skip
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][a-zA-Z0-9_:]*)")
ALLOWED_UNITS = {
    "bps", "Bps", "watt", "joule", "s", "percentunit", "iops", "pps", "cps", "short",
    "bool_yes_no", "dateTimeAsIso", "suffix: J/Gbit",
}  # fmt: skip


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["panels"] if p["type"] != "row"]


def exprs(doc: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in panels(doc) for t in p.get("targets", [])]
    out += [a["expr"] for a in doc["annotations"]["list"] if "expr" in a]
    for v in doc["templating"]["list"]:
        if v["type"] == "query":
            out.append(v["query"]["query"])
    return out


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (label names and values, functions left out)."""
    expr = QUOTED.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # matchers: label names
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"label_values\((.*),\s*\w+\)", r"\1", expr)
    names = set()
    for m in IDENT.finditer(expr):
        name = m.group(1)
        rest = expr[m.end() :].lstrip()
        if rest.startswith("(") or name in PROMQL_WORDS or re.fullmatch(r"\d.*|e\d+", name):
            continue
        names.add(name)
    return names


def documented() -> set[str]:
    text = "\n".join(p.read_text() for p in DOCS)
    names = set(re.findall(r"(?<![\w:])wattbit_[a-z_]+", text))
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


def test_committed_json_is_what_the_code_generates(tmp_path: Path) -> None:
    generate.write_all(tmp_path)
    made = sorted(p.name for p in tmp_path.glob("*.json"))
    assert made == sorted(p.name for p in JSON_DIR.glob("*.json")), "run dashboards/generate.py"
    for name in made:
        assert (tmp_path / name).read_bytes() == (JSON_DIR / name).read_bytes(), (
            f"dashboards/json/{name} differs from the code: run dashboards/generate.py"
        )


def test_the_five_dashboards_and_their_variables() -> None:
    docs = dashboards()
    assert set(docs) == {"wall", "streaming", "disks", "power", "network"}
    for stem, doc in docs.items():
        assert doc["uid"] == f"wattbit-{stem}"
        names = [v["name"] for v in doc["templating"]["list"]]
        assert names[:2] == ["datasource", "host"], names
        assert any(
            a.get("expr") == generate.RUN_ANNOTATION_EXPR for a in doc["annotations"]["list"]
        )
    assert "device" in [v["name"] for v in docs["disks"]["templating"]["list"]]
    assert "device" in [v["name"] for v in docs["streaming"]["templating"]["list"]]
    for stem in ("streaming", "wall"):
        run = next(v for v in docs[stem]["templating"]["list"] if v["name"] == "run")
        assert run["query"]["query"] == generate.RUN_VAR_QUERY and not run["multi"]


def test_every_panel_has_a_unit_and_a_prometheus_query() -> None:
    for stem, doc in dashboards().items():
        for p in panels(doc):
            unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
            assert unit in ALLOWED_UNITS, f"{stem}: {p['title']!r} has unit {unit!r}"
            assert p.get("targets"), f"{stem}: {p['title']!r} has no query"
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            for t in p["targets"]:
                assert t["expr"].strip(), f"{stem}: {p['title']!r}"


def test_every_metric_is_documented_or_recorded() -> None:
    known = documented()
    assert "wattbit_nic_bytes_total" in known and "host:wattbit_power_watts:sum" in known
    used = set()
    for stem, doc in dashboards().items():
        for expr in exprs(doc):
            for name in metric_names(expr):
                used.add(name)
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in known or base in known or name in EXTERNAL, (
                    f"{stem}: {name} (in {expr}) is in no exporter doc, docs/runs.md or rule"
                )
    # the parser found what the dashboards are about
    assert {"site:wattbit_power_watts:sum", "wattbit_disk_io_latency_seconds_bucket",
            "node_cpu_seconds_total", "wattbit_run_active",
            "wattbit_nic_bytes_total"} <= used  # fmt: skip
    doc = (ROOT / "docs" / "dashboards.md").read_text()
    for name in EXTERNAL:
        assert name in doc, f"docs/dashboards.md does not document the dependency on {name}"


def test_metric_name_parser() -> None:
    assert metric_names(
        'sum by (host, le) (rate(a_b_bucket{host=~"$host", x="y:z"}[5m])) * 1e9'
    ) == {"a_b_bucket"}
    assert metric_names("x:y:z / on (host) group_left () quantile by (host) (0.5, w)") == {
        "x:y:z",
        "w",
    }
    assert metric_names('label_values(wattbit_disk_info{parent=""}, device)') == {
        "wattbit_disk_info"
    }


def test_provisioning_points_at_the_mounted_json() -> None:
    prov = ROOT / "dashboards" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"
    dash = yaml.safe_load((prov / "dashboards" / "wattbit.yml").read_text())
    assert dash["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/wattbit"
    assert "/var/lib/grafana/dashboards/wattbit" in (ROOT / "docs" / "dashboards.md").read_text()


RANGE = re.compile(r"\[([^\]]*)\]")


# The "what limits it" panels read the limiter rules: the limiter needs the whole chain of
# docs/rules.md ("What limits it"), the disks' last-seen-alone latch included, which no
# $__rate_interval query can redo (docs/dashboards.md).
LIMITS_PANELS = {"What limits it", "Utilisation of every resource over time"}


def test_no_fixed_windows_in_panels() -> None:
    """Rates over $__rate_interval, totals over $__range: right at any scrape interval."""
    allowed = {"$__rate_interval", "$__range", "$__range:$__interval"}
    for stem, doc in dashboards().items():
        for p in panels(doc):
            for t in p["targets"]:
                windows = set(RANGE.findall(QUOTED.sub('""', t["expr"])))
                assert windows <= allowed, f"{stem}: {p['title']!r} uses {windows - allowed}"
                if p["title"] in LIMITS_PANELS:
                    continue
                assert not re.search(r":rate1m|:ratio1m", t["expr"]), (
                    f"{stem}: {p['title']!r} reads a 1-minute rule: use $__rate_interval"
                )


def test_the_wall() -> None:
    doc = dashboards()["wall"]
    ps = {p["title"]: p for p in panels(doc)}
    for title in ("Gbit/s", "Site watts", "J/Gbit", "Disks busy"):
        p = ps[title]
        assert p["type"] == "stat" and p["options"]["graphMode"] == "area", title
        assert p["options"]["text"]["valueSize"] >= 60, title
        assert p["gridPos"]["y"] == 0 and p["gridPos"]["w"] == 6, title
    xy = next(p for p in panels(doc) if p["type"] == "xychart")
    # without a pluginVersion Grafana would migrate these options as the pre-11 format
    assert xy["pluginVersion"] == generate.XYCHART_PLUGIN_VERSION
    assert xy["options"]["mapping"] == "manual"
    names = [t["legendFormat"] for t in xy["targets"]]
    assert names == ["Gbit/s", "watts", "fit"]
    assert [t["id"] for t in xy["transformations"]] == ["joinByField"]
    for s in xy["options"]["series"]:
        assert s["x"]["matcher"] == {"id": "byName", "options": "Gbit/s"}
        assert s["y"]["matcher"]["options"] in names[1:]
    assert "@ end()" in xy["targets"][2]["expr"] and "$run" in xy["targets"][2]["expr"]
    assert any(p["type"] == "bargauge" for p in panels(doc))
    assert len(panels(doc)) <= 10, "the Wall is read from the back of a room: few panels"
    compose = (ROOT / "docker-compose.yml").read_text()
    assert f"grafana/grafana:{generate.XYCHART_PLUGIN_VERSION}" in compose


def test_the_datasource_minimum_interval_is_the_scrape_interval() -> None:
    """$__rate_interval is built from it: it must be the scrape interval Prometheus uses."""
    ds = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/prometheus.yml").read_text())
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    assert ds["datasources"][0]["jsonData"]["timeInterval"] == prom["global"]["scrape_interval"]


def _grafana_link(url: str, row: dict[str, float | str], units: dict[str, str]) -> str:
    """A data link as Grafana 11 interpolates it on a table row, for the variables used here.

    ``${__data.fields.F}`` is the field's *display* value (getFieldDisplayValuesProxy returns a
    DisplayValue whose toString is its formatted text: a dateTimeAsIso field shows an ISO
    date); ``${__data.fields.F.numeric}`` is the number (the __data macro reads the path with
    lodash property()); ``${__url_time_range}`` is the current range, ``from=now-6h&to=now``.
    """
    import datetime
    import urllib.parse

    def field(m: re.Match[str]) -> str:
        name, prop, fmt = m.group(1), m.group(2), m.group(3)
        value = row[name]
        if prop == "numeric":
            text = str(int(value)) if float(value).is_integer() else str(value)
        elif units.get(name) == "dateTimeAsIso":
            dt = datetime.datetime.fromtimestamp(float(value) / 1000, datetime.UTC)
            text = dt.strftime("%Y-%m-%d %H:%M:%S")
        else:
            text = str(value)
        return urllib.parse.quote(text, safe="") if fmt == "percentencode" else text

    url = re.sub(r"\$\{__data\.fields\.(\w+)(?:\.(\w+))?(?::(\w+))?\}", field, url)
    url = url.replace("${__url_time_range}", "from=now-6h&to=now")
    return url.replace("${host:queryparam}", "var-host=h1")


def test_the_runs_table_link_zooms_to_the_run() -> None:
    """Issue 26, 8: the link carried ${__url_time_range} before its own from/to, and the
    fields' display text (an ISO date) as from/to: Grafana kept the current range."""
    import urllib.parse

    start, end = 1_714_557_600_123, 1_714_561_200_456  # ms, as the table's queries give them
    found = 0
    for name, doc in dashboards().items():
        for p in panels(doc):
            for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []):
                if link.get("title") != "Zoom to this run":
                    continue
                found += 1
                units = {"start": p["fieldConfig"]["defaults"].get("unit", "")}
                units["end"] = units["start"]
                row = {"run": "sc10 demo", "start": float(start), "end": float(end)}
                got = urllib.parse.urlsplit(_grafana_link(link["url"], row, units))
                query = urllib.parse.parse_qs(got.query)
                assert query["from"] == [str(start)] and query["to"] == [str(end)], (name, got)
                assert query["var-run"] == ["sc10 demo"], (name, got)
    assert found >= 1


def test_the_wall_has_the_transfers() -> None:
    """The Streaming dashboard's Transfers (top flows, their rates, what limits them) were on
    no other dashboard: the Wall has the 5 busiest flows, by the same queries cut to 5."""
    docs = dashboards()
    wall = {p["title"]: p for p in panels(docs["wall"])}
    streaming = {p["title"]: p for p in panels(docs["streaming"])}
    top, rates = wall["Top flows"], wall["Flow rates"]
    assert rates["type"] == "bargauge" and top["type"] == "table"
    assert rates["targets"][0]["expr"] == f"topk(5, {generate.FLOW_BITS})"
    same = [t["expr"].replace("topk(10,", "topk(5,") for t in streaming["Top flows"]["targets"]]
    assert [t["expr"] for t in top["targets"]] == same
    for share in ("rwnd_limited_seconds", "sndbuf_limited_seconds"):
        assert any(share in t["expr"] for t in top["targets"]), share
    assert not any(p["type"] == "row" for p in docs["wall"]["panels"])  # no rows on the Wall
