"""Every metric family either daemon exports is in the reference docs, and every family the
reference docs name is exported (dashboards and rules have their own checks).

Exported: the families of the two whole-process goldens, tests/fixtures/metrics/agent.prom
(tests/unit/test_agent_golden.py) and site.prom (tests/unit/test_site_golden.py), plus
NOT_IN_GOLDENS: families the goldens cannot show (another backend, an opt-in), each with why.
Documented: every `wattbit_*` name in the reference pages, docs/exporters/*.md and docs/runs.md
(a name followed by `*` is a family of names, one followed by `.x` a file: neither counts).
"""

from __future__ import annotations

import re

from tests.support.env import FIXTURES, ROOT

GOLDENS = [FIXTURES / "metrics" / "agent.prom", FIXTURES / "metrics" / "site.prom"]
REFERENCE = [*sorted((ROOT / "docs" / "exporters").glob("*.md")), ROOT / "docs" / "runs.md"]

# Exported, but by no golden: family -> why (the goldens run blockio on diskstats, defaults).
NOT_IN_GOLDENS = {
    "wattbit_blockio_bpf_runs_total": "the BPF backends' own cost: core and bcc only",
    "wattbit_blockio_bpf_run_seconds_total": "the BPF backends' own cost: core and bcc only",
    "wattbit_blockio_bpf_missed_events_total": "the BPF backends' own cost: core and bcc only",
    "wattbit_blockio_bpf_map_full_total": "the BPF backends' maps: core and bcc only",
    "wattbit_disk_io_size_bytes": "blockio.size_histogram, opt-in (series budget)",
    "wattbit_disk_io_latency_clock_info": "core and bcc only: which clock the latency reads",
    "wattbit_disk_io_untimed_total": "core and bcc only: requests the latency could not time",
    "wattbit_disk_ios_unseen_total": "core only, and only where the kernel skipped the program",
    "wattbit_cpu_seconds_total": "cpu.enabled, opt-in (where no node_exporter runs)",
    "wattbit_tcp_flow_label_info": "tcp.key with experiment or activity only (SciTags)",
    "wattbit_tcp_flow_label_entries": "tcp.key with experiment or activity only (SciTags)",
}

_NAME = re.compile(r"(?<![:\w])(wattbit_[a-z0-9_]*[a-z0-9])(?![\w*]|\.[A-Za-z])")
_SUFFIXES = ("_bucket", "_sum", "_count")  # a histogram's series, named in prose


def exported() -> dict[str, str]:
    """Every family either golden exports -> the golden's file name."""
    out: dict[str, str] = {}
    for golden in GOLDENS:
        for line in golden.read_text().splitlines():
            if line.startswith("# TYPE "):
                out.setdefault(line.split()[2], golden.name)
    return out


def documented() -> dict[str, list[str]]:
    """Every family the reference docs name -> the pages that name it."""
    names = {**exported(), **NOT_IN_GOLDENS}
    out: dict[str, list[str]] = {}
    for page in REFERENCE:
        for name in _NAME.findall(page.read_text()):
            base = next((name.removesuffix(s) for s in _SUFFIXES if name.endswith(s)), name)
            name = base if base in names else name
            where = str(page.relative_to(ROOT))
            if where not in out.setdefault(name, []):
                out[name].append(where)
    return out


def test_every_exported_family_is_documented() -> None:
    docs = documented()
    pages = ", ".join(str(p.relative_to(ROOT)) for p in REFERENCE)
    missing = [
        f"  {name} (exported in {where}): name it in the metric table of its exporter's page"
        for name, where in sorted({**exported(), **dict.fromkeys(NOT_IN_GOLDENS, "code")}.items())
        if name not in docs
    ]
    assert not missing, f"exported but in no reference page ({pages}):\n" + "\n".join(missing)


def test_every_documented_family_is_exported() -> None:
    known = {**exported(), **NOT_IN_GOLDENS}
    goldens = ", ".join(str(g.relative_to(ROOT)) for g in GOLDENS)
    stray = [
        f"  {name} (named in {', '.join(pages)}): make a golden show it ({goldens}: "
        "WATTBIT_UPDATE_GOLDEN=1), or if no golden can (another backend, an opt-in), add it "
        "to NOT_IN_GOLDENS in tests/unit/test_metric_docs.py with why; or fix the name"
        for name, pages in sorted(documented().items())
        if name not in known
    ]
    assert not stray, "documented but exported by no golden:\n" + "\n".join(stray)


def test_the_families_outside_the_goldens_are_real() -> None:
    # each one is written in an exporter's code, and none has since reached a golden
    code = "\n".join(p.read_text() for p in sorted((ROOT / "exporters").rglob("*.py")))
    for name in NOT_IN_GOLDENS:
        base = name.removesuffix("_total")
        assert f'"{base}"' in code, f"{name}: no exporter writes it; drop it from NOT_IN_GOLDENS"
        assert name not in exported(), f"{name} is in a golden now: drop it from NOT_IN_GOLDENS"


def test_the_reader_sees_names_and_skips_the_rest() -> None:
    text = (
        "`wattbit_nic_bytes_total` and wattbit_disk_io_latency_seconds_bucket{le} in prose; "
        "not `wattbit_snmp_*`, not wattbit_buckets.h, not site:wattbit_joules_per_gigabit:ratio1m"
    )
    assert _NAME.findall(text) == [
        "wattbit_nic_bytes_total",
        "wattbit_disk_io_latency_seconds_bucket",
    ]
