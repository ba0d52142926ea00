"""What every phase of the fleet bench uses: settings, child processes, HTTP and PromQL."""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.synthetic import (
    TOKEN,
)

ROOT = Path(__file__).resolve().parents[2]

RECORDING = ROOT / "deploy" / "demo" / "apc_ap8641.snmprec"
STORES = ("prometheus", "victoriametrics")
TOOLS = {
    "prometheus": ["prometheus"],
    "victoriametrics": ["victoria-metrics", "vmagent", "vmalert"],
}
SAMPLE_EVERY_S = 5.0
REPORT_GUARD_S = 30.0  # the run ends this long before the window: VictoriaMetrics' latencyOffset
KEPT_UP = 0.9


# --- processes --------------------------------------------------------------------------------


def get(url: str, timeout: float = 10.0) -> bytes:
    """GET a URL's body."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def post(url: str, body: object | None = None) -> Any:
    """POST JSON with the run token; the decoded answer."""
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", re.M)


def scrape(url: str, timeout: float = 60.0) -> list[tuple[str, str, float]]:
    """(name, labels text, value) of every sample at a /metrics URL."""
    # A store at its limit answers its own /metrics slowly (vmalert took > 10 s at 200 hosts).
    text = get(url, timeout).decode()
    return [(m[1], m[2] or "", float(m[3])) for m in _SAMPLE.finditer(text)]


def total(samples: list[tuple[str, str, float]], name: str) -> float:
    """The sum of a metric over its label sets (NaN when absent)."""
    vals = [v for n, _, v in samples if n == name]
    return sum(vals) if vals else math.nan


def by_label(samples: list[tuple[str, str, float]], name: str, label: str) -> dict[str, float]:
    """{value of `label`: sample} of one metric."""
    out: dict[str, float] = {}
    for n, labels, v in samples:
        m = re.search(rf'{label}="([^"]*)"', labels) if n == name else None
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def query(base: str, expr: str, at: float) -> float:
    """An instant query's single value (NaN when empty) at unix time `at`."""
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    data = json.loads(get(f"{base}/api/v1/query?{q}", timeout=60))
    result = data["data"]["result"]
    return float(result[0]["value"][1]) if result else math.nan


def query_vector(base: str, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
    """An instant query's (labels, value) pairs at unix time `at`."""
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    data = json.loads(get(f"{base}/api/v1/query?{q}", timeout=60))
    return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]
