"""`wattbit agent --check` and `wattbit collector --check` on this machine, as root and as an
unprivileged uid with and without the tracer's capabilities; and the collector itself run as
an unprivileged uid with no capability, polling a real SNMP recording (snmpsim), a real
Redfish mockup (sushy-static) and an IPMI simulator through FreeIPMI's ipmi-raw over lanplus.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporters.blockio.core.backend import OBJECT
from exporters.hostfs import caps
from exporters.tcp.flowlabels import OBJECT as FLOWLABEL_OBJECT
from exporters.tcp.owners import cgroup_name
from tests.support.bmcs import MOCKUPS, IpmiSim, SushyStatic, sushy_static_path
from tests.support.env import RECORDINGS, ROOT, require
from tests.support.realparts import Collector, have, is_root, running, setpriv
from tests.support.snmpagents import SnmpSim, have_snmpsim, silent_udp_port

APC = RECORDINGS / "apc_ap8641.snmprec"
COMMUNITY = "preflight-community-Kq3"
IPMI_PASSWORD = "Ipmi-pf-S3cret-4"

pytestmark = [pytest.mark.root]


@pytest.fixture
def tmp() -> Iterator[Path]:
    # The unprivileged processes read their configs and secrets here.
    d = Path(tempfile.mkdtemp(prefix="wattbit-privilege-check-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def check(
    command: str,
    config: Path,
    user: str | None = None,
    tracer: list[str] | None = None,
    prefix: tuple[str, ...] = (),
) -> tuple[int, dict]:
    """Run `wattbit COMMAND --config CONFIG --check --json` (as user with caps, after
    prefix: nsenter into a network namespace); (exit, doc)."""
    cmd = [sys.executable, "-m", "collector.cli", command, "--config", str(config)]
    cmd += ["--check", "--json"]
    if user is not None:
        cmd = [*setpriv(user, tracer), *cmd]
    cmd = [*prefix, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert out.stdout, out.stderr
    return out.returncode, json.loads(out.stdout)


def status(doc: dict, exporter: str, what: str) -> tuple[str, str]:
    """(status, detail) of one finding."""
    for f in doc["findings"]:
        if f["exporter"] == exporter and f["check"] == what:
            return f["status"], f["detail"]
    raise AssertionError(f"no finding {exporter}/{what}: {doc}")


def _agent_config(tmp: Path, smart: bool = True) -> Path:
    cfg = tmp / "agent.yml"
    cfg.write_text("smart:\n  enabled: false\n" if not smart else "{}\n")
    cfg.chmod(0o644)
    return cfg


def _need_bpf() -> None:
    require(is_root() and have("setpriv"), "needs root and setpriv")
    require(OBJECT.exists(), f"{OBJECT} is not built")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "needs the kernel's BTF")


def test_agent_check_as_root(tmp: Path) -> None:
    _need_bpf()
    code, doc = check("agent", _agent_config(tmp))
    assert status(doc, "blockio", "program loads and attaches")[0] == "ok"
    assert status(doc, "blockio", "capabilities")[0] == "ok"
    assert status(doc, "smart", "smartctl") == (
        "ok",
        "/usr/sbin/smartctl run by the agent (has CAP_SYS_RAWIO)",
    )
    assert code == 0 and doc["ok"] is True
    kept, detail = status(doc, "agent", "after start")
    assert kept == "ok" and "keeps CAP_SYS_ADMIN, CAP_SYS_RAWIO permitted" in detail
    # Nothing attached is left behind: the check detached what it loaded.
    assert not any(f["status"] == "fail" for f in doc["findings"])


def test_agent_check_with_exactly_the_tracer_capabilities(tmp: Path) -> None:
    _need_bpf()
    code, doc = check("agent", _agent_config(tmp), "65534", ["bpf", "perfmon"])
    assert status(doc, "agent", "capabilities") == ("ok", "effective: CAP_BPF, CAP_PERFMON")
    assert status(doc, "agent", "after start") == ("ok", "drops every capability once attached")
    assert status(doc, "blockio", "program loads and attaches")[0] == "ok"
    # No CAP_SYS_RAWIO and no helper socket here: SMART cannot run, and says how to fix it.
    smart, detail = status(doc, "smart", "smartctl")
    assert smart == "fail" and "lacks CAP_SYS_RAWIO" in detail
    assert code == 1
    code, doc = check("agent", _agent_config(tmp, smart=False), "65534", ["bpf", "perfmon"])
    assert code == 0 and doc["ok"] is True


def test_agent_check_without_capabilities(tmp: Path) -> None:
    require(is_root() and have("setpriv"), "needs root and setpriv")
    code, doc = check("agent", _agent_config(tmp, smart=False), "65534", [])
    assert status(doc, "blockio", "capabilities") == ("fail", "missing CAP_BPF and CAP_PERFMON")
    assert status(doc, "agent", "after start") == ("ok", "holds no capability to drop")
    loaded, detail = status(doc, "blockio", "program loads and attaches")
    assert loaded == "fail" and "(missing CAP_BPF+CAP_PERFMON)" in detail
    assert code == 1 and doc["ok"] is False


# --- tcp (issue #31) -----------------------------------------------------------------------

ONLY_TCP = "".join(
    f"{e}:\n  enabled: false\n" for e in ("blockio", "smart", "pcie", "power", "nic")
)
SCITAGS_KEY = "tcp:\n  key: [peer, port, cgroup, experiment]\n"
# Inside the namespace: a listener on 127.0.0.1 and N connections to it, all accepted; says
# "ready", then holds them until its stdin closes.
HOLDER = """
import socket, sys
n = int(sys.argv[1])
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(n)
conns = [socket.create_connection(lst.getsockname()) for _ in range(n)]
accepted = [lst.accept()[0] for _ in range(n)]
print("ready", flush=True)
sys.stdin.read()
"""


def _tcp_config(tmp: Path, text: str) -> Path:
    cfg = tmp / "agent-tcp.yml"
    cfg.write_text(ONLY_TCP + text)
    cfg.chmod(0o644)
    return cfg


@contextlib.contextmanager
def _netns() -> Iterator[tuple[str, ...]]:
    """A network namespace of this branch's tests (lo up), as an nsenter prefix: nsenter
    switches the network namespace only (`ip netns exec` would also mount a new /sys,
    hiding /sys/fs/cgroup from the check)."""
    name = f"agentcheck{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield ("nsenter", f"--net=/run/netns/{name}")
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _ss_count(prefix: tuple[str, ...]) -> int:
    out = subprocess.run([*prefix, "ss", "-tanH"], capture_output=True, text=True, check=True)
    return len(out.stdout.splitlines())


def _own_cgroup() -> str:
    """This process's cgroup v2 label (the check, its child, is in the same cgroup)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return cgroup_name(line[3:])
    raise AssertionError("no cgroup v2 line in /proc/self/cgroup")


def test_agent_check_tcp_counts_what_ss_counts(tmp: Path) -> None:
    """As root, in a namespace of its own holding a listener and 6 connections (sockets
    elsewhere on this shared machine come and go: here only ours): the tcp rows pass, and
    the dump's count lies between `ss -tanH | wc -l` taken before and after the check."""
    _need_bpf()
    require(have("nsenter") and have("ss") and have("ip"), "needs nsenter and iproute2")
    require(FLOWLABEL_OBJECT.exists(), f"{FLOWLABEL_OBJECT} is not built")
    n = 6
    with _netns() as ns:
        holder = subprocess.Popen(
            [*ns, sys.executable, "-c", HOLDER, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            before = _ss_count(ns)
            code, doc = check("agent", _tcp_config(tmp, SCITAGS_KEY), prefix=ns)
            after = _ss_count(ns)
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=60)
    assert before >= 2 * n + 1  # the listener, n connections and n accepted
    dump, detail = status(doc, "tcp", "socket dump")
    assert dump == "ok", detail
    counted = int(detail.split()[0])
    assert min(before, after) <= counted <= max(before, after), (before, detail, after)
    assert status(doc, "tcp", "socket cgroup") == (
        "ok",
        f"given with the dump; a socket of this check is in {_own_cgroup()}",
    )
    assert status(doc, "tcp", "closing sockets") == (
        "ok",
        "destroy messages (bound the sock_diag destroy groups)",
    )
    # net.core.default_qdisc is in the initial network namespace's /proc/sys only (the
    # kernel's net_core_table, not netns_core_table): a fallback, said as a warning
    tuning, detail = status(doc, "tcp", "host tuning")
    assert tuning == "warn" and "unreadable: " in detail, detail
    assert "net.core.default_qdisc" in detail.split("unreadable: ")[1]
    assert "net.ipv4.tcp_congestion_control" not in detail
    labels, detail = status(doc, "tcp", "flow labels (SciTags)")
    assert labels == "ok" and detail.startswith("bpf_iter: loaded, attached, walked once")
    assert code == 0 and doc["ok"] is True, doc


def test_agent_check_tcp_unprivileged(tmp: Path) -> None:
    """As uid 65534 with no capability: the dump, the closing sockets, the cgroup and the
    tuning need none; the
    SciTags dimensions in tcp.key cannot work (the iterator needs CAP_BPF + CAP_PERFMON):
    the row names them and the check exits 1; the same key without them exits 0."""
    require(is_root() and have("setpriv"), "needs root and setpriv")
    code, doc = check("agent", _tcp_config(tmp, SCITAGS_KEY), "65534", [])
    assert status(doc, "agent", "capabilities") == ("ok", "effective: none")
    assert status(doc, "tcp", "socket dump")[0] == "ok"
    assert status(doc, "tcp", "host tuning")[0] == "ok"
    # the destroy groups need no capability either: sock_diag's netlink family is created
    # with NL_CFG_F_NONROOT_RECV (diag_net_init(), net/core/sock_diag.c)
    assert status(doc, "tcp", "closing sockets") == (
        "ok",
        "destroy messages (bound the sock_diag destroy groups)",
    )
    labels, detail = status(doc, "tcp", "flow labels (SciTags)")
    assert labels == "fail" and "missing CAP_BPF+CAP_PERFMON" in detail, detail
    assert [f["check"] for f in doc["findings"] if f["status"] == "fail"] == [
        "flow labels (SciTags)"
    ]
    assert code == 1 and doc["ok"] is False
    code, doc = check("agent", _tcp_config(tmp, "tcp:\n  key: [peer, port, cgroup]\n"), "65534", [])
    assert not any(f["check"] == "flow labels (SciTags)" for f in doc["findings"])
    assert code == 0 and doc["ok"] is True, doc


def test_agent_check_tcp_disabled(tmp: Path) -> None:
    code, doc = check("agent", _tcp_config(tmp, "tcp:\n  enabled: false\n"))
    tcp = [(f["check"], f["status"]) for f in doc["findings"] if f["exporter"] == "tcp"]
    assert tcp == [("enabled", "off")] and code == 0


@pytest.mark.parametrize(
    ("command", "text", "key"),
    [
        ("agent", "blockio:\n  backend: ebpf-please\n", "blockio.backend"),
        ("collector", "pdus:\n  - name: a\n    adress: x\n", "pdus[0]"),
    ],
)
def test_check_bad_config_exits_2(tmp: Path, command: str, text: str, key: str) -> None:
    cfg = tmp / "bad.yml"
    cfg.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "collector.cli", command, "--config", str(cfg), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 2 and key in out.stderr and not out.stdout


def _collector_config(tmp: Path, snmp_port: int, rf_url: str, ipmi_port: int) -> str:
    community = tmp / "community"
    community.write_text(COMMUNITY + "\n")
    pw = tmp / "ipmi.pw"
    pw.write_text(IPMI_PASSWORD + "\n")
    for f in (community, pw):
        f.chmod(0o600)
        shutil.chown(f, user=65534, group=65534)  # the collector's user, as a site sets it
    return f"""
interval: 5s
state_dir: {tmp / "state"}
auths:
  lab:
    version: 2c
    community_file: {community}
pdus:
  - name: apc
    address: 127.0.0.1:{snmp_port}
    auth: lab
    timeout: 2s
bmcs:
  - name: dl325
    protocol: redfish
    address: {rf_url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_file: {pw}
    host: node-8
  - name: ipmi
    protocol: ipmi
    address: 127.0.0.1:{ipmi_port}
    username: wattbit
    password_file: {pw}
    host: node-9
"""


def _need_sims() -> None:
    require(is_root() and have("setpriv"), "needs root and setpriv")
    require(have_snmpsim() and APC.is_file(), "needs snmpsim and the AP8641 recording")
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")
    require(shutil.which("ipmi-raw") is not None, "ipmi-raw (Debian freeipmi-tools) is missing")


def test_collector_runs_and_checks_with_no_capability(tmp: Path) -> None:
    """As uid 65534 with no capability at all: --check passes, then the collector polls all
    three (ipmi-raw included) and its threads hold nothing."""
    _need_sims()
    with (
        SnmpSim({COMMUNITY: APC}) as snmp,
        SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp) as dl325,
        IpmiSim(tmp, IPMI_PASSWORD, watts=415) as ipmi,
    ):
        config = _collector_config(tmp, snmp.port, dl325.url, ipmi.port)
        cfg = tmp / "collector.yml"
        cfg.write_text(config)
        cfg.chmod(0o644)
        code, doc = check("collector", cfg, "65534", [])
        assert status(doc, "collector", "capabilities") == ("ok", "none held, none needed")
        pdu, detail = status(doc, "pdu", "apc")
        assert pdu == "ok" and "apc_rpdu2" in detail and "AP8641" in detail, detail
        assert status(doc, "bmc", "dl325")[0] == "ok"
        assert status(doc, "bmc", "ipmi")[0] == "ok"
        assert status(doc, "bmc", "ipmi-raw")[0] == "ok"
        assert code == 0, doc

        coll = Collector(config, tmp, user="65534", caps=[])
        with running(coll):

            def polled(s: dict) -> bool:
                watts = {k for k in s if k[0] == "wattbit_bmc_power_watts"}
                return len(watts) == 2 and any(k[0] == "wattbit_pdu_outlet_power_watts" for k in s)

            s = coll.scrape_until("the PDU's and both BMCs' watts", polled, timeout=90)
            for task in Path(f"/proc/{coll.proc.pid}/task").iterdir():
                sets = caps.parse_status((task / "status").read_text())
                assert (sets.effective, sets.permitted, sets.ambient) == (0, 0, 0)
    power = {dict(k[1])["host"]: v for k, v in s.items() if k[0] == "wattbit_bmc_power_watts"}
    assert power == {"node-8": 97.0, "node-9": 415.0}
    assert s[("wattbit_pdu_up", (("pdu", "apc"),))] == 1.0


def test_collector_check_fails_on_what_cannot_run(tmp: Path) -> None:
    """A PDU that never answers, a BMC with a wrong password: exit 1, each said; the check
    ends (each target has its own bound)."""
    _need_sims()
    with (
        SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp) as dl325,
        IpmiSim(tmp, "another-password-9", watts=415) as ipmi,
        silent_udp_port() as silent,
    ):
        config = _collector_config(tmp, silent, dl325.url, ipmi.port)
        cfg = tmp / "collector.yml"
        cfg.write_text(config)
        cfg.chmod(0o644)
        code, doc = check("collector", cfg, "65534", [])
    pdu, detail = status(doc, "pdu", "apc")
    assert pdu == "fail" and "no SNMP answer" in detail
    ipmi_status, detail = status(doc, "bmc", "ipmi")
    assert ipmi_status == "fail" and "auth" in detail, detail
    assert status(doc, "bmc", "dl325")[0] == "ok"
    assert code == 1 and doc["ok"] is False
    assert IPMI_PASSWORD not in json.dumps(doc) and "another-password-9" not in json.dumps(doc)
