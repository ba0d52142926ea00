"""Real parts for integration tests: loop disks on tmpfs, a running agent, scraping, fio.

Loop disks, free ports and waits are the demo's (collector/demo/loopdisks.py, procs.py),
re-exported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from collector.demo.loopdisks import LoopDisk as LoopDisk
from collector.demo.loopdisks import loop_disks as loop_disks
from collector.demo.procs import free_port as free_port
from collector.demo.procs import wait_for as wait_for
from tests.support.tcpnet import ip, namespace, root_link_up

ROOT = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def is_root() -> bool:
    """True when running as root."""
    return os.geteuid() == 0


def have(cmd: str) -> bool:
    """True when cmd is on PATH."""
    return shutil.which(cmd) is not None


def bcc_importable() -> bool:
    """True when Debian's bcc is importable from this interpreter."""
    try:
        import bcc  # noqa: F401
    except ImportError:
        return False
    return True


def setpriv(user: str, caps: list[str] | None = None) -> list[str]:
    """A setpriv prefix: run as uid and gid user, no groups, and with caps given exactly
    those capabilities (None: what setpriv leaves, i.e. none for a non-root uid)."""
    cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    if caps is not None:
        plus = ",".join(f"+{c}" for c in caps)
        cmd += [f"--inh-caps=-all{',' + plus if plus else ''}"]
        if plus:
            cmd += [f"--ambient-caps={plus}"]
        cmd += [f"--bounding-set=-all{',' + plus if plus else ''}"]
    return cmd


class Agent:
    """A `wattbit agent` subprocess on 127.0.0.1."""

    command = "agent"
    host = "127.0.0.1"  # where it listens (with port: an endpoint for tests.support.http)

    def __init__(
        self,
        config: str,
        tmp: Path,
        user: str | None = None,
        netns: str | None = None,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        caps: list[str] | None = None,
    ) -> None:
        """caps (with user): exactly these capabilities (setpriv names: "bpf", "perfmon"),
        in every set a non-root process keeps across exec (inheritable, ambient, bounding),
        as the packaged unit's AmbientCapabilities/CapabilityBoundingSet give them."""
        self.port = free_port()
        cfg = tmp / f"{self.command}.yml"
        cfg.write_text(config)
        cfg.chmod(0o644)
        self.config = cfg
        cmd = [sys.executable, "-m", "collector.cli", self.command, "--config", str(cfg)]
        cmd += ["--listen", f"127.0.0.1:{self.port}"]
        if user:
            cmd = [*setpriv(user, caps), *cmd]
        self.netns = netns
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        if prefix:  # e.g. a private mount namespace hiding the kernel's BTF
            cmd = [*prefix, *cmd]
        self.log = tmp / f"{self.command}.log"
        self._log = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def check_alive(self) -> None:
        """Raise, with its log, when the process has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.command} exited {self.proc.returncode}: {self.log.read_text()}"
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until /metrics answers (bcc compiles the program first: a few seconds)."""
        wait_for(
            lambda: self.scrape_text() is not None,
            timeout,
            f"{self.command} /metrics",
            alive=self.check_alive,
            logs=[self.log],
            errors=(OSError,),
            interval=0.2,
        )

    def scrape_until(
        self, what: str, ok: Callable[[Samples], bool], timeout: float = 20.0
    ) -> Samples:
        """Scrape until ok(samples) holds and return those samples; TimeoutError with the log."""

        def check() -> Samples | None:
            s = self.scrape()
            return s if ok(s) else None

        return wait_for(check, timeout, what, alive=self.check_alive, logs=[self.log], interval=0.2)

    def scrape_text(self) -> str:
        """The raw /metrics text (fetched from inside the agent's network namespace)."""
        if self.netns:
            code = (
                "import sys, urllib.request; "
                f"r = urllib.request.urlopen({self.url!r}, timeout=10); "
                "sys.stdout.write(r.read().decode())"
            )
            r = subprocess.run(
                ["ip", "netns", "exec", self.netns, sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if r.returncode != 0:
                raise ConnectionError(r.stderr.strip().splitlines()[-1:] or "scrape failed")
            return r.stdout
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return str(r.read().decode())

    def scrape(self) -> Samples:
        """/metrics as {(sample name, sorted labels): value}."""
        return parse_samples(self.scrape_text())

    def stop(self) -> None:
        """SIGTERM, then wait; kill if it hangs."""
        stop_process(self.proc, 20)
        self._log.close()


@dataclass
class VethPair:
    """Two network namespaces joined by a veth pair, with addresses on both ends."""

    ns_a: str
    ns_b: str
    if_a: str
    if_b: str
    addr_a: str
    addr_b: str

    def run(self, ns: str, *cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
        """Run a command inside one of the namespaces."""
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            ["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, **kw
        )

    def sys_counter(self, ns: str, ifname: str, name: str) -> int:
        """The kernel's own counter from /sys/class/net inside the namespace."""
        r = self.run(ns, "cat", f"/sys/class/net/{ifname}/statistics/{name}", check=True)
        return int(r.stdout)


@contextlib.contextmanager
def veth_pair() -> Iterator[VethPair]:
    """Fresh namespaces and a veth between them; all removed afterwards, also on failure."""
    tag = f"{os.getpid() % 10000}{int(time.time() * 1000) % 1000}"
    # 169.254/16 is link-local: these addresses exist only inside the test's own namespaces.
    pair = VethPair(
        f"wbA{tag}", f"wbB{tag}", f"wbtx{tag}", f"wbrx{tag}", "169.254.213.1", "169.254.213.2"
    )

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    try:
        ip("netns", "add", pair.ns_a)
        ip("netns", "add", pair.ns_b)
        ip(
            "link",
            "add",
            pair.if_a,
            "netns",
            pair.ns_a,
            "type",
            "veth",
            "peer",
            "name",
            pair.if_b,
            "netns",
            pair.ns_b,
        )
        for ns, ifname, addr in (
            (pair.ns_a, pair.if_a, pair.addr_a),
            (pair.ns_b, pair.if_b, pair.addr_b),
        ):
            # No IPv6 on the pair: router solicitations would add bytes nobody asked for.
            pair.run(ns, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1")
            ip("-n", ns, "addr", "add", f"{addr}/30", "dev", ifname)
            ip("-n", ns, "link", "set", ifname, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield pair
    finally:
        for ns in (pair.ns_a, pair.ns_b):
            # Kill whatever still runs inside, then remove the namespace (and the veth).
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


class Collector(Agent):
    """A `wattbit collector` subprocess on 127.0.0.1."""

    command = "collector"


def prometheus_on_blocks(
    data: Path, directory: Path, scrape_interval: str = "10s", timeout: float = 120.0
) -> contextlib.AbstractContextManager[str]:
    """A real Prometheus serving the TSDB in `data` on 127.0.0.1 (no scrapes); its base URL.

    Started by server() like every other Prometheus of the tests; always stopped.
    """
    cfg = directory / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: {scrape_interval}\nscrape_configs: []\n")
    return server(
        "prometheus",
        lambda port: [
            "prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d",
        ],
        directory,
        timeout=timeout,
    )  # fmt: skip


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run promtool from the repository root.

    The timeout only guards against a hang, under pytest-timeout's 300 s: `promtool test
    rules` over every case file took 120 s beside a parallel suite on a busy 2-CPU machine.
    """
    return subprocess.run(
        ["promtool", *args], cwd=ROOT, capture_output=True, text=True, timeout=270
    )


def assert_promtool_clean(proc: subprocess.CompletedProcess[str]) -> None:
    """Exit 0, SUCCESS, and no warning anywhere in promtool's output."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "warn" not in out.lower(), out
    assert "SUCCESS" in out, out


def parse_samples(text: str) -> Samples:
    """Exposition text as {(sample name, sorted labels): value}."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: dict, name: str, **labels: str) -> float:
    """One sample's value, 0 when absent."""
    return float(samples.get((name, tuple(sorted(labels.items()))), 0.0))


def diskstats() -> dict[str, list[int]]:
    """The kernel's /proc/diskstats counters by device name."""
    out = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        p = line.split()
        out[p[2]] = [int(x) for x in p[3:]]
    return out


def fio(args: list[str]) -> dict:
    """Run fio with JSON output and return the parsed report."""
    r = subprocess.run(
        ["fio", "--output-format=json", *args], capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RuntimeError(f"fio failed: {r.stderr}")
    return dict(json.loads(r.stdout[r.stdout.index("{") :]))


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over cumulative (le, count) pairs, +Inf last."""
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


# --- servers: Prometheus, VictoriaMetrics, vmagent, vmalert -----------------------------------


class _PortTaken(Exception):
    """The port chosen was taken by someone else before the server bound it."""


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM, wait up to timeout, SIGKILL if it hangs (nothing if it has exited)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def server(
    name: str,
    command: Callable[[int], list[str]],
    directory: Path,
    ready_path: str = "/-/ready",
    timeout: float = 60.0,
) -> Iterator[str]:
    """A server on a free 127.0.0.1 port, as `command(port)` starts it; yields its base URL.

    Ready when GET `ready_path` answers 200. Always stopped (SIGTERM, then SIGKILL after 30 s;
    Prometheus flushes its remote-write queues on SIGTERM). A port is free when chosen, not
    necessarily when the server binds it: if another process took it in between, the server
    is started again on another port (three tries). Its output goes to DIRECTORY/NAME.log.
    """
    log_path = directory / f"{name}.log"
    proc: subprocess.Popen[bytes] | None = None
    log = None
    url = ""
    try:
        for attempt in range(3):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            log = log_path.open("ab")
            offset = log.tell()  # this try's output starts here
            proc = subprocess.Popen(
                command(port), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

            def alive(p: subprocess.Popen[bytes] = proc, offset: int = offset) -> None:
                if p.poll() is None:
                    return
                text = log_path.read_bytes()[offset:].decode(errors="replace")
                if "address already in use" in text.lower():
                    raise _PortTaken(text[-2000:])
                raise RuntimeError(f"{name} exited {p.returncode}: {text[-3000:]}")

            def ready(u: str = url) -> bool:
                with urllib.request.urlopen(u + ready_path, timeout=2) as r:
                    return bool(r.status == 200)

            try:
                wait_for(ready, timeout, f"{name} ready", alive=alive, logs=[log_path])
                break
            except _PortTaken:
                stop_process(proc)
                log.close()
                proc = None
                if attempt == 2:
                    raise
        yield url
    finally:
        if proc is not None:
            stop_process(proc)
        if log is not None:
            log.close()


def prometheus_server(
    config: str, directory: Path, name: str = "prometheus", *args: str
) -> contextlib.AbstractContextManager[str]:
    """A scraping Prometheus with `config` (YAML text) and its own TSDB under `directory`."""
    cfg = directory / f"{name}.yml"
    cfg.write_text(config)
    return server(
        name,
        lambda port: [
            "prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={directory / name}",
            f"--web.listen-address=127.0.0.1:{port}", *args,
        ],
        directory,
    )  # fmt: skip


def victoria_metrics(
    directory: Path, name: str = "victoria-metrics", *args: str
) -> contextlib.AbstractContextManager[str]:
    """Debian's single-node VictoriaMetrics with its own data directory; its base URL.

    Prometheus remote-writes to URL/api/v1/write and queries URL/api/v1/query* as a
    Prometheus. Not the package's systemd service: a process of the test's own, on a free
    port, with every default (docs/longterm-store.md lists the ones that matter).
    """
    return server(
        name,
        lambda port: [
            "victoria-metrics", f"-storageDataPath={directory / name}",
            f"-httpListenAddr=127.0.0.1:{port}", *args,
        ],
        directory,
        ready_path="/health",
    )  # fmt: skip


def vmagent(
    config: str, directory: Path, remote_write: str, name: str = "vmagent", *args: str
) -> contextlib.AbstractContextManager[str]:
    """vmagent scraping with the Prometheus-style `config`, remote-writing to `remote_write`."""
    cfg = directory / f"{name}.yml"
    cfg.write_text(config)
    return server(
        name,
        lambda port: [
            "vmagent", f"-promscrape.config={cfg}", f"-remoteWrite.url={remote_write}",
            f"-remoteWrite.tmpDataPath={directory / name}", f"-httpListenAddr=127.0.0.1:{port}",
            *args,
        ],
        directory,
        ready_path="/health",
    )  # fmt: skip


def vmalert(
    rules: list[Path], directory: Path, datasource: str, name: str = "vmalert", *args: str
) -> contextlib.AbstractContextManager[str]:
    """vmalert evaluating `rules` against the Prometheus-compatible `datasource`."""
    return server(
        name,
        lambda port: [
            "vmalert", *(f"-rule={r}" for r in rules), f"-datasource.url={datasource}",
            f"-httpListenAddr=127.0.0.1:{port}", *args,
        ],
        directory,
        ready_path="/health",
    )  # fmt: skip


def query_api(url: str, path: str, params: dict[str, str] | None = None) -> Any:
    """POST a form to a Prometheus-compatible API path; its `data` (RuntimeError otherwise)."""
    data = urllib.parse.urlencode(params).encode() if params is not None else None
    with urllib.request.urlopen(url.rstrip("/") + path, data=data, timeout=60) as r:
        doc = json.load(r)
    if doc.get("status") != "success":
        raise RuntimeError(f"{url}{path} {params}: {doc}")
    return doc["data"]


@contextlib.contextmanager
def veth_into_namespace(
    name: str, addr_root: str, addr_ns: str, link: str | None = None
) -> Iterator[tuple[str, str]]:
    """A fresh namespace joined to the root namespace by a veth; yields (namespace, root end).

    Names are `name` (the interfaces' `link`, default name's first four letters) with this
    process' id, the addresses /30s given by the caller (each test
    its own, so that two tests at once never share a route). The namespace, whatever still
    runs in it, and the veth are removed afterwards, also on failure.
    """
    tag = f"{os.getpid() % 100000}"
    link = link or name[:4]  # the interfaces' prefix: with the tag, within IFNAMSIZ
    ns, if_root, if_ns = f"{name}{tag}", f"{link}{tag}a", f"{link}{tag}b"

    try:
        with namespace(ns):
            ip("link", "add", if_root, "type", "veth", "peer", "name", if_ns, "netns", ns)
            root_link_up(ns, if_root, if_ns, addr_root, addr_ns)
            yield ns, if_root
    finally:
        subprocess.run(["ip", "link", "del", if_root], capture_output=True, check=False)


@contextlib.contextmanager
def process(cmd: list[str], log: Path, **kw: Any) -> Iterator[subprocess.Popen[bytes]]:
    """A subprocess from the repository (output to log), terminated, then killed, on exit."""
    fh = log.open("wb")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, **kw)
    try:
        yield proc
    finally:
        stop_process(proc, 15)
        fh.close()


AgentT = TypeVar("AgentT", bound=Agent)


@contextlib.contextmanager
def running(agent: AgentT) -> Iterator[AgentT]:
    """The agent (or collector) once it serves /metrics; always stopped afterwards."""
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.stop()
