"""The agent's tcp: settings: defaults, and bad values that exit 2 naming file, key and reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.agent.config import AgentConfig
from collector.config import ConfigError, load_model
from tests.support.cli import wattbit


def test_defaults() -> None:
    t = AgentConfig().tcp
    assert t.enabled and t.interval == 5.0 and t.key == ["peer", "port", "cgroup"]
    assert t.top_k == 20 and t.destroy_events and not t.processes
    assert t.flow_labels == "socket" and t.packet_label_flows == 65_536


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("tcp:\n  interval: 0.5s\n", "tcp.interval"),
        ("tcp:\n  interval: 10m\n", "tcp.interval"),
        ("tcp:\n  key: [peer, peer]\n", "tcp.key"),
        ("tcp:\n  key: [peer, pid]\n", "tcp.key"),
        ("tcp:\n  top_k: 0\n", "tcp.top_k"),
        ("tcp:\n  top_k: 100000\n", "tcp.top_k"),
        ("tcp:\n  peer_prefix_v4: 33\n", "tcp.peer_prefix_v4"),
        ("tcp:\n  peer_prefix_v6: -1\n", "tcp.peer_prefix_v6"),
        ("tcp:\n  max_sockets: 10\n", "tcp.max_sockets"),
        ("tcp:\n  destroy_event: true\n", "tcp.destroy_event"),
        ("tcp:\n  key: [peer, process]\n  processes: false\n", "tcp.processes"),
        ("tcp:\n  flow_labels: wire\n", "tcp.flow_labels"),
        ("tcp:\n  flow_labels: [socket, packet]\n", "tcp.flow_labels"),
        ("tcp:\n  packet_label_flows: 16\n", "tcp.packet_label_flows"),
        ("tcp:\n  packet_label_flows: 100000000\n", "tcp.packet_label_flows"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    f = tmp_path / "agent.yml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_model(AgentConfig, f)
    assert key in err.value.key, err.value


def test_cli_exits_2_on_a_bad_flow_label_source(tmp_path: Path) -> None:
    f = tmp_path / "agent.yml"
    f.write_text("tcp:\n  flow_labels: s3cr3t\n")
    r = wattbit("agent", "--config", str(f), "--listen", "127.0.0.1:1")
    assert r.returncode == 2
    assert str(f) in r.stderr and "tcp.flow_labels" in r.stderr and "s3cr3t" not in r.stderr


def test_cli_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "agent.yml"
    f.write_text("tcp:\n  key: [peer, s3cr3t]\n")
    r = wattbit("agent", "--config", str(f), "--listen", "127.0.0.1:1")
    assert r.returncode == 2
    assert str(f) in r.stderr and "tcp.key" in r.stderr and "s3cr3t" not in r.stderr
