"""The run registry: named time windows (with labels) kept by the site collector.

A run is a name, optional labels and a start time; stopping it sets its end time. Runs are
held in memory behind a lock and persisted to `<state_dir>/runs.json` (written atomically:
temporary file, fsync, rename, fsync of the directory) on every change, so an active run
survives a restart of the collector. The file is mode 0600 and never reached through a
symbolic link: loading refuses one (O_NOFOLLOW), writing replaces the link itself. A corrupt
file is moved aside to `runs.json.corrupt` (never overwritten, never silently dropped) and the
registry starts empty.

Exported metrics (see docs/runs.md):

* `wattbit_run_active{run}`: 1 while the run is active, 0 for a recent ended run;
* `wattbit_run_start_time_seconds{run}`, `wattbit_run_end_time_seconds{run}` (ended only);
* `wattbit_run_info{run, labels}`: 1, the labels rendered as "k=v,k2=v2", sorted by name.

Ended runs stay exported (and in the file) while they are one of the `keep` most recently
ended, or ended less than `retention` ago; older ones are pruned. Never more than `max_runs`
in all: beyond it the earliest-ended go even within `retention`, and a start is refused while
`max_runs` runs are active. Every change rewrites the whole file; at the cap (1,000 runs, a
~300 kB file) that costs a few milliseconds plus one fsync (docs/benchmarks.md, "Run
registry"), so the file stays one JSON document rather than a log to compact.

Temporaries of a write interrupted by a crash or SIGKILL (`.runs.json.*.tmp`) are removed at
load.

The HTTP API over it is in api.py; `wattbit run` (cli.py) is its client.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from collector.values import unsafe_text
from exporters.base import Exporter

log = logging.getLogger("wattbit.runs")

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
LABEL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_LABELS = 32
MAX_LABEL_NAME = 64
MAX_LABEL_VALUE = 256
DEFAULT_KEEP = 100
DEFAULT_MAX_RUNS = 1000
DEFAULT_RETENTION = 7 * 86400.0
FILE_VERSION = 1
STATE_FILE = "runs.json"


class RunError(Exception):
    """A request the registry refuses; `status` is the HTTP status that says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def validate_name(name: object) -> str:
    """A run name, or ValueError saying what is wrong with it."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            "a run name is 1-128 characters of A-Z a-z 0-9 _ . : -, starting with a letter or "
            f"digit; got {name!r}"
        )
    return name


def validate_labels(labels: object) -> dict[str, str]:
    """Labels as {name: value}, or ValueError saying which one is wrong and why.

    Names are Prometheus label names (not the reserved `__` ones). Values are non-empty, at
    most 256 characters, without control or format characters (collector.values.unsafe_text)
    or commas (the `labels` label of wattbit_run_info joins them as "k=v,k2=v2", which must
    stay unambiguous), and encodable as UTF-8 (no lone surrogates).
    """
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise ValueError("labels must be an object of name: value strings")
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels per run")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if (
            not isinstance(key, str)
            or not LABEL_NAME_RE.fullmatch(key)
            or len(key) > MAX_LABEL_NAME
        ):
            raise ValueError(
                f"label name {key!r} is not a Prometheus label name ([A-Za-z_][A-Za-z0-9_]*, "
                f"at most {MAX_LABEL_NAME} characters)"
            )
        if key.startswith("__"):
            raise ValueError(f"label name {key!r}: names starting with __ are reserved")
        if not isinstance(value, str):
            raise ValueError(f"label {key}: the value must be a string")
        if not value or len(value) > MAX_LABEL_VALUE:
            raise ValueError(f"label {key}: the value must be 1-{MAX_LABEL_VALUE} characters")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            # JSON's "\ud800" decodes to a lone surrogate, which no UTF-8 text can hold:
            # /metrics would fail to encode on every scrape until the run was pruned.
            raise ValueError(f"label {key}: the value must be Unicode text (no lone surrogates)")
        if "," in value or unsafe_text(value):
            # C0 and C1 controls (U+009B is a terminal's CSI, as ESC [), format characters (a
            # bidi override reorders a log line) and line separators (issue 34)
            raise ValueError(
                f"label {key}: the value must not contain commas, format or control characters"
            )
        out[key] = value
    return out


def parse_label(text: str) -> tuple[str, str]:
    """('k', 'v') from 'k=v' (a command-line --label), validated."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"expected a label as k=v, got {text!r}")
    validate_labels({key: value})
    return key, value


def render_labels(labels: Mapping[str, str]) -> str:
    """Labels as the `labels` label of wattbit_run_info: "k=v,k2=v2", sorted by name."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number of seconds since the epoch")
    return float(value)


@dataclass(frozen=True)
class Run:
    """One run: a name, labels and its time window (end None while active)."""

    name: str
    start: float
    end: float | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        """True until the run is stopped."""
        return self.end is None

    def to_json(self) -> dict[str, Any]:
        """The run as the API and the state file show it."""
        return {
            "name": self.name,
            "labels": dict(sorted(self.labels.items())),
            "active": self.active,
            "start_time": self.start,
            "end_time": self.end,
            "start": _iso(self.start),
            "end": _iso(self.end),
        }

    @cached_property
    def json_line(self) -> str:
        """to_json() encoded, once per run (a run never changes: stopping makes a new one)."""
        return json.dumps(self.to_json())

    @classmethod
    def from_json(cls, data: object) -> Run:
        """A run from the state file; ValueError if anything in it is off."""
        if not isinstance(data, dict):
            raise ValueError("a run must be an object")
        name = validate_name(data.get("name"))
        start = _number(data.get("start_time"), f"run {name}: start_time")
        end_raw = data.get("end_time")
        end = None if end_raw is None else _number(end_raw, f"run {name}: end_time")
        try:
            labels = validate_labels(data.get("labels") or {})
        except ValueError as exc:
            raise ValueError(f"run {name}: {exc}") from None
        return cls(name=name, start=start, end=end, labels=labels)


def _dump(runs: Mapping[str, Run]) -> str:
    # One run a line, each by the C encoder (indent= takes json's Python encoder: 40 ms for
    # 1,000 runs against 4 ms here, every write; docs/benchmarks.md "Run registry").
    ordered = sorted(runs.values(), key=lambda r: (r.start, r.name))
    lines = ",\n  ".join(r.json_line for r in ordered)
    return (
        f'{{"version": {FILE_VERSION}, "runs": [\n  {lines}\n]}}'
        if lines
        else (f'{{"version": {FILE_VERSION}, "runs": []}}')
    )


def _parse(text: str) -> dict[str, Run]:
    """The runs of a state file; ValueError if it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != FILE_VERSION:
        raise ValueError(f"expected an object with version {FILE_VERSION}")
    items = data.get("runs")
    if not isinstance(items, list):
        raise ValueError("expected a list of runs")
    runs: dict[str, Run] = {}
    for item in items:
        run = Run.from_json(item)
        if run.name in runs:
            raise ValueError(f"run {run.name!r} appears twice")
        runs[run.name] = run
    return runs


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text`: a temporary file beside it, fsync, rename, fsync the dir.

    A crash at any moment leaves either the old file or the new one, never a torn one.
    """
    # mkstemp creates the file 0600 with O_EXCL (never through a planted link); os.replace
    # renames over the name itself, so a symlink at `path` is replaced, never followed.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)  # run names and labels are the site's business only
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)


def _read_nofollow(path: Path) -> bytes:
    """The bytes of a regular file, refusing a symbolic link (OSError ELOOP) or anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, f"{path} is a symbolic link; refusing to follow it"
            ) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        return f.read()


def _ms(t: float) -> float:
    """A run's time, to the millisecond: a short decimal that every store keeps exactly.

    VictoriaMetrics keeps a value as a decimal of about 15 significant digits: a time with
    microseconds came back ~2 µs off, and a report from it rounded a run's end to another
    millisecond than the site's Prometheus (docs/longterm-store.md).
    """
    return round(t, 3)


class RunRegistry(Exporter):
    """Thread-safe registry of runs, persisted to a JSON file; also a metric source."""

    name = "runs"  # the exporter name in wattbit_exporter_up{exporter}

    def __init__(
        self,
        path: Path | None,
        keep: int = DEFAULT_KEEP,
        retention: float = DEFAULT_RETENTION,
        clock: Callable[[], float] = time.time,
        max_runs: int = DEFAULT_MAX_RUNS,
    ) -> None:
        """`path`: the state file (None: memory only); `clock`: seconds since the epoch."""
        self.path = path
        self.keep = keep
        self.retention = retention
        self.max_runs = max_runs
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self.load_error: str | None = None  # why the state file was set aside, if it was

    # -- persistence ----------------------------------------------------------------------

    def load(self) -> None:
        """Read the state file. Missing: start empty. Corrupt: set it aside, start empty.

        A file that exists but cannot be read (permissions, I/O error) raises OSError: the
        collector must not start and later overwrite runs it could not see.
        """
        if self.path is None:
            return
        self._remove_temporaries()
        try:
            raw = _read_nofollow(self.path)
        except FileNotFoundError:
            return
        try:
            runs = _parse(raw.decode("utf-8"))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            aside = self._set_aside()
            self.load_error = f"{self.path} is not a valid run registry ({exc})"
            log.error(
                "%s; moved it to %s and started with no runs (the file is kept for inspection)",
                self.load_error,
                aside,
            )
            with self._lock:
                self._runs = {}
            return
        with self._lock:
            self._runs = self._pruned(runs, self._clock())
        active = sum(1 for r in self._runs.values() if r.active)
        log.info("loaded %d run(s) from %s, %d active", len(self._runs), self.path, active)

    def _remove_temporaries(self) -> None:
        """Remove what interrupted writes left: `.runs.json.*.tmp` (mkstemp's names) beside it.

        Only this collector writes them, under its lock; at load nothing is writing yet.
        """
        assert self.path is not None
        prefix, removed = f".{self.path.name}.", 0
        try:
            names = os.listdir(self.path.parent)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(prefix) and name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path.parent / name)  # a link itself, never its target
                    removed += 1
        if removed:
            log.warning("removed %d temporary file(s) of interrupted writes", removed)

    def _set_aside(self) -> Path:
        """Rename the state file to runs.json.corrupt (or .corrupt.N: never overwrite one)."""
        assert self.path is not None
        candidate = self.path.with_name(self.path.name + ".corrupt")
        n = 0
        while os.path.lexists(candidate):
            n += 1
            candidate = self.path.with_name(f"{self.path.name}.corrupt.{n}")
        os.rename(self.path, candidate)
        return candidate

    def _commit(self, runs: dict[str, Run]) -> None:
        """Persist `runs`, then make them current (with the lock held)."""
        if self.path is not None:
            try:
                atomic_write(self.path, _dump(runs) + "\n")
            except OSError as exc:
                log.error("cannot save the run registry to %s: %s", self.path, exc)
                raise RunError(500, f"cannot save the run registry: {exc.strerror or exc}") from exc
        self._runs = runs

    def _pruned(self, runs: Mapping[str, Run], now: float) -> dict[str, Run]:
        """Active runs, plus ended ones among the `keep` latest or within `retention`."""
        ended = sorted(
            (r for r in runs.values() if r.end is not None),
            key=lambda r: (r.end, r.start, r.name),
            reverse=True,
        )
        kept = {r.name for r in ended[: self.keep]}
        kept |= {r.name for r in ended if r.end is not None and now - r.end < self.retention}
        # max_runs in all, active first: the earliest-ended go, even within retention
        room = max(0, self.max_runs - sum(1 for r in runs.values() if r.active))
        kept &= {r.name for r in ended[:room]}
        return {n: r for n, r in runs.items() if r.active or n in kept}

    # -- the registry ---------------------------------------------------------------------

    def start(self, name: str, labels: Mapping[str, str] | None = None) -> Run:
        """Start a run; 400 for a bad name or label, 409 if it is already active.

        A name whose earlier run has ended may be started again: a new window replaces it.
        """
        try:
            validate_name(name)
            clean = validate_labels(labels or {})
        except ValueError as exc:
            raise RunError(400, str(exc)) from None
        with self._lock:
            current = self._runs.get(name)
            if current is not None and current.active:
                raise RunError(409, f"run {name!r} is already active (since {_iso(current.start)})")
            if sum(1 for r in self._runs.values() if r.active) >= self.max_runs:
                raise RunError(
                    409, f"{self.max_runs} runs are active (runs.max_runs): stop one first"
                )
            now = _ms(self._clock())
            run = Run(name=name, start=now, labels=clean)
            self._commit(self._pruned({**self._runs, name: run}, now))
        log.info("run %s started%s", name, f" ({render_labels(clean)})" if clean else "")
        return run

    def stop(self, name: str) -> Run:
        """Stop an active run; 404 if there is no such run, 409 if it has already ended."""
        try:
            validate_name(name)
        except ValueError as exc:
            raise RunError(400, str(exc)) from None
        with self._lock:
            current = self._runs.get(name)
            if current is None:
                raise RunError(404, f"no run named {name!r}")
            if not current.active:
                raise RunError(409, f"run {name!r} is not active (it ended {_iso(current.end)})")
            now = _ms(self._clock())
            end = max(now, current.start)  # a clock stepped back must not end it before it began
            run = Run(name=name, start=current.start, end=end, labels=current.labels)
            self._commit(self._pruned({**self._runs, name: run}, now))
        log.info("run %s stopped after %.1fs", name, (run.end or 0.0) - run.start)
        return run

    def get(self, name: str) -> Run | None:
        """One run (active or recent), or None."""
        with self._lock:
            return self._pruned(self._runs, self._clock()).get(name)

    def runs(self) -> list[Run]:
        """Active and recent runs, oldest start first."""
        with self._lock:
            current = self._pruned(self._runs, self._clock())
        return sorted(current.values(), key=lambda r: (r.start, r.name))

    # -- metrics --------------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        """The run metrics, for ExportersCollector."""
        active = GaugeMetricFamily(
            "wattbit_run_active",
            "1 while the run is active, 0 for a recently ended run.",
            labels=["run"],
        )
        start = GaugeMetricFamily(
            "wattbit_run_start_time_seconds",
            "When the run started, in seconds since the epoch.",
            labels=["run"],
        )
        end = GaugeMetricFamily(
            "wattbit_run_end_time_seconds",
            "When the run ended, in seconds since the epoch.",
            labels=["run"],
        )
        info = GaugeMetricFamily(
            "wattbit_run_info",
            'The run\'s labels as "k=v,k2=v2", sorted by name; always 1.',
            labels=["run", "labels"],
        )
        for run in self.runs():
            active.add_metric([run.name], 1.0 if run.active else 0.0)
            start.add_metric([run.name], run.start)
            if run.end is not None:
                end.add_metric([run.name], run.end)
            info.add_metric([run.name, render_labels(run.labels)], 1.0)
        return [active, start, end, info]
