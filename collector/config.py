"""The one YAML loader: every file wattbit reads (agent and collector configs, the web config,
PDU profiles) is validated by pydantic through load_model, and every problem is a ConfigError
naming file, key and reason, in one style: ``FILE: key 'a.b[0].c': reason``.

The YAML is strict as Go's is (node_exporter's web config must mean the same to both): a key
given twice is an error, not "the last one wins". Values are never echoed, neither in the
message nor in a chained exception: they may be secrets (communities, v3 keys, run tokens,
password hashes).
"""

from __future__ import annotations

import math
import re
import unicodedata
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BeforeValidator, ValidationError
from pydantic_core import ErrorDetails

from collector.files import MAX_CONFIG_FILE, FileRefused, read_bounded
from exporters.strict import Strict

__all__ = [
    "ConfigError",
    "Duration",
    "DurationOrZero",
    "Regex",
    "Strict",
    "load_model",
    "parse_duration",
    "parse_duration_or_zero",
    "parse_listen",
]


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


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A finite number of seconds > 0 (NaN, infinities, 0 and negative values are refused)."""
DurationOrZero = Annotated[float, BeforeValidator(parse_duration_or_zero)]
"""A finite number of seconds >= 0: only where 0 has a meaning of its own (say which)."""


def at_least(minimum: float) -> AfterValidator:
    """A Duration's lower bound: ``Annotated[Duration, at_least(10)]`` ("must be at least 10s")."""

    def check(seconds: float) -> float:
        if seconds < minimum:
            raise ValueError(f"must be at least {minimum:g}s")
        return seconds

    return AfterValidator(check)


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


def _regex(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # `name: 5` as YAML gives it: the digits are the pattern
    if not isinstance(value, str):
        raise ValueError("expected a regular expression (a string)")
    try:
        re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        # re.error's own message may quote part of the pattern: give the position only.
        pos = getattr(exc, "pos", None)
        where = f" (at position {pos})" if pos is not None else ""
        raise ValueError(f"not a valid regular expression{where}") from None
    return value


Regex = Annotated[str, BeforeValidator(_regex)]

MAX_LABEL_TEXT = 128
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


def _label_text(value: object) -> str:
    """A label value from the configuration: printable text on one line, bounded.

    A newline, an ESC sequence, a NUL or a lone surrogate would reach every series of the
    target and every log line naming it (issue 34); the error never quotes the value.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)  # `host: 7` as YAML gives it
    if not isinstance(value, str):
        raise ValueError("expected text")
    if len(value) > MAX_LABEL_TEXT or unsafe_text(value):
        raise ValueError(
            f"must be at most {MAX_LABEL_TEXT} printable characters on one line "
            "(no control or format characters)"
        )
    return value


LabelText = Annotated[str, BeforeValidator(_label_text)]
"""A label value (a host, a component) written in a configuration file."""


# --- the loader ----------------------------------------------------------------------------

M = TypeVar("M", bound=Strict)

_MERGE_TAG = "tag:yaml.org,2002:merge"
# Anything that looks like the start of a bcrypt hash (web config users), for scrubbing the
# text of an error: a hash pasted where a key or user name belongs must not be shown either.
_HASHLIKE_RE = re.compile(r"\$2[a-z]?\$[^\s'\",]{3,}")


def _redact(text: str) -> str:
    """Replace anything shaped like a bcrypt hash so error text can never carry one."""
    return _HASHLIKE_RE.sub("<redacted>", text)


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects duplicate mapping keys, as Go's strict YAML does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Construct a mapping, failing on a key that appears twice."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # `<<: *anchor`: merged keys may be overridden, as in Go
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable: the base class reports it properly
            if duplicate:
                # Only the position: the key itself is user text and could be anything.
                raise yaml.constructor.ConstructorError(
                    None, None, "duplicate key", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """Describe a YAML error by position only, never quoting the file's text."""
    # str(exc) includes a snippet of the offending line, which may hold a secret.
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or "syntax error"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"not valid YAML{where}: {problem}"


def _key(loc: tuple[int | str, ...]) -> str:
    """'a.b[0].c' from pydantic's location ('' for the file as a whole)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]":  # pydantic's marker of a bad mapping key: the key names it
            out += f".{part}" if out else part
    return out


def _reason(err: ErrorDetails, key: str, model: type[Strict]) -> str:
    """The reason of one pydantic error, in words that never quote the input."""
    if err["type"] == "extra_forbidden":
        return model.unsupported_keys.get(key, "unknown key")
    if err["type"] == "missing":
        return "required key is missing"
    if err["type"] in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping"
    if err["type"] == "value_error":  # our validators' own words
        return str(err.get("ctx", {}).get("error", err["msg"]))
    # pydantic's messages describe the expected type or values, not the input.
    return err["msg"]


def load_model(model: type[M], path: str | Path | None, context: dict[str, Any] | None = None) -> M:
    """Load and validate a YAML file (None: all defaults); raise ConfigError on any problem.

    context is handed to the model's validators (the web config resolves relative paths
    against the file's directory with it).
    """
    if path is None:
        return model()
    path = Path(path)
    try:
        text = read_bounded(path, MAX_CONFIG_FILE)[0].decode("utf-8")
    except FileRefused as exc:  # a FIFO, a link to /dev/zero, a huge file: never read
        raise ConfigError(path, "", str(exc)) from None
    except UnicodeDecodeError:
        raise ConfigError(path, "", "not valid UTF-8") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        # `from None`: the YAML error quotes the offending line, which may hold a secret.
        raise ConfigError(path, "", _redact(_yaml_reason(exc))) from None
    except (ValueError, TypeError, OverflowError, RecursionError):
        # PyYAML's own constructors raise these on values such as a timestamp 2024-13-45.
        raise ConfigError(path, "", "not valid YAML: a value cannot be read") from None
    if data is None:
        data = {}  # an empty file: every default
    if not isinstance(data, dict):
        raise ConfigError(path, "", "the top level must be a mapping")
    try:
        cfg = model.model_validate(data, context=context)
    except RecursionError:
        raise ConfigError(path, "", "nested too deeply") from None
    except ValidationError as exc:
        err = exc.errors(include_input=False, include_url=False)[0]
        key = _key(err["loc"])
        # `from None`: pydantic's own message quotes the input.
        raise ConfigError(path, _redact(key), _redact(_reason(err, key, model))) from None
    for key, reason in cfg.cross_check():
        raise ConfigError(path, key, reason)
    return cfg
