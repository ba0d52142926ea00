"""A small client of Prometheus' HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

Standard library only. Queries are sent as form-encoded POSTs (long selectors do not hit URL
length limits); answers are parsed into :class:`Series`. ``query_range`` is cut into chunks
under Prometheus' limit of 11 000 points per series, and raw-sample fetches (range selectors
in an instant query) are cut into time chunks so that no single answer grows without bound.
Every value is taken at the significant digits every store keeps (:func:`steady`).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import re
import socket
import threading
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
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
# Significant digits every store keeps of a value: VictoriaMetrics 1.79 turns a non-integer
# into a decimal of about 12 (lib/decimal's conversionPrecision, 1e12), about 15 above 1e6
# (its issue 213: big counters), integers below 2^55 exactly; Prometheus keeps the double as
# sent (17). docs/longterm-store.md, quirk 7.
DIGITS, DIGITS_BIG, BIG = 12, 15, 1e6
_EXACT = float(2**53)  # integers below this are exact doubles, kept exactly by both stores
_SHORT = DIGITS + 1  # a value written in this many characters has at most DIGITS digits

LabelKey = tuple[tuple[str, str], ...]

# What one answer may hold (`--max-answer-bytes`, `--max-series`). JSON of a matrix grows about
# 12-fold in memory once parsed (a 64 MiB answer: ~0.8 GB peak RSS, docs/report.md); a series
# costs ~1 KB however few its samples. A store answering more is refused, not trusted.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_SERIES = 100_000
# Range queries are cut into time chunks of at most this many points in all (series × points):
# a site-wide query of 48,000 disks then stays near 12 MB of JSON per answer, far below the cap.
POINTS_PER_ANSWER = 400_000
# An error answer is read this far and shown this far (after control characters go).
MAX_ERROR_BYTES = 64 * 1024
MAX_ERROR_SHOWN = 300


class PromError(Exception):
    """Prometheus could not be reached, refused a query or gave an unusable answer."""

    fatal = False  # True: the store is not worth asking anything else


class PromTimeout(PromError):
    """No complete answer within ``--timeout``."""

    fatal = True


class PromTooLarge(PromError):
    """An answer beyond ``--max-answer-bytes`` or ``--max-series``."""

    fatal = True


def shown(text: str, limit: int = MAX_ERROR_SHOWN) -> str:
    """The store's words as they may be printed: one line, no control characters, short.

    Control and format characters (terminal escapes, carriage returns, bidi overrides) become
    ``?``, runs of blanks one space; longer than ``limit`` is cut with an ellipsis.
    """
    out = []
    for ch in text[: limit * 4]:
        if ch in "\t\n\r":
            out.append(" ")
        elif unicodedata.category(ch)[0] == "C":
            out.append("?")
        else:
            out.append(ch)
    line = " ".join("".join(out).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _Deadline:
    """The whole of one request (connect, TLS, send, status, headers, body) within ``seconds``.

    urllib's timeout is per socket operation: a store dripping a byte a second never trips it.
    A timer shuts the request's sockets down when the time is up, which ends any read or write
    in progress at once; each connect is given what time is left.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._done = False
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def remaining(self) -> float:
        """Seconds left (at least a millisecond, so a socket timeout is never 0: non-blocking)."""
        return max(0.001, self._end - time.monotonic())

    def watch(self, sock: socket.socket) -> socket.socket:
        """Shut ``sock`` down when the time is up (at once when it already is)."""
        with self._lock:
            self._socks.append(sock)
            late = self.expired
        if late:
            self._shutdown(sock)
        return sock

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        # socket.socket's own shutdown, also on an SSLSocket (whose shutdown() would drop its
        # TLS state under the reading thread's feet): the reader sees EOF and returns.
        with contextlib.suppress(OSError):  # closed already
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            socks = list(self._socks)
        for sock in socks:
            self._shutdown(sock)

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()

    def handlers(self) -> list[urllib.request.BaseHandler]:
        """urllib handlers whose connections this deadline bounds."""
        deadline = self

        def watched(base: type[http.client.HTTPConnection]) -> Callable[..., Any]:
            def make(*args: Any, **kw: Any) -> http.client.HTTPConnection:
                conn = base(*args, **{**kw, "timeout": deadline.remaining()})
                create = conn._create_connection  # type: ignore[attr-defined]
                conn._create_connection = lambda *a, **k: deadline.watch(create(*a, **k))  # type: ignore[attr-defined]
                return conn

            return make

        class HTTPS(http.client.HTTPSConnection):
            def connect(self) -> None:
                # HTTPSConnection.connect with the handshake apart, so that the deadline
                # watches the TLS socket while it shakes hands (CPython 3.11's own steps).
                http.client.HTTPConnection.connect(self)
                host = self._tunnel_host or self.host  # type: ignore[attr-defined]
                tls = self._context.wrap_socket(  # type: ignore[attr-defined]
                    self.sock, server_hostname=host, do_handshake_on_connect=False
                )
                self.sock = deadline.watch(tls)
                tls.do_handshake()

        class HTTPHandler(urllib.request.HTTPHandler):
            def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(watched(http.client.HTTPConnection), req)  # type: ignore[arg-type]

        class HTTPSHandler(urllib.request.HTTPSHandler):
            def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
                return self.do_open(watched(HTTPS), req, context=self._context)  # type: ignore[arg-type,attr-defined]

        return [HTTPHandler(), HTTPSHandler()]


def _read_capped(resp: Any, limit: int, where: str) -> bytes:
    """The body of an answer: _TooLarge beyond ``limit`` bytes, PromError when cut short."""
    header = resp.headers.get("Content-Length")
    length = int(header) if header is not None and header.strip().isdigit() else None
    if length is not None and length > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = resp.read(min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise _TooLarge
    if length is not None and size < length:  # http.client's read(n) returns it short
        raise PromError(
            f"{where}: a broken HTTP answer: the body ended early ({size} of {length} bytes)"
        )
    return b"".join(chunks)


class _TooLarge(Exception):
    pass


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

    ``timeout`` bounds each request as a whole; ``max_answer_bytes`` and ``max_series`` what
    one answer may hold. Every unusable answer is a one-line PromError.
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
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_series: int = MAX_SERIES,
    ) -> None:
        public = without_userinfo(url)
        if public != url:
            raise PromError(
                f"{public.rstrip('/')}: credentials in the URL are not supported; use "
                "--prometheus-user with --prometheus-password-file, or --prometheus-token-file"
            )
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self.max_series = max_series
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
        where = f"{self.url}{path}"
        with _Deadline(self.timeout) as deadline:
            try:
                return self._ask(path, params, deadline)
            except PromError:
                if deadline.expired:
                    raise PromTimeout(self._late(where)) from None
                raise
            except _TooLarge:
                raise PromTooLarge(
                    f"{where}: the answer is larger than {self.max_answer_bytes} bytes "
                    "(--max-answer-bytes; a shorter window or a coarser --step asks for less)"
                ) from None
            except (http.client.HTTPException, urllib.error.URLError, OSError, ValueError) as exc:
                if deadline.expired:
                    raise PromTimeout(self._late(where)) from None
                if isinstance(exc, urllib.error.URLError) and not isinstance(
                    exc, urllib.error.HTTPError
                ):
                    reason = shown(str(exc.reason))
                    raise PromError(f"cannot reach Prometheus at {self.url}: {reason}") from None
                raise PromError(f"{where}: a broken HTTP answer: {_what(exc)}") from None

    def _late(self, where: str) -> str:
        return f"{where}: no complete answer within {self.timeout:g} s (--timeout)"

    def _ask(self, path: str, params: dict[str, str] | None, deadline: _Deadline) -> Any:
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
        where = f"{self.url}{path}"
        opener = urllib.request.build_opener(*deadline.handlers())
        try:
            with opener.open(req, timeout=deadline.remaining()) as resp:
                body = _read_capped(resp, self.max_answer_bytes, where)
        except urllib.error.HTTPError as exc:
            try:
                detail = exc.read(MAX_ERROR_BYTES).decode("utf-8", "replace")
            except (http.client.HTTPException, OSError):
                detail = ""
            finally:
                exc.close()
            try:
                err = json.loads(detail)
                detail = f"{err.get('errorType', '')}: {err.get('error', detail)}"
            except (ValueError, RecursionError, AttributeError):
                pass
            raise PromError(f"{where}: HTTP {exc.code}: {shown(detail)}") from None
        if body.count(b'"metric"') > self.max_series:  # before parsing: a series costs ~1 KB
            raise self._too_many(where)
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise PromError(f"{where}: the answer is not JSON (or nested too deeply)") from None
        if not isinstance(doc, dict):
            raise PromError(f"{where}: the answer is not a JSON object")
        if doc.get("status") != "success":
            raise PromError(
                f"{where}: {shown(str(doc.get('errorType')))}: {shown(str(doc.get('error')))}"
            )
        data = doc.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(result, list) and len(result) > self.max_series:
            raise self._too_many(where)
        return data

    def _parse(self, data: Any, path: str) -> list[Series]:
        try:
            return _parse(data)
        except PromError as exc:
            raise PromError(f"{self.url}{path}: {exc}") from None

    def _too_many(self, where: str) -> PromError:
        return PromTooLarge(
            f"{where}: the answer holds more than {self.max_series} series (--max-series)"
        )

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
        except PromError as exc:
            if exc.fatal:  # no answer in time, or a huge one: the report stops here
                raise
            points = None
        if points in (10.0, 11.0):
            return points == 11.0
        try:
            info = self._call("/api/v1/status/buildinfo")
            version = str(info.get("version", "")) if isinstance(info, dict) else ""
        except PromError as exc:
            if exc.fatal:
                raise
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
        return self._parse(data, "/api/v1/query")

    def query_range(
        self, expr: str, start: float, end: float, step: float, series: int = 1
    ) -> list[Series]:
        """Range query evaluated at ``start, start+step, ... <= end``, chunked under 11 000 points.

        ``series``, how many series the answer is expected to hold, makes the chunks shorter so
        that an answer holds about POINTS_PER_ANSWER points in all. Series of the chunks are
        joined by label set.
        """
        if step <= 0:
            raise ValueError("step must be positive")
        n = math.floor((end - start) / step + 1e-9) + 1
        per = max(1, min(MAX_POINTS - 1, POINTS_PER_ANSWER // max(1, series)))
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
            _merge(out, self._parse(data, "/api/v1/query_range"))
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


def _what(exc: BaseException) -> str:
    """One line on what was wrong with an HTTP answer, quoting none of it."""
    if isinstance(exc, http.client.IncompleteRead):
        return f"the body ended early ({len(exc.partial)} bytes read)"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the connection closed without an answer"
    if isinstance(exc, http.client.BadStatusLine):
        return "not an HTTP status line"
    if isinstance(exc, http.client.LineTooLong):
        return "a header line is too long"
    if isinstance(exc, http.client.HTTPException):
        return shown(str(exc) or type(exc).__name__, 80)  # "got more than 100 headers"
    if isinstance(exc, OSError):
        return shown(exc.strerror or str(exc) or type(exc).__name__, 80)
    return shown(str(exc) or type(exc).__name__, 80)


def steady(v: float) -> float:
    """``v`` at the significant digits every store keeps (:data:`DIGITS`, :data:`DIGITS_BIG`
    from :data:`BIG` on), an integer as it is; NaN and infinities unchanged.

    The stores keep other last bits of one sample: Prometheus the exporter's double as sent
    (the tcp exporter's busy seconds, a sum of fractions: ``0.11599999999999999``),
    VictoriaMetrics 1.79 a decimal (``0.116``). Figures computed from those differ by 1e-16,
    and one exactly on a boundary of the verdict's words (a flow key busy 0.5 % of the time)
    read "1 %" from one store and "0 %" from the other. At these digits both give the report
    the same number, so it computes the same figures and words from either.
    """
    if not math.isfinite(v) or (v.is_integer() and abs(v) < _EXACT):
        return v
    return float(f"{v:.{DIGITS_BIG if abs(v) >= BIG else DIGITS}g}")


def _sample(pair: Any) -> tuple[float, float]:
    """One ``[time, "value"]`` pair, its value :func:`steady`; ValueError when it is not one."""
    if not isinstance(pair, list) or len(pair) != 2:
        raise ValueError("a sample is not a [time, value] pair")
    t, v = pair
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        raise ValueError("a sample time is not a number")
    if not isinstance(v, str):
        raise ValueError("a sample value is not a string")
    x = float(v)  # "NaN", "+Inf" are values Prometheus sends
    # a short one is steady already (the cheap case: most values are integers or short)
    return float(t), x if len(v) <= _SHORT else steady(x)


def _labels(metric: Any) -> dict[str, str]:
    if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
        raise ValueError("a series' labels are not a mapping of strings")
    return dict(metric)


def _parse(data: Any) -> list[Series]:
    """An answer's ``data`` as series; PromError (quoting none of it) when it is malformed."""
    try:
        return _parse_checked(data)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        reason = str(exc) if isinstance(exc, ValueError) and " " in str(exc) else "malformed"
        raise PromError(f"a malformed answer: {shown(reason, 80)}") from None


def _parse_checked(data: Any) -> list[Series]:
    if not isinstance(data, dict):
        raise ValueError("data is not an object")
    kind = data.get("resultType")
    result = data.get("result") or []
    out: list[Series] = []
    if kind == "vector":
        if not isinstance(result, list):
            raise ValueError("a vector's result is not a list")
        for r in result:
            out.append(Series(_labels(r["metric"]), [_sample(r["value"])]))
    elif kind == "matrix":
        if not isinstance(result, list):
            raise ValueError("a matrix's result is not a list")
        for r in result:
            if not isinstance(r["values"], list):
                raise ValueError("a series' values are not a list")
            out.append(Series(_labels(r["metric"]), [_sample(p) for p in r["values"]]))
    elif kind == "scalar":
        out.append(Series({}, [_sample(result)]))
    else:
        raise ValueError(f"unexpected result type {shown(str(kind), 40)!r}")
    return out


def _merge(into: dict[LabelKey, Series], series: Iterable[Series]) -> None:
    for s in series:
        have = into.get(s.key)
        if have is None:
            into[s.key] = s
        else:
            have.samples.extend(s.samples)
