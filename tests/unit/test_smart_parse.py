"""The smartctl --json parser over real outputs (tests/fixtures/smart, provenance in its README),
exact values from each file, and a fuzz tier: on any bytes it returns a reading, never raises."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporters.smart.parse import (
    EXIT_STATUS_BITS,
    MAX_OUTPUT,
    MAX_SCANNED,
    AtaAttribute,
    NvmeHealth,
    RaidMember,
    SmartReading,
    attribute_count,
    parse_scan,
    parse_smartctl,
)
from tests.support.env import FIXTURES

SMART = FIXTURES / "smart"
H = 3600  # seconds per power-on hour


def parse(name: str) -> SmartReading:
    return parse_smartctl((SMART / name).read_bytes())


def ata(*rows: tuple[int, str, int]) -> tuple[AtaAttribute, ...]:
    return tuple(AtaAttribute(i, n, v) for i, n, v in rows)


# file -> (status, exit status, protocol, healthy, temperature, power-on seconds, attributes)
ATA = {
    "sata_hdd_WDC_WD140EDFZ-11A0VA0.json": (
        0, True, 32, 1730 * H,
        ata((5, "Reallocated_Sector_Ct", 0), (197, "Current_Pending_Sector", 0),
            (198, "Offline_Uncorrectable", 0)),
    ),
    "sata_hdd_WDC_WD181KRYZ-01AGBB0.json": (
        0, True, 49, 8244 * H,
        ata((5, "Reallocated_Sector_Ct", 0), (197, "Current_Pending_Sector", 0),
            (198, "Offline_Uncorrectable", 0)),
    ),
    "sata_ssd_Samsung_SSD_860_EVO_500GB.json": (
        # 187 under the name smartctl's drive database gives Samsung SSDs
        0, True, 36, 14551 * H,
        ata((5, "Reallocated_Sector_Ct", 0), (187, "Uncorrectable_Error_Cnt", 0)),
    ),
    "sata_ssd_WDC_WDS400T1R0A-68A4W0.json": (
        0, True, 27, 8244 * H,
        ata((5, "Reallocated_Sector_Ct", 0), (187, "Reported_Uncorrect", 0),
            (188, "Command_Timeout", 0)),
    ),
    "failing_Hitachi_HDS721050DLE630.json": (
        # behind a USB JMicron bridge smartctl knows; DISK FAILING, prefail attribute below
        # threshold, error and self-test log entries: 8 + 16 + 64 + 128
        216, False, 25, 65592 * H,
        ata((5, "Reallocated_Sector_Ct", 1975), (197, "Current_Pending_Sector", 8),
            (198, "Offline_Uncorrectable", 0)),
    ),
    "failing_HGST_HUS726060ALA640.json": (
        # passed, yet 1040 reallocated, 878 pending and 1272 uncorrectable sectors
        0, True, 29, 43177 * H,
        ata((5, "Reallocated_Sector_Ct", 1040), (197, "Current_Pending_Sector", 878),
            (198, "Offline_Uncorrectable", 1272)),
    ),
    "reallocated_ST3500418AS.json": (
        0, True, 33, 44668 * H,
        ata((5, "Reallocated_Sector_Ct", 304), (187, "Reported_Uncorrect", 0),
            (188, "Command_Timeout", 0), (197, "Current_Pending_Sector", 0),
            (198, "Offline_Uncorrectable", 0)),
    ),
}  # fmt: skip


# behind an LSI MegaRAID controller (`-d megaraid,N`: smartctl talks SAT through it)
ATA |= {
    "megaraid_sat_WD4000FYYX_slot0.json": (
        # exit 4 (bit 2: a command failed) as captured, yet health, attributes and logs read
        4, True, 36, 37787 * H,
        ata((5, "Reallocated_Sector_Ct", 0), (197, "Current_Pending_Sector", 0),
            (198, "Offline_Uncorrectable", 0)),
    ),
    "megaraid_sat_WD4000FYYX_slot1.json": (
        # the drive a RAID volume hides: 387 reallocated sectors
        4, True, 36, 37788 * H,
        ata((5, "Reallocated_Sector_Ct", 387), (197, "Current_Pending_Sector", 0),
            (198, "Offline_Uncorrectable", 0)),
    ),
    # another host (XCP-ng, smartctl 7.0): SATA SSDs whose only error attribute is 187
    "megaraid_sat_KINGSTON_SA400S37240G_slot0.json": (
        4, True, 26, 23872 * H, ata((187, "Reported_Uncorrect", 0)),
    ),
    "megaraid_sat_KINGSTON_SA400S37240G_slot1.json": (
        4, True, 23, 23892 * H, ata((187, "Reported_Uncorrect", 0)),
    ),
}  # fmt: skip

# file -> (power cycles, the newest self-test passed): ATA attribute 12 as power_cycle_count,
# ata_smart_self_test_log.standard.table[0].status.passed
ATA_MORE = {
    "sata_hdd_WDC_WD140EDFZ-11A0VA0.json": (9, True),
    "sata_hdd_WDC_WD181KRYZ-01AGBB0.json": (12, None),  # -a without a self-test log entry
    "sata_ssd_Samsung_SSD_860_EVO_500GB.json": (13, None),
    "sata_ssd_WDC_WDS400T1R0A-68A4W0.json": (13, None),
    # exit bit 7 (errors in the self-test log), but the newest test completed without error
    "failing_Hitachi_HDS721050DLE630.json": (86, True),
    "failing_HGST_HUS726060ALA640.json": (55, None),  # no -l selftest in its argv
    "reallocated_ST3500418AS.json": (26, None),
    "megaraid_sat_WD4000FYYX_slot0.json": (70, True),
    "megaraid_sat_WD4000FYYX_slot1.json": (68, None),  # newest test "Aborted by host"
    "megaraid_sat_KINGSTON_SA400S37240G_slot0.json": (10, True),
    "megaraid_sat_KINGSTON_SA400S37240G_slot1.json": (10, True),
}


@pytest.mark.parametrize("name", sorted(ATA))
def test_ata_drives(name: str) -> None:
    exit_status, healthy, temp, power_on, attributes = ATA[name]
    cycles, self_test = ATA_MORE[name]
    # smartctl's first message: every MegaRAID capture carries one (severity warning)
    detail = "Warning: This result is based on an Attribute check." if "megaraid" in name else ""
    assert parse(name) == SmartReading(
        "ok",
        detail,
        exit_status=exit_status,
        protocol="ATA",
        healthy=healthy,
        temperature_celsius=temp,
        power_on_seconds=power_on,
        attributes=attributes,
        power_cycles=cycles,
        self_test_passed=self_test,
    )


# file -> (exit status, healthy, temperature, power-on hours, power cycles, NVMe health log:
# critical warning, media errors, error log entries, % used, spare, spare threshold, data
# units read, data units written)
NVME = {
    "nvme_Seagate_FireCuda_530_ZP4000GM30023.json": (
        0, True, 39, 3113, 2, NvmeHealth(0, 0, 4, 0, 100, 5, 52, 0)
    ),
    "nvme_Samsung_SSD_970_EVO_Plus_250GB.json": (
        0, True, 35, 3149, 16, NvmeHealth(0, 0, 22, 0, 100, 10, 2025034, 1969459)
    ),
    "nvme_Force_MP510.json": (
        0, True, 38, 6487, 4, NvmeHealth(0, 0, 8382, 1, 100, 5, 6932144, 16093122)
    ),
    # critical_warning 0x10: volatile memory backup failed; smartctl fails the health check
    # and sets exit bit 3 (DISK FAILING)
    "nvme_critical_warning_SAMSUNG_MZWLL3T2HAJQ-00005.json": (
        8, False, 40, 18376, 6, NvmeHealth(16, 0, 0, 0, 100, 10, 146935678, 147556750)
    ),
    # 7 media errors: smartctl still passes it
    "nvme_media_errors_Samsung_SSD_970_EVO_500GB.json": (
        0, True, 35, 12798, 25, NvmeHealth(0, 7, 62, 3, 99, 10, 17176794, 65602088)
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NVME))
def test_nvme_drives(name: str) -> None:
    exit_status, healthy, temp, hours, cycles, log = NVME[name]
    assert parse(name) == SmartReading(
        "ok",
        exit_status=exit_status,
        protocol="NVMe",
        healthy=healthy,
        temperature_celsius=temp,
        power_on_seconds=hours * H,
        nvme=log,
        power_cycles=cycles,
    )


# file -> (temperature, power-on seconds, grown defects, error counter log, newest self-test)
SCSI = {
    "sas_SEAGATE_ST600MP0036.json": (
        29, 4665 * H + 46 * 60, 0,
        (("read", 170693715, 0), ("write", 0, 0), ("verify", 26102529, 0)), True,
    ),
    "sas_HITACHI_H109060SESUN600G.json": (
        26, 22364 * H + 52 * 60, 0,
        (("read", 40247, 0), ("write", 26762907, 0), ("verify", 87, 0)), None,
    ),
    # SMART "disabled" (smart_support.enabled false: DEXCPT set), yet everything is read
    "scsi_smart_disabled_SEAGATE_ST373453LC.json": (
        34, 91691 * H + 24 * 60, 0,
        (("read", 128691425, 0), ("write", 0, 0), ("verify", 342052, 0)), None,
    ),
    # 260 grown defects, 1 uncorrected read and 535 uncorrected write errors, health "passed"
    "scsi_uncorrected_SEAGATE_ST373453LC.json": (
        33, 102880 * H + 59 * 60, 260, (("read", 5330297, 1), ("write", 1973, 535)), None,
    ),
}  # fmt: skip

# SAS drives behind LSI MegaRAID (`-d megaraid,N`, device.type "megaraid,N", protocol SCSI:
# smartctl talks SCSI through the controller). Two hosts: TOSHIBA AL15SEB24EQY (smartctl 7.4,
# scsi_* identity keys, power_on_time) and TOSHIBA MG08SCA16TEY (smartctl 7.1: vendor/product
# keys, no power_on_time in the output, so none is read).
SCSI |= {
    "megaraid_sas_TOSHIBA_AL15SEB24EQY_slot0.json": (
        32, 12437 * H + 29 * 60, 0, (("read", 4, 0), ("write", 0, 0), ("verify", 0, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_AL15SEB24EQY_slot2.json": (
        31, 12438 * H + 15 * 60, 0, (("read", 483, 0), ("write", 5, 0), ("verify", 30, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_MG08SCA16TEY_slot1.json": (
        31, None, 0, (("read", 374, 0), ("write", 59, 0), ("verify", 160, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_MG08SCA16TEY_slot2.json": (
        30, None, 0, (("read", 39, 0), ("write", 12, 0), ("verify", 10, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_MG08SCA16TEY_slot3.json": (
        29, None, 0, (("read", 14, 0), ("write", 23, 0), ("verify", 2, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_MG08SCA16TEY_slot4.json": (
        29, None, 0, (("read", 23, 0), ("write", 0, 0), ("verify", 0, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_MG08SCA16TEY_slot5.json": (
        32, None, 0, (("read", 41, 0), ("write", 15, 0), ("verify", 3, 0)), None,
    ),
    "megaraid_sas_TOSHIBA_MG08SCA16TEY_slot6.json": (
        28, None, 0, (("read", 0, 0), ("write", 0, 0), ("verify", 0, 0)), None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCSI))
def test_scsi_drives(name: str) -> None:
    temp, power_on, grown, errors, self_test = SCSI[name]
    assert parse(name) == SmartReading(
        "ok",
        exit_status=0,
        protocol="SCSI",
        healthy=True,
        temperature_celsius=temp,
        power_on_seconds=power_on,
        grown_defects=grown,
        scsi_errors=errors,
        self_test_passed=self_test,
    )


@pytest.mark.parametrize("name", sorted(n for n in SCSI if n.startswith("megaraid_sas_")))
def test_sas_behind_megaraid_is_read_as_scsi(name: str) -> None:
    """Cross-check against the capture itself: smartctl ran `--device=megaraid,N /dev/bus/0`
    and named the slot in info_name; the reading is the SCSI one, with no ATA attributes."""
    doc = json.loads((SMART / name).read_bytes())
    slot = name.rsplit("slot", 1)[1].removesuffix(".json")
    assert doc["device"] == {
        "info_name": f"/dev/bus/0 [megaraid_disk_{int(slot):02d}]",
        "name": "/dev/bus/0",
        "protocol": "SCSI",
        "type": f"megaraid,{slot}",
    }
    assert f"--device=megaraid,{slot}" in doc["smartctl"]["argv"]
    r = parse(name)
    assert (r.protocol, r.attributes, r.nvme) == ("SCSI", (), None)
    # power-on time only where smartctl wrote it (the 7.4 captures; the 7.1 ones have none)
    assert (r.power_on_seconds is None) is ("power_on_time" not in doc)


def test_scsi_smart_disabled_is_read_but_ata_disabled_is_not() -> None:
    # On SCSI "disabled" is exception reporting off (SPC-4 DEXCPT); on ATA it is SMART off.
    name = "scsi_smart_disabled_SEAGATE_ST373453LC.json"
    doc = json.loads((SMART / name).read_bytes())
    assert doc["smart_support"] == {"available": True, "enabled": False}
    assert parse(name).status == "ok"
    off = {"smart_support": {"available": True, "enabled": False}}
    r = parse_smartctl(_edit("sata_hdd_WDC_WD181KRYZ-01AGBB0.json", off))
    assert (r.status, r.detail) == ("no_smart", "SMART is disabled on the device")


@pytest.mark.parametrize(
    ("value", "want"),
    [(0, True), (1, None), (2, None), (3, False), (4, False), (7, False), (15, None)],
)
def test_scsi_self_test_result_codes(value: int, want: bool | None) -> None:
    # SPC-4 SELF-TEST RESULTS: 0 completed, 1-2 aborted, 3-7 failed, 15 in progress
    base = "sas_SEAGATE_ST600MP0036.json"
    doc = json.loads((SMART / base).read_bytes())
    doc["scsi_self_test_0"]["result"]["value"] = value
    assert parse_smartctl(json.dumps(doc).encode()).self_test_passed is want


@pytest.mark.parametrize(
    ("value", "want"), [(0, True), (1, None), (5, False), (6, False), (7, False), (15, None)]
)
def test_nvme_self_test_result_codes(value: int, want: bool | None) -> None:
    # NVMe Device Self-test Status: 0 completed, 1-4 aborted, 5-7 failed, 15 unused entry.
    # smartctl >= 7.4 writes nvme_self_test_log; none of the NVMe captures has one.
    log = {"table": [{"self_test_code": {"value": 1}, "self_test_result": {"value": value}}]}
    r = parse_smartctl(_edit("nvme_Force_MP510.json", {"nvme_self_test_log": log}))
    assert r.self_test_passed is want


@pytest.mark.parametrize("name", sorted([*ATA, *NVME, *SCSI]))
def test_exit_status_bits_agree_with_the_capture(name: str) -> None:
    """Cross-check: the bits come from smartctl's own exit_status, and bit 3 ("DISK FAILING")
    is set exactly when the capture's smart_status says failed."""
    doc = json.loads((SMART / name).read_bytes())
    r = parse(name)
    assert r.exit_status == doc["smartctl"]["exit_status"]
    bits = {label: bool(r.exit_status >> bit & 1) for bit, label in EXIT_STATUS_BITS}
    assert bits["disk_failing"] is (doc["smart_status"]["passed"] is False)
    if bits["self_test_log"]:
        # the self-test log has failed entries: smartctl read the log, so it is in the capture
        assert "ata_smart_self_test_log" in doc


def test_scan_megaraid_host() -> None:
    got = parse_scan((SMART / "scan_megaraid.json").read_bytes())
    assert got == (
        RaidMember("/dev/bus/0", "megaraid,0", "megaraid", "0"),
        RaidMember("/dev/bus/0", "megaraid,1", "megaraid", "1"),
    )
    # this VM: a scan that found nothing has no `devices` key
    assert parse_scan((SMART / "local_scan_open.json").read_bytes()) == ()
    assert parse_scan(b"not json") is None
    assert parse_scan(b"{}") is None


def test_scan_keeps_raid_types_only_and_bounds_them() -> None:
    head = {"json_format_version": [1, 0], "smartctl": {"exit_status": 0}}
    devices = [
        {"name": "/dev/sda", "type": "scsi"},  # read by its kernel name, not from the scan
        {"name": "/dev/nvme0", "type": "nvme"},
        {"name": "/dev/bus/0", "type": "sat+megaraid,3"},
        {"name": "/dev/sda", "type": "cciss,2"},
        {"name": "/dev/twa0", "type": "3ware,1"},
        {"name": "/dev/sdb", "type": "aacraid,0,0,4"},
        {"name": "/dev/sg2", "type": "areca,1/2"},
        {"name": "/dev/sdc", "type": "hpt,1/2/3"},
        {"name": "/dev/bus/1", "type": "sssraid,0,7"},
        {"name": "/dev/bus/1", "type": "sssraid,7"},  # wants E,S
        {"name": "/dev/sda", "type": "cciss,1,2"},  # one number
        {"name": "/dev/sda", "type": "hpt,1"},  # L/M at least
        {"name": "/dev/sda", "type": "usbjmicron,0"},  # not a RAID type
        {"name": "/dev/bus/0", "type": "megaraid,3"},
        {"name": "/dev/bus/0", "type": "megaraid,3"},  # twice: once
        {"name": "/dev/../etc/passwd", "type": "megaraid,4"},
        {"name": "/dev/bus/0", "type": "megaraid,-1"},
        {"name": "/dev/bus/0", "type": "megaraid,1 -a"},
        {"name": 7, "type": "megaraid,5"},
        "junk",
    ]
    got = parse_scan(json.dumps({**head, "devices": devices}).encode())
    assert got is not None
    assert [(m.path, m.dtype, m.controller, m.slot) for m in got] == [
        ("/dev/bus/0", "sat+megaraid,3", "megaraid", "3"),
        ("/dev/sda", "cciss,2", "cciss", "2"),
        ("/dev/twa0", "3ware,1", "3ware", "1"),
        ("/dev/sdb", "aacraid,0,0,4", "aacraid", "0,0,4"),
        ("/dev/sg2", "areca,1/2", "areca", "1/2"),
        ("/dev/sdc", "hpt,1/2/3", "hpt", "1/2/3"),
        ("/dev/bus/1", "sssraid,0,7", "sssraid", "0,7"),
        ("/dev/bus/0", "megaraid,3", "megaraid", "3"),
    ]
    many = [{"name": "/dev/bus/0", "type": f"megaraid,{i}"} for i in range(2000)]
    got = parse_scan(json.dumps({**head, "devices": many}).encode())
    assert got is not None and len(got) == MAX_SCANNED


def test_standby_is_not_woken() -> None:
    r = parse("standby_sat_sdc.json")
    assert r == SmartReading(
        "standby", "Device is in STANDBY mode, exit(2)", exit_status=2, protocol="ATA"
    )


@pytest.mark.parametrize(
    ("name", "status", "exit_status", "detail"),
    [
        # this VM: virtio and zram have no device type smartctl 7.3 knows
        ("local_vda.json", "no_smart", 1, "/dev/vda: Unable to detect device type"),
        ("local_zram0.json", "no_smart", 1, "/dev/zram0: Unable to detect device type"),
        ("nosmart_unable_to_detect_nonexistent.json", "no_smart", 1,
         "/dev/nonexistent: Unable to detect device type"),
        # a RAID volume: opened and identified (SCSI), but no health in any form
        ("nosmart_Intel_Raid_1_Volume.json", "no_smart", 4, "no SMART data"),
        # forcing a type on virtio: the open fails, which is an error, not "no SMART"
        ("local_vda_d_sat.json", "error", 2,
         "Smartctl open device: /dev/vda [SAT] failed: Operation not permitted"),
        ("nosmart_open_failed_windows.json", "error", 2,
         "Smartctl open device: /dev/sda failed: \\\\.\\PhysicalDrive0: Open failed, Error=5"),
        # --scan-open that found nothing: no `devices` key at all, and no health either
        ("local_scan_open.json", "error", 0, "no SMART data in the output"),
        # a RAID -d type on a node of no such controller (what a probe of an absent
        # controller or slot meets: exporters/smart/probe.py): the open fails, exit 2
        ("local_probe_cciss_0_vda.json", "error", 2,
         "Smartctl open device: /dev/vda [cciss_disk_00] [SCSI/SAT] failed: Operation not"
         " permitted"),
        ("local_probe_3ware_0_vda.json", "error", 2,
         "Smartctl open device: /dev/vda [3ware_disk_00] failed: Operation not permitted"),
        ("local_probe_aacraid_0_0_0_vda.json", "error", 2,
         "Smartctl open device: /dev/vda [aacraid_disk_00_00_0] [SCSI/SAT] failed: aac entry not"
         " found in /proc/devices"),
        ("local_probe_areca_1_vda.json", "error", 2,
         "Smartctl open device: /dev/vda [areca_disk#01_enc#01] failed: Input/output error"),
        ("local_probe_hpt_1_1_vda.json", "error", 2,
         "Smartctl open device: /dev/vda [hpt_disk_1/1/1] failed: Operation not permitted"),
    ],
)  # fmt: skip
def test_outputs_without_health(name: str, status: str, exit_status: int, detail: str) -> None:
    r = parse(name)
    assert (r.status, r.exit_status, r.detail) == (status, exit_status, detail)
    assert (r.healthy, r.temperature_celsius, r.power_on_seconds) == (None, None, None)
    assert (r.attributes, r.nvme, r.grown_defects) == ((), None, None)


@pytest.mark.parametrize(
    ("name", "slot", "dtype", "protocol", "layer"),
    [
        ("info_cciss_sas_HITACHI_HUC106060CSS600_slot1.json", 1, "cciss", "SCSI", "SCSI"),
        ("info_cciss_sat_Inland_SATA_SSD_slot0.json", 0, "sat", "ATA", "SAT"),
    ],
)  # fmt: skip
def test_real_cciss_identity_reads(
    name: str, slot: int, dtype: str, protocol: str, layer: str
) -> None:
    """Two real `smartctl --info --json --device cciss,N /dev/sda` outputs of an HPE Smart
    Array host (smartctl 7.5): the JSON's device.type carries no slot number (`cciss` for the
    SAS drive, `sat` for the SATA SSD behind it), only info_name does, so a member's label must
    come from the type wattbit ran it with (the probe's), never from the output. An `--info`
    run reads no health: no_smart, with the protocol the controller passed through."""
    doc = json.loads((SMART / name).read_bytes())
    assert doc["smartctl"]["argv"][-3:] == ["--device", f"cciss,{slot}", "/dev/sda"]
    assert doc["device"] == {
        "name": "/dev/sda",
        "info_name": f"/dev/sda [cciss_disk_{slot:02d}] [{layer}]",
        "type": dtype,
        "protocol": protocol,
    }
    r = parse(name)
    assert (r.status, r.detail, r.exit_status, r.protocol) == (
        "no_smart", "no SMART data", 0, protocol
    )  # fmt: skip
    assert (r.healthy, r.temperature_celsius, r.attributes, r.grown_defects) == (
        None,
        None,
        (),
        None,
    )


def test_every_fixture_is_asserted() -> None:
    named = {*ATA, *NVME, *SCSI, "standby_sat_sdc.json", "scan_megaraid.json"}
    named |= {
        "info_cciss_sas_HITACHI_HUC106060CSS600_slot1.json",
        "info_cciss_sat_Inland_SATA_SSD_slot0.json",
    }
    named |= {
        "local_vda.json",
        "local_zram0.json",
        "nosmart_unable_to_detect_nonexistent.json",
        "nosmart_Intel_Raid_1_Volume.json",
        "local_vda_d_sat.json",
        "nosmart_open_failed_windows.json",
        "local_scan_open.json",
        *(f"local_probe_{t}_vda.json" for t in ("cciss_0", "3ware_0", "aacraid_0_0_0")),
        *(f"local_probe_{t}_vda.json" for t in ("areca_1", "hpt_1_1")),
    }
    assert {p.name for p in SMART.glob("*.json")} == named


def _edit(name: str, edit: dict[str, object]) -> bytes:
    doc = json.loads((SMART / name).read_bytes())
    doc.update(edit)
    return json.dumps(doc).encode()


def test_smart_support_says_no_smart() -> None:
    base = "sata_hdd_WDC_WD181KRYZ-01AGBB0.json"
    r = parse_smartctl(_edit(base, {"smart_support": {"available": False}}))
    assert (r.status, r.detail, r.healthy) == ("no_smart", "the device has no SMART", None)
    r = parse_smartctl(_edit(base, {"smart_support": {"available": True, "enabled": False}}))
    assert (r.status, r.detail) == ("no_smart", "SMART is disabled on the device")


def test_unknown_usb_bridge_is_no_smart() -> None:
    # smartctl.cpp: the message of a failed get_smart_device for an unknown USB bridge
    out = {
        "smartctl": {
            "exit_status": 1,
            "messages": [
                {
                    "string": "/dev/sdb: Unknown USB bridge [0x152d:0x0578 (0x1234)]",
                    "severity": "error",
                }
            ],
        }
    }  # fmt: skip
    assert parse_smartctl(json.dumps(out).encode()).status == "no_smart"


def test_process_exit_code_when_the_output_has_none() -> None:
    assert parse_smartctl(b"", exit_code=1) == SmartReading("error", "output is not JSON", 1)
    r = parse_smartctl(b'{"device": {"protocol": "ATA"}}', exit_code=4)
    assert (r.status, r.exit_status) == ("no_smart", 4)


@pytest.mark.parametrize(
    ("attr_id", "raw", "count"),
    [
        (5, {"value": 304, "string": "304"}, 304),  # raw48
        # raw16(raw16), the DEFAULT format of 5: the leading word is the count
        (5, {"value": (7 << 32) | (3 << 16), "string": "0 (7 3)"}, 0),
        (5, {"value": 12, "string": "12 (Average 9)"}, 12),  # raw16(avg16)
        (194, {"value": 163210330144, "string": "32 (Min/Max 24/38)"}, 32),
        # Seagate 188 formatted raw16 (newer drive databases): words high first, the largest
        (188, {"value": 4295032833, "string": "1 1 1"}, 1),
        (188, {"value": 5 << 16, "string": "0 5 0"}, 5),
        # Seagate 188 formatted raw48 (7.3's database lacks most of them): split all the same
        (188, {"value": 4295032833, "string": "4295032833"}, 1),
        (188, {"value": 4295032853, "string": "4295032853"}, 21),
        (188, {"value": 65535, "string": "65535"}, 65535),
        (198, {"value": 5, "string": "0x000000000005"}, 5),  # hex48: raw.value
        (198, {"value": 5}, 5),
        (5, {"string": "7"}, 7),
        (5, {"value": -1, "string": "-1"}, None),
        (5, {"value": 1 << 64, "string": str(1 << 64)}, None),
        (5, {"value": True}, None),
        (5, {"value": 1.5}, None),
        (5, "304", None),
        (5, {"value": 3, "string": "\u0663"}, 3),  # Arabic-Indic 3: not ASCII, raw.value
    ],
)
def test_attribute_count(attr_id: int, raw: object, count: int | None) -> None:
    assert attribute_count(attr_id, raw) == count


def test_oversized_output_is_refused_unread() -> None:
    r = parse_smartctl(b" " * (MAX_OUTPUT + 1))
    assert (r.status, r.detail) == ("error", f"output larger than {MAX_OUTPUT} bytes")


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000,  # nesting past the recursion limit
        b'{"smartctl": {"exit_status": ' + b"9" * 5000 + b"}}",  # past int()'s digit limit
        b"\xff\xfe{}",
        b"null",
        b'"ok"',
        b'{"smartctl": [], "smart_status": {"passed": "yes"}, "temperature": {"current": 1e9}}',
        b'{"ata_smart_attributes": {"table": [null, 5, {"id": 5}, {"id": "5", "raw": {}}]}}',
    ],
)
def test_malformed_outputs(data: bytes) -> None:
    assert parse_smartctl(data).status in ("error", "ok")


BOUNDED = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 130), max_value=1 << 130),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["Device is in STANDBY mode, exit(2)", "1 1 1", "0 (2 3)",
                     "/dev/x: Unable to detect device type"]),
)  # fmt: skip
_KEYS = st.sampled_from(
    [
        "smartctl", "exit_status", "messages", "string", "device", "protocol", "smart_support",
        "available", "enabled", "smart_status", "passed", "ata_smart_attributes", "table", "id",
        "name", "raw", "value", "temperature", "current", "power_on_time", "hours", "minutes",
        "nvme_smart_health_information_log", "critical_warning", "media_errors",
        "num_err_log_entries", "percentage_used", "available_spare",
        "available_spare_threshold", "scsi_grown_defect_list", "scsi_error_counter_log",
        "read", "write", "verify", "total_errors_corrected", "total_uncorrected_errors",
        "power_cycle_count", "data_units_read", "ata_smart_self_test_log", "standard",
        "status", "scsi_self_test_0", "result", "nvme_self_test_log", "self_test_result",
        "devices", "type",
    ]
)  # fmt: skip
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(_KEYS, inner, max_size=6)),
    max_leaves=40,
)


def _dump(doc: object) -> bytes:
    try:
        return json.dumps(doc).encode()  # NaN and Infinity as Python's json writes them
    except ValueError:
        return b"{}"


@BOUNDED
@given(st.one_of(st.binary(max_size=512), _JSON.map(_dump)), st.none() | st.integers(0, 255))
def test_parser_never_raises(data: bytes, exit_code: int | None) -> None:
    r = parse_smartctl(data, exit_code)
    assert r.status in ("ok", "standby", "no_smart", "error")
    if r.status != "ok":
        assert (r.healthy, r.attributes, r.nvme) == (None, (), None)
    for a in r.attributes:
        assert 0 <= a.raw < 1 << 64 and a.id in (5, 187, 188, 197, 198)
        assert len(a.name) <= 64 and a.name.isprintable()
    if r.attributes and any(a.id == 188 for a in r.attributes):
        assert next(a.raw for a in r.attributes if a.id == 188) <= 0xFFFF
    assert len(r.detail) <= 200 and r.detail.isprintable()


@BOUNDED
@given(st.one_of(st.binary(max_size=512), _JSON.map(_dump)))
def test_scan_parser_never_raises(data: bytes) -> None:
    got = parse_scan(data)
    for m in got or ():
        assert m.path.startswith("/dev/") and ".." not in m.path
        assert m.dtype.endswith(f"{m.controller},{m.slot}")


# What a drive's IDENTIFY strings, or a broken smartctl, may put in its JSON (issue 34): the
# JSON text of each, bytes that are not UTF-8 raw. smartctl copies a drive's model, serial and
# firmware as they come.
HOSTILE_STRINGS = {
    "esc-newline": b'"\\u001b[31m\\nFORGED smart line"',
    "nul": b'"\\u0000\\u0000x"',
    "surrogate": b'"\\ud800x"',
    "not-utf8": b'"caf\xe9 \xff\xfe\xc3("',
    "c1-bidi": b'"\\u009b31m\\u202e"',
    # 16 KB in each of up to ~150 strings (every attribute's name and flags string): within
    # MAX_OUTPUT (4 MiB), past which the whole output is refused, cleanly and unread (a
    # megabyte in each: test_oversized_output_is_refused_unread's bound)
    "16kB": b'"' + b"M" * 16384 + b'"',
}
STRING_KEYS = ("model_name", "model_family", "serial_number", "firmware_version", "name", "string")
_MARK = "WB-HOSTILE-STRING"


def _hostile(doc: object) -> object:
    """The document with every STRING_KEYS string (at any depth) replaced by the marker."""
    if isinstance(doc, dict):
        return {
            k: _MARK if k in STRING_KEYS and isinstance(v, str) else _hostile(v)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_hostile(v) for v in doc]
    return doc


@pytest.mark.parametrize("kind", list(HOSTILE_STRINGS))
@pytest.mark.parametrize("name", sorted({**ATA, **NVME}))
def test_hostile_strings_cost_their_characters_never_the_reading(name: str, kind: str) -> None:
    """Every model, family, serial, firmware, device and attribute name and message of a real
    capture made hostile: the same reading (health, temperature, counters) as the capture's,
    every string kept printable and bounded (before: bytes that are not UTF-8 lost the disk's
    whole reading, "output is not JSON")."""
    data = (FIXTURES / "smart" / name).read_bytes()
    want = parse_smartctl(data)
    text = json.dumps(_hostile(json.loads(data))).encode()
    got = parse_smartctl(text.replace(f'"{_MARK}"'.encode(), HOSTILE_STRINGS[kind]))
    assert got.status == want.status == "ok", got.detail[:80]
    assert (got.healthy, got.temperature_celsius, got.power_on_seconds, got.nvme) == (
        want.healthy,
        want.temperature_celsius,
        want.power_on_seconds,
        want.nvme,
    )
    assert [(a.id, a.raw) for a in got.attributes] == [(a.id, a.raw) for a in want.attributes]
    for text_out in (got.detail, *(a.name for a in got.attributes)):
        assert text_out.isprintable() and len(text_out) <= 256, text_out[:80]
