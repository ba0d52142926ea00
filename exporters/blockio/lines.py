"""blockio's busiest families' lines, written without Sample objects (issue 35).

Under load every disk's histogram and counters change at every scrape: ~2,200 samples on a
48-disk host. These write each family's lines from the numbers, with each series' prefix
kept while the series is there, and re-write only what changed (exporters/textfamily.py).
"""

from __future__ import annotations

from itertools import accumulate

from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from exporters.textfamily import TextFamily, count_text, series_prefix, written_alike

# per (device, op): its slots' counts and sum as last written, and the lines written then
_Chunk = tuple[tuple[int, ...], float, str]


class HistogramLines:
    """One histogram family's exposition lines, written from the kernel's per-slot counts.

    Each (device, op) is re-written only when its counts or sum changed since the family
    before (a busy host's idle disks keep their lines); its series' prefixes are kept while
    it is there. What was not added since the last family leaves with it (a disk detached).
    The lines are those prometheus_client writes for HistogramMetricFamily.add_metric of the
    same cumulative counts (tests/unit/test_textfamily.py).
    """

    def __init__(self, name: str, le: tuple[str, ...]) -> None:
        if not le or le[-1] != "+Inf":
            raise ValueError(f"{name}: the buckets must end in +Inf")
        self.name, self.le = name, le
        self._last: dict[tuple[str, str], _Chunk] = {}
        self._now: dict[tuple[str, str], _Chunk] = {}
        self._prefixes: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}

    def begin(self) -> None:
        """Start a family afresh (what a render that failed half-way added is dropped)."""
        self._now = {}

    def add(self, device: str, op: str, slots: list[int], total: float) -> None:
        """One series' per-slot (not cumulative) counts, one per le, and their sum."""
        key = (device, op)
        counts = tuple(slots)
        if len(counts) != len(self.le):
            raise ValueError(f"{self.name}: {len(counts)} slots for {len(self.le)} buckets")
        last = self._last.get(key)
        # == on the sum: a sum of the kernel's is never -0.0, and a NaN is re-written
        if last is not None and last[0] == counts and last[1] == total:
            self._now[key] = last
            return
        series = self._prefixes.get(key)
        if series is None:
            series = self._prefixes[key] = self._series(device, op)
        prefixes, buckets = series
        acc = tuple(accumulate(counts))
        if acc[-1] < 1_000_000 and min(counts) >= 0:  # then every cumulative count is below
            text = buckets % acc  # one C call for the bucket lines (issue 35)
        else:
            text = "".join(f"{p}{count_text(n)}\n" for p, n in zip(prefixes[:-2], acc, strict=True))
        text += f"{prefixes[-2]}{count_text(acc[-1])}\n{prefixes[-1]}{floatToGoString(total)}\n"
        self._now[key] = (counts, total, text)

    def family(self, documentation: str) -> TextFamily:
        """The family of what was added since the last one (which is then forgotten)."""
        chunks, self._last, self._now = self._now, self._now, {}
        if len(self._prefixes) > len(chunks):
            self._prefixes = {k: v for k, v in self._prefixes.items() if k in chunks}
        name, le = self.name, self.le
        entries = [(d, op, c, t) for (d, op), (c, t, _) in chunks.items()]

        def build() -> list[Sample]:
            return [s for d, op, c, t in entries for s in samples(name, d, op, c, le, t)]

        text = "".join(c[2] for c in chunks.values())
        return TextFamily(
            name, documentation, "histogram", text, len(chunks) * (len(le) + 2), build
        )

    def _series(self, device: str, op: str) -> tuple[tuple[str, ...], str]:
        """The prefixes of one (device, op): its buckets', then _count's and _sum's; and its
        bucket lines as a %-format of the cumulative counts below 10^6 (count_text's "n.0")."""
        name = self.name
        buckets = [
            series_prefix(f"{name}_bucket", {"device": device, "op": op, "le": b}) for b in self.le
        ]
        plain = {"device": device, "op": op}
        prefixes = (
            *buckets,
            series_prefix(f"{name}_count", plain),
            series_prefix(f"{name}_sum", plain),
        )
        return prefixes, "".join(p.replace("%", "%%") + "%d.0\n" for p in buckets)


def samples(
    name: str, device: str, op: str, counts: tuple[int, ...], le: tuple[str, ...], total: float
) -> list[Sample]:
    """HistogramMetricFamily.add_metric's samples of per-slot counts (cumulated here)."""
    out = [
        Sample(f"{name}_bucket", {"device": device, "op": op, "le": b}, float(n))
        for b, n in zip(le, accumulate(counts), strict=True)
    ]
    plain = {"device": device, "op": op}
    out.append(Sample(f"{name}_count", plain, float(sum(counts))))
    out.append(Sample(f"{name}_sum", plain, total))
    return out


class SeriesLines:
    """One counter or gauge family's lines, one per series (its labels' values, in order).

    A series whose value is written alike to the last family's keeps its line; a series not
    added since the last family leaves with it. The lines are those prometheus_client writes
    for the Counter/GaugeMetricFamily.add_metric of the same values (test_textfamily.py).
    """

    def __init__(self, name: str, typ: str, labelnames: tuple[str, ...]) -> None:
        if typ not in ("counter", "gauge"):
            raise ValueError(f"{name}: {typ} is not a counter or a gauge")
        self.name, self.typ, self.labelnames = name, typ, labelnames
        self.sample = f"{name}_total" if typ == "counter" else name
        self._last: dict[tuple[str, ...], tuple[float, str]] = {}
        self._now: dict[tuple[str, ...], tuple[float, str]] = {}
        self._prefixes: dict[tuple[str, ...], str] = {}

    def begin(self) -> None:
        """Start a family afresh (what a render that failed half-way added is dropped)."""
        self._now = {}

    def add(self, values: tuple[str, ...], value: float) -> None:
        """One series: its labels' values (in labelnames' order) and its value."""
        last = self._last.get(values)
        if last is not None and written_alike(last[0], value):
            self._now[values] = last
            return
        prefix = self._prefixes.get(values)
        if prefix is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(values)} label values")
            labels = dict(zip(self.labelnames, values, strict=True))
            prefix = self._prefixes[values] = series_prefix(self.sample, labels)
        self._now[values] = (value, f"{prefix}{floatToGoString(value)}\n")

    def family(self, documentation: str) -> TextFamily:
        """The family of what was added since the last one (which is then forgotten)."""
        series, self._last, self._now = self._now, self._now, {}
        if len(self._prefixes) > len(series):
            self._prefixes = {k: v for k, v in self._prefixes.items() if k in series}
        sample, names = self.sample, self.labelnames
        entries = [(k, v[0]) for k, v in series.items()]

        def build() -> list[Sample]:
            return [Sample(sample, dict(zip(names, k, strict=True)), v) for k, v in entries]

        text = "".join(v[1] for v in series.values())
        return TextFamily(self.name, documentation, self.typ, text, len(series), build)
