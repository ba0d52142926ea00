"""Metric families whose exporter writes their samples' lines itself (issue 35).

A 48-disk host under load changes ~1,800 latency-histogram samples every scrape. Built as
prometheus_client ``Sample`` objects and formatted one by one by the renderer, they cost
~6 ms of CPU per scrape (docs/benchmarks.md, "the scrape under fio"); written as text from
the kernel's integer counts in one pass, ~0.2 ms. A ``TextFamily`` carries those lines; the
agent's renderer (collector/web/exposition.py) writes them after the family's HELP and TYPE,
and anything else (prometheus_client's ``generate_latest``, tests) reads ``samples``, built
from the same counts on first access. tests/unit/test_textfamily.py holds the two to one text.
"""

from __future__ import annotations

from collections.abc import Callable
from math import copysign

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


def series_prefix(name: str, labels: dict[str, str]) -> str:
    """A series' ``name{labels} `` as generate_latest writes it (labels sorted, escaped)."""
    if not labels:
        return f"{om.escape_metric_name(name, om.UNDERSCORES)} "
    pairs = ",".join(
        f'{om.escape_label_name(k, om.UNDERSCORES)}="{om._escape(v, om.ALLOWUTF8, False)}"'  # type: ignore[arg-type]  # as generate_latest calls it
        for k, v in sorted(labels.items())
    )
    return f"{om.escape_metric_name(name, om.UNDERSCORES)}{{{pairs}}} "


def written_alike(a: float, b: float) -> bool:
    """Whether a and b are written alike: equal, and of one sign when zero (-0.0 is "-0.0")."""
    return a == b and (a != 0 or copysign(1.0, a) == copysign(1.0, b))


def count_text(n: int) -> str:
    """floatToGoString(float(n)) of a count n >= 0, without the float's repr below 10^6.

    Below 10^6 Python's repr of the float is the integer and ".0", as Go writes it; from 10^6
    on Go switches to an exponent (prometheus_client.utils.floatToGoString does that part).
    """
    return f"{n}.0" if 0 <= n < 1_000_000 else floatToGoString(float(n))


class TextFamily(Metric):
    """A metric family carrying its samples' exposition lines, as its exporter wrote them.

    ``lines``: the samples' lines in the text format (each ending in a newline), in the order
    of ``samples``; ``count``: how many. ``samples`` is built by ``build`` on first access
    only: the agent's renderer never asks for it.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        typ: str,
        lines: str,
        count: int,
        build: Callable[[], list[Sample]],
    ) -> None:
        super().__init__(name, documentation, typ)
        self.lines, self.count = lines, count
        self._build: Callable[[], list[Sample]] | None = build

    @property  # type: ignore[override]  # Metric's plain attribute, built here on demand
    def samples(self) -> list[Sample]:
        """The family's samples (built from the exporter's data the first time)."""
        if self._build is not None:
            self._samples = self._build()
            self._build = None
        return self._samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = value
        self._build = None
