"""What every part of the blockio overhead bench uses: settings, goals, log, BPF programs."""

from __future__ import annotations

import contextlib
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.harness import (
    spawn,
    stop,
)

REPO = Path(__file__).resolve().parents[2]

BT_SCRIPT = Path(__file__).resolve().with_name("blockio_overhead.bt")
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
BTF = Path("/sys/kernel/btf/vmlinux")
LOOP_SIZE = 1 << 30
NEIGHBOUR_SHARE = 0.02  # another process using more than 2% of one CPU during a run is noise
TRACERS = ("core", "bcc", "empty", "bpftrace", "ebpf_exporter")
# ebpf_exporter only when its binary is given (--ebpf-exporter)
DEFAULT_TRACERS = TRACERS[:4]
PARTS = ("iops", "start", "latency")
# blockio.bpf.o's programs; --hold-empty loads only the last.
CORE_PROGRAMS = ("complete", "issue", "empty")

# Issue 15's goals (today's bcc figures in docs/benchmarks.md).
GOAL_NS_PER_IO = 150.0  # core: kernel time per I/O, bpf_stats
GOAL_POINTS_VS_EMPTY = 2.0  # core's IOPS ratio at most this many points below the empty one's
GOAL_READY_S = 1.0  # core agent: spawn to first /metrics with the backend
GOAL_RSS_MB = 60.0  # core agent: VmRSS, MB = 10^6 bytes
GOAL_LAT_RATIO = 0.10  # latency median core/bcc within 10 %
LAT_SETTLE_S = 2.0  # after the agent is ready, before the latency run: its start-up work done

# Fine latency bounds for the latency part: 10 per decade, 1 us .. 1 ms, 31 bounds (<= 32).
LAT_MANTISSAS = (1.0, 1.25, 1.6, 2.0, 2.5, 3.2, 4.0, 5.0, 6.4, 8.0)
FINE_BOUNDS_S = [*(round(m * 10**k * 1000) / 1e9 for k in range(3) for m in LAT_MANTISSAS), 1e-3]

TOOLS = {
    "fio": "apt-get install fio",
    "bpftool": "apt-get install bpftool",
    "losetup": "apt-get install mount",
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class BenchError(Exception):
    """The benchmark cannot run or a step failed; the message says what to do."""


def log(msg: str) -> None:
    """Progress on stderr, so stdout holds only the results."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- child processes ---------------------------------------------------------------------


def _raise_memlock() -> None:
    # bpftrace warns (harmlessly, memcg accounting has replaced memlock since 5.11) when it
    # cannot raise RLIMIT_MEMLOCK; raise it for it when we are allowed to.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(
            resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )


def spawn_child(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    # Dies with the bench even if it is SIGKILLed: a stray tracer would keep BPF programs
    # attached to every block request on the host.
    return spawn(cmd, setup=_raise_memlock, **kw)


def stop_child(proc: subprocess.Popen[Any], sig: int, timeout: float = 15.0) -> None:
    """Signal proc, wait for it, SIGKILL it if it does not exit in time."""
    stop(proc, sig, timeout, log=log)


# --- BPF programs ------------------------------------------------------------------------


@dataclass
class Prog:
    """One loaded BPF program as bpftool shows it."""

    id: int
    name: str
    run_time_ns: int
    run_cnt: int
    recursion_misses: int


def _bpftool(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(["bpftool", *args, "--json"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise BenchError(f"bpftool {' '.join(args)} failed: {out.stderr.strip()}")
    doc = json.loads(out.stdout or "[]")
    return doc if isinstance(doc, list) else []


def bpf_progs() -> dict[int, Prog]:
    """Every loaded BPF program with its run-time statistics."""
    # bpftool leaves run_time_ns/run_cnt/recursion_misses out while they are zero.
    return {
        p["id"]: Prog(
            p["id"],
            p.get("name", ""),
            p.get("run_time_ns", 0),
            p.get("run_cnt", 0),
            p.get("recursion_misses", 0),
        )
        for p in _bpftool("prog", "show")
    }


def block_attachments() -> dict[int, set[str]]:
    """Program ID -> the block_rq_* tracepoints it is attached to, without the prefix.

    Tracepoints through perf events (bcc, bpftrace) are listed by `bpftool perf show`, the
    tp_btf and raw-tracepoint links (the core backend) by `bpftool link show` (tp_name). A
    program that is loaded but not attached (the core's `issue` until it is needed) is in
    neither.
    """
    out: dict[int, set[str]] = {}
    for args, key in ((("perf", "show"), "tracepoint"), (("link", "show"), "tp_name")):
        for entry in _bpftool(*args):
            tp = entry.get(key) or ""
            if tp.startswith("block_rq_") and "prog_id" in entry:
                out.setdefault(entry["prog_id"], set()).add(tp.removeprefix("block_rq_"))
    return out


def owned_prog_ids(pid: int) -> set[int]:
    """IDs of the BPF programs process pid holds (fdinfo of its program, link, perf fds)."""
    ids = set()
    with contextlib.suppress(OSError):
        for f in Path(f"/proc/{pid}/fdinfo").iterdir():
            with contextlib.suppress(OSError):
                for line in f.read_text().splitlines():
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split(":", 1)[1]))
    return ids


def tracer_progs(pid: int) -> dict[int, str]:
    """The block_rq_* programs pid holds that are attached: ID -> tracepoint(s)."""
    att = block_attachments()
    return {i: "+".join(sorted(att[i])) for i in owned_prog_ids(pid) if i in att}


def wait_attached(pid: int, need: set[str], timeout: float = 30.0) -> dict[int, str]:
    """tracer_progs(pid) once it covers the tracepoints in need."""
    deadline = time.monotonic() + timeout
    while True:
        progs = tracer_progs(pid)
        if need <= {k for kinds in progs.values() for k in kinds.split("+")}:
            return progs
        if time.monotonic() > deadline:
            raise BenchError(
                f"pid {pid} attached no {'+'.join(sorted(need))} programs within "
                f"{timeout:.0f} s (saw {progs})"
            )
        time.sleep(0.2)


def foreign_block_progs(ours: set[int]) -> list[str]:
    """block_rq_* programs attached by someone else (they add noise to both sides)."""
    progs = bpf_progs()
    return [
        f"{i}:{progs[i].name if i in progs else '?'}@{'+'.join(sorted(kinds))}"
        for i, kinds in sorted(block_attachments().items())
        if i not in ours
    ]


def prog_label(name: str, kinds: str) -> str:
    """The core's programs by name (complete, issue, empty), others by tracepoint."""
    return name if name in CORE_PROGRAMS else kinds


# --- /metrics ----------------------------------------------------------------------------


def parse_samples(text: str) -> Samples:
    """Exposition text as {(sample name, sorted labels): value} (tests/support/realparts.py)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value, 0 when absent."""
    return float(samples.get((name, tuple(sorted(labels.items()))), 0.0))


def latency_buckets(samples: Samples, device: str, op: str = "read") -> dict[float, float]:
    """The cumulative latency buckets of (device, op): le -> count."""
    out = {}
    for (name, labels), value in samples.items():
        lab = dict(labels)
        if (
            name == "wattbit_disk_io_latency_seconds_bucket"
            and lab.get("device") == device
            and lab.get("op") == op
        ):
            out[float(lab["le"])] = value
    return out


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over cumulative (le, count) pairs, +Inf last (the same
    as tests/support/realparts.py's)."""
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-9)
        prev_le, prev_count = le, count
    return prev_le
