"""A whole PDU, bank or phase mapped to one host (`feeds:`): config checks and the rendering.

A host fed both by outlets and by a feed, or by overlapping feeds of one PDU, would have its
power counted twice: the file is refused (exit 2) naming both keys, never the host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.config import ConfigError, load_model
from collector.site.config import CollectorConfig
from exporters.pdu.exporter import feed_values
from exporters.pdu.types import OutletReading, Reading

HEAD = """\
auths:
  a: {version: 2c, community: public}
pdus:
"""


def _load(tmp_path: Path, pdus: str) -> CollectorConfig:
    f = tmp_path / "collector.yml"
    f.write_text(HEAD + pdus)
    return load_model(CollectorConfig, f)


def _refused(tmp_path: Path, pdus: str) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, pdus)
    assert str(tmp_path / "collector.yml") in str(exc.value)
    return exc.value


def test_feeds_map_a_pdu_a_bank_and_a_phase(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        """\
  - name: p1
    address: 127.0.0.1:1161
    auth: a
    component: server
    feeds:
      - {feed: unit, host: mover01}
  - name: p2
    address: 127.0.0.1:1162
    auth: a
    feeds:
      - {feed: "bank:1", host: mover02}
      - {feed: "bank:2", host: mover02}
      - {feed: "phase:0.3", host: mover03, component: storage}
    outlets:
      - {index: 7, host: switch01}
""",
    )
    assert cfg.pdus[0].feed_labels() == [("unit", "mover01", "server")]
    assert cfg.pdus[1].feed_labels() == [
        ("bank:1", "mover02", ""),
        ("bank:2", "mover02", ""),
        ("phase:0.3", "mover03", "storage"),
    ]


@pytest.mark.parametrize(
    ("pdus", "key", "names"),
    [
        # outlets of one PDU and the whole of another feed one host
        (
            """\
  - {name: p1, address: "127.0.0.1:1", auth: a, outlets: [{index: 1, host: mover01}]}
  - {name: p2, address: "127.0.0.1:2", auth: a, feeds: [{feed: unit, host: mover01}]}
""",
            "pdus[1].feeds[0].host",
            "pdus[0].outlets[0].host",
        ),
        # the PDU's default host labels its outlets: a feed of the same host doubles it
        (
            """\
  - name: p1
    address: "127.0.0.1:1"
    auth: a
    host: mover01
    feeds: [{feed: "bank:1", component: storage}]
""",
            "pdus[0].feeds[0].host",
            "pdus[0].host",
        ),
        # the unit holds its banks
        (
            """\
  - name: p1
    address: "127.0.0.1:1"
    auth: a
    feeds: [{feed: unit, host: m1}, {feed: "bank:2", host: m1}]
""",
            "pdus[0].feeds[1].feed",
            "pdus[0].feeds[0].feed",
        ),
        # banks sit on phases
        (
            """\
  - name: p1
    address: "127.0.0.1:1"
    auth: a
    feeds: [{feed: "phase:1", host: m1}, {feed: "bank:1", host: m1}]
""",
            "pdus[0].feeds[1].feed",
            "pdus[0].feeds[0].feed",
        ),
        # one feed, two hosts
        (
            """\
  - name: p1
    address: "127.0.0.1:1"
    auth: a
    feeds: [{feed: "bank:1", host: m1}, {feed: "bank:1", host: m2}]
""",
            "pdus[0].feeds[1].feed",
            "pdus[0].feeds[0].feed",
        ),
    ],
)
def test_a_host_fed_twice_is_refused_naming_both_keys(
    tmp_path: Path, pdus: str, key: str, names: str
) -> None:
    err = _refused(tmp_path, pdus)
    assert err.key == key
    assert names in err.reason
    assert "twice" in err.reason or "one host" in err.reason
    assert "mover01" not in str(err) and "m1" not in err.reason  # keys, never the value


def test_near_misses_are_accepted(tmp_path: Path) -> None:
    """Two banks or two phases of one PDU, or two PDUs' units (a dual-corded host): no overlap."""
    _load(
        tmp_path,
        """\
  - name: p1
    address: "127.0.0.1:1"
    auth: a
    feeds: [{feed: "bank:1", host: m1}, {feed: "bank:2", host: m1}, {feed: "phase:1", host: m2}]
  - {name: p2, address: "127.0.0.1:2", auth: a, feeds: [{feed: unit, host: m1}]}
  - {name: p3, address: "127.0.0.1:3", auth: a, feeds: [{feed: unit, host: m1}]}
  - {name: p4, address: "127.0.0.1:4", auth: a, outlets: [{index: 1, component: switch}]}
""",
    )


@pytest.mark.parametrize(
    ("feed", "reason"),
    [("bank", "unit, bank:N or phase:N"), ("outlet:1", "unit, bank:N or phase:N")],
)
def test_bad_feeds_name_the_key(tmp_path: Path, feed: str, reason: str) -> None:
    pdu = '  - {name: p1, address: "127.0.0.1:1", auth: a, feeds: [{feed: "FEED", host: m}]}\n'
    err = _refused(tmp_path, pdu.replace("FEED", feed))
    assert "feeds" in err.key and reason in err.reason


def test_a_feed_without_host_or_component_is_refused(tmp_path: Path) -> None:
    err = _refused(
        tmp_path, '  - {name: p1, address: "127.0.0.1:1", auth: a, feeds: [{feed: unit}]}\n'
    )
    assert "feeds" in err.key and "host, component or both" in err.reason


def test_feed_values_pick_the_unit_bank_or_phase() -> None:
    r = Reading(unit_power_watts=900.0, unit_energy_joules=7.2e6)
    r.banks = [OutletReading("1", "B1", power_watts=400.0), OutletReading("2", "B2", 500.0)]
    r.phases = [OutletReading("0.1", "L1", power_watts=300.0, energy_joules=3.6e6)]
    assert feed_values(r, "unit") == (900.0, 7.2e6)
    assert feed_values(r, "bank:2") == (500.0, None)
    assert feed_values(r, "phase:0.1") == (300.0, 3.6e6)
    assert feed_values(r, "bank:3") == (None, None)  # no such bank: no series, never a 0
