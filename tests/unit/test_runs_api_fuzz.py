"""Property tests of the run API (collector/runs/api.py) on arbitrary request bodies and paths.

Whatever a client sends — random bytes, JSON of any shape, huge numbers, deep nesting, wrong
types, lone surrogates — the answer is a 4xx with a JSON error (never a 5xx, never an
exception out of the app), and the registry stays valid: every run's name and labels pass
validation, its metrics render, and its state file reads back as the same runs. Well-formed
bodies start their run. Bounded and derandomized: the same examples on every run.
"""

from __future__ import annotations

import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from collector.runs.api import API_PREFIX, MAX_BODY, api_app
from collector.runs.registry import (
    LABEL_NAME_RE,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    NAME_RE,
    RunRegistry,
    validate_labels,
    validate_name,
)

TOKEN = "k9QpX2mZ7rT4vW8yB3nC"
T0 = 1_700_000_000.0
BOUNDED = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def call(app: Any, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
    """One request through the WSGI app, as the server hands it over."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
        "wsgi.input": io.BytesIO(body or b""),
    }
    if body is not None:
        environ["CONTENT_LENGTH"] = str(len(body))
    got: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got.append((status, headers))

    data = b"".join(app(environ, start_response))
    assert len(got) == 1
    return int(got[0][0].split()[0]), dict(got[0][1]), data


@functools.cache
def _state_text() -> str:
    """A state file holding one active and one ended run, written (and fsynced) once."""
    with tempfile.TemporaryDirectory() as tmp:
        reg = RunRegistry(Path(tmp) / "runs.json", clock=lambda: T0)
        reg.load()
        reg.start("before", {"setup": "raid50"})
        reg.start("ended")
        reg.stop("ended")
        return (Path(tmp) / "runs.json").read_text()


def fresh() -> tuple[RunRegistry, Any, tempfile.TemporaryDirectory[str]]:
    """A registry loaded from such a state file, and its API (a new one for every example)."""
    tmp = tempfile.TemporaryDirectory()
    state = Path(tmp.name) / "runs.json"
    state.write_text(_state_text())
    state.chmod(0o600)
    reg = RunRegistry(state, clock=lambda: T0)
    reg.load()
    assert [r.name for r in reg.runs()] == ["before", "ended"]
    return reg, api_app(reg, TOKEN), tmp


def assert_valid(reg: RunRegistry) -> None:
    """The registry's runs are valid, render as metrics, and read back from its file alike."""
    runs = reg.runs()
    for run in runs:
        assert validate_name(run.name) == run.name
        assert validate_labels(run.labels) == run.labels
        json.dumps(run.to_json()).encode("utf-8")
    metrics = CollectorRegistry(auto_describe=False)
    metrics.register(reg)
    generate_latest(metrics)  # encodes as UTF-8: a lone surrogate in a label would raise here
    assert reg.path is not None
    again = RunRegistry(reg.path, clock=lambda: T0)
    again.load()
    assert again.runs() == runs


def assert_client_error(status: int, headers: dict[str, str], data: bytes) -> None:
    assert 400 <= status < 500, (status, data[:200])
    assert headers["Content-Type"] == "application/json"
    assert isinstance(json.loads(data)["error"], str)


# -- strategies ---------------------------------------------------------------------------

# Strings that are also the edges: empty, a lone surrogate, commas, control characters.
_texts = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3),
    st.sampled_from(
        ["", ",", "a,b", "\x00", "\x7f", "\x9b31m", "a\u202eb", "a\u2028b", "__x", "x" * 257]
    ),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),  # past the 32-digit bound too
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN, Infinity
    _texts,
)
_json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_texts, inner, max_size=5),
    max_leaves=25,
)
_names = st.one_of(st.from_regex(NAME_RE, fullmatch=True), _texts, _json_values)
_label_names = st.one_of(
    st.from_regex(LABEL_NAME_RE, fullmatch=True).filter(lambda k: len(k) <= 64), _texts
)
_labels = st.one_of(
    st.dictionaries(_label_names, st.one_of(_texts, _json_values), max_size=MAX_LABELS + 2),
    _json_values,
)
_run_bodies = st.fixed_dictionaries(
    {}, optional={"name": _names, "labels": _labels, "extra": _json_values}
).map(lambda d: json.dumps(d).encode())


_good_labels = st.dictionaries(
    st.from_regex(LABEL_NAME_RE, fullmatch=True).filter(
        lambda k: len(k) <= 64 and not k.startswith("__")
    ),
    st.text(
        st.characters(exclude_categories=["Cs", "Cc", "Cf", "Zl", "Zp"], exclude_characters=","),
        min_size=1,
        max_size=MAX_LABEL_VALUE,
    ),
    max_size=MAX_LABELS,
)


# Valid but for one thing: one label (or the name) of any value, the rest as they should be.
_near_valid = st.builds(
    lambda name, labels, key, value: json.dumps({"name": name, "labels": {**labels, key: value}}),
    st.from_regex(NAME_RE, fullmatch=True),
    _good_labels.filter(lambda d: len(d) < MAX_LABELS),
    st.from_regex(LABEL_NAME_RE, fullmatch=True).filter(lambda k: len(k) <= 64),
    st.one_of(_texts, _json_values),
).map(str.encode)


def _nested(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    if kind == "labels":
        return b'{"name": "x", "labels": ' + b'{"a": ' * depth + b"1" + b"}" * (depth + 1)
    return b'{"name": "x", "labels": {"a": "' + b"[{" * depth + b'"}}'  # brackets in a string


_hostile = st.one_of(
    st.builds(_nested, st.integers(1, 5000), st.sampled_from(["array", "labels", "string"])),
    st.integers(1, 6000).map(lambda n: b'{"name": ' + b"9" * n + b"}"),
    st.integers(1, 6000).map(lambda n: b'{"name": "x", "labels": {"a": 1e' + b"9" * n + b"}}"),
    st.sampled_from([b"NaN", b"-Infinity", b'{"name": NaN}', b"\xef\xbb\xbf{}", b"{}" * 10]),
)
_bodies = st.one_of(
    st.binary(max_size=512),
    _json_values.map(lambda v: json.dumps(v).encode()),
    _run_bodies,
    _near_valid,
    _hostile,
    # valid JSON cut short or with one byte changed
    st.builds(
        lambda b, i, c: b[: i % (len(b) + 1)] + c,
        _run_bodies,
        st.integers(0, 200),
        st.binary(max_size=2),
    ),
)


@BOUNDED
@given(_bodies)
def test_any_body_is_a_client_error_or_a_valid_run(body: bytes) -> None:
    reg, app, tmp = fresh()
    with tmp:
        before = reg.runs()
        status, headers, data = call(app, "POST", API_PREFIX, body[:MAX_BODY])
        if status == 201:
            # Only what validation lets through: a JSON object with a valid name and labels.
            doc = json.loads(body)
            assert isinstance(doc, dict) and set(doc) <= {"name", "labels"}
            run = reg.get(validate_name(doc["name"]))
            assert run is not None and run.active
            assert run.labels == validate_labels(doc.get("labels") or {})
            assert json.loads(data)["name"] == run.name
        else:
            assert_client_error(status, headers, data)
            assert reg.runs() == before  # a refused write changes nothing
        assert_valid(reg)


@BOUNDED
@given(st.from_regex(NAME_RE, fullmatch=True), _good_labels, st.booleans())
def test_well_formed_bodies_start_their_run(
    name: str, labels: dict[str, str], ascii_: bool
) -> None:
    reg, app, tmp = fresh()
    with tmp:
        body = json.dumps({"name": name, "labels": labels}, ensure_ascii=ascii_).encode()
        status, headers, data = call(app, "POST", API_PREFIX, body)
        if name in ("before",):  # already active in the fresh registry
            assert status == 409
        else:
            assert status == 201, data
            assert headers["Location"] == f"{API_PREFIX}/{name}"
            run = reg.get(name)
            assert run is not None and run.active and run.labels == labels
        assert_valid(reg)


@BOUNDED
@given(
    st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get"]),
    st.lists(st.one_of(st.sampled_from(["before", "ended", "stop", ""]), _texts), max_size=4),
    st.one_of(st.none(), _bodies),
)
def test_any_method_and_path_is_answered_never_a_5xx(
    method: str, parts: list[str], body: bytes | None
) -> None:
    reg, app, tmp = fresh()
    with tmp:
        path = "/".join([API_PREFIX, *parts])
        status, headers, data = call(app, method, path, body[:MAX_BODY] if body else body)
        assert status < 500, (status, data[:200])
        assert headers["Content-Type"] == "application/json"
        if method != "HEAD":
            json.loads(data)
        assert_valid(reg)
