"""A small client of Prometheus' HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

Standard library only. Queries are sent as form-encoded POSTs (long selectors do not hit URL
length limits); answers are parsed into :class:`Series`. ``query_range`` is cut into chunks
under Prometheus' limit of 11 000 points per series, and raw-sample fetches (range selectors
in an instant query) are cut into time chunks so that no single answer grows without bound.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Prometheus answers "exceeded maximum resolution of 11,000 points per timeseries" above this.
MAX_POINTS = 11_000
# Evaluate at the times asked, on the samples there are. Without nocache=1 VictoriaMetrics
# moves an instant query less than 30 s old (-search.latencyOffset) 30 s back, and the points
# of a range query of more than 50 to multiples of the step (for its cache): a run that just
# ended would be read 30 s early, and the bins would not be where the report cut them.
# latency_offset=0 (VictoriaMetrics 1.88 on; 1.79 ignores it) stops it answering a range
# query's newest points with older values. Prometheus, Thanos and Mimir ignore both.
# docs/longterm-store.md, "VictoriaMetrics 1.79: what differs from Prometheus".
AS_ASKED = {"nocache": "1", "latency_offset": "0"}
# 11 points where range selectors include their left end (Prometheus 2), 10 where they do not.
RANGE_PROBE = "count_over_time(vector(1)[10s:1s])"

LabelKey = tuple[tuple[str, str], ...]


class PromError(Exception):
    """Prometheus could not be reached or refused a query."""


@dataclass
class Series:
    """One time series of an answer: its labels and its samples (seconds, value)."""

    labels: dict[str, str]
    samples: list[tuple[float, float]] = field(default_factory=list)

    @property
    def key(self) -> LabelKey:
        """The labels as a sorted, hashable tuple."""
        return label_key(self.labels)


def label_key(labels: dict[str, str]) -> LabelKey:
    """Sorted, hashable form of a label set."""
    return tuple(sorted(labels.items()))


def escape(value: str) -> str:
    """A label value quoted for PromQL."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(metric: str, labels: dict[str, str] | None = None, **regex: str) -> str:
    """``metric{l="v",...,r=~"re"}`` with exact matchers for ``labels`` and regex ones."""
    parts = [f"{k}={escape(v)}" for k, v in sorted((labels or {}).items()) if k != "__name__"]
    parts += [f"{k}=~{escape(v)}" for k, v in sorted(regex.items())]
    return metric + ("{" + ",".join(parts) + "}" if parts else "")


def duration(seconds: float) -> str:
    """A PromQL duration in whole milliseconds (at least 1 ms)."""
    return f"{max(1, round(seconds * 1000))}ms"


def _ts(t: float) -> str:
    return f"{t:.3f}"


def without_userinfo(url: str) -> str:
    """The URL with any ``user:password@`` removed: the only form of it that may be shown."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<the --prometheus URL>"
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class Prometheus:
    """Client of one Prometheus server (or anything speaking its query API).

    Credentials: basic auth (user, password) or a bearer token, sent with every request
    (never on a redirect to another URL). Credentials in the URL itself are refused (PromError):
    a URL ends up in messages, shell history and `ps`.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 120.0,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
    ) -> None:
        shown = without_userinfo(url)
        if shown != url:
            raise PromError(
                f"{shown.rstrip('/')}: credentials in the URL are not supported; use "
                "--prometheus-user with --prometheus-password-file, or --prometheus-token-file"
            )
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._closed_ranges: bool | None = None
        self.requests = 0
        self._authorization: str | None = None
        if token is not None:
            self._authorization = f"Bearer {token}"
        elif user is not None:
            pair = f"{user}:{password or ''}".encode()
            self._authorization = "Basic " + base64.b64encode(pair).decode("ascii")

    # --- transport --------------------------------------------------------------------

    def _call(self, path: str, params: dict[str, str] | None = None) -> Any:
        data = urllib.parse.urlencode(params).encode() if params is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            headers={"Accept": "application/json", "User-Agent": "wattbit-report"},
        )
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self._authorization is not None:
            # unredirected: urllib copies ordinary headers to wherever a redirect points
            req.add_unredirected_header("Authorization", self._authorization)
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            try:
                err = json.loads(detail)
                detail = f"{err.get('errorType', '')}: {err.get('error', detail)}"
            except ValueError:
                detail = detail.strip()[:300]
            raise PromError(f"{self.url}{path}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PromError(f"cannot reach Prometheus at {self.url}: {reason}") from exc
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise PromError(f"{self.url}{path}: the answer is not JSON") from exc
        if doc.get("status") != "success":
            raise PromError(f"{self.url}{path}: {doc.get('errorType')}: {doc.get('error')}")
        return doc.get("data")

    # --- server facts -----------------------------------------------------------------

    def closed_ranges(self) -> bool:
        """True when range selectors include their left end (Prometheus 2; 3 made them open).

        Asked of the server itself first: ``count_over_time(vector(1)[10s:1s])`` at a whole
        second counts 11 points where ranges are closed, 10 where they are open (Prometheus 3,
        VictoriaMetrics). A version says less: VictoriaMetrics' buildinfo has none (1.79) or
        a made-up "2.24.0" (1.96 on), and its ranges are open. A server that answers neither
        is taken as closed: the report then asks for ranges 1 ms shorter, which is exact for
        closed ranges and loses only a sample exactly 1 ms inside an open one.
        """
        if self._closed_ranges is None:
            self._closed_ranges = self._probe_ranges()
        return self._closed_ranges

    def _probe_ranges(self) -> bool:
        try:
            res = self.query(RANGE_PROBE, float(math.floor(time.time())))
            points = res[0].samples[-1][1] if len(res) == 1 and res[0].samples else None
        except PromError:
            points = None
        if points in (10.0, 11.0):
            return points == 11.0
        try:
            version = str(self._call("/api/v1/status/buildinfo").get("version", ""))
        except PromError:
            version = ""
        m = re.match(r"(\d+)\.", version)
        return not (m and int(m.group(1)) >= 3)

    def range_for(self, seconds: float) -> str:
        """A range selector duration meaning exactly ``(t - seconds, t]`` on this server."""
        if self.closed_ranges():
            return duration(seconds - 0.001)
        return duration(seconds)

    # --- queries ----------------------------------------------------------------------

    def query(self, expr: str, at: float) -> list[Series]:
        """Instant query at ``at``: a vector (one sample each) or a matrix (raw samples)."""
        data = self._call("/api/v1/query", {"query": expr, "time": _ts(at), **AS_ASKED})
        return _parse(data)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """Range query evaluated at ``start, start+step, ... <= end``, chunked under 11 000 points.

        Series of the chunks are joined by label set.
        """
        if step <= 0:
            raise ValueError("step must be positive")
        n = math.floor((end - start) / step + 1e-9) + 1
        per = MAX_POINTS - 1
        out: dict[LabelKey, Series] = {}
        for first in range(0, n, per):
            last = min(n, first + per) - 1
            data = self._call(
                "/api/v1/query_range",
                {
                    "query": expr,
                    "start": _ts(start + first * step),
                    "end": _ts(start + last * step),
                    "step": repr(float(step)),
                    **AS_ASKED,
                },
            )
            _merge(out, _parse(data))
        return list(out.values())

    def raw(
        self, sel: str, start: float, end: float, chunk_seconds: float = 3600.0
    ) -> list[Series]:
        """Every raw sample of the series matching ``sel`` in ``(start, end]``.

        Fetched as range selectors in instant queries, one time chunk at a time.
        """
        out: dict[LabelKey, Series] = {}
        t = start
        while t < end:
            stop = min(end, t + chunk_seconds)
            _merge(out, self.query(f"{sel}[{self.range_for(stop - t)}]", stop))
            t = stop
        for s in out.values():
            s.samples = [p for p in s.samples if start < p[0] <= end]
        return [s for s in out.values() if s.samples]


def _parse(data: Any) -> list[Series]:
    kind = data.get("resultType")
    result = data.get("result") or []
    out: list[Series] = []
    if kind == "vector":
        for r in result:
            t, v = r["value"]
            out.append(Series(dict(r["metric"]), [(float(t), float(v))]))
    elif kind == "matrix":
        for r in result:
            out.append(Series(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]))
    elif kind == "scalar":
        t, v = result
        out.append(Series({}, [(float(t), float(v))]))
    else:
        raise PromError(f"unexpected result type {kind!r}")
    return out


def _merge(into: dict[LabelKey, Series], series: Iterable[Series]) -> None:
    for s in series:
        have = into.get(s.key)
        if have is None:
            into[s.key] = s
        else:
            have.samples.extend(s.samples)
