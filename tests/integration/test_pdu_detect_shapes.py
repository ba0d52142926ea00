"""What `wattbit pdu detect` / `check` say about a PDU no profile reads, and a MIB recognised
by its shape under an OEM's enterprise number.

Real recordings of unsupported PDUs (tests/fixtures/pdu/unsupported/), and partial ones
derived from real recordings (named `synthetic_partial`): the output names the known MIB
shapes the PDU answers in part and the signature columns it lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collector.pdu.snmprec import read_recording
from collector.site.profiles import load_profiles
from exporters.pdu.detect import detect_in_walk, shapes_in_walk
from tests.support.cli import wattbit
from tests.support.env import FIXTURES, OWN_RECORDINGS, RECORDINGS, require
from tests.support.snmpagents import SnmpSim, have_snmpsim

UNSUPPORTED = FIXTURES / "pdu" / "unsupported"
SYS_OBJECT_ID = "1.3.6.1.2.1.1.2.0"


def _derived(src: Path, dst: Path, keep: Callable[[str], bool], sys_object_id: str) -> Path:
    """src without the lines keep() refuses, its sysObjectID replaced: as snmprec."""
    walk = read_recording(src)
    lines = [f"{SYS_OBJECT_ID}|6|{sys_object_id}"]
    for oid, v in sorted(walk.items(), key=lambda kv: tuple(int(a) for a in kv[0].split("."))):
        if oid == SYS_OBJECT_ID or not keep(oid):
            continue
        if v.type == "Integer32" or v.type == "Integer":
            lines.append(f"{oid}|2|{v.value}")
        elif v.type == "Gauge32":
            lines.append(f"{oid}|66|{v.value}")
        elif v.type == "OctetString" and isinstance(v.value, bytes):
            lines.append(f"{oid}|4x|{v.value.hex()}")
    dst.write_text("\n".join(lines) + "\n")
    return dst


def test_a_real_pdu_of_a_known_enterprise_names_its_profiles_and_their_signatures() -> None:
    r = wattbit("pdu", "check", str(UNSUPPORTED / "hpe_ipdu-modular-pdu.snmprec"))
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "not read: no_profile" in out
    assert "known MIB shapes it answers in part:" in out
    for name in ("hpe_pdu2", "hpe_pdu3", "hpe_pdumm"):
        assert f"  {name} (HPE, CPQPOWER-MIB" in out
    assert "the PDU's enterprise" in out and "answers 0 of its columns" in out
    # what it would take: the signature columns of each, by OID
    assert "lacks its signature columns (one would do): 1.3.6.1.4.1.232.165.7." in out


def test_a_real_partial_pdu_names_the_mib_it_partly_answers() -> None:
    """A WTI MPC captured with its unit name only: WTI-POWER-MIB, one column, no signature."""
    r = wattbit("pdu", "check", str(UNSUPPORTED / "wti_mpc-partial.snmprec"))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    at = lines.index("  wti_power (WTI, WTI-POWER-MIB)")
    assert lines[at + 1] == "    answers 1 of its columns: 1.3.6.1.4.1.2634.3.200.10.1.2"
    assert lines[at + 2].startswith("    lacks its signature columns (one would do): ")
    assert "1.3.6.1.4.1.2634.3.100.200.1.8" in lines[at + 2]  # plugPower


def test_a_real_pdu_of_no_known_shape_says_so() -> None:
    r = wattbit("pdu", "check", str(UNSUPPORTED / "planet_ipm-8220.snmprec"))
    assert r.returncode == 1
    assert "none: no column of any profile's MIB answers" in r.stdout


def test_synthetic_partial_cyberpower_without_value_columns(tmp_path: Path) -> None:
    """The PDU44005 recording without any value column, under an enterprise no profile has."""
    profiles = load_profiles()
    cyber = next(p for p in profiles if p.name == "cyberpower")
    required, _ = cyber.columns_doc()
    src = RECORDINGS / "cyberpower_pdu44005.snmpwalk"
    require(src.is_file(), f"no recording {src}")
    partial = _derived(
        src,
        tmp_path / "cyberpower_pdu44005__synthetic_partial.snmprec",
        lambda oid: not any(oid.startswith(c + ".") for c in required),
        "1.3.6.1.4.1.3808.1.1.99",  # CyberPower's enterprise, in no profile's family
    )
    shapes = shapes_in_walk(profiles, read_recording(partial))
    assert shapes and shapes[0].profile.name == "cyberpower"
    assert shapes[0].same_enterprise
    assert set(shapes[0].lacking) == set(cyber.signature_columns())
    assert "1.3.6.1.4.1.3808.1.1.3.3.5.1.1.2" in shapes[0].answered  # outlet names
    r = wattbit("pdu", "check", str(partial))
    assert r.returncode == 1
    assert "  cyberpower (CyberPower, CPS-MIB): the PDU's enterprise" in r.stdout
    assert "1.3.6.1.4.1.3808.1.1.3.3.5.1.1.2" in r.stdout


def test_synthetic_partial_schleifenbauer_mib_under_an_unknown_enterprise(tmp_path: Path) -> None:
    """The DPM27e's databus MIB moved under an enterprise no profile knows, names only:
    the shape is named with its OEM prefix, and what it lacks under that prefix."""
    src = OWN_RECORDINGS / "schleifenbauer_dpm27e.snmprec"
    walk = read_recording(src)
    moved = tmp_path / "schleifenbauer_dpm27e__synthetic_partial_oem.snmprec"
    lines = [f"{SYS_OBJECT_ID}|6|1.3.6.1.4.1.64999.11.1"]
    for oid, v in walk.items():
        # sdbDevOutName only (no value column)
        if oid.startswith("1.3.6.1.4.1.31034.12.1.1.2.7.1.1.2.") and isinstance(v.value, bytes):
            lines.append(f"1.3.6.1.4.1.64999{oid[len('1.3.6.1.4.1.31034') :]}|4x|{v.value.hex()}")
    moved.write_text("\n".join(lines) + "\n")
    shapes = shapes_in_walk(load_profiles(), read_recording(moved))
    assert [s.profile.name for s in shapes][:1] == ["schleifenbauer@64999"]
    assert all(c.startswith("1.3.6.1.4.1.64999.12.1.") for c in shapes[0].lacking)


def test_a_mib_is_recognised_by_its_shape_under_an_oem_enterprise(tmp_path: Path) -> None:
    """The DPM27e moved whole under an enterprise no profile knows is read as Schleifenbauer's
    MIB there, the same values (Conteg is the real case: tests/fixtures/pdu/recordings)."""
    src = OWN_RECORDINGS / "schleifenbauer_dpm27e.snmprec"
    text = src.read_text(encoding="utf-8", errors="surrogateescape")
    moved = tmp_path / "schleifenbauer_dpm27e__synthetic_oem.snmprec"
    body = [ln for ln in text.splitlines() if not ln.startswith(SYS_OBJECT_ID + "|")]
    body = [ln.replace("1.3.6.1.4.1.31034.", "1.3.6.1.4.1.64999.", 1) for ln in body]
    moved.write_text(
        "\n".join([f"{SYS_OBJECT_ID}|6|1.3.6.1.4.1.64999.11.3", *body]) + "\n",
        encoding="utf-8",
        errors="surrogateescape",
    )
    profiles = load_profiles()
    found = detect_in_walk(profiles, read_recording(moved))
    assert found.profile.name == "schleifenbauer@64999"
    assert "OEM" in found.why
    r = wattbit("pdu", "check", str(moved))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "profile: schleifenbauer@64999 (Schleifenbauer MIB (enterprise 64999)" in r.stdout
    original = wattbit("pdu", "check", str(src)).stdout
    values = [ln for ln in original.splitlines() if "_watts" in ln or "_joules" in ln]
    assert values and all(v in r.stdout for v in values)


def test_detect_names_partial_shapes_of_a_live_pdu(tmp_path: Path) -> None:
    """The live path (`detect`, one GETBULK of one row per column) says what `check` says."""
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    secret = "shapes-community-7Qx"
    with SnmpSim({secret: UNSUPPORTED / "hpe_ipdu-modular-pdu.snmprec"}) as sim:
        cred = tmp_path / "community"
        cred.write_text(secret + "\n")
        cred.chmod(0o600)
        cfg = tmp_path / "collector.yml"
        cfg.write_text(f"auths:\n  lab:\n    version: 2c\n    community_file: {cred}\npdus: []\n")
        r = wattbit("pdu", "detect", sim.endpoint, "--config", str(cfg), "--auth", "lab")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "known MIB shapes it answers in part:" in r.stdout
    assert "  hpe_pdumm (HPE, CPQPOWER-MIB (pdu)): the PDU's enterprise" in r.stdout
    assert secret not in r.stdout + r.stderr


def test_check_lists_the_banks_and_phases_feeds_can_map() -> None:
    """What to write in `feeds:`: each bank and phase row with its watts."""
    r = wattbit("pdu", "check", str(OWN_RECORDINGS / "riedo_updu-rn3214.snmprec"))
    assert r.returncode == 0, r.stderr
    assert "phases (feeds): phase:0.1 272 W, phase:0.2 196 W, phase:0.3 400 W" in r.stdout
    assert "banks (feeds): bank:1.0 69 W," in r.stdout


def test_no_mib_is_moved_under_net_snmps_generic_enterprise() -> None:
    """net-snmp's generic sysObjectID names the agent software, not an OEM: nothing moved."""
    from exporters.pdu.detect import oem_candidates

    profiles = load_profiles()
    assert oem_candidates(profiles, "1.3.6.1.4.1.8072.3.2.10") == []
    assert oem_candidates(profiles, "1.3.6.1.4.1.31034.11.3") == []  # a profile lives there
    moved = oem_candidates(profiles, "1.3.6.1.4.1.64999.1")
    assert {p.name for p in moved} == {f"{p.name}@64999" for p in profiles if not p.oem_of}


def test_check_says_a_device_in_a_pdu_family_that_is_no_pdu_is_not_read() -> None:
    """A Geist temperature sensor reports a sysObjectID inside the vertiv_geist family
    (.21239.42.1.31): `check` says no_profile and exits 1, never "meters nothing" (issue 32)."""
    r = wattbit(
        "pdu", "check", str(FIXTURES / "pdu" / "not_pdus" / "geist_temperature-sensor.snmprec")
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not read: no_profile" in r.stdout
    assert "product family of vertiv_geist, but neither" in r.stderr
    assert "  vertiv_geist (Vertiv, VERTIV-V5-MIB): the PDU's enterprise" in r.stdout
    assert "meters nothing" not in r.stdout
