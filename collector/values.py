"""The configuration's plain values: ConfigError, durations, listen addresses and unsafe text.

No pydantic here (collector.config, the YAML loader, builds on these): the `wattbit` command
line and the `wattbit run` client import this alone and start without pydantic (issue #35).
"""

from __future__ import annotations

import math
import re
import unicodedata
from pathlib import Path
from typing import Any


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
_DURATION_HELP = "expected a duration like 10s, 500ms or 1m"


def _seconds(value: Any) -> float:
    """Seconds from '10s', '500ms', '1m', '2h' or a bare number; ValueError (no echo) else."""
    if isinstance(value, bool):
        raise ValueError(_DURATION_HELP)
    try:
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str) and (m := _DURATION.match(value)):
            seconds = float(m.group(1)) * _UNIT[m.group(2)]
        else:
            raise ValueError(_DURATION_HELP)
    except OverflowError:  # an integer beyond any float
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ValueError("a duration must be a finite number of seconds")
    return seconds


def parse_duration(value: Any) -> float:
    """Seconds (finite, > 0) from '10s', '500ms', '1m', '2h' or a bare number of seconds.

    Errors never quote the value: it may be a secret pasted into the wrong key.
    """
    seconds = _seconds(value)
    if seconds <= 0:
        raise ValueError("a duration must be greater than 0")
    return seconds


def parse_duration_or_zero(value: Any) -> float:
    """As parse_duration, but 0 is allowed (for the keys where 0 means something)."""
    seconds = _seconds(value)
    if seconds < 0:
        raise ValueError("a duration must not be negative")
    return seconds


def duration_arg(text: str) -> float:
    """argparse type: parse_duration, its error an ArgumentTypeError."""
    import argparse

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_listen(value: str, default_port: int) -> tuple[str, int]:
    """(host, port) from 'HOST:PORT', '[v6]:PORT', ':PORT' or 'HOST'; the port is 1-65535.

    Errors never quote the value.
    """
    if not isinstance(value, str):
        raise ValueError("expected HOST:PORT or [IPv6]:PORT")
    value = value.strip()
    m = re.match(r"^\[([0-9a-fA-F:.]+)\](?::(\d+))?$", value)
    if m:
        host, port = m.group(1), m.group(2)
    elif value.count(":") == 1:
        host, port = value.split(":")
    elif value.count(":") == 0:
        host, port = value, None
    else:
        raise ValueError("expected HOST:PORT or [IPv6]:PORT")
    # A DNS name is at most 253 characters (RFC 1035 2.3.4); ESC or NUL in one reached the
    # log lines naming the target (issue 34).
    if len(host) > 253 or not host.isprintable() or any(c.isspace() or c in "[]/@" for c in host):
        raise ValueError("expected HOST:PORT or [IPv6]:PORT (not a valid host)")
    if port is None or port == "":
        port_n = default_port
    elif port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535:
        port_n = int(port)
    else:
        raise ValueError("the port must be 1-65535")
    return host or "0.0.0.0", port_n


# Unicode categories no label or log line may hold: C0/C1 controls (ESC, NUL, a newline,
# U+009B a terminal's CSI), format characters (a bidi override reorders a log line), line and
# paragraph separators, lone surrogates (not UTF-8). Unassigned code points and spaces pass:
# a newer Unicode than Python's, or a no-break space, is text.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def unsafe_text(text: str) -> bool:
    """Whether text holds a character no label value or log line may (see above)."""
    return not text.isprintable() and any(
        unicodedata.category(c) in _UNSAFE_CATEGORIES for c in text
    )
