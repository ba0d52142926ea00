"""A histogram family's lines written from per-slot counts, per (device, op) (issue 35)."""

from __future__ import annotations

from itertools import accumulate

from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from exporters.textfamily import TextFamily, count_text, series_prefix

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
        self._prefixes: dict[tuple[str, str], tuple[str, ...]] = {}

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
        prefixes = self._prefixes.get(key)
        if prefixes is None:
            prefixes = self._prefixes[key] = self._series(device, op)
        acc = list(accumulate(counts))
        lines = [f"{p}{count_text(n)}\n" for p, n in zip(prefixes[:-2], acc, strict=True)]
        lines.append(f"{prefixes[-2]}{count_text(acc[-1])}\n")
        lines.append(f"{prefixes[-1]}{floatToGoString(total)}\n")
        self._now[key] = (counts, total, "".join(lines))

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

    def _series(self, device: str, op: str) -> tuple[str, ...]:
        """The prefixes of one (device, op): its buckets', then _count's and _sum's."""
        name = self.name
        buckets = [
            series_prefix(f"{name}_bucket", {"device": device, "op": op, "le": b}) for b in self.le
        ]
        plain = {"device": device, "op": op}
        return (
            *buckets,
            series_prefix(f"{name}_count", plain),
            series_prefix(f"{name}_sum", plain),
        )


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
