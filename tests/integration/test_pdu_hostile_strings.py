"""A PDU whose every string is hostile, beside a healthy one, through a real `wattbit collector`
and a real SNMP agent (issue 34: "other strings than the ones named").

The hostile PDU is a SYNTHETIC recording made here from the real APC AP8641 one
(../shared/pdu-recordings): the same MIB tree and values, with sysDescr, sysName, sysContact,
sysLocation, the model, firmware and serial, and every outlet's name replaced by bytes a
broken or hostile agent could send (an ESC sequence and a newline forging a log line, NULs,
a C1 CSI, a bidi override, a CESU-encoded lone surrogate, bytes that are not UTF-8, 8 KB).
Nothing in it is a recording of a real PDU; its file name says `synthetic`.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.env import RECORDINGS, require
from tests.support.realparts import Collector, parse_samples, running
from tests.support.snmpagents import SnmpSim, have_snmpsim
from tests.support.synthetic_pdu import read_snmprec

APC = RECORDINGS / "apc_ap8641.snmprec"
FORGE = b"\x1b[31m\nFORGED pdu line\r\n"
SCALARS = {
    "1.3.6.1.2.1.1.1.0": b"APC Web/SNMP" + FORGE,  # sysDescr
    "1.3.6.1.2.1.1.4.0": b"\x9b31mJohn\xe2\x80\xae",  # sysContact: C1 CSI, bidi override
    "1.3.6.1.2.1.1.5.0": b"pwr-01" + FORGE,  # sysName
    "1.3.6.1.2.1.1.6.0": b"\xed\xa0\x80room",  # sysLocation: a lone surrogate, CESU-8
}
IDENTITY = {
    "1.3.6.1.4.1.318.1.1.26.2.1.8.": b"AP8641" + FORGE + b"\x00tail",  # rPDU2IdentModelNumber
    "1.3.6.1.4.1.318.1.1.26.2.1.6.": b"v6.7\xff\xfe\xc3(",  # rPDU2IdentFirmwareRevision
    "1.3.6.1.4.1.318.1.1.26.2.1.9.": b"S" * 8192,  # rPDU2IdentSerialNumber
}
NAME_COLUMNS = ("1.3.6.1.4.1.318.1.1.26.9.2.3.1.3.", "1.3.6.1.4.1.318.1.1.26.9.4.3.1.3.")
OUTLET_NAMES = [
    b"web-1" + FORGE,
    b"\x00\x00",
    b"db\x9b31m",
    b"\xe2\x80\xaeevil",
    b"\xed\xa0\x80x",
    b"caf\xe9 \xff",
    b"N" * 8192,
    b"tab\there\x7f",
]


def hostile_recording(tmp: Path) -> Path:
    """The synthetic recording (see the module's doc), written under tmp."""
    rows = []
    for oid, tag, value in read_snmprec(APC):
        if oid in SCALARS:
            tag, value = "4x", SCALARS[oid].hex()
        elif oid.startswith(tuple(IDENTITY)):
            tag, value = "4x", IDENTITY[oid[: oid.rindex(".") + 1]].hex()
        elif oid.startswith(NAME_COLUMNS):
            outlet = int(oid.rsplit(".", 1)[1])
            tag, value = "4x", OUTLET_NAMES[outlet % len(OUTLET_NAMES)].hex()
        rows.append(f"{oid}|{tag}|{value}")
    path = tmp / "synthetic_hostile_strings.snmprec"
    path.write_text("\n".join(rows) + "\n", encoding="latin-1")
    return path


def test_hostile_pdu_strings_cost_their_label_at_most(tmp_path: Path) -> None:
    """Every scrape answers in UTF-8, both PDUs' 24 outlets are there with their watts, every
    label of the hostile PDU is printable and at most 128 characters, the log holds no control
    character and no forged line (before: the ESC sequences, newlines and 8 KB names reached
    the outlet_name and model labels as they came)."""
    require(have_snmpsim(), "snmpsim-command-responder is not installed in this venv")
    require(APC.exists(), f"PDU recordings missing in {APC.parent}")
    hostile = hostile_recording(tmp_path)
    with SnmpSim({"apc_ap8641": APC, "hostile": hostile}) as sim:
        config = f"""
interval: 1s
log_level: debug
state_dir: {tmp_path / "state"}
auths:
  apc: {{version: 2c, community: apc_ap8641}}
  hostile: {{version: 2c, community: hostile}}
pdus:
  - name: pdu-ok
    address: 127.0.0.1:{sim.port}
    auth: apc
  - name: pdu-hostile
    address: 127.0.0.1:{sim.port}
    auth: hostile
"""
        coll = Collector(config, tmp_path)
        with running(coll):

            def outlets(s: dict, pdu: str) -> list[dict[str, str]]:
                return [
                    dict(k[1])
                    for k in s
                    if k[0] == "wattbit_pdu_outlet_power_watts" and dict(k[1])["pdu"] == pdu
                ]

            def complete(s: dict) -> bool:
                return len(outlets(s, "pdu-ok")) == 24 and len(outlets(s, "pdu-hostile")) == 24

            coll.scrape_until("both PDUs' 24 outlets", complete, timeout=60)
            for _ in range(3):  # every scrape, not one lucky one
                text = coll.scrape_text()
                assert text.encode("utf-8").decode("utf-8") == text
                samples = parse_samples(text)
                assert complete(samples)
        log = coll.log.read_text(encoding="utf-8", errors="strict")
    hostile_labels = [(k[0], dict(k[1])) for k in samples if dict(k[1]).get("pdu") == "pdu-hostile"]
    assert hostile_labels
    for name, labels in hostile_labels:
        for key, value in labels.items():
            assert value.isprintable() and len(value) <= 128, (name, key, value[:40])
    info = [dict(k[1]) for k in samples if k[0] == "wattbit_pdu_info"]
    by_pdu = {i["pdu"]: i for i in info}
    assert by_pdu["pdu-ok"]["model"] == "AP8641"
    assert by_pdu["pdu-hostile"]["model"].startswith("AP8641")
    assert by_pdu["pdu-hostile"]["serial"] == "S" * 128
    names = {o["outlet_name"] for o in outlets(samples, "pdu-hostile")}
    assert "N" * 128 in names and any(n.startswith("web-1") for n in names), names

    def watts(pdu: str) -> list[float]:
        return sorted(
            v
            for k, v in samples.items()
            if k[0] == "wattbit_pdu_outlet_power_watts" and dict(k[1])["pdu"] == pdu
        )

    assert watts("pdu-hostile") == watts("pdu-ok")  # the same values: only the names changed
    assert "Traceback" not in log
    assert not any(c in log for c in "\x1b\x00\x9b\u202e"), "a control character reached the log"
    assert not any(line.startswith("FORGED") for line in log.splitlines())
