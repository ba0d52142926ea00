"""`wattbit agent` configuration: listen address, web config, each exporter's settings."""

from __future__ import annotations

import itertools
import math
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from collector.config import Duration, Regex, Strict, at_least
from collector.daemon.config import AGENT_PORT, Listen, ProcessConfig
from exporters.blockio.model import DEFAULT_LAT_BOUNDS_SECONDS, MAX_LAT_BOUNDS
from exporters.hostfs.blockdevs import BLOCK_EXCLUDE
from exporters.hostfs.netdevs import NIC_EXCLUDE
from exporters.smart import HELPER_SOCKET
from exporters.tcp.flows import DEFAULT_KEY as TCP_DEFAULT_KEY

MAX_LINK_SPEEDS = 4096  # nic.link_speeds entries: far more interfaces than a host exports


class BlockioConfig(Strict):
    """The blockio exporter's settings."""

    enabled: bool = True
    backend: Literal["auto", "core", "bcc", "diskstats"] = "auto"
    exclude: Regex = BLOCK_EXCLUDE
    max_inflight: int = Field(default=65536, ge=1024, le=1 << 22)
    topology_refresh: Duration = 60.0
    # Latency histogram bounds in seconds (the series budget: docs/exporters/blockio.md).
    latency_buckets: list[float] = Field(default_factory=lambda: list(DEFAULT_LAT_BOUNDS_SECONDS))
    size_histogram: bool = False  # wattbit_disk_io_size_bytes: 19 more series per (disk, op)

    @field_validator("latency_buckets")
    @classmethod
    def _buckets(cls, v: list[float]) -> list[float]:
        if not 1 <= len(v) <= MAX_LAT_BOUNDS:
            raise ValueError(f"must list 1 to {MAX_LAT_BOUNDS} bounds")
        # Whole nanoseconds (what the kernel's clock counts), finite, increasing.
        if not all(math.isfinite(b) and 1e-9 <= b <= 3600 for b in v):
            raise ValueError("every bound must be between 1ns and 3600 seconds")
        ns = [round(b * 1e9) for b in v]
        if any(a >= b for a, b in itertools.pairwise(ns)):
            raise ValueError("bounds must increase (by at least 1ns)")
        return v


class NicConfig(Strict):
    """The nic exporter's settings."""

    enabled: bool = True
    exclude: Regex = NIC_EXCLUDE  # loopback is always left out
    queues: bool = True  # per-queue counters from the driver's ethtool statistics
    info_refresh: Duration = 60.0
    # Interface -> link speed in bits/s, in place of the kernel's: the rate a tc shaper or the
    # far end holds the link to, or a speed for an interface the kernel gives none (tun, a
    # virtio-net that says -1) or a made-up one (veth says 10000 Mb/s). Never guessed: an
    # interface neither the kernel nor this map gives a speed has none.
    link_speeds: dict[str, float] = Field(default_factory=dict)

    @field_validator("link_speeds")
    @classmethod
    def _link_speeds(cls, v: dict[str, float]) -> dict[str, float]:
        if len(v) > MAX_LINK_SPEEDS:
            raise ValueError(f"at most {MAX_LINK_SPEEDS} interfaces")
        for name, bits in v.items():
            # IFNAMSIZ is 16 with the NUL (include/uapi/linux/if.h); no "/" or whitespace
            if not 1 <= len(name) <= 15 or "/" in name or any(c.isspace() for c in name):
                raise ValueError("interface names are 1-15 characters, no '/' or spaces")
            if not (math.isfinite(bits) and 1e3 <= bits <= 1e13):
                raise ValueError("speeds are bits/s between 1e3 and 1e13 (1 kbit/s .. 10 Tbit/s)")
        return v


class SmartConfig(Strict):
    """The smart exporter's settings (drive health from smartctl, off the scrape path)."""

    enabled: bool = True
    # Every read sends commands to the drive; more often than every 10 s gains nothing.
    interval: Annotated[Duration, at_least(10)] = 300.0
    timeout: Duration = 30.0
    devices: Regex = "auto"  # "auto": every disk blockio exports; else a regex on the name
    concurrency: int = Field(default=4, ge=1, le=64)  # smartctl processes at once
    raid: bool = True  # also read the disks behind RAID controllers (smartctl --scan-open)
    # Who runs smartctl: the agent itself ("direct": it needs CAP_SYS_RAWIO, and
    # CAP_SYS_ADMIN for NVMe), the root helper on helper_socket ("helper"), or "auto":
    # direct when this process holds CAP_SYS_RAWIO, else the helper if its socket exists.
    smartctl: Literal["auto", "direct", "helper"] = "auto"
    helper_socket: str = HELPER_SOCKET

    @field_validator("helper_socket")
    @classmethod
    def _socket(cls, v: str) -> str:
        # sun_path is 108 bytes with its NUL (include/uapi/linux/un.h)
        if not v.startswith("/") or len(v.encode()) > 107 or "\0" in v:
            raise ValueError("must be an absolute path of at most 107 bytes")
        return v

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: float, info: ValidationInfo) -> float:
        interval = info.data.get("interval")
        if interval is not None and v > interval:
            raise ValueError("must not be longer than smart.interval")
        return v


class PowerConfig(Strict):
    """The power exporter's settings (RAPL energy from powercap, hwmon power sensors)."""

    enabled: bool = True
    rapl: bool = True  # /sys/class/powercap: CPU packages' and DRAM's energy
    hwmon: bool = True  # /sys/class/hwmon power*_{average,input} and energy*_input


class PcieConfig(Strict):
    """The pcie exporter's settings (PCIe links, disk link rates, controller interrupts)."""

    enabled: bool = True
    # re-read the chains at least this often (and on device change)
    refresh: Annotated[Duration, at_least(1)] = 60.0
    # wattbit_controller_irq_info and _cpu_interrupts_total: one series per vector and per
    # (controller, CPU); off on hosts with many NVMe drives (docs/exporters/pcie.md, budget)
    controller_irqs: bool = True


class CpuConfig(Strict):
    """The opt-in per-CPU time from /proc/stat, for hosts without node_exporter."""

    enabled: bool = False


TcpDimension = Literal["peer", "port", "cgroup", "process", "experiment", "activity"]


class TcpConfig(Strict):
    """The tcp exporter's settings (every TCP socket's tcp_info, by flow key; tuning)."""

    enabled: bool = True
    interval: Annotated[Duration, at_least(1)] = 5.0
    key: list[TcpDimension] = Field(default_factory=lambda: list(TCP_DEFAULT_KEY))  # type: ignore[arg-type]
    top_k: int = Field(default=20, ge=1, le=500)
    peer_prefix_v4: int = Field(default=32, ge=0, le=32)
    peer_prefix_v6: int = Field(default=128, ge=0, le=128)
    process_refresh: Annotated[Duration, at_least(1)] = 30.0
    max_sockets: int = Field(default=262_144, ge=1024, le=1 << 22)
    destroy_events: bool = True  # follow closing sockets' last figures
    # the owning process and its CPU (a /proc fd scan): opt-in, the agent then keeps
    # CAP_SYS_PTRACE (docs/privileges.md)
    processes: bool = False
    # where experiment/activity's flow labels come from: the sockets (iter/tcp), the
    # outgoing packets after tc egress (tp_btf, for labels scitags flowd writes), or both
    # (docs/exporters/tcp.md, "SciTags")
    flow_labels: Literal["socket", "packet", "both"] = "socket"
    # the packet source's LRU map: 5-tuples kept (about 100 bytes each in the kernel)
    packet_label_flows: int = Field(default=65_536, ge=256, le=1 << 22)

    @field_validator("processes")
    @classmethod
    def _processes(cls, v: bool, info: ValidationInfo) -> bool:
        if not v and "process" in (info.data.get("key") or []):
            raise ValueError("must be true while tcp.key lists process")
        return v

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: float) -> float:
        if v > 300:
            raise ValueError("must be at most 300s")
        return v

    @field_validator("key")
    @classmethod
    def _key(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("lists a dimension twice")
        return v


class AgentConfig(ProcessConfig):
    """`wattbit agent` configuration."""

    default_port: ClassVar[int] = AGENT_PORT

    # Once every exporter has started (the BPF programs attached), drop every capability
    # none of them still needs (docs/privileges.md).
    drop_capabilities: bool = True

    listen: Listen = Listen.default(AGENT_PORT)
    blockio: BlockioConfig = BlockioConfig()
    nic: NicConfig = NicConfig()
    smart: SmartConfig = SmartConfig()
    power: PowerConfig = PowerConfig()
    pcie: PcieConfig = PcieConfig()
    cpu: CpuConfig = CpuConfig()
    tcp: TcpConfig = TcpConfig()
