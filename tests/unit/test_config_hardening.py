"""Configuration hardening: no value is ever echoed, and every bad file exits 2 before anything
starts (durations, addresses, secret files and their permissions, profiles_dir)."""

from __future__ import annotations

import logging
import os
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from collector import cli
from collector.agent.config import AgentConfig
from collector.config import ConfigError, load_model, parse_duration, parse_listen
from collector.site.config import CollectorConfig
from tests.support.cli import wattbit

# A recognisable secret-like string that is a wrong value for every key: it is no duration,
# no number, no address (two colons), no regular expression (an open group), no name.
CANARY = "zz(S3CR3T-canary:do-not-echo:x y"
TOKEN = "0123456789abcdef0123456789abcdef"


def _secret(tmp_path: Path, name: str, text: str, mode: int = 0o600) -> Path:
    f = tmp_path / name
    f.write_text(text)
    f.chmod(mode)
    return f


# --- 7: no value is ever echoed ------------------------------------------------------------


def _base_agent(tmp_path: Path) -> dict[str, Any]:
    return {"listen": "127.0.0.1:9731", "http": {}, "blockio": {}, "nic": {}}


def _base_collector(tmp_path: Path) -> dict[str, Any]:
    community = _secret(tmp_path, "community", "public-community\n")
    return {
        "listen": "127.0.0.1:9732",
        "http": {},
        "profiles_dir": str(tmp_path),
        "state_dir": str(tmp_path / "state"),
        "auths": {
            "v2": {"version": "2c", "community_file": str(community)},
            "v3": {
                "version": "3",
                "user": "u",
                "auth_protocol": "SHA256",
                "auth_key": "auth-key-123456",
                "priv_protocol": "AES256",
                "priv_key": "priv-key-123456",
            },
        },
        "pdus": [
            {
                "name": "p",
                "address": "127.0.0.1:1161",
                "auth": "v2",
                "outlets": [{"index": 1, "host": "h"}],
            }
        ],
        "runs": {"token": TOKEN},
    }


def _nested(annotation: Any) -> type[BaseModel] | None:
    """The model inside an annotation (M, M | None, list[M], dict[str, M]), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, dict, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _nested(arg)
            if found is not None:
                return found
    return None


def _leaves(model: type[BaseModel], data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key of model (and of the nested sections present in data), as a path into data."""
    out: list[tuple[Any, ...]] = []
    for name, field in model.model_fields.items():
        here = (*path, name)
        out.append(here)
        sub = _nested(field.annotation)
        value = data.get(name) if isinstance(data, dict) else None
        if sub is None or value is None:
            continue
        if isinstance(value, list):
            out += _leaves(sub, value[0], (*here, 0))
        elif isinstance(value, dict) and sub is not None and name == "auths":
            for auth in value:
                out += _leaves(sub, value[auth], (*here, auth))
        else:
            out += _leaves(sub, value, here)
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _is_path_key(path: tuple[Any, ...]) -> bool:
    # Paths are named in errors (like the config file's own), so a path key gets the canary
    # inside a wrong type only.
    return str(path[-1]).endswith(("_file", "_dir", "web_config"))


def _cases(kind: str, tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    base = _base_agent if kind == "agent" else _base_collector
    model: type[BaseModel] = AgentConfig if kind == "agent" else CollectorConfig
    cases = []
    for path in _leaves(model, base(tmp_path)):
        wrongs: list[Any] = [{"k": CANARY}, [CANARY]]  # keys are named, values never
        if not _is_path_key(path):
            wrongs.append(CANARY)
        for wrong in wrongs:
            data = base(tmp_path)
            _set(data, path, wrong)
            cases.append((".".join(map(str, path)), data))
    return cases


@pytest.mark.parametrize("kind", ["agent", "collector"])
def test_no_config_error_echoes_a_value(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every key with a wrong value holding a secret-like string: it never reaches stderr."""
    from collector.agent import main as agent
    from collector.site import main as site

    def never(*args: object, **kwargs: object) -> int:
        raise AssertionError("started although the configuration is wrong")

    monkeypatch.setattr(agent, "run", never)
    monkeypatch.setattr(site, "run", never)
    f = tmp_path / f"{kind}.yml"
    cases = _cases(kind, tmp_path)
    assert len(cases) > 20
    refused = 0
    for key, data in cases:
        f.write_text(yaml.safe_dump(data))
        argv = [kind, "--config", str(f)] + (["--print-config"] if kind == "collector" else [])
        code = cli.main(argv)
        err = capsys.readouterr().err
        assert CANARY not in err and "S3CR3T" not in err, (key, err)
        refused += code == 2
        if code == 2:
            assert str(f) in err, (key, err)
    assert refused >= len(cases) * 0.8  # nearly every key refuses such a value


def test_no_echo_of_names_pointing_elsewhere(tmp_path: Path) -> None:
    """`auth:` naming no auth (e.g. the community pasted there), a PDU name given twice."""
    data = _base_collector(tmp_path)
    data["pdus"][0]["auth"] = "S3CR3Tcommunity"
    f = tmp_path / "c.yml"
    f.write_text(yaml.safe_dump(data))
    r = wattbit("collector", "--config", str(f), "--print-config")
    assert r.returncode == 2 and "pdus[0].auth" in r.stderr and "S3CR3T" not in r.stderr
    data = _base_collector(tmp_path)
    data["pdus"] = [dict(data["pdus"][0], name="S3CR3Tname") for _ in range(2)]
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == "pdus[1].name" and "S3CR3T" not in str(err.value)
    data = _base_collector(tmp_path)
    data["pdus"][0]["profile"] = "S3CR3Tprofile"
    f.write_text(yaml.safe_dump(data))
    r = wattbit("collector", "--config", str(f), "--print-config")
    assert r.returncode == 2 and "pdus[0].profile" in r.stderr and "S3CR3T" not in r.stderr


def test_env_and_secret_file_errors_echo_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "c.yml"
    f.write_text("runs:\n  token_env: S3CR3T_NOT_SET_ANYWHERE\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert "S3CR3T" not in str(err.value) and "not set" in err.value.reason
    bad = _secret(tmp_path, "token", "S3CR3T with spaces\n")
    f.write_text(f"runs:\n  token_file: {bad}\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert "S3CR3T" not in str(err.value)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("S3CR3Tsoon", "duration"),
        ("1.2.3.4:S3CR3T", "port"),
        ("a:b:S3CR3T", "HOST:PORT"),
        ("x:99999S3CR3T", "port"),
    ],
)
def test_parsers_never_quote_the_value(value: str, words: str) -> None:
    parse = parse_duration if words == "duration" else (lambda v: parse_listen(v, 1))
    with pytest.raises(ValueError) as err:
        parse(value)
    assert "S3CR3T" not in str(err.value) and words in str(err.value)


def test_regex_errors_give_the_position_not_the_text(tmp_path: Path) -> None:
    f = tmp_path / "a.yml"
    f.write_text("blockio:\n  exclude: 'S3CR3T\\q'\n")
    with pytest.raises(ConfigError) as err:
        load_model(AgentConfig, f)
    assert err.value.key == "blockio.exclude" and "S3CR3T" not in str(err.value)
    assert "\\q" not in str(err.value) and "position" in err.value.reason


# --- 8: every bad file exits 2 before anything starts --------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("interval: .nan\n", "interval", "finite"),
        ("interval: .inf\n", "interval", "finite"),
        ("interval: -.inf\n", "interval", "finite"),
        ("runs:\n  retention: .nan\n", "runs.retention", "finite"),
        ("runs:\n  retention: 1" + "0" * 400 + "d\n", "runs.retention", "finite"),
        ("interval: 1" + "0" * 400 + "\n", "interval", "finite"),
        ("interval: 1" + "0" * 400 + "s\n", "interval", "finite"),
        (
            "pdus:\n  - {name: p, address: 'h:161', auth: a, timeout: 0}\n",
            "pdus[0].timeout",
            "greater than 0",
        ),
        (
            "pdus:\n  - {name: p, address: 'h:161', auth: a, timeout: -1s}\n",
            "pdus[0].timeout",
            "duration",
        ),
        (
            "pdus:\n  - {name: p, address: 'h:161', auth: a, timeout: .nan}\n",
            "pdus[0].timeout",
            "finite",
        ),
        ("pdus:\n  - {name: p, address: 'h:0', auth: a}\n", "pdus[0].address", "1-65535"),
        ("listen: ':0'\n", "listen", "1-65535"),
        ("listen: '[::1]:0'\n", "listen", "1-65535"),
        ("listen: ':\u00b2'\n", "listen", "1-65535"),
        ("profiles_dir: /nonexistent/wattbit-profiles\n", "profiles_dir", "does not exist"),
        ("profiles_dir: /etc/hostname\n", "profiles_dir", "not a directory"),
        ("when: 2024-13-45\n", "", "not valid YAML"),
    ],
)
def test_bad_collector_values_are_refused(tmp_path: Path, text: str, key: str, reason: str) -> None:
    f = tmp_path / "c.yml"
    f.write_text("auths:\n  a: {version: 2c, community: public}\n" + text)
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == key, str(err.value)
    assert reason in err.value.reason, str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        "blockio:\n  topology_refresh: .nan\n",
        "nic:\n  info_refresh: .inf\n",
        "nic:\n  info_refresh: 0\n",
        "listen: ':0'\n",
    ],
)
def test_bad_agent_values_are_refused(tmp_path: Path, text: str) -> None:
    f = tmp_path / "a.yml"
    f.write_text(text)
    with pytest.raises(ConfigError):
        load_model(AgentConfig, f)


# Values that would reach a label or a log line from the configuration (issue 34): a newline
# forging a log line, an ESC sequence, a NUL, a C1 CSI, a bidi override, a line separator, a
# megabyte. Written with YAML's own escapes (a double-quoted scalar), as an editor would leave
# them.
HOSTILE_TEXT = {
    "newline": "web\\nFORGED line",
    "esc": "web\\e[31m",
    "nul": "web\\0x",
    "csi": "web\\x9b31m",
    "bidi": "web\\u202ex",
    "line-separator": "web\\u2028x",
    "megabyte": "w" * 1_000_000,
}
_PDU = "{name: p, address: 'h:161', auth: a, %s}"
_BMC = "{name: b, protocol: ipmi, address: 'h', username: u, password: pw, %s}"
LABEL_KEYS = {
    "pdus[0].host": "pdus:\n  - " + _PDU % 'host: "VALUE"',
    "pdus[0].component": "pdus:\n  - " + _PDU % 'component: "VALUE"',
    "pdus[0].outlets[0].host": "pdus:\n  - " + _PDU % 'outlets: [{index: 1, host: "VALUE"}]',
    "pdus[0].feeds[0].component": "pdus:\n  - "
    + _PDU % 'feeds: [{feed: unit, component: "VALUE"}]',
    "bmcs[0].host": "bmcs:\n  - " + _BMC % 'host: "VALUE"',
    "bmcs[0].chassis[0].component": "bmcs:\n  - " + _BMC % 'chassis: [{id: X, component: "VALUE"}]',
    "pdus[0].address": 'pdus:\n  - {name: p, address: "VALUE:161", auth: a}',
    "bmcs[0]": 'bmcs:\n  - {name: b, protocol: redfish, address: "https://VALUE"}',
}


@pytest.mark.parametrize("value", list(HOSTILE_TEXT), ids=list(HOSTILE_TEXT))
@pytest.mark.parametrize("key", list(LABEL_KEYS), ids=list(LABEL_KEYS))
def test_hostile_label_text_in_the_config_is_refused(tmp_path: Path, key: str, value: str) -> None:
    """Host names and label values of the configuration: refused naming the key, the value
    never echoed (before: accepted, and into every series and log line of the target)."""
    f = tmp_path / "c.yml"
    text = LABEL_KEYS[key].replace("VALUE", HOSTILE_TEXT[value])
    f.write_text("auths:\n  a: {version: 2c, community: public}\n" + text + "\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == key, str(err.value)
    assert "FORGED" not in str(err.value) and "www" not in str(err.value)
    assert len(str(err.value)) < 400


def test_label_text_that_is_text_passes(tmp_path: Path) -> None:
    """Spaces, accents, a no-break space and emoji are text: kept as written."""
    f = tmp_path / "c.yml"
    host = "Büro rack\u00a07 ⚡ node-1"
    f.write_text(
        "auths:\n  a: {version: 2c, community: public}\n"
        f"pdus:\n  - {{name: p, address: 'h:161', auth: a, host: \"{host}\"}}\n"
    )
    assert load_model(CollectorConfig, f).pdus[0].host == "Büro rack\u00a07 ⚡ node-1"


def test_retention_zero_stays_meaningful(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("runs:\n  retention: 0\n")
    assert load_model(CollectorConfig, f).runs.retention == 0


@pytest.mark.parametrize(
    ("kind", "content", "where"),
    [
        ("collector", b"interval: .nan\n", "interval"),
        ("collector", b"pdus:\n  - {name: p, address: 'h:161', auth: a, timeout: 0}\n", "timeout"),
        ("collector", b"pdus:\n  - {name: p, address: 'h:0', auth: a}\n", "pdus[0].address"),
        ("collector", b"listen: ':0'\n", "listen"),
        ("collector", b"profiles_dir: /nonexistent/wattbit-profiles\n", "profiles_dir"),
        ("collector", b"interval: 10s\ninterval: 20s\n", "duplicate key"),
        ("collector", b"# \xe9t\xe9\ninterval: 10s\n", "not valid UTF-8"),
        ("agent", b"# \xe9t\xe9\n", "not valid UTF-8"),
        ("agent", b"nic:\n  queues: true\n  queues: false\n", "duplicate key"),
        ("agent", b"listen: ':0'\n", "listen"),
        ("agent", b"blockio:\n  topology_refresh: .inf\n", "blockio.topology_refresh"),
        ("agent", b"smart:\n  interval: 1m\n  timeout: 5m\n", "smart.timeout"),
    ],
)
def test_cli_exits_2_naming_file_and_reason(
    tmp_path: Path, kind: str, content: bytes, where: str
) -> None:
    f = tmp_path / f"{kind}.yml"
    f.write_bytes(
        (b"auths:\n  a: {version: 2c, community: public}\n" if kind == "collector" else b"")
        + content
    )
    extra = ["--print-config"] if kind == "collector" else ["--listen", "127.0.0.1:1"]
    r = wattbit(kind, "--config", str(f), *extra)
    assert r.returncode == 2, r.stderr
    assert str(f) in r.stderr and where in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_cli_listen_port_zero_exits_2() -> None:
    r = wattbit("agent", "--listen", "127.0.0.1:0")
    assert r.returncode == 2 and "--listen" in r.stderr and "Traceback" not in r.stderr


def test_cli_broken_profile_in_profiles_dir_exits_2(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "bad.yaml").write_bytes(b"name: x\n\xff\xfe\n")
    f = tmp_path / "c.yml"
    f.write_text(f"profiles_dir: {profiles}\n")
    r = wattbit("collector", "--config", str(f), "--print-config")
    assert r.returncode == 2, r.stderr
    assert f"{profiles / 'bad.yaml'}: not valid UTF-8" in r.stderr
    assert "Traceback" not in r.stderr


# --- 8 and 15: secret files ----------------------------------------------------------------


def test_token_file_is_its_first_line(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    good = _secret(tmp_path, "token", TOKEN + "\n\n")
    f.write_text(f"runs:\n  token_file: {good}\n")
    token = load_model(CollectorConfig, f).runs.token
    assert token is not None and token.get_secret_value() == TOKEN
    multi = _secret(tmp_path, "token2", TOKEN + "\nS3CR3T-second-line\n")
    f.write_text(f"runs:\n  token_file: {multi}\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == "runs.token_file" and "one line" in err.value.reason
    assert "S3CR3T" not in str(err.value) and TOKEN not in str(err.value)


@pytest.mark.parametrize(
    ("key", "section"),
    [
        ("community_file", "auths:\n  a:\n    version: 2c\n    community_file: {f}\n"),
        ("token_file", "runs:\n  token_file: {f}\n"),
        (
            "auth_key_file",
            "auths:\n  a:\n    version: 3\n    user: u\n    auth_protocol: SHA256\n"
            "    auth_key_file: {f}\n",
        ),
        (
            "priv_key_file",
            "auths:\n  a:\n    version: 3\n    user: u\n    auth_protocol: SHA256\n"
            "    auth_key: auth-key-123456\n    priv_protocol: AES128\n    priv_key_file: {f}\n",
        ),
    ],
)
def test_world_readable_secret_file_exits_2(tmp_path: Path, key: str, section: str) -> None:
    secret = _secret(tmp_path, "secret", TOKEN + "\n", 0o644)
    f = tmp_path / "c.yml"
    f.write_text(section.format(f=secret))
    r = wattbit("collector", "--config", str(f), "--print-config")
    assert r.returncode == 2, r.stderr
    assert key in r.stderr and str(f) in r.stderr and "every user" in r.stderr
    assert str(secret) in r.stderr  # the file is named, its content never
    assert TOKEN not in r.stderr and "Traceback" not in r.stderr
    secret.chmod(0o600)
    r = wattbit("collector", "--config", str(f), "--print-config")
    assert r.returncode == 0, r.stderr
    assert TOKEN not in r.stdout + r.stderr


def test_group_readable_secret_file_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = _secret(tmp_path, "token", TOKEN + "\n", 0o640)
    f = tmp_path / "c.yml"
    f.write_text(f"runs:\n  token_file: {secret}\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_model(CollectorConfig, f)
    assert cfg.runs.token is not None
    assert "readable by its group" in caplog.text and str(secret) in caplog.text
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("content", [b"", b"\n", b"\xff\xfe\n", b"x" * 70000])
def test_unusable_secret_files(tmp_path: Path, content: bytes) -> None:
    secret = tmp_path / "token"
    secret.write_bytes(content)
    secret.chmod(0o600)
    f = tmp_path / "c.yml"
    f.write_text(f"runs:\n  token_file: {secret}\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == "runs.token_file"


def test_secret_file_must_be_a_regular_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("auths:\n  a: {version: 2c, community_file: /dev/zero}\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == "auths.a.community_file" and "regular file" in err.value.reason
    assert os.path.exists("/dev/zero")


# --- issue 26, 6: every file an operator names is a regular file, size-capped, never blocking ----

# A wattbit run that blocks on a FIFO or reads /dev/zero would hit this; a refusal takes ~1 s.
_BOUND_S = 30


def _fifo(tmp_path: Path, name: str) -> Path:
    p = tmp_path / name
    os.mkfifo(p, 0o600)
    return p


def _web_with_cert(tmp_path: Path, cert: Path) -> Path:
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {tmp_path / 'key.pem'}\n")
    return web


def _hostile_files(tmp_path: Path) -> list[tuple[str, list[str], str, str]]:
    """(case, wattbit arguments, the file that must be named, the words of the reason)."""
    big = tmp_path / "big.yml"
    with big.open("wb") as f:  # sparse: the size is what is refused, before any read
        f.truncate(64 * 1024 * 1024)
    profiles_link = tmp_path / "profiles-link"
    profiles_link.mkdir()
    (profiles_link / "zero.yaml").symlink_to("/dev/zero")
    profiles_fifo = tmp_path / "profiles-fifo"
    profiles_fifo.mkdir()
    fifo_profile = _fifo(profiles_fifo, "hang.yaml")
    secret_fifo = _fifo(tmp_path, "community")
    cfg = tmp_path / "c.yml"
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    cases: list[tuple[str, list[str], str, str]] = [
        ("config /dev/zero", ["--config", "/dev/zero"], "/dev/zero", "a character device"),
        ("config FIFO", ["--config", str(_fifo(tmp_path, "c.fifo"))], "c.fifo", "a FIFO"),
        ("config 64 MiB", ["--config", str(big)], str(big), "larger than"),
        (
            "web-config FIFO",
            ["--config", str(empty), "--web-config", str(_fifo(tmp_path, "w.fifo"))],
            "w.fifo",
            "a FIFO",
        ),
        (
            "cert FIFO",
            [
                "--config",
                str(empty),
                "--web-config",
                str(_web_with_cert(tmp_path, _fifo(tmp_path, "cert.pem"))),
            ],
            "cert.pem",
            "tls_server_config.cert_file",
        ),
    ]
    for name, directory, named, reason in (
        ("profile link to /dev/zero", profiles_link, "zero.yaml", "a character device"),
        ("profile FIFO", profiles_fifo, str(fifo_profile), "a FIFO"),
    ):
        c = tmp_path / f"c-{len(cases)}.yml"
        c.write_text(f"profiles_dir: {directory}\n")
        cases.append((name, ["--config", str(c)], named, reason))
    cfg.write_text(f"auths:\n  a: {{version: 2c, community_file: {secret_fifo}}}\n")
    cases.append(("secret FIFO", ["--config", str(cfg)], "auths.a.community_file", "a FIFO"))
    return cases


def test_hostile_files_exit_2_at_once_naming_file_and_reason(tmp_path: Path) -> None:
    """--config /dev/zero, FIFOs, a *.yaml link to /dev/zero, a 64 MiB file: exit 2, no hang.

    Before the bounded reader, /dev/zero filled memory and a FIFO blocked the start for ever
    (here: the subprocess timeout).
    """
    for case, args, named, reason in _hostile_files(tmp_path):
        r = wattbit("collector", *args, "--print-config", timeout=_BOUND_S)
        assert r.returncode == 2, (case, r.stderr)
        assert named in r.stderr and reason in r.stderr, (case, r.stderr)
        assert "Traceback" not in r.stderr, (case, r.stderr)
    r = wattbit("agent", "--config", "/dev/zero", "--listen", "127.0.0.1:1", timeout=_BOUND_S)
    assert r.returncode == 2 and "/dev/zero" in r.stderr and "character device" in r.stderr


def test_the_bounded_reader(tmp_path: Path) -> None:
    """Regular files up to the limit; the limit exactly; a file growing past it; a directory."""
    from collector.files import FileRefused, read_bounded

    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_bounded(f, 100)[0] == b"x" * 100
    with pytest.raises(FileRefused, match="larger than 99 bytes"):
        read_bounded(f, 99)
    with pytest.raises(FileRefused, match="a directory"):
        read_bounded(tmp_path, 100)
    with pytest.raises(FileRefused, match="cannot read: No such file"):
        read_bounded(tmp_path / "missing", 100)
    with pytest.raises(FileRefused, match="not a valid path"):
        read_bounded("a\0b", 100)
