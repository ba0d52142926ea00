"""The contract every metric source implements, and the health wrapper around them."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)


def clean_text(value: object, limit: int = 128) -> str:
    """A string from outside (a BMC, an agent's output) made fit for a label and a log line.

    Printable and on one line (a lone surrogate, valid in JSON as "\\ud800", cannot be
    encoded as UTF-8 and once made every scrape fail; an ESC sequence or a newline in a log
    line can rewrite a terminal or forge a line): each such character becomes U+FFFD, so one
    bad value costs its own label's text at most (issue 34). "" for anything not a string.
    """
    if not isinstance(value, str):
        return ""
    text = value[: limit * 2]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else "\ufffd" for c in text)
    return text.strip()[:limit]


# Set on a family its exporter yields again as the very same object, never changed, while the
# family's inputs are unchanged (issue 35: a 48-disk host's idle disks' histograms are the
# same ~2,000 samples scrape after scrape). A renderer may keep such a family's text and reuse
# it while it is handed that same object (collector/web/exposition.py); any other family is
# rendered afresh.
REUSED = "_wattbit_reused"


def reusable(families: Iterable[Metric]) -> tuple[Metric, ...]:
    """The families, marked REUSED: the caller yields these objects again only unchanged."""
    out = tuple(families)
    for family in out:
        setattr(family, REUSED, True)
    return out


class Exporter(ABC):
    """A metric source, run on every scrape by ExportersCollector.

    Required: ``name`` (its ``exporter`` label in wattbit_exporter_up) and ``collect()``.
    Optional, with defaults here: ``startup_note()``, ``kept_capabilities()``,
    ``kept_effective()`` and ``close()``;
    the process running the exporters (collector/daemon/serve.py, for the agent and the site
    collector) logs every note once serving and closes every exporter when it stops, whatever
    the exporter; the agent drops every capability no exporter keeps once all have started.
    """

    name: str

    @abstractmethod
    def collect(self) -> Iterable[Metric]:
        """Read the source and yield its metric families (raise: absent this scrape, up 0)."""

    def startup_note(self) -> str:
        """One line for the log at start: how this exporter runs here ("": nothing to say)."""
        return ""

    def kept_capabilities(self) -> frozenset[int]:
        """Capabilities this exporter still needs once started (the agent drops the rest)."""
        return frozenset()

    def kept_effective(self) -> dict[int, str]:
        """Those of kept_capabilities() this process itself still uses once started, and why:
        kept effective (inherited by threads started later); the others stay permitted only,
        for what the process executes."""
        return {}

    def close(self) -> None:  # noqa: B027 (optional: a no-op unless overridden)
        """Release what the exporter holds (sockets, BPF programs); by default nothing."""


class ExportersCollector:
    """Runs every exporter on each scrape and reports each one's up and duration."""

    def __init__(
        self, exporters: Sequence[Exporter], clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.exporters = list(exporters)
        self._clock = clock
        self._failing: set[str] = set()

    def describe(self) -> list[Metric]:
        """Nothing to pre-declare: keeps registration from running a first collection."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Collect every exporter; one failing exporter never hides another's metrics."""
        up = GaugeMetricFamily(
            "wattbit_exporter_up",
            "1 if the exporter's last collection succeeded.",
            labels=["exporter"],
        )
        duration = GaugeMetricFamily(
            "wattbit_exporter_duration_seconds",
            "Time the exporter's last collection took.",
            labels=["exporter"],
        )
        for exporter in self.exporters:
            start = self._clock()
            try:
                families = list(exporter.collect())
                ok = 1.0
                if exporter.name in self._failing:
                    self._failing.discard(exporter.name)
                    log.info("exporter %s recovered", exporter.name)
            except Exception:
                families = []
                ok = 0.0
                # Log the traceback once per failure streak, not on every scrape.
                if exporter.name not in self._failing:
                    self._failing.add(exporter.name)
                    log.exception("exporter %s failed; its metrics are absent", exporter.name)
            up.add_metric([exporter.name], ok)
            duration.add_metric([exporter.name], self._clock() - start)
            yield from families
        yield up
        yield duration
