"""`wattbit agent` configuration: listen address, web config, each exporter's settings."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

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


class SmartConfig(Strict):
    """The smart exporter's settings (drive health from smartctl, off the scrape path)."""

    enabled: bool = True
    interval: Duration = 300.0
    timeout: Duration = 30.0
    devices: Regex = "auto"  # "auto": every disk blockio exports; else a regex on the name
    concurrency: int = Field(default=4, ge=1, le=64)  # smartctl processes at once

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: float) -> float:
        # Every read sends commands to the drive; more often than this gains nothing.
        if v < 10:
            raise ValueError("must be at least 10s")
        return v

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: float, info: ValidationInfo) -> float:
        interval = info.data.get("interval")
        if interval is not None and v > interval:
            raise ValueError("must not be longer than smart.interval")
        return v


class AgentConfig(ProcessConfig):
    """`wattbit agent` configuration."""

    default_port: ClassVar[int] = 9731

    listen: str = ":9731"
    blockio: BlockioConfig = BlockioConfig()
    nic: NicConfig = NicConfig()
    smart: SmartConfig = SmartConfig()
