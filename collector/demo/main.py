"""`make demo`: the whole of wattbit on one machine, on loopback, in about a minute.

Creates four loop disks (files of random bytes in tmpfs) and a veth pair into a second network
namespace; starts a SIMULATED PDU (collector/demo/pdusim.py: a real SNMP agent speaking APC's
rPDU2 MIB whose outlet watts follow this machine's load), the wattbit agent, the wattbit
collector, and Prometheus, Alertmanager and node_exporter from Debian's packages, all on
127.0.0.1 ports with temporary data directories. Then it marks a run (`wattbit run start`)
and, inside it, four phase runs one after the other (`schedule`): idle; a ramp of streams,
one more every few seconds; every disk streaming; idle again. A stream is one disk's
contents, read with O_DIRECT, sent over TCP through the veth pair to a receiver in the other
namespace. It shows Gbit/s, watts, J/Gbit and per-disk busy % live, stops the run and writes
the energy-per-gigabit report (`wattbit report`), whose idle watts come from the idle phases.

Everything it creates — loop devices, the namespace and veth, processes, temporary files — is
removed on the way out: at the end, on Ctrl-C, on SIGTERM/SIGHUP and on any failure. Leftovers
of a demo that was killed with SIGKILL (namespace, veth, loop devices) are removed at the next
start, so a second `make demo` always works.

    python -m collector.demo [--duration 60] [--disks 4] [--out demo-report] [--no-wait]
                             [--keep-running] [--prometheus-data DIR]

docs/demo.md says what each phase shows and how to keep Prometheus and its data afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from collector.config import duration_arg
from collector.demo.loopdisks import loop_disks
from collector.demo.procs import Procs, free_port, wait_for
from collector.runs.cli import Client as RunClient
from collector.secretfile import read_secret_file

if TYPE_CHECKING:
    from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
NETNS = "wattbit-demo"
IF_ROOT, IF_NS = "wbdemo0", "wbdemo1"
ADDR_ROOT, ADDR_NS = "169.254.77.1", "169.254.77.2"  # link-local: exists only on this pair
# A veth has no link: the kernel's 10000 Mb/s is a placeholder (veth_get_link_ksettings), and
# the demo's streams move more than that through it. What holds a veth down is the CPU that
# copies its packets, which the verdict judges as such. The agent is told the most a speed may
# be (nic.link_speeds' bound, 10 Tbit/s), a rate it can never reach: the NIC is never the
# limit, and its evidence says so in numbers anyone can check (docs/demo.md).
VETH_BITS = 1e13
TMP_PREFIX = "wattbit-demo-"
HOST = "demo-host"
RUN = "demo-stream"
PDU = "demo-pdu-simulated"
STREAM_PORT = 5201
# The stream would take both CPUs of a small machine; niced, it leaves the agent, the collector
# and Prometheus their scrapes (the report's coverage counts every missed one).
NICE = ("nice", "-n", "15")
BLOCK_SIZES = (64 * 1024, 128 * 1024, 256 * 1024, 1024 * 1024)  # uneven on purpose
# The CPU the simulated PDU's model counts: the streams' (niced) and the kernel's moving their
# bytes, not the monitoring stack's own user time, which would make the idle watts wander.
STREAM_CPU = ("nice", "system", "irq", "softirq")
MIN_DURATION = 30.0  # the shortest phase (idle, 15 %) still holds a few one-second steps

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Interrupted(Exception):
    """SIGTERM or SIGHUP: leave through the same cleanup as Ctrl-C."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # start_new_session: a Ctrl-C reaches the demo alone (see Procs.start)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, start_new_session=True)


# --- leftovers, network -------------------------------------------------------------------------


def remove_leftovers() -> list[str]:
    """Remove what a demo killed by SIGKILL left behind; returns what was removed."""
    removed = []
    if NETNS in _run("ip", "netns", "list", check=False).stdout.split():
        for pid in _run("ip", "netns", "pids", NETNS, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run("ip", "netns", "del", NETNS, check=False)
        removed.append(f"namespace {NETNS}")
    if _run("ip", "link", "show", IF_ROOT, check=False).returncode == 0:
        _run("ip", "link", "del", IF_ROOT, check=False)
        removed.append(f"link {IF_ROOT}")
    for line in _run("losetup", "-a", check=False).stdout.splitlines():
        if f"/{TMP_PREFIX}" in line:
            dev = line.split(":", 1)[0]
            _run("losetup", "-d", dev, check=False)
            removed.append(f"loop device {dev}")
    for d in Path("/dev/shm").glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(d, ignore_errors=True)
    return removed


@contextlib.contextmanager
def veth_to_namespace() -> Iterator[None]:
    """IF_ROOT here, IF_NS in namespace NETNS; both gone afterwards, with whatever ran in it."""
    try:
        _run("ip", "netns", "add", NETNS)
        _run("ip", "link", "add", IF_ROOT, "type", "veth", "peer", "name", IF_NS, "netns", NETNS)
        for ns, ifname, addr in ((None, IF_ROOT, ADDR_ROOT), (NETNS, IF_NS, ADDR_NS)):
            pre = ["-n", ns] if ns else []
            sysctl = f"net.ipv6.conf.{ifname}.disable_ipv6=1"  # no router solicitations
            if ns:
                _run("ip", "netns", "exec", ns, "sysctl", "-qw", sysctl, check=False)
            else:
                _run("sysctl", "-qw", sysctl, check=False)
            _run("ip", *pre, "addr", "add", f"{addr}/30", "dev", ifname)
            _run("ip", *pre, "link", "set", ifname, "up")
        _run("ip", "-n", NETNS, "link", "set", "lo", "up")
        yield
    finally:
        for pid in _run("ip", "netns", "pids", NETNS, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run("ip", "netns", "del", NETNS, check=False)
        _run("ip", "link", "del", IF_ROOT, check=False)


# --- the phases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """From `at` seconds into the run: phase run `run` (of kind `phase`), `streams` streaming."""

    at: float
    run: str
    phase: str
    streams: int


# The run's phases as shares of --duration: idle, then a ramp, then every disk, then idle
# again, as the SC10 power figure's day had them. The second idle phase is longer because its
# first seconds still show the watts of the load before it (the PDU model, the poll and the
# scrape each lag a second).
PHASES = (("demo-idle-1", "idle", 0.15), ("demo-ramp", "ramp", 0.35),
          ("demo-full", "full", 0.30), ("demo-idle-2", "idle", 0.20))  # fmt: skip


def schedule(duration: float, disks: int) -> list[Step]:
    """The run's steps: the ramp adds one stream at a time up to disks - 1, full has them all."""
    steps: list[Step] = []
    at = 0.0
    for run, phase, share in PHASES:
        length = duration * share
        if phase == "ramp":
            ramp = max(1, disks - 1)
            steps += [Step(at + length * i / ramp, run, phase, i + 1) for i in range(ramp)]
        else:
            steps.append(Step(at, run, phase, disks if phase == "full" else 0))
        at += length
    return steps


def streams(plan: list[Step], step: Step) -> str:
    """The `streams` label of a step's phase run: `0`, `4`, or `1-3` for a ramp."""
    n = sorted({x.streams for x in plan if x.run == step.run})
    return str(n[0]) if n[0] == n[-1] else f"{n[0]}-{n[-1]}"


def streaming_until(duration: float) -> float:
    """Seconds into the run when the streams stop: where the last (idle) phase begins."""
    return duration * (1.0 - PHASES[-1][2])


# --- scraping -----------------------------------------------------------------------------------


def _http(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode())


def scrape(url: str) -> Samples:
    """/metrics as {(sample name, sorted labels): value}."""
    out: Samples = {}
    for fam in text_string_to_metric_families(_http(url)):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(s: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    return sum(
        v
        for (n, lab), v in s.items()
        if n == name and all(dict(lab).get(k) == x for k, x in labels.items())
    )


def prom_query(base: str, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    doc = json.loads(_http(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"))
    return list(doc["data"]["result"])


# --- configuration files ------------------------------------------------------------------------


def write_configs(tmp: Path, ports: dict[str, int], disks: list[str]) -> dict[str, Path]:
    """Agent, collector, Prometheus and Alertmanager configuration, and the two secrets."""
    token = tmp / "run-token"
    token.write_text(os.urandom(24).hex() + "\n")
    community = tmp / "snmp-community"
    community.write_text(f"demo{os.urandom(6).hex()}\n")
    for f in (token, community):
        f.chmod(0o600)
    names = "|".join(re.escape(Path(d).name) for d in disks)
    agent = tmp / "agent.yml"
    agent.write_text(
        f"listen: 127.0.0.1:{ports['agent']}\n"
        f"blockio:\n  exclude: '^(?!({names})$)'   # only the demo's loop disks\n"
        f"nic:\n  exclude: '^(?!{IF_ROOT}$)'   # only the demo's veth (the stream)\n"
        f"  link_speeds: {{{IF_ROOT}: {VETH_BITS:.1f}}}   # a veth has no link speed\n"
    )
    collector = tmp / "collector.yml"
    collector.write_text(
        f"listen: 127.0.0.1:{ports['collector']}\n"
        "interval: 1s\n"
        f"state_dir: {tmp / 'collector-state'}\n"
        f"auths:\n  demo:\n    version: 2c\n    community_file: {community}\n"
        "pdus:\n"
        f"  - name: {PDU}\n"
        f"    address: 127.0.0.1:{ports['pdu']}\n"
        "    auth: demo\n"
        "    profile: apc_rpdu2\n"
        "    outlets:\n"
        f"      - {{index: [1, 2], host: {HOST}, component: server}}\n"
        "      - {index: 3, component: switch}\n"
        f"runs:\n  token_file: {token}\n"
    )
    prom = tmp / "prometheus.yml"
    prom.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{ROOT / 'alerts'}/*.yml']\n"
        "alerting:\n  alertmanagers:\n"
        f"    - static_configs: [{{targets: ['127.0.0.1:{ports['alertmanager']}']}}]\n"
        "scrape_configs:\n"
        "  - job_name: wattbit-agent\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{ports['agent']}'], "
        f"labels: {{host: {HOST}}}}}]\n"
        "  - job_name: wattbit-collector\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{ports['collector']}']}}]\n"
        "  - job_name: node\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{ports['node']}'], "
        f"labels: {{host: {HOST}}}}}]\n"
    )
    am = tmp / "alertmanager.yml"
    am.write_text("route: {receiver: demo-null, group_wait: 5s}\nreceivers:\n  - name: demo-null\n")
    return {
        "agent": agent,
        "collector": collector,
        "prometheus": prom,
        "alertmanager": am,
        "token": token,
        "community": community,
    }


# --- the stream ---------------------------------------------------------------------------------


def receive(addr: str, port: int) -> int:
    """The receiver (in the other namespace): accept connections, read and discard."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(16)

    def drain(c: socket.socket) -> None:
        buf = bytearray(1 << 20)
        with c:
            while c.recv_into(buf):
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def send(addr: str, port: int, until: float, devices: list[str]) -> int:
    """The sender: per disk a thread reading with O_DIRECT and writing to its own TCP stream.

    Streams until `until`, a time.monotonic() instant: the clock is the same in every process
    of the machine, so the demo ends every stream, started whenever, at one moment.
    """
    errors: list[str] = []

    def one(dev: str, bs: int) -> None:
        try:
            buf = mmap.mmap(-1, bs)  # page-aligned, as O_DIRECT wants
            fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
            for _ in range(100):
                try:
                    sock = socket.create_connection((addr, port), timeout=5)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise ConnectionError(f"no receiver at {addr}:{port}")
            sock.settimeout(30)  # a receiver starved of CPU for a while is slow, not gone
            off, view = 0, memoryview(buf)
            with sock:
                while time.monotonic() < until:
                    n = os.preadv(fd, [buf], off)
                    if n <= 0:
                        off = 0
                        continue
                    sock.sendall(view[:n])
                    off += n
                # Wait for the receiver's close: what is still in the socket's buffers (MBs)
                # would otherwise go out after this process ends, into the next (idle) phase.
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(4096):
                    pass
            os.close(fd)
        except Exception as exc:
            errors.append(f"{dev}: {exc}")

    threads = [threading.Thread(target=one, args=(d, block_size(d)), daemon=True) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


def block_size(device: str) -> int:
    """The read size of a device's stream: by its loop number, so uneven across disks."""
    digits = re.sub(r"\D", "", Path(device).name) or "0"
    return BLOCK_SIZES[int(digits) % len(BLOCK_SIZES)]


def touch_disks(devices: list[str]) -> None:
    """Read one 4 KiB block of each device with O_DIRECT."""
    buf = mmap.mmap(-1, 4096)
    for dev in devices:
        fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
        try:
            os.preadv(fd, [buf], 0)
        finally:
            os.close(fd)


# --- the live view ------------------------------------------------------------------------------


def live_table(
    prev: tuple[float, Samples, Samples],
    now: tuple[float, Samples, Samples],
    disks: list[str],
    prom_jpg: float | None,
    left: float,
    step: Step,
) -> Any:
    """A rich table of the last interval, from the agent's and the collector's /metrics."""
    from rich.table import Table

    dt = max(now[0] - prev[0], 1e-3)
    a0 = prev[1]
    a1, c1 = now[1], now[2]

    def rate(s0: Samples, s1: Samples, name: str, **lab: str) -> float:
        return (total(s1, name, **lab) - total(s0, name, **lab)) / dt

    gbps = rate(a0, a1, "wattbit_nic_bytes_total", interface=IF_ROOT) * 8 / 1e9
    host_w = total(c1, "wattbit_pdu_outlet_power_watts", host=HOST)
    site_w = total(c1, "wattbit_pdu_outlet_power_watts")
    jpg = f"{site_w / gbps:,.1f}" if gbps > 0.01 else "-"
    streams = f"{step.streams} stream{'' if step.streams == 1 else 's'}"
    t = Table(
        title=f"wattbit demo: run {RUN!r}, phase {step.run} ({streams}) — {left:.0f} s left "
        "(PDU is SIMULATED)"
    )
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("source")
    t.add_row("Gbit/s", f"{gbps:.2f}", f"agent /metrics: {IF_ROOT} tx+rx")
    t.add_row("watts, site", f"{site_w:.0f}", "collector /metrics: PDU outlets 1-3")
    t.add_row(f"watts, {HOST}", f"{host_w:.0f}", "outlets 1-2 (host=demo-host)")
    t.add_row("J/Gbit, now", jpg, "site watts ÷ Gbit/s")
    t.add_row(
        "J/Gbit, Prometheus",
        f"{prom_jpg:,.1f}" if prom_jpg else "-",
        "site:wattbit_joules_per_gigabit:ratio1m",
    )
    for d in disks:
        busy = rate(a0, a1, "wattbit_disk_busy_seconds_total", device=d) * 100
        mbs = rate(a0, a1, "wattbit_disk_io_bytes_total", device=d, op="read") / 1e6
        t.add_row(f"{d} busy %", f"{min(busy, 100):.0f}", f"agent, eBPF; read {mbs:,.0f} MB/s")
    return t


# --- main ---------------------------------------------------------------------------------------


def wait_senders(procs: Procs, senders: list[subprocess.Popen[bytes]]) -> None:
    """Wait for the senders, which end at their deadline; raise if one failed."""
    names = {id(p): name for name, p in procs.procs}
    for p in senders:
        name = names.get(id(p), "sender")
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{name} did not end:\n{procs.log_tail(name)}") from None
        if p.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{procs.log_tail(name)}")


def wait_for_the_end() -> None:
    """Until a line on stdin (Enter), Ctrl-C or SIGTERM; at the end of stdin, the signals only."""
    sys.stdout.flush()  # whoever waits for the URL on a pipe sees it now
    with contextlib.suppress(KeyboardInterrupt, Interrupted):
        if sys.stdin is not None and sys.stdin.readline():
            return
        while True:  # stdin closed or /dev/null: only a signal ends the wait
            signal.pause()


@dataclass
class Stack:
    """The demo's running parts: what main's steps hand each other."""

    procs: Procs
    tmp: Path
    devs: list[str]  # the loop disks' /dev paths
    names: list[str]  # and their names
    cfg: dict[str, Path]  # the configuration files written for the run
    prom_url: str
    agent_url: str  # the agent's /metrics
    coll_url: str  # the collector's base URL (its /metrics, the run API)
    py: str = sys.executable

    @property
    def wattbit(self) -> list[str]:
        """The `wattbit` command, run from this checkout."""
        return [self.py, "-m", "collector.cli"]


def preflight(console: Console, prometheus_data: str | Path | None) -> tuple[int, Path | None]:
    """Root, the programs the demo runs, a usable --prometheus-data: (exit code or 0, its dir)."""
    if os.geteuid() != 0:
        console.print("[red]the demo needs root (loop devices, network namespaces, eBPF).")
        return 1, None
    missing = [
        t
        for t in ("losetup", "ip", "nice", "prometheus", "prometheus-alertmanager")
        if shutil.which(t) is None
    ]
    if missing:
        console.print(f"[red]missing {', '.join(missing)}: run `make demo`, which installs them.")
        return 1, None
    data_dir = Path(prometheus_data).resolve() if prometheus_data is not None else None
    if (
        data_dir is not None
        and data_dir.exists()
        and (not data_dir.is_dir() or any(data_dir.iterdir()))
    ):
        # one run's data alone: an earlier demo's series would be served with this one's
        console.print(f"[red]--prometheus-data: {data_dir} must be a new or empty directory")
        return 2, None
    return 0, data_dir


def start(
    console: Console, procs: Procs, tmp: Path, devs: list[str], names: list[str],
    data_dir: Path | None,
) -> Stack:  # fmt: skip
    """Start the simulated PDU, agent, collector, node_exporter, Alertmanager and Prometheus,
    and wait until Prometheus scrapes them all and holds every disk's series."""
    ports = {k: free_port() for k in ("agent", "collector", "node", "alertmanager")}
    ports["prometheus"] = free_port()
    ports["pdu"] = free_port(socket.SOCK_DGRAM)
    ports["am_cluster"] = free_port()
    cfg = write_configs(tmp, ports, devs)
    st = Stack(
        procs, tmp, devs, names, cfg,
        prom_url=f"http://127.0.0.1:{ports['prometheus']}",
        agent_url=f"http://127.0.0.1:{ports['agent']}/metrics",
        coll_url=f"http://127.0.0.1:{ports['collector']}",
    )  # fmt: skip
    procs.start(
        "pdusim",
        [st.py, "-m", "collector.demo.pdusim", "--listen", f"127.0.0.1:{ports['pdu']}",
         "--community-file", str(cfg["community"]), "--interfaces", f"^{IF_ROOT}$",
         "--disks", f"^({'|'.join(names)})$", "--cpu-modes", ",".join(STREAM_CPU)],
    )  # fmt: skip
    console.print(
        f"  [yellow]SIMULATED PDU[/yellow] (APC AP8641, rPDU2 MIB) on "
        f"udp://127.0.0.1:{ports['pdu']}: outlet watts are modelled from this machine's "
        "CPU, disk busy and Gbit/s — not measured"
    )
    procs.start("agent", [*st.wattbit, "agent", "--config", str(cfg["agent"])])
    procs.start("collector", [*st.wattbit, "collector", "--config", str(cfg["collector"])])
    procs.start(
        "node_exporter",
        ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{ports['node']}"],
    )
    procs.start(
        "alertmanager",
        ["prometheus-alertmanager", f"--config.file={cfg['alertmanager']}",
         f"--storage.path={tmp / 'alertmanager'}",
         f"--web.listen-address=127.0.0.1:{ports['alertmanager']}",
         f"--cluster.listen-address=127.0.0.1:{ports['am_cluster']}"],
    )  # fmt: skip
    procs.start(
        "prometheus",
        ["prometheus", f"--config.file={cfg['prometheus']}",
         f"--storage.tsdb.path={data_dir or tmp / 'prometheus'}",
         f"--web.listen-address=127.0.0.1:{ports['prometheus']}"],
    )  # fmt: skip
    console.print("  starting agent (bcc compiles its program: a few seconds), "
                  "collector, Prometheus, Alertmanager, node_exporter…")  # fmt: skip
    # a child that dies fails the wait at once; anything check() raises is "not yet"
    up = (Exception,)
    wait_for(lambda: scrape(st.agent_url), 90, "agent", alive=procs.check, errors=up)
    wait_for(
        lambda: total(scrape(f"{st.coll_url}/metrics"), "wattbit_pdu_up", pdu=PDU) == 1,
        90,
        "collector polling the PDU",
        alive=procs.check,
        errors=up,
    )
    wait_for(
        lambda: len(prom_query(st.prom_url, "up == 1")) >= 3,
        90,
        "Prometheus scraping all targets",
        alive=procs.check,
        errors=up,
    )
    backend = [
        dict(k[1]).get("backend", "?")
        for k in scrape(st.agent_url)
        if k[0] == "wattbit_blockio_backend_info"
    ]
    console.print(f"  agent blockio backend: {', '.join(backend) or '?'}")
    console.print(f"  Prometheus: [cyan]{st.prom_url}[/cyan]")
    # One direct read per disk before the run: the agent's per-op series exist from
    # the run's first second, so the idle seconds at its start count as covered.
    touch_disks(devs)
    wait_for(
        lambda: len(prom_query(st.prom_url, 'wattbit_disk_io_bytes_total{op="read"}')) >= len(devs),
        90,
        "Prometheus holding every disk's read series",
        alive=procs.check,
        errors=up,
    )
    return st


def _wattbit_run(st: Stack, *args: str) -> str:
    """`wattbit run ARGS` against the demo's collector: its output, RuntimeError on failure."""
    r = subprocess.run(
        [*st.wattbit, "run", *args, "--collector", st.coll_url, "--token-file",
         str(st.cfg["token"])],
        capture_output=True, text=True, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"wattbit run {args[0]} failed: {r.stderr.strip()}")
    return r.stdout.strip()


def phases(console: Console, st: Stack, duration: float) -> None:
    """The run: started, its phases one after the other with their streams and a live view of
    the agent's and collector's figures, and stopped once its last stream has ended."""
    from rich.live import Live

    procs = st.procs
    receiver = procs.start(
        "receiver",
        ["ip", "netns", "exec", NETNS, *NICE, st.py, "-m", "collector.demo", "receive",
         ADDR_NS, str(STREAM_PORT)],
    )  # fmt: skip
    console.print(f"  {_wattbit_run(st, 'start', RUN, '--label', 'source=make-demo')}")
    # The phases are runs too, started and stopped through the run API in-process: a
    # `wattbit run` process per phase would cost the CPU the watts are modelled from.
    runs = RunClient(st.coll_url, read_secret_file(st.cfg["token"]))
    plan = schedule(duration, len(st.devs))
    started = time.monotonic()
    until = started + streaming_until(duration)
    senders: list[subprocess.Popen[bytes]] = []
    step: Step | None = None
    coll_metrics = f"{st.coll_url}/metrics"
    prev = (time.monotonic(), scrape(st.agent_url), scrape(coll_metrics))
    prom_jpg: float | None = None
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while (elapsed := time.monotonic() - started) < duration:
            procs.check(ending=("sender",))
            if receiver.poll() is not None:
                raise RuntimeError(f"receiver exited:\n{procs.log_tail('receiver')}")
            wait_senders(procs, [p for p in senders if p.poll() not in (None, 0)])
            due = [x for x in plan if x.at <= elapsed][-1]
            if step is None or due.run != step.run:
                if due.streams == 0 and senders:
                    # idle begins when the last byte has gone, not at the deadline
                    wait_senders(procs, senders)
                    senders = []
                if step is not None:
                    runs.stop(step.run)
                labels = {"phase": due.phase, "part_of": RUN, "streams": streams(plan, due)}
                runs.start(due.run, labels)
            step = due
            while len(senders) < step.streams:
                senders.append(procs.start(
                    f"sender-{len(senders) + 1}",
                    [*NICE, st.py, "-m", "collector.demo", "send", ADDR_NS,
                     str(STREAM_PORT), repr(until), st.devs[len(senders)]],
                ))  # fmt: skip
            # a second between views, less when the next step is due sooner
            upcoming = [x.at for x in plan if x.at > elapsed] + [duration]
            time.sleep(min(1.0, max(0.05, started + upcoming[0] - time.monotonic())))
            now = (time.monotonic(), scrape(st.agent_url), scrape(coll_metrics))
            with contextlib.suppress(Exception):
                res = prom_query(st.prom_url, "site:wattbit_joules_per_gigabit:ratio1m")
                prom_jpg = float(res[0]["value"][1]) if res else None
            left = max(0.0, duration - (now[0] - started))
            live.update(live_table(prev, now, st.names, prom_jpg, left, step))
            prev = now
    wait_senders(procs, senders)
    if step is not None:
        runs.stop(step.run)
    console.print(_wattbit_run(st, "stop", RUN))


def settled(st: Stack, since: float) -> None:
    """Wait until Prometheus has scraped every target and evaluated every rule group after
    ``since`` (what a fixed pause guessed at: the last samples are in, on a busy machine too)."""
    last = "prometheus_rule_group_last_evaluation_timestamp_seconds"

    def after() -> bool:
        scraped = prom_query(st.prom_url, "min(timestamp(up))")
        evaluated = [v for (n, _l), v in scrape(f"{st.prom_url}/metrics").items() if n == last]
        newest = [float(scraped[0]["value"][1]), *evaluated] if scraped and evaluated else []
        return bool(newest) and min(newest) > since

    def alive() -> None:
        st.procs.check(ending=("sender",))  # the streams have ended

    wait_for(after, 60, "Prometheus: the run's last samples", alive=alive, errors=(Exception,))


def report(
    console: Console, st: Stack, out_dir: Path, data_dir: Path | None, wait: bool | None
) -> None:
    """`wattbit report` of the run, its summary, and Prometheus kept up if asked."""
    settled(st, time.time())  # the run's end and the last samples reach Prometheus
    console.print("writing the report: wattbit report …")
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [*st.wattbit, "report", RUN, "--prometheus", st.prom_url, "--out", str(out_dir)],
        capture_output=True, text=True, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    # the report's own summary (render.summary_lines): site, hosts, phases, warnings
    console.print(r.stdout.rstrip(), markup=False, highlight=False)
    if r.returncode != 0:
        raise RuntimeError(f"wattbit report failed ({r.returncode}): {r.stderr.strip()}")
    console.print("(the PDU is simulated: the watts are a model of this machine's load)")
    for ext in ("html", "md", "json"):
        console.print(f"report: [cyan]{out_dir / f'{RUN}.{ext}'}[/cyan]")
    if data_dir is not None:
        console.print(
            f"Prometheus' data is kept in [cyan]{data_dir}[/cyan]: serve it again with "
            "docs/demo.md's command"
        )
    keep = sys.stdin.isatty() if wait is None else wait
    if keep:
        console.print(
            f"Prometheus: [cyan]{st.prom_url}[/cyan] (try "
            "site:wattbit_joules_per_gigabit:ratio1m) with the demo's data, kept up "
            "with everything else until Enter, Ctrl-C or SIGTERM."
        )
        wait_for_the_end()
    else:
        console.print(f"Prometheus was at {st.prom_url} (stopped now; --keep-running keeps it up)")


def main(
    duration: float = 60.0,
    disks: int = 4,
    out: str | Path = "demo-report",
    wait: bool | None = None,
    disk_mb: int = 256,
    prometheus_data: str | Path | None = None,
) -> int:
    """Run the demo; returns the exit code (0 ok, 1 failure, 2 bad options, 130 interrupted)."""
    from rich.console import Console

    console = Console()
    code, data_dir = preflight(console, prometheus_data)
    if code:
        return code
    old = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
    tmp.chmod(0o755)
    procs = Procs(tmp)
    try:
        for what in remove_leftovers():
            console.print(f"removed a leftover of an earlier demo: {what}")
        with (
            loop_disks(disks, disk_mb, nomerges=False, fill=True, prefix=TMP_PREFIX) as loops,
            veth_to_namespace(),
        ):
            devs = [d.device for d in loops]
            console.print(f"[bold]wattbit demo[/bold] (temporary files in {tmp})")
            console.print(f"  {disks} loop disks of {disk_mb} MB on tmpfs: {', '.join(devs)}")
            console.print(f"  veth {IF_ROOT} ({ADDR_ROOT}) ⇄ {IF_NS} ({ADDR_NS}) in netns {NETNS}")
            st = start(console, procs, tmp, devs, [d.name for d in loops], data_dir)
            phases(console, st, duration)
            report(console, st, Path(out).resolve(), data_dir, wait)
        return 0
    except (KeyboardInterrupt, Interrupted) as exc:
        console.print(f"\ninterrupted ({exc or 'SIGINT'}): cleaning up")
        return 130
    except Exception as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        for name, _ in procs.procs:
            if name in ("agent", "collector", "pdusim", "prometheus"):
                tail = procs.log_tail(name, 5)
                if tail:
                    console.print(f"[dim]--- {name} log:\n{tail}[/dim]", markup=True)
        return 1
    finally:
        # Cleanup must survive a second Ctrl-C.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            procs.stop_all()
            # loop disks and namespace were removed by their context managers; be sure
            remove_leftovers()
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for s, h in old.items():
                signal.signal(s, h)


def _duration(text: str) -> float:
    """argparse type of --duration: a duration (`90`, `90s`, `2m`) of at least MIN_DURATION."""
    seconds = duration_arg(text)
    if seconds < MIN_DURATION:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_DURATION:g} s")
    return seconds


def add_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The demo's options, the same on `wattbit demo` and `python -m collector.demo`."""
    p.add_argument(
        "--duration", type=_duration, default=60.0,
        help=f"length of the run (60, 90s, 2m; at least {MIN_DURATION:g} s, default 60 s); "
        "its phases keep their shares of it",
    )  # fmt: skip
    p.add_argument("--disks", type=int, default=4, help="loop disks (default 4)")
    p.add_argument("--disk-mb", type=int, default=256, help="size of each loop disk in MB")
    p.add_argument("--out", default="demo-report", help="report directory (default demo-report)")
    p.add_argument(
        "--wait", "--keep-running",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after the report, keep Prometheus (with the demo's data) and everything else up "
        "until Enter, Ctrl-C or SIGTERM (default: when stdin is a terminal)",
    )  # fmt: skip
    p.add_argument(
        "--prometheus-data", metavar="DIR",
        help="keep Prometheus' data (its TSDB) in DIR, a new or empty directory, after the "
        "demo: to serve it again for dashboards and reports (docs/demo.md)",
    )  # fmt: skip
    return p


def parser() -> argparse.ArgumentParser:
    """`python -m collector.demo` options (what `make demo DEMO_ARGS=...` passes)."""
    p = argparse.ArgumentParser(prog="python -m collector.demo", description="the wattbit demo")
    return add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run the demo with the options of add_options()."""
    return main(args.duration, args.disks, args.out, args.wait, args.disk_mb, args.prometheus_data)


def entry(argv: list[str]) -> int:
    """Dispatch the demo or one of its helper roles (`send`, `receive`)."""
    if argv[:1] == ["receive"]:
        return receive(argv[1], int(argv[2]))
    if argv[:1] == ["send"]:
        return send(argv[1], int(argv[2]), float(argv[3]), argv[4:])  # ADDR PORT UNTIL DEV...
    return run(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
