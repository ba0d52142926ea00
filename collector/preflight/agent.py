"""`wattbit agent --check`: per exporter, what will work on this host with this process's
capabilities, found by doing it (the BPF program is loaded, attached and detached; each
exporter collects once), not by guessing from the uid."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

from prometheus_client.metrics_core import Metric

from collector.agent.config import AgentConfig
from collector.preflight.report import Report
from collector.preflight.tcp import check_tcp
from exporters.base import Exporter
from exporters.blockio.exporter import open_backend
from exporters.blockio.model import BackendUnavailable
from exporters.hostfs import caps
from exporters.nic.exporter import NicExporter
from exporters.pcie.exporter import PcieExporter
from exporters.power.powercap import parse_zones, read_powercap
from exporters.smart.runner import choose_runner, decode_answer, find_smartctl, helper_present

GRANT = (
    "run as root, or give the agent CAP_BPF and CAP_PERFMON (the packaged unit's "
    "AmbientCapabilities=CAP_BPF CAP_PERFMON; CAP_SYS_ADMIN before Linux 5.8): docs/privileges.md"
)


def check_agent(
    cfg: AgentConfig,
    sys_root: Path = Path("/sys"),
    proc_root: Path = Path("/proc"),
    helper_timeout: float = 30.0,
) -> Report:
    """Every check of the agent's configured exporters on this host."""
    report = Report("agent")
    held = caps.current()
    report.add("agent", "capabilities", "ok", "effective: " + describe(held.effective))
    if cfg.blockio.enabled:
        _blockio(report, cfg, sys_root, proc_root, held.effective)
    else:
        report.add("blockio", "enabled", "off", "blockio.enabled: false")
    if cfg.nic.enabled:
        _collect_once(
            report,
            NicExporter(
                exclude=cfg.nic.exclude,
                queues=cfg.nic.queues,
                link_speeds=cfg.nic.link_speeds,
                sys_root=sys_root,
                proc_root=proc_root,
            ),
            _nic,
        )
    if cfg.pcie.enabled:
        pcie = PcieExporter(
            block_exclude=cfg.blockio.exclude,
            nic_exclude=cfg.nic.exclude,
            sys_root=sys_root,
            proc_root=proc_root,
        )
        _collect_once(report, pcie, _pcie)
    if cfg.power.enabled and cfg.power.rapl:
        _rapl(report, sys_root)
    if cfg.smart.enabled:
        _smart(report, cfg, held, helper_timeout)
    if cfg.tcp.enabled:
        check_tcp(report, cfg.tcp, sys_root, proc_root)
    for name in ("nic", "pcie", "power", "smart", "tcp"):
        if not getattr(cfg, name).enabled:
            report.add(name, "enabled", "off", f"{name}.enabled: false")
    _after_start(report, cfg, held)
    return report


def _after_start(report: Report, cfg: AgentConfig, held: caps.CapSets) -> None:
    """What the agent would keep once its programs are attached (collector/agent/privileges)."""
    if not held.permitted:
        report.add("agent", "after start", "ok", "holds no capability to drop")
        return
    if not cfg.drop_capabilities:
        report.add(
            "agent",
            "after start",
            "warn",
            "drop_capabilities: false: keeps " + describe(held.permitted) + " throughout",
            "drop_capabilities: true (the default)",
        )
        return
    direct = False
    if cfg.smart.enabled:
        s = cfg.smart
        rawio = held.has(caps.CAP_SYS_RAWIO)
        direct = choose_runner(s.smartctl, helper_present(s.helper_socket), rawio).runner == (
            "smartctl"
        )
    kept = held.permitted & caps.mask([caps.CAP_SYS_RAWIO, caps.CAP_SYS_ADMIN]) if direct else 0
    why = ["smartctl, its child (the helper socket would let it keep none)"] if kept else []
    # exporters/tcp kept_capabilities(): the owners' /proc/PID/fd reads need CAP_SYS_PTRACE
    ptrace = caps.mask([caps.CAP_NUMBERS["CAP_SYS_PTRACE"]])
    if cfg.tcp.enabled and cfg.tcp.processes and held.permitted & ptrace:
        kept |= ptrace
        why.append("the tcp exporter's owning processes (tcp.processes: true)")
    if kept:
        report.add(
            "agent",
            "after start",
            "ok",
            f"drops the rest; keeps {describe(kept)} permitted (never effective) for "
            + " and ".join(why),
        )
    else:
        report.add("agent", "after start", "ok", "drops every capability once attached")


# The capabilities an exporter may use (docs/privileges.md); the others are only counted.
RELEVANT = ("CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "CAP_SYS_RAWIO", "CAP_DAC_READ_SEARCH",
            "CAP_SYS_PTRACE")  # fmt: skip


def describe(eff: int) -> str:
    """The effective set in a line: the relevant capabilities, and how many others."""
    held = caps.names(eff)
    shown = [n for n in RELEVANT if n in held]
    others = len(held) - len(shown)
    text = ", ".join(shown) or "none"
    return text + (f" (and {others} others)" if others else "")


def _blockio(report: Report, cfg: AgentConfig, sys_root: Path, proc_root: Path, eff: int) -> None:
    btf = Path("/sys/kernel/btf/vmlinux")
    if btf.exists():
        report.add("blockio", "kernel BTF", "ok", f"{btf} present (CO-RE relocates against it)")
    else:
        report.add(
            "blockio",
            "kernel BTF",
            "warn",
            f"{btf} missing: the core backend cannot run",
            "a kernel with CONFIG_DEBUG_INFO_BTF=y; else bcc needs kernel headers",
        )
    missing = caps.bpf_tracing_missing(eff)
    if missing:
        report.add("blockio", "capabilities", "fail", "missing " + " and ".join(missing), GRANT)
    else:
        report.add("blockio", "capabilities", "ok", "may load and attach tracing programs")
    b = cfg.blockio
    try:
        # Loads and attaches the program as the agent would, then detaches it.
        backend, reason = open_backend(
            b.backend, b.max_inflight, sys_root, proc_root, b.latency_buckets, b.size_histogram
        )
    except BackendUnavailable as exc:
        report.add(
            "blockio",
            "program loads and attaches",
            "fail",
            f"backend {b.backend!r} was requested but {exc.detail.splitlines()[0]}",
            GRANT if exc.reason.startswith("missing CAP") else "see docs/exporters/blockio.md",
        )
        return
    try:
        name = backend.name
    finally:
        backend.close()
    why = f" ({reason})" if reason else ""
    if name == "core":
        report.add(
            "blockio",
            "program loads and attaches",
            "ok",
            "core (CO-RE, libbpf): loaded, attached and detached",
        )
    elif name == "bcc":
        report.add(
            "blockio",
            "program loads and attaches",
            "warn",
            f"bcc{why}",
            "core is preferred: kernel BTF and blockio.bpf.o (docs/exporters/blockio.md)",
        )
    elif reason == "configured":
        report.add("blockio", "backend", "ok", "diskstats (configured)")
    else:
        report.add(
            "blockio",
            "program loads and attaches",
            "fail",
            f"no eBPF: would fall back to /proc/diskstats{why}, no latency histograms",
            GRANT if reason.startswith("missing CAP") else "docs/exporters/blockio.md",
        )


Families = dict[str, Metric]


def _collect_once(
    report: Report, exporter: Exporter, judge: Callable[[Report, Families], None]
) -> None:
    """Collect once, as a scrape would, and judge what came out."""
    try:
        families = {f.name: f for f in exporter.collect()}
    except Exception as exc:  # what the agent would log as "exporter failed"
        report.add(exporter.name, "collects", "fail", f"{type(exc).__name__}: {exc}")
        return
    finally:
        exporter.close()
    judge(report, families)


def _labels(families: Families, name: str, label: str) -> set[str]:
    fam = families.get(name)
    return {s.labels[label] for s in fam.samples} if fam is not None else set()


def _nic(report: Report, families: Families) -> None:
    names = _labels(families, "wattbit_nic_info", "interface")
    known = _labels(families, "wattbit_nic_link_speed_bytes_per_second", "interface")
    if not names:
        report.add(
            "nic",
            "interfaces",
            "warn",
            "no interface to export (all excluded?)",
            "check nic.exclude",
        )
        return
    unknown = sorted(names - known)
    if unknown:
        report.add(
            "nic",
            "link speeds known",
            "warn",
            f"{len(known)} of {len(names)}; none for {', '.join(unknown[:8])}",
            "set nic.link_speeds for them (J/Gbit and utilisation need a speed)",
        )
    else:
        report.add("nic", "link speeds known", "ok", f"all {len(names)} interfaces")


def _pcie(report: Report, families: Families) -> None:
    links = families.get("wattbit_pcie_link_info")
    n = len(links.samples) if links else 0
    if n:
        report.add("pcie", "PCIe links visible", "ok", f"{n} links of disks' and NICs' chains")
    else:
        report.add(
            "pcie",
            "PCIe links visible",
            "warn",
            "none (a VM's virtio devices, or no PCIe disks and NICs)",
            "nothing to do on a VM; on hardware check /sys/bus/pci",
        )


def _rapl(report: Report, sys_root: Path) -> None:
    zones = parse_zones(read_powercap(sys_root))
    if not zones:
        report.add(
            "power",
            "RAPL readable",
            "warn",
            "no powercap zones on this host",
            "none needed on a VM or a CPU without RAPL; else load intel_rapl_msr",
        )
        return
    unreadable = [z.key for z in zones if not z.readable]
    if unreadable:
        report.add(
            "power",
            "RAPL readable",
            "fail",
            f"{len(unreadable)} of {len(zones)} zones' energy_uj root-only (CVE-2020-8694)",
            "the unit's ExecStartPre=+/usr/lib/wattbit/rapl-access (group wattbit "
            "read), or run as root",
        )
    else:
        report.add("power", "RAPL readable", "ok", f"{len(zones)} zones")


def _smart(report: Report, cfg: AgentConfig, held: caps.CapSets, timeout: float) -> None:
    s = cfg.smart
    present = helper_present(s.helper_socket)
    choice = choose_runner(s.smartctl, present, held.has(caps.CAP_SYS_RAWIO))
    if choice.runner == "helper":
        ok, detail = ask_helper_scan(s.helper_socket, timeout)
        report.add(
            "smart",
            "smartctl helper",
            "ok" if ok else "fail",
            f"{s.helper_socket} ({choice.reason}): {detail}",
            ""
            if ok
            else "systemctl enable --now wattbit-smartctl.socket; the agent's "
            "user in group wattbit",
        )
        return
    binary = find_smartctl()
    if binary is None:
        report.add(
            "smart",
            "smartctl",
            "fail",
            "smartctl not found",
            "install smartmontools (Debian, EL: smartmontools)",
        )
        return
    if choice.reason == "missing CAP_SYS_RAWIO, no helper":
        report.add(
            "smart",
            "smartctl",
            "fail",
            f"{binary}, but this process lacks CAP_SYS_RAWIO and no helper listens on "
            f"{s.helper_socket}",
            "enable wattbit-smartctl.socket (the agent keeps no privilege), or run as root",
        )
        return
    report.add("smart", "smartctl", "ok", f"{binary} run by the agent ({choice.reason})")


def ask_helper_scan(path: str, timeout: float) -> tuple[bool, str]:
    """Ask the helper for a scan: (answered, what it said)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"scan\n")
            data = b""
            while len(data) < 1 << 20 and (chunk := sock.recv(65536)):
                data += chunk
    except OSError as exc:
        return False, f"cannot ask it: {exc.strerror or exc}"
    outcome = decode_answer(data)
    if outcome.result != "done":
        return False, outcome.detail
    try:
        devices = json.loads(outcome.output).get("devices", [])
    except (ValueError, AttributeError):
        return False, "answered, but not with smartctl's scan"
    return True, f"answers; smartctl's scan lists {len(devices)} device(s)"
