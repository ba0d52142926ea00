"""`wattbit pdu detect / check / profiles` as someone adding a PDU runs them.

`detect` polls a real SNMP agent (snmpsim serving a real recording, no profile named);
`check` serves a recording itself and must show net-snmp's raw reading beside each value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.pdu.cli import profiles_markdown
from collector.site.profiles import load_profiles
from tests.support.cli import wattbit
from tests.support.env import RECORDINGS, ROOT, require
from tests.support.snmpagents import SnmpSim, have_netsnmp, have_snmpsim, silent_udp_port

PX3 = RECORDINGS / "raritan_px3-5493u-k2.snmprec"
APC = RECORDINGS / "apc_ap8641.snmprec"
SECRET = "detect-community-Zq81"


@pytest.fixture(scope="module")
def sim() -> Iterator[SnmpSim]:
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(PX3.is_file(), f"recording {PX3} not present")
    with SnmpSim({SECRET: PX3}) as s:
        yield s


def _config(tmp_path: Path) -> Path:
    secret = tmp_path / "community"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    cfg = tmp_path / "collector.yml"
    cfg.write_text(f"auths:\n  lab:\n    version: 2c\n    community_file: {secret}\npdus: []\n")
    return cfg


def test_detect_a_live_pdu(sim: SnmpSim, tmp_path: Path) -> None:
    r = wattbit("pdu", "detect", sim.endpoint, "--config", str(_config(tmp_path)), "--auth", "lab")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "profile: raritan_pdu2 (Raritan, PDU2-MIB)" in out
    assert "why: sysObjectID 1.3.6.1.4.1.13742.6 is in its product family" in out
    assert "model: PX3-5493U-K2" in out
    assert "outlets: 24" in out
    # every outlet of this unit has the four metrics the profile reads
    rows = [ln.split() for ln in out.splitlines() if re.match(r"^1\.\d+\s", ln)]
    per_outlet: dict[str, set[str]] = {}
    for row in rows:
        metric = next(w for w in row if w.endswith(("_watts", "_amperes", "_volts", "_joules")))
        per_outlet.setdefault(row[0], set()).add(metric)
    assert len(per_outlet) == 24
    assert all(
        m == {"power_watts", "current_amperes", "voltage_volts", "energy_joules"}
        for m in per_outlet.values()
    )
    assert SECRET not in out + r.stderr


def test_detect_a_dead_pdu_fails_without_hanging(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    with silent_udp_port() as port:
        r = wattbit(
            "pdu", "detect", f"127.0.0.1:{port}", "--config", str(cfg), "--auth", "lab",
            "--timeout", "200ms",
        )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not read: timeout" in r.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--auth", "nope"], ["--auth", "auth"]),
        (["--auth", "lab", "--profile", "nope"], ["--profile", "no known profile"]),
    ],
)
def test_detect_usage_errors_exit_2(tmp_path: Path, args: list[str], words: list[str]) -> None:
    r = wattbit("pdu", "detect", "127.0.0.1:1", "--config", str(_config(tmp_path)), *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert all(w in r.stderr for w in words), r.stderr


def test_check_a_recording_beside_net_snmp() -> None:
    require(have_netsnmp(), "net-snmp's snmpget is not installed (Debian package snmp)")
    require(APC.is_file(), f"recording {APC} not present")
    r = wattbit("pdu", "check", str(APC))
    assert r.returncode == 0, r.stderr
    assert "profile: apc_rpdu2" in r.stdout
    assert "raw (net-snmp snmpget)" in r.stdout
    # rPDU2OutletMeteredStatusCurrent is in tenths of A: each value is net-snmp's raw / 10
    amps = [ln.split() for ln in r.stdout.splitlines() if re.match(r"^\d+ .* current_amperes ", ln)]
    assert len(amps) == 24
    for row in amps:
        value, raw = float(row[-3]), int(row[-1])
        assert value == pytest.approx(raw / 10)


def test_check_a_snmpwalk_capture_with_a_named_profile() -> None:
    path = RECORDINGS / "cyberpower_pdu44005.snmpwalk"
    require(path.is_file(), f"recording {path} not present")
    r = wattbit("pdu", "check", str(path), "--profile", "cyberpower")
    assert r.returncode == 0, r.stderr
    assert "why: named by the profile key" in r.stdout
    assert "outlets: 10" in r.stdout


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["/nonexistent/x.snmprec"], "recording"),
        ([str(APC), "--profile", "nope"], "--profile"),
    ],
)
def test_check_usage_errors_exit_2(args: list[str], word: str) -> None:
    r = wattbit("pdu", "check", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert word in r.stderr


def test_check_a_broken_recording_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.snmprec"
    bad.write_text("1.3.6.1.2.1.1.1.0|4\n")
    r = wattbit("pdu", "check", str(bad))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "bad.snmprec" in r.stderr and "line 1" in r.stderr


def test_profiles_readme_section_is_current() -> None:
    readme = (ROOT / "exporters" / "pdu" / "profiles" / "README.md").read_text()
    start = "<!-- generated: wattbit pdu profiles --markdown -->\n"
    body = readme.split(start, 1)[1].split("<!-- end generated -->", 1)[0]
    assert body.strip() == profiles_markdown(load_profiles()).strip(), (
        "run `wattbit pdu profiles --markdown` and paste it into exporters/pdu/profiles/README.md"
    )
    r = wattbit("pdu", "profiles", "--markdown")
    assert r.returncode == 0 and r.stdout.strip() == body.strip()
