"""The configuration every serving process (agent, collector) has in common."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import field_validator

from collector.config import Strict, parse_listen
from collector.web.limits import HttpConfig

__all__ = ["ProcessConfig"]


class ProcessConfig(Strict):
    """What the configuration of each serving process (agent, collector) has in common."""

    default_port: ClassVar[int]  # the port of a `listen` that names none

    listen: str
    web_config: Path | None = None  # TLS and basic auth, node_exporter's web-config format
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    http: HttpConfig = HttpConfig()  # the HTTP server's limits

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        parse_listen(v, cls.default_port)
        return v
