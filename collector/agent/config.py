"""`wattbit agent` configuration: listen address, web config, each exporter's settings."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from collector.config import Duration, ProcessConfig, Regex, Strict
from exporters.blockio.exporter import DEFAULT_EXCLUDE
from exporters.nic.exporter import DEFAULT_EXCLUDE as NIC_EXCLUDE


class BlockioConfig(Strict):
    """The blockio exporter's settings."""

    enabled: bool = True
    backend: Literal["auto", "bcc", "diskstats"] = "auto"
    exclude: Regex = DEFAULT_EXCLUDE
    max_inflight: int = Field(default=65536, ge=1024, le=1 << 22)
    topology_refresh: Duration = 60.0


class NicConfig(Strict):
    """The nic exporter's settings."""

    enabled: bool = True
    exclude: Regex = NIC_EXCLUDE  # loopback is always left out
    queues: bool = True  # per-queue counters from the driver's ethtool statistics
    info_refresh: Duration = 60.0


class AgentConfig(ProcessConfig):
    """`wattbit agent` configuration."""

    default_port: ClassVar[int] = 9731

    listen: str = ":9731"
    blockio: BlockioConfig = BlockioConfig()
    nic: NicConfig = NicConfig()
