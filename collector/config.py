"""Configuration files: YAML validated by pydantic, every error naming file, key and reason."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError


class ConfigError(Exception):
    """A configuration file is unusable: names the file, the key and the reason."""

    def __init__(self, file: str | Path, key: str, reason: str) -> None:
        self.file = str(file)
        self.key = key
        self.reason = reason
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        key = f"key '{self.key}': " if self.key else ""
        return f"{where}{key}{self.reason}"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from '10s', '500ms', '1m', '2h' or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 10s, 500ms or 1m")
    if isinstance(value, int | float):
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"expected a duration like 10s, 500ms or 1m, got {value!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


Duration = Annotated[float, BeforeValidator(parse_duration)]


def parse_listen(value: str, default_port: int) -> tuple[str, int]:
    """(host, port) from 'HOST:PORT', '[v6]:PORT', ':PORT' or 'HOST'."""
    value = value.strip()
    m = re.match(r"^\[([0-9a-fA-F:.]+)\](?::(\d+))?$", value)
    if m:
        host, port = m.group(1), m.group(2)
    elif value.count(":") == 1:
        host, port = value.split(":")
    elif value.count(":") == 0:
        host, port = value, None
    else:
        raise ValueError(f"expected HOST:PORT or [IPv6]:PORT, got {value!r}")
    if port is None or port == "":
        port_n = default_port
    elif port.isdigit() and 0 <= int(port) <= 65535:
        port_n = int(port)
    else:
        raise ValueError(f"port must be 0-65535, got {port!r}")
    return host or "0.0.0.0", port_n


class Strict(BaseModel):
    """Base of every config section: unknown keys are errors (typos must not pass silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    return value


Regex = Annotated[str, BeforeValidator(lambda v: _regex(str(v)))]


M = TypeVar("M", bound=BaseModel)


def _key(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def load_model(model: type[M], path: str | Path | None) -> M:
    """Load and validate a YAML file (None: all defaults); raise ConfigError on any problem."""
    if path is None:
        return model()
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(path, "", f"cannot read: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        # `from None`: the YAML error quotes the offending line, which may hold a secret.
        raise ConfigError(
            path, "", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping of keys at the top level")
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        reason = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            reason = "unknown key"
        # Never echo the input value: it may be a secret (communities, keys, tokens). `from
        # None`: pydantic's own message quotes the input.
        raise ConfigError(path, _key(err["loc"]), reason) from None
    cross_check = getattr(cfg, "cross_check", None)
    for key, reason in cross_check() if cross_check else ():
        raise ConfigError(path, key, reason)
    return cfg
