"""The real agent process with every exporter on: ready time, memory, CPU per scrape; against
another revision of wattbit, or head to head with ebpf_exporter (issue 35).

Run (root): PYTHONPATH=. .venv/bin/python bench/agent_process.py [--against main]
     [--disks 48] [--rounds 5] [--scrapes 40] [--fio-iops 200] [--package dist/wattbit_*.deb]
or:  ... bench/agent_process.py --ebpf-exporter /path/to/ebpf_exporter [--libbpf-include DIR]
Started alternately (A B, B A, ...) on the same loop disks (``--disks`` of them, named
``wattbit-bench-h2h-*`` in /dev/shm, each given reads and writes after every start so each
exporter has them in its maps): per start, seconds from spawn to the first /metrics answer
that shows the BPF program attached, VmRSS after the scrapes, the series of a scrape, and the
CPU seconds the process spends per scrape (utime + stime over ``--scrapes`` sequential
scrapes), idle and again while fio reads and writes every disk (``--fio-iops`` per disk).
Medians, and ratios to the last contender. ``--interleave``: each round starts every contender
(one after the other: each's ready time alone), then scrapes them in turns of 20 (A B, B A,
...) within one idle phase and one fio phase, so that the machine's moment-to-moment drift,
larger on a shared VM than the differences compared, falls on each alike; CPU per scrape is
each one's threads' CPU over its own turns (schedstat, in ns).

Without ``--ebpf-exporter``: this checkout against another revision (``--against``, extracted
with git archive into a temporary directory, its BPF objects built there), both with
every exporter on; ``--package`` adds this checkout's .deb, extracted and run in place, as a
third. With it: this checkout twice (blockio alone; every exporter on) against
ebpf_exporter with its ``biolatency`` example (per-disk, per-operation latency histograms: the
closest equivalent), whose BPF object is built here into a temporary directory with clang as
its examples/Makefile does, from the source tree beside the binary (``--ebpf-exporter-src``)
and libbpf's headers (``--libbpf-include``: a libbpf >= 1.2 whose bpf_core_read.h includes
bpf_helpers.h, as the libbpf its Makefile builds). Both trees' bytecode is compiled first (an
installed package's is). Issue 35's goals for a 48-disk host: scrape <= 5 ms CPU, ready
<= 0.25 s, VmRSS <= 45 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    alternate,
    bench_lock,
    build_ebpf_exporter_example,
    cpu_seconds,
    fio_load,
    free_port,
    git_tree,
    in_turn,
    load_average,
    median,
    print_command,
    proc_status,
    spawn,
    stop,
    table,
)
from collector.demo.loopdisks import loop_disks

CONFIG = """\
blockio:
  backend: core
cpu:
  enabled: true
"""
# blockio alone: the part ebpf_exporter's biolatency does
BLOCKIO_ONLY = """\
blockio:
  backend: core
nic:
  enabled: false
smart:
  enabled: false
power:
  enabled: false
pcie:
  enabled: false
tcp:
  enabled: false
cpu:
  enabled: false
"""
MARK = 'wattbit_blockio_backend_info{backend="core"'
# ebpf_exporter listens only once its configs' programs are attached (cmd/ebpf_exporter)
EBPFX_MARK = 'ebpf_exporter_enabled_configs{name="biolatency"} 1'
KEYS = ("ready_s", "idle_cpu_ms", "fio_cpu_ms", "rss_mb", "series")


@dataclass
class Contender:
    """One compared exporter: how to start it listening on a port, and what says it is ready."""

    name: str
    argv: list[str]  # "{port}" and "{config}" replaced at each start
    cwd: Path
    mark: str
    config: str = ""  # written to the start's own file when set
    env: dict[str, str] = field(default_factory=dict)

    def command(self, port: int, config: Path) -> list[str]:
        """The argv of one start."""
        return [a.format(port=port, config=config) for a in self.argv]


def wattbit(name: str, tree: Path, config: str, python: str = sys.executable) -> Contender:
    """`wattbit agent` of `tree` with that configuration (a source tree: on PYTHONPATH; an
    extracted package: its own venv's ``python``, its installed modules, no PYTHONPATH)."""
    argv = [python, "-m", "collector.cli", "agent", "--config", "{config}"]
    argv += ["--listen", "127.0.0.1:{port}", "--log-level", "warning"]
    env = {"PYTHONPATH": str(tree)} if python == sys.executable else {}
    return Contender(name, argv, tree, MARK, config, env)


@contextlib.contextmanager
def package(deb: Path) -> Iterator[Contender]:
    """The agent of a built .deb (packaging/build.sh), extracted (dpkg-deb -x) into a
    temporary directory and run in place: its venv finds its pyvenv.cfg wherever it lies, and
    runs the shipped bytecode and dependencies' wheels (docs/install.md)."""
    d = Path(tempfile.mkdtemp(prefix="wattbit-bench-deb-"))
    try:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(d)], check=True)
        python = d / "opt" / "wattbit" / "bin" / "python"
        yield wattbit("this, packaged", d, CONFIG, str(python))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def revision(rev: str) -> Iterator[Path]:
    """A temporary tree of the revision, its BPF objects built from its own sources (its
    scripts/build-bpf.sh: an object and the backend that loads it change together)."""
    d = Path(tempfile.mkdtemp(prefix="wattbit-bench-rev-"))
    try:
        tree = git_tree(rev, d)
        subprocess.run(["bash", str(tree / "scripts" / "build-bpf.sh")], check=True)
        yield tree
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def ebpf_exporter(binary: Path, src: Path, libbpf_include: Path) -> Iterator[Contender]:
    """ebpf_exporter with its biolatency example, the object built into a temporary directory
    (the source tree is only read)."""
    with tempfile.TemporaryDirectory(prefix="wattbit-bench-h2h-ebpfx-") as d:
        build_ebpf_exporter_example(src, libbpf_include, "biolatency", Path(d))
        argv = [str(binary), f"--config.dir={d}", "--config.names=biolatency"]
        argv += ["--web.listen-address=127.0.0.1:{port}"]
        yield Contender("ebpf_exporter", argv, Path(d), EBPFX_MARK)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def _wait_ready(proc: subprocess.Popen[bytes], url: str, mark: bytes, log: Path) -> float:
    """Seconds from now until `url` answers with `mark` (the caller started proc just before)."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited {proc.returncode}: see {log}")
        with contextlib.suppress(OSError):
            if mark in _get(url):
                return time.monotonic() - t0
        if time.monotonic() - t0 > 60:
            raise RuntimeError("exporter not ready in 60 s")
        time.sleep(0.002)  # finer than the differences compared (ms)


def _cpu_per_scrape(pid: int, url: str, scrapes: int) -> tuple[float, bytes]:
    """CPU ms the process spends per scrape over `scrapes` sequential ones; the last body."""
    body = _get(url)
    c0 = cpu_seconds(pid)
    for _ in range(scrapes):
        body = _get(url)
    return (cpu_seconds(pid) - c0) / scrapes * 1e3, body


def _start(c: Contender, cfg: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """The contender spawned with its configuration in cfg: the process, its /metrics URL and
    its log."""
    cfg.write_text(c.config)
    port = free_port()
    log = cfg.parent / f"{c.name.replace(' ', '-')}.log"
    with log.open("ab") as out:
        proc = spawn(
            c.command(port, cfg),
            cwd=c.cwd,
            env=dict(os.environ, **c.env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, f"http://127.0.0.1:{port}/metrics", log


def _series(body: bytes) -> int:
    """Samples in an exposition (lines that are not comments)."""
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def one_start(
    c: Contender, workdir: Path, scrapes: int, devices: list[str], fio_iops: int
) -> dict[str, float]:
    """Start the contender, wait for it, scrape it idle and under fio; its figures."""
    proc, url, log = _start(c, workdir / "exporter.yaml")
    try:
        ready = _wait_ready(proc, url, c.mark.encode(), log)
        _load_disks(devices)  # after the start: the programs count only what completes then
        idle, _ = _cpu_per_scrape(proc.pid, url, scrapes)
        with fio_load(devices, fio_iops):
            busy, body = _cpu_per_scrape(proc.pid, url, scrapes)
        rss = proc_status(proc.pid).get("VmRSS", 0) / 1000  # MB
        series = _series(body)
        return {
            "ready_s": ready,
            "idle_cpu_ms": idle,
            "fio_cpu_ms": busy,
            "rss_mb": rss,
            "series": series,
        }
    finally:
        stop(proc)


def _cpu_ns(pid: int) -> int:
    """CPU ns of a process's live threads so far (schedstat: ns, not utime's 10 ms ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread gone meanwhile
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


def interleaved_round(
    contenders: list[Contender],
    r: int,
    workdir: Path,
    scrapes: int,
    devices: list[str],
    fio_iops: int,
    batch: int = 20,
) -> dict[str, dict[str, float]]:
    """Every contender started (one after the other, each's ready time alone), then scraped in
    turns of `batch` (A B, B A, ...) in the same phase, idle and under the same fio: the
    machine's moment-to-moment drift falls on each alike. CPU per scrape: each one's threads'
    CPU over its own batches only (schedstat, ns)."""
    order = list(in_turn(contenders, r))
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    out: dict[str, dict[str, float]] = {c.name: {} for c in contenders}
    try:
        for c in order:
            proc, url, log = _start(c, workdir / f"exporter-{len(procs)}.yaml")
            procs[c.name] = (proc, url)
            out[c.name]["ready_s"] = _wait_ready(proc, url, c.mark.encode(), log)
        _load_disks(devices)
        phases: list[tuple[str, contextlib.AbstractContextManager[None]]] = [
            ("idle_cpu_ms", contextlib.nullcontext()),
            ("fio_cpu_ms", fio_load(devices, fio_iops)),
        ]
        for key, ctx in phases:
            spent = dict.fromkeys(procs, 0)
            with ctx:
                for b in range(max(1, scrapes // batch)):
                    for c in in_turn(order, b):
                        proc, url = procs[c.name]
                        c0 = _cpu_ns(proc.pid)
                        for _ in range(batch):
                            _get(url)
                        spent[c.name] += _cpu_ns(proc.pid) - c0
            for name in procs:
                out[name][key] = spent[name] / (max(1, scrapes // batch) * batch) / 1e6
        for name, (proc, url) in procs.items():
            out[name]["rss_mb"] = proc_status(proc.pid).get("VmRSS", 0) / 1000
            out[name]["series"] = _series(_get(url))
    finally:
        for proc, _ in procs.values():
            stop(proc)
    return out


def _compile(tree: Path) -> None:
    """Both trees' bytecode written before the first start, as a package install does (pip,
    dpkg): with PYTHONDONTWRITEBYTECODE set, every start would compile the sources again."""
    for pkg in ("collector", "exporters"):
        cmd = [sys.executable, "-m", "compileall", "-q", str(tree / pkg)]
        subprocess.run(cmd, check=True, capture_output=True)


def _load_disks(devices: list[str]) -> None:
    """Reads and writes on every disk, so each exporter counts each (and renders them)."""
    for rw in ("randread", "randwrite"):
        args = ["fio", f"--rw={rw}", "--bs=4k", "--ioengine=psync", "--direct=1", "--io_size=64k"]
        for dev in devices:
            args += [f"--name={Path(dev).name}", f"--filename={dev}"]
        subprocess.run(args, check=True, capture_output=True)


def _report(results: dict[str, list[dict[str, float]]]) -> None:
    """Medians per contender, and each one's ratio to the last (the reference)."""
    med = {n: {k: median([x[k] for x in res]) or 0.0 for k in KEYS} for n, res in results.items()}
    table(
        ["exporter", *(f"median {k}" for k in KEYS)],
        [[n, *(f"{m[k]:.3f}" for k in KEYS)] for n, m in med.items()],
    )
    *others, ref = med
    for name in others:
        a, b = med[name], med[ref]
        ratios = ", ".join(f"{k} {a[k] / b[k]:.2f}" if b[k] else f"{k} -" for k in KEYS)
        print(f"{name} / {ref}: {ratios}")


def main() -> None:
    """Alternate the contenders' starts; print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--against", default="main", help="git revision to compare with")
    ap.add_argument("--ebpf-exporter", type=Path, help="ebpf_exporter's binary (head to head)")
    ap.add_argument("--ebpf-exporter-src", type=Path, help="its source tree (the binary's dir)")
    ap.add_argument("--libbpf-include", type=Path, default=Path("/usr/include"))
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scrapes", type=int, default=40)
    ap.add_argument("--fio-iops", type=int, default=200, help="per disk, while scraping busy")
    ap.add_argument(
        "--interleave",
        action="store_true",
        help="run the contenders side by side in each round, scraped in turns of 20 in the "
        "same phase (CPU from schedstat, ns): for differences smaller than the machine's "
        "drift between two starts",
    )
    ap.add_argument(
        "--package",
        type=Path,
        help="a .deb of this checkout (PACKAGES=deb packaging/build.sh): its agent as a third",
    )
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        if args.ebpf_exporter:
            src = args.ebpf_exporter_src or args.ebpf_exporter.resolve().parent
            contenders = [
                wattbit("wattbit blockio", ROOT, BLOCKIO_ONLY),
                wattbit("wattbit all", ROOT, CONFIG),
                stack.enter_context(ebpf_exporter(args.ebpf_exporter, src, args.libbpf_include)),
            ]
        else:
            other = stack.enter_context(revision(args.against))
            contenders = [wattbit("this", ROOT, CONFIG), wattbit(args.against, other, CONFIG)]
            if args.package:
                contenders.insert(0, stack.enter_context(package(args.package)))
        disks = stack.enter_context(loop_disks(args.disks, 4, prefix="wattbit-bench-h2h-"))
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wattbit-bench-h2h-")))
        stack.enter_context(bench_lock())
        for tree in {c.cwd for c in contenders if "PYTHONPATH" in c.env}:  # a package has its own
            _compile(tree)
        print(f"load average before: {load_average()}")
        results: dict[str, list[dict[str, float]]] = {c.name: [] for c in contenders}
        devices = [d.device for d in disks]
        if args.interleave:
            for r in range(args.rounds):
                for name, res in interleaved_round(
                    contenders, r, work, args.scrapes, devices, args.fio_iops
                ).items():
                    results[name].append(res)
                    print(f"round {r} {name}: {res}", flush=True)
        else:
            for r, c in alternate(contenders, args.rounds):
                res = one_start(c, work, args.scrapes, devices, args.fio_iops)
                results[c.name].append(res)
                print(f"round {r} {c.name}: {res}", flush=True)
        print(f"load average after: {load_average()}")
    _report(results)
    print_command()


if __name__ == "__main__":
    main()
