"""Disks behind RAID controllers that smartctl's scan does not list: which controllers a /sys
tree shows (exporters/hostfs/scsihosts.py), which slots are tried behind each
(exporters/smart/probe.py), and the exporter probing them with a stand-in runner.

The /sys trees are built by tests/support/scsitree.py as the kernel lays them out. The
stand-in runner answers a present slot with a real smartctl capture of a drive
(tests/fixtures/smart, provenance in its README; captured on direct-attached ports, as no
public JSON capture of a drive behind these controllers was found: smartctl prints the same
JSON for a disk it reaches through cciss/3ware/areca pass-through, with its own info_name)
and an empty one with this VM's real smartctl 7.3 answer to the same -d type
(``local_probe_*_vda.json``: the open fails, exit status 2).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from exporters.hostfs.scsihosts import cciss_controllers, scsi_hosts
from exporters.smart.exporter import SmartExporter
from exporters.smart.parse import parse_smartctl, raid_type
from exporters.smart.probe import MAX_PROBES, plan
from exporters.smart.runner import RunOutcome
from tests.support.env import FIXTURES
from tests.support.scsitree import add_device, add_host, hpe_host, seeds_host

SMART = FIXTURES / "smart"
ROOT = Path(__file__).resolve().parents[2]


# --- hostfs: what /sys says ------------------------------------------------------------------


def test_scsi_hosts_name_their_driver_and_nodes(tmp_path: Path) -> None:
    hosts = {h.number: h for h in scsi_hosts(hpe_host(tmp_path))}
    assert {n: h.driver for n, h in hosts.items()} == {0: "ahci", 2: "hpsa"}
    ctrl, volume = hosts[2].devices
    assert (ctrl.hctl, ctrl.peripheral_type, ctrl.block, ctrl.generic) == (
        (2, 0, 0, 0),
        12,
        "",
        "sg1",
    )
    assert (volume.hctl, volume.peripheral_type, volume.block) == ((2, 1, 0, 0), 0, "sdb")
    assert cciss_controllers(hpe_host(tmp_path / "again")) == ["cciss/c0d0"]


def test_a_tree_without_scsi_hosts_has_none(tmp_path: Path) -> None:
    assert scsi_hosts(tmp_path) == [] and cciss_controllers(tmp_path) == []


def test_a_link_out_of_the_tree_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_host(root, 0, "hpsa")
    (root / "class" / "scsi_device").mkdir(parents=True)
    (root / "class" / "scsi_device" / "0:0:0:0").symlink_to("/sys/class/scsi_device/0:0:0:0")
    assert [h.devices for h in scsi_hosts(root)] == [()]


# --- the plan: which node and which -d types ------------------------------------------------


def test_plan_for_hpe_smart_array(tmp_path: Path) -> None:
    root = hpe_host(tmp_path)
    got = plan(scsi_hosts(root), cciss_controllers(root))
    assert [(c.driver, c.path, c.contiguous) for c in got] == [
        ("hpsa", "/dev/cciss/c0d0", True),
        ("hpsa", "/dev/sdb", True),  # a logical drive of the controller, not the AHCI disk
    ]
    assert got[1].types[:2] == ("cciss,0", "cciss,1") and got[1].types[-1] == "cciss,127"


def test_plan_for_hpsa_without_a_logical_drive_uses_the_controllers_sg(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_host(root, 4, "hpsa")
    add_device(root, "4:0:0:0", 12, "", "sg9")
    assert [c.path for c in plan(scsi_hosts(root), [])] == ["/dev/sg9"]


def test_plan_for_the_seeds_controllers(tmp_path: Path) -> None:
    got = {c.path: c for c in plan(scsi_hosts(seeds_host(tmp_path)), [])}
    assert list(got) == ["/dev/twa0", "/dev/twa1", "/dev/sdc", "/dev/sdd", "/dev/sg6", "/dev/twl0"]
    assert got["/dev/twa1"].types == tuple(f"3ware,{n}" for n in range(128))
    assert not got["/dev/twa0"].contiguous  # ports have gaps
    assert got["/dev/sdc"].types[:2] == ("hpt,1/1", "hpt,1/2") and len(got["/dev/sdc"].types) == 32
    assert got["/dev/sdd"].types[:2] == ("aacraid,5,0,0", "aacraid,5,0,1")  # H is the host
    assert got["/dev/sg6"].types[:2] == ("areca,1/1", "areca,2/1")  # the processor device
    assert got["/dev/sg6"].types[-1] == "areca,32/8"
    for c in got.values():
        assert 0 < len(c.types) <= MAX_PROBES
        assert all(raid_type(t) is not None for t in c.types)  # what the helper accepts too
        assert "megaraid" not in c.driver


# --- the exporter probing -----------------------------------------------------------------------

SCAN_NONE = RunOutcome("done", (SMART / "local_scan_open.json").read_bytes(), 0)


def done(name: str, exit_code: int = 0) -> RunOutcome:
    return RunOutcome("done", (SMART / name).read_bytes(), exit_code, 0.1)


class SlotRunner:
    """Answers reads by (path, type): present slots with a real drive capture, the rest as
    smartctl 7.3 answered here for an open that fails (exit 2)."""

    def __init__(self, present: dict[str, RunOutcome], empty: RunOutcome) -> None:
        self.present = present
        self.empty = empty
        self.calls: list[str] = []

    def __call__(self, device: str, timeout: float, dtype: str = "auto") -> RunOutcome:
        key = device if dtype == "auto" else f"{device} {dtype}"
        self.calls.append(key)
        if dtype == "auto":
            return done("local_vda.json", 1)
        return self.present.get(key, self.empty)

    def scan(self, timeout: float) -> RunOutcome:
        return SCAN_NONE

    def close(self) -> None:
        pass


def run(e: SmartExporter) -> None:
    e.run_cycle()
    assert e.wait_idle(60.0)


def members(e: SmartExporter) -> dict[str, tuple[str, str, str] | None]:
    return {name: st.raid for name, st in e._states.items() if st.raid is not None}


def test_empty_slot_answers_are_not_disks() -> None:
    for f in sorted(SMART.glob("local_probe_*_vda.json")):
        assert parse_smartctl(f.read_bytes(), 2).status == "error", f.name


def test_smart_array_slots_are_probed_until_the_first_empty_one(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_host(root, 2, "hpsa")
    add_device(root, "2:1:0:0", 0, "sdb", "sg2", "8:16")
    runner = SlotRunner(
        {
            "/dev/sdb cciss,0": done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json"),
            "/dev/sdb cciss,1": done("sas_SEAGATE_ST600MP0036.json"),
        },
        done("local_probe_cciss_0_vda.json", 2),
    )
    e = SmartExporter(sys_root=root, runner=runner, autostart=False)
    try:
        run(e)
        probes = [c for c in runner.calls if "cciss" in c]
        # 0 and 1 probed in turn, 2 is the end of the controller's list; then 0 and 1 read
        assert probes[:3] == ["/dev/sdb cciss,0", "/dev/sdb cciss,1", "/dev/sdb cciss,2"]
        assert sorted(probes[3:]) == ["/dev/sdb cciss,0", "/dev/sdb cciss,1"]
        assert members(e) == {
            "sdb:cciss,0": ("cciss", "/dev/sdb", "0"),
            "sdb:cciss,1": ("cciss", "/dev/sdb", "1"),
        }
        assert e._states["sdb:cciss,1"].reading.grown_defects is not None  # type: ignore[union-attr]
    finally:
        e.close()


def test_3ware_ports_with_gaps_are_all_tried_and_reprobed_later(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_host(root, 1, "3w-9xxx")
    add_device(root, "1:0:0:0", 0, "sda")
    present = {
        "/dev/twa0 3ware,0": done("sata_hdd_WDC_WD181KRYZ-01AGBB0.json"),
        "/dev/twa0 3ware,5": done("reallocated_ST3500418AS.json", 0),
    }
    runner = SlotRunner(present, done("local_probe_3ware_0_vda.json", 2))
    e = SmartExporter(sys_root=root, runner=runner, autostart=False, probe_every=2)
    try:
        run(e)
        assert len([c for c in runner.calls if c.startswith("/dev/twa0")]) == 128 + 2
        assert set(members(e)) == {"twa0:3ware,0", "twa0:3ware,5"}
        del present["/dev/twa0 3ware,5"]  # pulled: still a member until the next round
        runner.calls.clear()
        run(e)
        assert len([c for c in runner.calls if c.startswith("/dev/twa0")]) == 2  # reads only
        assert e._states["twa0:3ware,5"].reason == "error"
        run(e)  # the probe round: port 5 answers no more and leaves
        assert set(members(e)) == {"twa0:3ware,0"}
    finally:
        e.close()


def test_a_probe_that_times_out_ends_that_controllers_round_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = seeds_host(tmp_path)
    present = {"/dev/sg6 areca,3/1": done("sata_ssd_Samsung_SSD_860_EVO_500GB.json")}
    runner = SlotRunner(present, done("local_probe_areca_1_vda.json", 2))
    hang = RunOutcome("timeout", detail="no answer in 30s")
    runner.present["/dev/twa0 3ware,2"] = hang
    e = SmartExporter(sys_root=root, runner=runner, autostart=False)
    try:
        run(e)
        twa0 = [c for c in runner.calls if c.startswith("/dev/twa0")]
        assert twa0 == ["/dev/twa0 3ware,0", "/dev/twa0 3ware,1", "/dev/twa0 3ware,2"]
        assert set(members(e)) == {"sg6:areca,3/1"}
        assert "probing /dev/twa0 (3w-9xxx) timed out at -d 3ware,2" in caplog.text
        assert not any(c.startswith("/dev/sdf ") for c in runner.calls)  # MegaRAID: the scan's
    finally:
        e.close()


def test_devices_narrows_probed_members_by_label(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    add_host(root, 2, "hpsa")
    add_device(root, "2:1:0:0", 0, "sdb", "sg2", "8:16")
    runner = SlotRunner(
        {"/dev/sdb cciss,0": done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json")},
        done("local_probe_cciss_0_vda.json", 2),
    )
    e = SmartExporter(sys_root=root, runner=runner, autostart=False, devices="^sdz")
    try:
        run(e)
        assert members(e) == {}
    finally:
        e.close()


def test_raid_false_never_probes(tmp_path: Path) -> None:
    runner = SlotRunner({}, done("local_probe_cciss_0_vda.json", 2))
    e = SmartExporter(sys_root=hpe_host(tmp_path), runner=runner, autostart=False, raid=False)
    try:
        run(e)
        assert not any(" " in c for c in runner.calls)
    finally:
        e.close()


# --- the root helper: a probe only on a node of a controller of that driver -------------------


def _helper() -> ModuleType:
    path = ROOT / "packaging" / "libexec" / "smartctl-helper"
    loader = importlib.machinery.SourceFileLoader("smartctl_helper_probe", str(path))
    spec = importlib.util.spec_from_loader("smartctl_helper_probe", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


H = _helper()


@pytest.mark.parametrize(
    ("device", "dtype", "ok"),
    [
        ("/dev/sda", "cciss,3", False),  # sda is on the AHCI host
        ("/dev/sdb", "cciss,3", True),  # sdb is the Smart Array's logical drive
        ("/dev/sg1", "cciss,0", True),  # the controller's own generic node
        ("/dev/sg0", "cciss,0", False),
        ("/dev/cciss/c0d0", "cciss,1", True),
        ("/dev/cciss/c1d0", "cciss,1", False),  # no such controller
        ("/dev/sdb", "3ware,0", False),
        ("/dev/sdb", "megaraid,0", False),  # never probed: only the scan names megaraid
        ("/dev/sdb", "auto", False),
        ("/dev/sdb/../sda", "cciss,0", False),
    ],
)
def test_helper_probe_ok_on_an_hpe_host(tmp_path: Path, device: str, dtype: str, ok: bool) -> None:
    assert H.probe_ok(device, dtype, hpe_host(tmp_path)) is ok


@pytest.mark.parametrize(
    ("device", "dtype", "ok"),
    [
        ("/dev/twa0", "3ware,7", True),
        ("/dev/twa1", "3ware,7", True),
        ("/dev/twa2", "3ware,7", False),  # two 3w-9xxx controllers: twa0 and twa1
        ("/dev/twl0", "3ware,0", True),
        ("/dev/twe0", "3ware,0", False),  # no 3w-xxxx controller
        ("/dev/twa0", "cciss,0", False),
        ("/dev/sdc", "hpt,1/4", True),  # rr2740
        ("/dev/sdd", "hpt,1/4", False),
        ("/dev/sdd", "aacraid,5,0,3", True),
        ("/dev/sdd", "aacraid,4,0,3", False),  # H must be the node's host
        ("/dev/sg4", "aacraid,5,0,3", True),
        ("/dev/sg6", "areca,3/1", True),
        ("/dev/sg5", "areca,3", True),
        ("/dev/sdf", "areca,3", False),  # a MegaRAID disk
        ("/dev/sdf", "sat+cciss,1", False),
    ],
)
def test_helper_probe_ok_on_the_seeds_host(
    tmp_path: Path, device: str, dtype: str, ok: bool
) -> None:
    assert H.probe_ok(device, dtype, seeds_host(tmp_path)) is ok


def test_helper_reads_a_probe_without_scanning(tmp_path: Path) -> None:
    """A stand-in smartctl: the probe of a Smart Array slot is run with the agent's argv and
    -d cciss,N on the controller's node; the same slot on the AHCI disk is refused after a
    scan that does not list it."""
    calls = tmp_path / "calls"
    fake = tmp_path / "smartctl"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in\n'
        f"--scan-open*) cat {SMART / 'local_scan_open.json'} ;;\n"
        f'*"-d cciss,1 /dev/sdb") cat {SMART / "sas_SEAGATE_ST600MP0036.json"} ;;\n'
        "*) exit 1 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    root = hpe_host(tmp_path)
    got = H.answer(("read", "/dev/sdb", "cciss,1"), smartctl=str(fake), sys_root=root)
    assert got["exit_code"] == 0 and "ST600MP0036" in str(got["output"])
    with pytest.raises(H.Refused, match="not a device smartctl's scan"):
        H.answer(("read", "/dev/sda", "cciss,1"), smartctl=str(fake), sys_root=root)
    runs = calls.read_text().splitlines()
    assert runs == [" ".join([*H.READ_ARGS, "-d", "cciss,1", "/dev/sdb"]), "--scan-open --json=c"]
