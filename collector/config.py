"""The one YAML loader: every file wattbit reads (agent and collector configs, the web config,
PDU profiles) is validated by pydantic through load_model, and every problem is a ConfigError
naming file, key and reason, in one style: ``FILE: key 'a.b[0].c': reason``.

The YAML is strict as Go's is (node_exporter's web config must mean the same to both): a key
given twice is an error, not "the last one wins". Values are never echoed, neither in the
message nor in a chained exception: they may be secrets (communities, v3 keys, run tokens,
password hashes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BeforeValidator, ValidationError
from pydantic_core import ErrorDetails

from collector.files import MAX_CONFIG_FILE, FileRefused, read_bounded
from collector.values import (
    ConfigError,
    duration_arg,
    parse_duration,
    parse_duration_or_zero,
    parse_listen,
    unsafe_text,
)
from exporters.strict import Strict

__all__ = [
    "ConfigError",
    "Duration",
    "DurationOrZero",
    "Regex",
    "Strict",
    "duration_arg",
    "load_model",
    "parse_duration",
    "parse_duration_or_zero",
    "parse_listen",
    "unsafe_text",
]


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
