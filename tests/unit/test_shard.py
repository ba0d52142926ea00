"""PDU polling shards: the hash is fixed, balanced and process-independent; `shard:` is strict.

The three-collector test over 100 simulated PDUs, and the check of the hash against
Prometheus' own `hashmod`, are in tests/integration/test_collector_shards.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from collector.config import ConfigError, load_model
from collector.site.config import CollectorConfig, redacted
from collector.site.main import build_poller, holds_registry
from collector.site.profiles import load_profiles
from collector.site.shard import WHOLE, Shard, parse_shard, shard_of
from exporters.base import ExportersCollector
from exporters.pdu.exporter import PduExporter
from tests.support.cli import wattbit
from tests.support.env import ROOT
from tests.support.realparts import parse_samples, sample

# shard_of(name, N) for N = 2, 3, 5, 8. Fixed for good: changing the function moves PDUs between
# the collectors of every sharded site on upgrade. The N = 3 column of rack1-a and the raw
# hashmod values behind it were read back from a real Prometheus (the integration test
# checks the function against Prometheus' hashmod on many names).
TABLE = {
    "rack1-a": (1, 3, 3, 3),
    "rack1-b": (1, 1, 5, 7),
    "row2-rack07-b": (2, 1, 4, 6),
    "pdu-001": (2, 1, 4, 2),
    "pdu-002": (2, 3, 5, 8),
    "10.1.2.3": (2, 1, 4, 8),
    "lab:pdu_7": (1, 2, 2, 1),
    "A": (2, 3, 1, 2),
    "z": (2, 2, 1, 8),
    "mover01.psu": (2, 2, 3, 4),
}
COUNTS = (2, 3, 5, 8)
# 1,000 fixed names in a common naming scheme: the counts below are facts, not chances.
SITE = [f"rack{r:02d}-pdu-{side}" for r in range(1, 501) for side in "ab"]


@pytest.mark.parametrize(("name", "expected"), sorted(TABLE.items()))
def test_fixed_table(name: str, expected: tuple[int, ...]) -> None:
    assert tuple(shard_of(name, n) for n in COUNTS) == expected


def test_one_shard_owns_everything() -> None:
    assert {shard_of(name, 1) for name in [*TABLE, *SITE]} == {1}
    assert all(WHOLE.owns(name) for name in SITE)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 16])
def test_balanced_over_a_site(n: int) -> None:
    counts = Counter(shard_of(name, n) for name in SITE)
    assert set(counts) == set(range(1, n + 1))
    fair = len(SITE) / n
    # loose: the fixed names give at most 25 % off the fair share (N = 16); 35 % is allowed
    assert all(0.65 * fair <= c <= 1.35 * fair for c in counts.values()), counts


def test_the_same_in_other_processes() -> None:
    """Python's hash() of a str differs per process (PYTHONHASHSEED); shard_of must not."""
    code = (
        "import json, sys; from collector.site.shard import shard_of; "
        "print(json.dumps([shard_of(n, 3) for n in json.loads(sys.argv[1])]))"
    )
    here = [shard_of(name, 3) for name in SITE[:200]]
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(SITE[:200])],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)},
        )
        assert json.loads(out.stdout) == here


@pytest.mark.parametrize(
    ("text", "shard"),
    [
        ("1/1", Shard(1, 1)),
        ("2/3", Shard(2, 3)),
        (" 3 / 3 ", Shard(3, 3)),
        ("1/1024", Shard(1, 1024)),
    ],
)
def test_good_shards(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard


MINIMAL = """\
auths:
  v2: {version: 2c, community: public}
pdus:
  - {name: rack1-a, address: "127.0.0.1:1161", auth: v2}
"""


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("'0/3'", "K must be 1-N"),
        ("'4/3'", "K must be 1-N"),
        ("'7/5'", "K must be 1-N"),
        ("'1/0'", "N (the number of shards) must be 1-1024"),
        ("'1/2048'", "N (the number of shards) must be 1-1024"),
        ("3", "expected K/N"),
        ("'3'", "expected K/N"),
        ("'2 of 3'", "expected K/N"),
        ("'-1/3'", "expected K/N"),
        ("'1.5/3'", "expected K/N"),
        ("'١/٣'", "expected K/N"),  # Arabic-Indic digits: not ASCII, refused
        ("[1, 3]", "expected K/N"),
        ("null", "expected K/N"),
        ("true", "expected K/N"),
    ],
)
def test_bad_shards_name_the_key_never_the_value(tmp_path: Path, value: str, reason: str) -> None:
    f = tmp_path / "collector.yml"
    f.write_text(MINIMAL + f"shard: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    assert err.value.key == "shard"
    assert reason in err.value.reason


@pytest.mark.parametrize("value", ["'9/8'", "'pa55w0rd/3'", "'1/99999'", "'77'"])
def test_a_bad_shard_is_never_echoed(tmp_path: Path, value: str) -> None:
    f = tmp_path / "collector.yml"
    f.write_text(MINIMAL + f"shard: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_model(CollectorConfig, f)
    # the message names the file: its path (pytest's numbered tmp dirs, e.g. pytest-77) may
    # hold the value's digits by chance, so only the rest of the message is searched
    assert value.strip("'") not in str(err.value).replace(str(f), "FILE")


def test_a_bad_shard_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    f = tmp_path / "collector.yml"
    f.write_text(MINIMAL + "shard: 5/4\n")
    r = wattbit("collector", "--config", str(f))
    assert r.returncode == 2, r.stderr
    assert f"{f}: key 'shard': K must be 1-N" in r.stderr
    assert "5/4" not in r.stderr + r.stdout


def _site(
    tmp_path: Path, shard: str | None, names: list[str], token: bool = False
) -> CollectorConfig:
    lines = ["auths:", "  v2: {version: 2c, community: public}", "pdus:" if names else "pdus: []"]
    lines += [
        f'  - {{name: {n}, address: "127.0.0.1:{1000 + i}", auth: v2}}' for i, n in enumerate(names)
    ]
    if shard is not None:
        lines.append(f"shard: {shard}")
    if token:
        lines.append("runs: {token: Zr8tQ2wLx5vN9cK3mB7pH4}")
    f = tmp_path / "collector.yml"
    f.write_text("\n".join(lines) + "\n")
    return load_model(CollectorConfig, f)


def test_every_pdu_in_exactly_one_shard(tmp_path: Path) -> None:
    names = SITE[:300]
    polled = [[p.name for p in _site(tmp_path, f"{k}/4", names).polled()] for k in range(1, 5)]
    assert sorted(n for mine in polled for n in mine) == sorted(names)  # each once, all
    assert all(polled)
    for k, mine in enumerate(polled, start=1):
        assert mine == [n for n in names if shard_of(n, 4) == k]  # in the file's order
    unsharded = _site(tmp_path, None, names)
    assert unsharded.shard == WHOLE and [p.name for p in unsharded.polled()] == names


def test_print_config_says_k_of_n(tmp_path: Path) -> None:
    assert redacted(_site(tmp_path, "2/3", SITE[:3]))["shard"] == "2/3"
    assert redacted(_site(tmp_path, None, SITE[:3]))["shard"] == "1/1"


def test_who_holds_the_run_registry(tmp_path: Path) -> None:
    assert holds_registry(_site(tmp_path, None, []))  # unsharded: as ever (read-only or not)
    assert holds_registry(_site(tmp_path, "1/3", [], token=True))
    assert not holds_registry(_site(tmp_path, "2/3", []))


class _NoClient:
    def counts(self) -> dict[str, int]:
        return {}


def test_shard_metrics(tmp_path: Path) -> None:
    cfg = _site(tmp_path, "2/3", SITE[:30])
    poller = build_poller(cfg, load_profiles(), _NoClient())  # type: ignore[arg-type]
    registry = CollectorRegistry(auto_describe=False)
    exporter = PduExporter(poller, shard=(cfg.shard.k, cfg.shard.n), configured=len(cfg.pdus))
    registry.register(ExportersCollector([exporter]))
    s = parse_samples(generate_latest(registry).decode())
    mine = sum(1 for n in SITE[:30] if shard_of(n, 3) == 2)
    assert sample(s, "wattbit_pdu_shard_info", shard="2", shards="3") == 1.0
    assert sample(s, "wattbit_pdu_polled_pdus") == mine == len(poller.targets)
    assert sample(s, "wattbit_pdu_configured_pdus") == 30.0
    # unsharded: 1 of 1, every configured PDU polled
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PduExporter(build_poller(_site(tmp_path, None, SITE[:5]), [], _NoClient())))  # type: ignore[arg-type]
    s = parse_samples(generate_latest(registry).decode())
    assert sample(s, "wattbit_pdu_shard_info", shard="1", shards="1") == 1.0
    assert sample(s, "wattbit_pdu_polled_pdus") == sample(s, "wattbit_pdu_configured_pdus") == 5.0
