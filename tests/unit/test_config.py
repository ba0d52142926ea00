"""Agent configuration: defaults, and bad files that name the file, the key and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.agent.config import AgentConfig
from collector.config import ConfigError, load_model, parse_duration, parse_listen
from collector.site.config import CollectorConfig
from tests.support.cli import wattbit


def test_defaults_without_a_file() -> None:
    cfg = load_model(AgentConfig, None)
    assert cfg.listen == ("0.0.0.0", 9731, ":9731")  # host, port and the text they came from
    assert cfg.blockio.backend == "auto"
    assert cfg.blockio.size_histogram is False
    assert len(cfg.blockio.latency_buckets) == 16  # the series budget: docs/exporters/blockio.md
    assert (cfg.smart.enabled, cfg.smart.interval, cfg.smart.timeout) == (True, 300.0, 30.0)
    assert (cfg.smart.devices, cfg.smart.concurrency, cfg.smart.raid) == ("auto", 4, True)
    assert (cfg.pcie.enabled, cfg.pcie.refresh, cfg.pcie.controller_irqs) == (True, 60.0, True)
    assert cfg.cpu.enabled is False  # node_exporter gives node_cpu_seconds_total
    assert cfg.model_dump(mode="json")["listen"] == ":9731"  # as --print-config shows it


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("blockio:\n  backend: ebpf\n", "blockio.backend", "'auto', 'core', 'bcc' or 'diskstats'"),
        ("blockio:\n  exclud: x\n", "blockio.exclud", "unknown key"),
        ("blockio:\n  exclude: '(['\n", "blockio.exclude", "regular expression"),
        ("blockio:\n  max_inflight: 10\n", "blockio.max_inflight", "greater than or equal"),
        ("blockio:\n  topology_refresh: soon\n", "blockio.topology_refresh", "duration"),
        ("blockio:\n  latency_buckets: []\n", "blockio.latency_buckets", "1 to 32 bounds"),
        ("blockio:\n  latency_buckets: [0.1, 0.01]\n", "blockio.latency_buckets", "increase"),
        (
            "blockio:\n  latency_buckets: [1e-3, 1.0000000001e-3]\n",
            "blockio.latency_buckets",
            "1ns",
        ),
        ("blockio:\n  latency_buckets: [.nan]\n", "blockio.latency_buckets", "between 1ns"),
        ("blockio:\n  latency_buckets: [-1]\n", "blockio.latency_buckets", "between 1ns"),
        ("blockio:\n  latency_buckets: [.inf]\n", "blockio.latency_buckets", "between 1ns"),
        (
            "blockio:\n  latency_buckets: [" + ", ".join(f"{k}e-3" for k in range(1, 34)) + "]\n",
            "blockio.latency_buckets",
            "1 to 32 bounds",
        ),
        ("blockio:\n  latency_buckets: 0.1\n", "blockio.latency_buckets", "list"),
        ("blockio:\n  size_histogram: sometimes\n", "blockio.size_histogram", "bool"),
        ("smart:\n  interval: 5s\n", "smart.interval", "at least 10s"),
        ("smart:\n  interval: .nan\n", "smart.interval", "finite"),
        ("smart:\n  timeout: 0\n", "smart.timeout", "greater than 0"),
        ("smart:\n  interval: 1m\n  timeout: 2m\n", "smart.timeout", "smart.interval"),
        ("smart:\n  devices: '^(sd'\n", "smart.devices", "regular expression"),
        ("smart:\n  concurrency: 0\n", "smart.concurrency", "greater than or equal"),
        ("smart:\n  enabled: maybe\n", "smart.enabled", "bool"),
        # never a binary of the config's choosing: who runs smartctl, not which one
        ("smart:\n  smartctl: /tmp/x\n", "smart.smartctl", "'auto', 'direct' or 'helper'"),
        ("smart:\n  smartctl_path: /tmp/x\n", "smart.smartctl_path", "unknown key"),
        ("smart:\n  helper_socket: run/x.sock\n", "smart.helper_socket", "absolute path"),
        ("smart:\n  helper_socket: /" + "x" * 120 + "\n", "smart.helper_socket", "107 bytes"),
        ("drop_capabilities: perhaps\n", "drop_capabilities", "bool"),
        ("pcie:\n  refresh: 500ms\n", "pcie.refresh", "at least 1s"),
        ("pcie:\n  refresh: 0\n", "pcie.refresh", "greater than 0"),
        ("pcie:\n  controller_irqs: some\n", "pcie.controller_irqs", "bool"),
        ("cpu:\n  enabled: 2\n", "cpu.enabled", "bool"),
        ("cpu:\n  modes: [user]\n", "cpu.modes", "unknown key"),
        ("listen: 'a:b:c'\n", "listen", "HOST:PORT"),
        ("listen: ':99999'\n", "listen", "1-65535"),
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


def test_cli_exits_2_before_starting(tmp_path: Path) -> None:
    f = tmp_path / "agent.yml"
    f.write_text("blockio:\n  backend: nope\n")
    r = wattbit("agent", "--config", str(f), "--listen", "127.0.0.1:1")
    assert r.returncode == 2
    assert str(f) in r.stderr and "blockio.backend" in r.stderr
    # Nothing started: no BPF compile, no listening message.
    assert "serving" not in r.stderr


def test_cli_bad_listen_and_web_config(tmp_path: Path) -> None:
    r = wattbit("agent", "--listen", "1.2.3.4:notaport")
    assert r.returncode == 2 and "--listen" in r.stderr
    r = wattbit("agent", "--web-config", str(tmp_path / "missing-web.yml"))
    assert r.returncode == 2 and "missing-web.yml" in r.stderr


def test_a_key_given_twice_is_an_error(tmp_path: Path) -> None:
    """Every file goes through the one strict loader: no silent "the last one wins"."""
    f = tmp_path / "agent.yml"
    f.write_text("blockio:\n  backend: bcc\n  backend: diskstats\n")
    with pytest.raises(ConfigError) as err:
        load_model(AgentConfig, f)
    assert err.value.key == ""
    assert "duplicate key" in err.value.reason and "line 3" in err.value.reason
    assert "diskstats" not in str(err.value)  # the position only, never the text


def test_merge_key_overrides_are_not_duplicates(tmp_path: Path) -> None:
    """A key set again after `<<: *anchor` overrides the merged one, as in Go's yaml."""
    f = tmp_path / "collector.yml"
    f.write_text(
        "auths:\n  a: {version: 2c, community: public}\n"
        "pdus:\n"
        "  - &rack {name: r1, address: '127.0.0.1:1161', auth: a, retries: 3}\n"
        "  - <<: *rack\n    name: r2\n"
    )
    cfg = load_model(CollectorConfig, f)
    assert [(p.name, p.retries) for p in cfg.pdus] == [("r1", 3), ("r2", 3)]


def test_file_must_be_utf8(tmp_path: Path) -> None:
    f = tmp_path / "agent.yml"
    f.write_bytes("listen: ':9731'  # \u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        load_model(AgentConfig, f)
    assert str(err.value) == f"{f}: not valid UTF-8"


@pytest.mark.parametrize(
    ("model", "text", "message"),
    [
        (AgentConfig, "blockio: 5\n", "key 'blockio': must be a mapping"),
        (AgentConfig, "nic:\n  queus: true\n", "key 'nic.queus': unknown key"),
        (
            CollectorConfig,
            "auths:\n  a: {community: x}\n",
            "key 'auths.a.version': required key is missing",
        ),
        (
            CollectorConfig,
            "pdus:\n  - {name: p, address: x, auth: a, retries: -1}\n",
            "key 'pdus[0].retries': Input should be greater than or equal to 0",
        ),
    ],
)
def test_one_message_style(
    tmp_path: Path, model: type[AgentConfig | CollectorConfig], text: str, message: str
) -> None:
    """FILE: key 'a.b[0].c': reason, for every file the loader reads."""
    f = tmp_path / "x.yml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_model(model, f)
    assert str(err.value) == f"{f}: {message}"


def test_cli_bad_site_profile_exits_2(tmp_path: Path) -> None:
    """A site profile is read by the same loader: a bad one is a configuration error too."""
    (tmp_path / "mine.yaml").write_text(
        "name: mine\nvendor: V\nmib: M\nsys_object_ids: [1.3.6.1.4.1.99999]\n"
        "unit: {power_watts: {oid: 1.3.6, scale: 1}}\n"
    )
    f = tmp_path / "collector.yml"
    f.write_text(f"profiles_dir: {tmp_path}\npdus: []\n")
    r = wattbit("collector", "--config", str(f), "--print-config")
    assert r.returncode == 2, r.stderr
    assert f"{tmp_path / 'mine.yaml'}: key 'unit.power_watts': give 'instance'" in r.stderr
    assert "Traceback" not in r.stderr


def test_nic_link_speeds(tmp_path: Path) -> None:
    """nic.link_speeds: bits/s per interface, bounded; errors name the key, never the value."""
    f = tmp_path / "agent.yml"
    f.write_text("nic:\n  link_speeds: {veth-wb0: 1e9, eth9: 2500000000}\n")
    assert load_model(AgentConfig, f).nic.link_speeds == {"veth-wb0": 1e9, "eth9": 2.5e9}
    for bad in ("{veth0: 0}", "{veth0: .nan}", "{veth0: 1e15}", "{'a/b': 1e9}", "{veth0: fast}"):
        f.write_text(f"nic:\n  link_speeds: {bad}\n")
        with pytest.raises(ConfigError) as err:
            load_model(AgentConfig, f)
        assert "nic.link_speeds" in err.value.key, err.value
        assert "1e15" not in str(err.value) and "fast" not in str(err.value)
