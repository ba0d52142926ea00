"""/metrics in the Prometheus text format, rendered with the label strings memoised.

prometheus_client.generate_latest re-validates and re-escapes every label name and value
of every sample on every scrape (about 4.7 us a sample here), which puts a 48-disk host's
~10k series over the 30 ms scrape budget (docs/benchmarks.md). Series are stable from one
scrape to the next, so this renderer keeps each sample's "name{labels} " prefix, as
generate_latest itself writes it, and formats only the value — and only when it changed
since the last scrape (most of a host's series do not change between two scrapes). Its
output is byte-for-byte generate_latest's (tests/unit/test_exposition.py).
"""

from __future__ import annotations

import gzip
import threading
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.openmetrics import exposition as om
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporters.base import REUSED
from exporters.textfamily import TextFamily, series_prefix, written_alike

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}


def _doc(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


class TextRenderer:
    """Renders a registry like generate_latest, caching each series' prefix between scrapes."""

    def __init__(self, registry: Collector) -> None:
        self.registry = registry
        # per series: its "name{labels} " prefix, and its last value and line
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, float, str]] = {}
        # per family an exporter marked REUSED (exporters/base.py): the object last handed
        # over, its text's pieces and its samples' count, reused while the same object comes
        self._reused: dict[str, tuple[Any, tuple[str, ...], int]] = {}
        # per family name (any other family): what it was last rendered from and its text,
        # reused while a new family's are equal (issue 35: pcie, smart, power, cpu info and
        # idle counters are the same scrape after scrape; _Rendered says what "equal" is)
        self._families: dict[str, _Rendered] = {}
        self._lock = threading.Lock()

    def render(self) -> bytes:
        """The whole exposition, UTF-8 encoded."""
        with self._lock:  # concurrent scrapes share (and would race on) the cache
            return self._render(self.registry.collect())

    def _render(self, metrics: Iterable[Any]) -> bytes:
        # the pieces of the text, joined once: a TextFamily's lines go in as its exporter
        # wrote them, never copied behind their header (issue 35: blockio's histograms, ~170 KB
        # of a 48-disk host's text, were copied twice a scrape, and kept twice while reused)
        out: list[str] = []
        reused = self._reused
        seen = 0
        for metric in metrics:
            if getattr(metric, REUSED, False):
                entry = reused.get(metric.name)
                if entry is None or entry[0] is not metric:
                    parts, n = self._parts(metric)
                    entry = reused[metric.name] = (metric, parts, n)
                out += entry[1]
                seen += entry[2]
            elif isinstance(metric, TextFamily):  # its lines are written: nothing to compare
                out.append(_header(metric))
                out.append(metric.lines)
                seen += metric.count
            else:
                text, n = self._equal_family(metric)
                out.append(text)
                seen += n
        if len(self._prefixes) > 4 * seen + 1024:
            self._prefixes.clear()  # series churned (devices went away): don't keep the dead ones
        if len(reused) > 4096:  # names no exporter makes any more (never this many: bound)
            reused.clear()
        if len(self._families) > 4096:
            self._families.clear()
        # "replace": the last line of defence against a string no exporter cleaned (a lone
        # surrogate from a BMC's JSON cannot be UTF-8): it costs that label's character, never
        # the page (issue 34); the exporters clean their strings first (exporters.base.clean_text).
        return "".join(out).encode("utf-8", "replace")

    def _equal_family(self, metric: Any) -> tuple[str, int]:
        """One family's text: the last one of its name again while its content is equal."""
        last = self._families.get(metric.name)
        now = _Rendered.of(metric)
        if last is not None and now is not None and last.same(now):
            return last.text, last.count
        text, n = self._family(metric)
        if now is not None and n:  # n == 0: written whole (timestamps, OpenMetrics samples)
            now.text, now.count = text, n
            self._families[metric.name] = now
        else:
            self._families.pop(metric.name, None)
        return text, n

    def _parts(self, metric: Any) -> tuple[tuple[str, ...], int]:
        """One family's text in pieces, and its samples' count."""
        if isinstance(metric, TextFamily):  # its exporter wrote its samples' lines
            return (_header(metric), metric.lines), metric.count
        text, n = self._family(metric)
        return (text,), n

    def _family(self, metric: Any) -> tuple[str, int]:
        """One family's text (no TextFamily), and its samples' count."""
        cache = self._prefixes
        lines = [_header(metric)]
        for s in metric.samples:
            # Sample: (name, labels, value, timestamp, ...), read by index (no property)
            name, labels, value, timestamp = s[0], s[1], s[2], s[3]
            if timestamp is not None or name.endswith(_OM_SUFFIXES):
                return _whole(metric), 0  # rare here: no exporter of wattbit writes these
            key = (name, tuple(labels.items()))
            entry = cache.get(key)
            if entry is not None and written_alike(value, entry[1]):
                # Unchanged since the last scrape (most series of a host: info gauges,
                # idle disks' buckets): its line as written then.
                lines.append(entry[2])
            else:
                prefix = series_prefix(name, labels) if entry is None else entry[0]
                line = f"{prefix}{floatToGoString(value)}\n"
                cache[key] = (prefix, value, line)
                lines.append(line)
        return "".join(lines), len(lines) - 1


def _whole(metric: Any) -> str:
    """A family with timestamps or OpenMetrics-only samples, as generate_latest writes it.

    Not generate_latest itself: its module imports the ssl module (OpenSSL), which the agent
    without TLS never loads (collector.agent.early.lean_imports).
    """
    lines = [_header(metric)]
    extra: dict[str, list[str]] = {}  # _created, _gsum, _gcount: gauges of their own, after
    for s in metric.samples:
        name, labels, value, timestamp = s[0], s[1], s[2], s[3]
        line = f"{series_prefix(name, labels)}{floatToGoString(value)}"
        if timestamp is not None:
            line += f" {int(float(timestamp) * 1000):d}"  # milliseconds
        suffix = name[len(metric.name) :] if name.startswith(metric.name) else ""
        if suffix in _OM_SUFFIXES:
            extra.setdefault(suffix, []).append(line + "\n")
        else:
            lines.append(line + "\n")
    for suffix, more in sorted(extra.items()):
        esc = om.escape_metric_name(metric.name + suffix, om.UNDERSCORES)
        lines.append(f"# HELP {esc} {_doc(metric.documentation)}\n# TYPE {esc} gauge\n")
        lines.extend(more)
    return "".join(lines)


def _header(metric: Any) -> str:
    """A family's HELP and TYPE lines, as generate_latest writes them."""
    mname, mtype = metric.name, metric.type
    if mtype == "counter":
        mname += "_total"
    elif mtype == "info":
        mname += "_info"
    mtype = _TYPES.get(mtype, mtype)
    esc = om.escape_metric_name(mname, om.UNDERSCORES)
    return f"# HELP {esc} {_doc(metric.documentation)}\n# TYPE {esc} {mtype}\n"


class _Rendered:
    """What a family's text is made of: its type, help, samples, and their values' bits.

    Samples compare equal (names, labels, values, timestamps) where the text may still differ:
    0.0 == -0.0 yet one is written "-0.0"; the values' IEEE 754 bytes tell them apart. A NaN
    may compare unequal to itself: its family is then written afresh (alike). The samples
    are kept as yielded: an exporter never changes a family's label dicts after yielding it.
    """

    __slots__ = ("bits", "count", "kind", "samples", "text")

    def __init__(self, kind: tuple[str, str], samples: list[Any], bits: bytes) -> None:
        self.kind, self.samples, self.bits = kind, samples, bits
        self.text, self.count = "", 0

    @classmethod
    def of(cls, metric: Any) -> _Rendered | None:
        """The family's content, or None when a value is no float (written afresh)."""
        samples = list(metric.samples)
        try:
            bits = array("d", [s[2] for s in samples]).tobytes()
        except (TypeError, OverflowError, ValueError):
            return None
        return cls((metric.type, metric.documentation), samples, bits)

    def same(self, other: _Rendered) -> bool:
        """Whether other's text is this one's: the same values' bits, type, help and samples."""
        return self.bits == other.bits and self.kind == other.kind and self.samples == other.samples


def metrics_app(registry: Collector) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving the registry through TextRenderer (gzip when the client asks)."""
    renderer = TextRenderer(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            start_response(
                "405 Method Not Allowed",
                [("Content-Type", "text/plain; charset=utf-8"), ("Allow", "GET, HEAD")],
            )
            return [b"405 Method Not Allowed\n"]
        body = renderer.render()
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    return app
