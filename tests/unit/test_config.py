"""Agent configuration: defaults, and bad files that name the file, the key and the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.agent.config import AgentConfig
from collector.config import ConfigError, load_model, parse_duration, parse_listen
from tests.support.env import ROOT


def test_defaults_without_a_file() -> None:
    cfg = load_model(AgentConfig, None)
    assert cfg.listen == ":9731"
    assert cfg.blockio.backend == "auto"
    assert parse_listen(cfg.listen, 9731) == ("0.0.0.0", 9731)


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("blockio:\n  backend: ebpf\n", "blockio.backend", "'auto', 'bcc' or 'diskstats'"),
        ("blockio:\n  exclud: x\n", "blockio.exclud", "unknown key"),
        ("blockio:\n  exclude: '(['\n", "blockio.exclude", "regular expression"),
        ("blockio:\n  max_inflight: 10\n", "blockio.max_inflight", "greater than or equal"),
        ("blockio:\n  topology_refresh: soon\n", "blockio.topology_refresh", "duration"),
        ("listen: 'a:b:c'\n", "listen", "HOST:PORT"),
        ("listen: ':99999'\n", "listen", "0-65535"),
    ],
)
def test_bad_keys_are_named(tmp_path: Path, text: str, key: str, reason: str) -> None:
    f = tmp_path / "agent.yml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_model(AgentConfig, f)
    assert err.value.file == str(f)
    assert err.value.key == key
    assert reason in err.value.reason
    assert str(f) in str(err.value) and key in str(err.value)


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "agent.yml"
    f.write_text("blockio: [\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d"):
        load_model(AgentConfig, f)
    with pytest.raises(ConfigError, match="cannot read"):
        load_model(AgentConfig, tmp_path / "nope.yml")
    f.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_model(AgentConfig, f)


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10), ("500ms", 0.5), ("1m", 60), ("2h", 7200), (3, 3)]
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("value", "pair"),
    [
        ("127.0.0.1:9731", ("127.0.0.1", 9731)),
        (":9000", ("0.0.0.0", 9000)),
        ("[::1]:9731", ("::1", 9731)),
        ("localhost", ("localhost", 9731)),
    ],
)
def test_listen(value: str, pair: tuple[str, int]) -> None:
    assert parse_listen(value, 9731) == pair


def _wattbit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_cli_exits_2_before_starting(tmp_path: Path) -> None:
    f = tmp_path / "agent.yml"
    f.write_text("blockio:\n  backend: nope\n")
    r = _wattbit("agent", "--config", str(f), "--listen", "127.0.0.1:1")
    assert r.returncode == 2
    assert str(f) in r.stderr and "blockio.backend" in r.stderr
    # Nothing started: no BPF compile, no listening message.
    assert "serving" not in r.stderr


def test_cli_bad_listen_and_web_config(tmp_path: Path) -> None:
    r = _wattbit("agent", "--listen", "1.2.3.4:notaport")
    assert r.returncode == 2 and "--listen" in r.stderr
    r = _wattbit("agent", "--web-config", str(tmp_path / "missing-web.yml"))
    assert r.returncode == 2 and "missing-web.yml" in r.stderr
