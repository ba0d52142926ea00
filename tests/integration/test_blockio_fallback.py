"""Without BPF the agent still starts, serves /proc/diskstats counters and says why."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.env import require
from tests.support.realparts import (
    Agent,
    LoopDisk,
    bcc_importable,
    diskstats,
    fio,
    have,
    is_root,
    loop_disks,
    sample,
)

# needs root: loop devices, private mounts and BPF; serial (tests/conftest.py)
pytestmark = pytest.mark.root

READS = 3001  # prime


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    # The unprivileged agent must read its config: pytest's tmp_path is root-only.
    d = Path(tempfile.mkdtemp(prefix="wattbit-fallback-"))
    d.chmod(0o755)
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def _reads(disk: LoopDisk) -> None:
    """READS 4k random reads, one at a time."""
    args = [f"--filename={disk.device}", "--rw=randread", "--bs=4k", "--direct=1"]
    fio(["--name=r", *args, "--ioengine=psync", f"--io_size={READS * 4096}"])


def _check_counts(agent: Agent, disk: LoopDisk) -> None:
    s0, k0 = agent.scrape(), diskstats()[disk.name]
    _reads(disk)
    s1, k1 = agent.scrape(), diskstats()[disk.name]

    def delta(metric: str, **labels: str) -> float:
        return sample(s1, metric, **labels) - sample(s0, metric, **labels)

    assert delta("wattbit_disk_ios_total", device=disk.name, op="read") == k1[0] - k0[0] == READS
    assert delta("wattbit_disk_io_bytes_total", device=disk.name, op="read") == READS * 4096
    busy = delta("wattbit_disk_busy_seconds_total", device=disk.name)
    assert busy == pytest.approx((k1[9] - k0[9]) / 1000.0, abs=0.0011)
    assert delta("wattbit_disk_io_time_seconds_total", device=disk.name, op="read") > 0
    # No histogram without BPF: absent, never a fake one.
    assert not any(k[0].startswith("wattbit_disk_io_latency_seconds") for k in s1)
    assert not any(k[0] == "wattbit_disk_io_errors_total" for k in s1)
    assert sample(s1, "wattbit_exporter_up", exporter="blockio") == 1.0


def test_unprivileged_agent_falls_back_to_diskstats(world_readable_tmp: Path) -> None:
    require(is_root(), "needs root to create loop devices and drop privileges")
    require(have("fio") and have("setpriv"), "needs fio and setpriv")
    with loop_disks(1) as (disk,):
        agent = Agent("blockio:\n  backend: auto\n", world_readable_tmp, user="65534")
        try:
            agent.wait_ready()
            s = agent.scrape()
            assert (
                sample(
                    s,
                    "wattbit_blockio_backend_info",
                    backend="diskstats",
                    reason="missing CAP_BPF+CAP_PERFMON",
                )
                == 1.0
            )
            _check_counts(agent, disk)
        finally:
            agent.stop()
        assert "falling back to /proc/diskstats" in agent.log.read_text()


def test_configured_diskstats_backend(world_readable_tmp: Path) -> None:
    require(is_root() and have("fio"), "needs root and fio")
    with loop_disks(1) as (disk,):
        agent = Agent("blockio:\n  backend: diskstats\n", world_readable_tmp)
        try:
            agent.wait_ready()
            s = agent.scrape()
            assert (
                sample(s, "wattbit_blockio_backend_info", backend="diskstats", reason="configured")
                == 1.0
            )
            _check_counts(agent, disk)
        finally:
            agent.stop()


def _private_mounts(*mounts: str) -> list[str]:
    """A command prefix: a private mount namespace with an empty tmpfs over each path (the
    kernel's BTF, the kernel headers), so the agent meets a machine without them."""
    script = " && ".join(f"mount -t tmpfs -o size=64k none {m}" for m in mounts)
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script + ' && exec "$@"',
        "sh",
    ]


def _headers() -> str:
    return f"/lib/modules/{os.uname().release}"


def _need_namespaces() -> None:
    require(is_root() and have("fio") and have("unshare"), "needs root, fio and unshare")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "this kernel has no BTF to hide")


def test_without_btf_the_agent_falls_back_to_bcc(world_readable_tmp: Path) -> None:
    """Forced, not assumed: the kernel's BTF hidden, core cannot load; bcc (kernel headers)
    takes over and times the I/O, and the info series says why not core."""
    _need_namespaces()
    require(bcc_importable(), "bcc (python3-bpfcc) is not importable")
    with loop_disks(1) as (disk,):
        agent = Agent(
            "blockio:\n  backend: auto\n",
            world_readable_tmp,
            prefix=_private_mounts("/sys/kernel/btf"),
        )
        try:
            agent.wait_ready()
            s0 = agent.scrape()
            assert (
                sample(s0, "wattbit_blockio_backend_info", backend="bcc", reason="no kernel BTF")
                == 1.0
            )
            _reads(disk)
            s1 = agent.scrape()
            assert (
                sample(s1, "wattbit_disk_io_latency_seconds_count", device=disk.name, op="read")
                - sample(s0, "wattbit_disk_io_latency_seconds_count", device=disk.name, op="read")
                >= READS * 0.99
            )
        finally:
            agent.stop()
        assert "core backend unavailable, trying bcc" in agent.log.read_text()


def test_without_btf_and_headers_the_agent_falls_back_to_diskstats(
    world_readable_tmp: Path,
) -> None:
    """Both eBPF backends forced to fail (no BTF for core, no kernel headers for bcc):
    /proc/diskstats, exact counts, the first reason."""
    _need_namespaces()
    with loop_disks(1) as (disk,):
        agent = Agent(
            "blockio:\n  backend: auto\n",
            world_readable_tmp,
            prefix=_private_mounts("/sys/kernel/btf", _headers()),
        )
        try:
            agent.wait_ready()
            s = agent.scrape()
            assert (
                sample(
                    s, "wattbit_blockio_backend_info", backend="diskstats", reason="no kernel BTF"
                )
                == 1.0
            )
            _check_counts(agent, disk)
        finally:
            agent.stop()
        log = agent.log.read_text()
        assert "core backend unavailable" in log and "falling back to /proc/diskstats" in log


def test_core_requested_without_btf_exits_1(world_readable_tmp: Path) -> None:
    _need_namespaces()
    agent = Agent(
        "blockio:\n  backend: core\n",
        world_readable_tmp,
        prefix=_private_mounts("/sys/kernel/btf"),
    )
    try:
        assert agent.proc.wait(timeout=60) == 1
    finally:
        agent.stop()
    assert "backend 'core' was requested but /sys/kernel/btf/vmlinux is missing" in (
        agent.log.read_text()
    )
