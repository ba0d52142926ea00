"""The configuration every serving process (agent, collector) has in common."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import field_serializer, field_validator

from collector.config import ConfigError, Strict, parse_listen
from collector.daemon.ports import AGENT_PORT, COLLECTOR_PORT
from collector.web.limits import HttpConfig

__all__ = ["AGENT_PORT", "COLLECTOR_PORT", "Listen", "ProcessConfig"]


class Listen(NamedTuple):
    """Where a daemon serves: `listen` parsed once (host, port) and the text it came from."""

    host: str
    port: int
    text: str  # as written (`:9732`), for --print-config

    @classmethod
    def parse(cls, text: str, default_port: int) -> Listen:
        """From 'HOST:PORT', '[v6]:PORT', ':PORT' or 'HOST'; ValueError (no echo) else."""
        host, port = parse_listen(text, default_port)
        return cls(host, port, text)

    @classmethod
    def default(cls, port: int) -> Listen:
        """Every address on ``port``: `:PORT`."""
        return cls.parse(f":{port}", port)

    @classmethod
    def option(cls, text: str, default_port: int) -> Listen:
        """--listen's value; a ConfigError (exit 2) naming the option."""
        try:
            return cls.parse(text, default_port)
        except ValueError as exc:
            raise ConfigError("--listen", "listen", str(exc)) from exc


class ProcessConfig(Strict):
    """What the configuration of each serving process (agent, collector) has in common."""

    default_port: ClassVar[int]  # the port of a `listen` that names none

    listen: Listen
    web_config: Path | None = None  # TLS and basic auth, node_exporter's web-config format
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    http: HttpConfig = HttpConfig()  # the HTTP server's limits

    @field_validator("listen", mode="before")
    @classmethod
    def _listen(cls, v: Any) -> Listen:
        if isinstance(v, Listen):
            return v
        if not isinstance(v, str):
            raise ValueError("expected HOST:PORT or [IPv6]:PORT")
        return Listen.parse(v, cls.default_port)

    @field_serializer("listen")
    def _listen_text(self, v: Listen) -> str:
        return v.text
