"""The smart exporter against real processes: Debian's smartctl on this machine's disks through
a running `wattbit agent`, and stand-in smartctl scripts that hang, flood or sleep, run by the
real runner (kill at the timeout, bounded output, process groups, the argv)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporters.smart.exporter import SmartExporter, list_disks
from exporters.smart.runner import SMARTCTL_ARGS, SmartctlRunner, find_smartctl
from tests.support.env import FIXTURES, require
from tests.support.realparts import Agent, is_root, loop_disks, wait_for
from tests.support.scsitree import add_device, add_host, seeds_host

# needs root: loop devices and smartctl on the machine's disks; serial (tests/conftest.py)
pytestmark = pytest.mark.root

SMART = FIXTURES / "smart"
WAIT = 60.0
AVAILABLE = "wattbit_disk_smart_available"
SMARTCTL = "/usr/sbin/smartctl"


def _alive(pid: int) -> bool:
    """True while pid runs (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _smart(sample: str) -> bool:
    """True for a sample of the smart exporter's families."""
    return sample.startswith(("wattbit_disk_smart_", "wattbit_nvme_", "wattbit_scsi_")) or (
        sample in ("wattbit_disk_temperature_celsius", "wattbit_disk_power_on_seconds")
    )


def fake_smartctl(tmp: Path, body: str) -> Path:
    """An executable `smartctl` shell script in tmp/bin that records its pid and argv, then
    runs body (the runner passes no environment of ours, so paths are written in)."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "smartctl"
    calls = tmp / "calls"
    script.write_text(f'#!/bin/sh\necho "$$ $*" >> {calls}\n{body}\n')
    script.chmod(0o755)
    return script


def calls(tmp: Path) -> list[tuple[int, list[str]]]:
    """(pid, argv) of every run of the fake so far."""
    path = tmp / "calls"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, *argv = line.split()
        out.append((int(pid), argv))
    return out


def hang(tmp: Path) -> str:
    """Script lines for a run that hangs with a child in its process group holding stdout
    open, as a smartctl stuck in the kernel would; the child's pid goes to sleep-DEV.pid.
    The exporter's `--scan-open` is answered as this VM answers it (no devices)."""
    return (
        f'[ "$1" = --scan-open ] && exec cat {SMART / "local_scan_open.json"}\n'
        'dev=$(basename "$(eval echo \\${$#})")\n'
        "sleep 600 &\n"
        f"echo $! > {tmp}/sleep-$dev.pid\n"
        "wait"
    )


def _need_smartctl() -> None:
    require(os.access(SMARTCTL, os.X_OK), "smartctl (Debian package smartmontools) missing")


# --- the real smartctl through the real agent ---------------------------------------------


@pytest.fixture
def agent_with_loop_disk(tmp_path: Path) -> Iterator[tuple[Agent, str]]:
    """The agent over this machine's disks and the test's own loop disk, and its exclude.

    Other loop devices are excluded: another test's come and go while this one waits, and
    would be (rightly) missing from one side of the comparison or the other.
    """
    _need_smartctl()
    require(is_root(), "needs root: smartctl opens the disks, loop devices")
    with loop_disks(1, size_mb=16) as (disk,):
        exclude = rf"^(ram|zram|fd|sr)\d+$|^loop(?!{disk.name.removeprefix('loop')}$)"
        agent = Agent(f"blockio:\n  backend: diskstats\n  exclude: '{exclude}'\n", tmp_path)
        try:
            agent.wait_ready()
            yield agent, exclude
        finally:
            agent.stop()


def test_real_smartctl_on_this_machines_disks(agent_with_loop_disk: tuple[Agent, str]) -> None:
    agent, exclude = agent_with_loop_disk
    expected = {d.name: d for d in list_disks(Path("/sys"), exclude)}

    def every_disk_reported(s: dict) -> bool:
        return {dict(k[1])["device"] for k in s if k[0] == AVAILABLE} >= set(expected)

    s = agent.scrape_until("a SMART result for every disk", every_disk_reported, timeout=WAIT)
    # the same devices as blockio's wattbit_disk_info whole disks: the join always works
    info = {
        dict(k[1])["device"]
        for k in s
        if k[0] == "wattbit_disk_info" and dict(k[1])["parent"] == ""
    }
    smart = {dict(k[1])["device"] for k in s if k[0] == AVAILABLE}
    # Other jobs on this machine attach and detach loop devices of their own at any time:
    # the disks present before and after the scrape are the ones both sets must hold.
    after = {d.name for d in list_disks(Path("/sys"), r"^(ram|zram|fd|sr)\d+$")}
    stable = set(expected) & after
    assert stable <= smart and stable <= info
    assert any(expected[n].virtual for n in stable), "the loop disk is missing"
    for name, disk in expected.items():
        if name not in stable:
            continue
        series = {k: v for k, v in s.items() if _smart(k[0]) and dict(k[1]).get("device") == name}
        if disk.virtual:
            assert series == {(AVAILABLE, (("device", name), ("reason", "no_smart"))): 0.0}
            continue
        # What smartctl itself says of the disk, read here independently.
        r = subprocess.run(
            [SMARTCTL, "--json", "--nocheck=standby", "-i", "-H", "-A", f"/dev/{name}"],
            capture_output=True,
            timeout=120,
        )
        doc = json.loads(r.stdout)
        messages = [m["string"] for m in doc["smartctl"].get("messages", [])]
        if any("Unable to detect device type" in m for m in messages):  # virtio: this VM
            assert series == {(AVAILABLE, (("device", name), ("reason", "no_smart"))): 0.0}
        elif "passed" in doc.get("smart_status", {}):
            assert series[(AVAILABLE, (("device", name), ("reason", "")))] == 1.0
            healthy = series[("wattbit_disk_smart_healthy", (("device", name),))]
            assert healthy == float(doc["smart_status"]["passed"])
    # "no SMART" is said in the log once per device (and not again at every read)
    log = agent.log.read_text()
    for name in stable:
        no_smart = s.get((AVAILABLE, (("device", name), ("reason", "no_smart")))) == 0.0
        assert log.count(f"smart: {name} has no SMART") == int(no_smart), log


# --- stand-in smartctl scripts through the real agent --------------------------------------


def test_a_hanging_smartctl_never_blocks_a_scrape_and_dies_with_the_agent(
    tmp_path: Path,
) -> None:
    require(is_root(), "needs root: the agent reads /sys like in production")
    fake = fake_smartctl(tmp_path, hang(tmp_path))
    agent = Agent(
        "blockio:\n  backend: diskstats\nsmart:\n  timeout: 5m\n  interval: 5m\n",
        tmp_path,
        env={"PATH": f"{fake.parent}:{os.environ['PATH']}"},
    )
    try:
        agent.wait_ready()
        reads = lambda: [c for c in calls(tmp_path) if c[1][0] != "--scan-open"] or None  # noqa: E731
        runs = wait_for(reads, WAIT, "the stand-in smartctl to start")
        pid, argv = runs[0]
        assert argv[:-1] == list(SMARTCTL_ARGS), "not the fixed argv"
        assert argv[-1].startswith("/dev/")
        device = argv[-1].removeprefix("/dev/")
        s = agent.scrape()  # answers while smartctl hangs: the scrape never waits for a drive
        assert _alive(pid), "the hanging smartctl was gone before the scrape returned"
        # nothing read yet, nothing made up
        assert not any(k[0] == AVAILABLE and ("device", device) in k[1] for k in s)
        assert s[("wattbit_exporter_up", (("exporter", "smart"),))] == 1.0
    finally:
        agent.stop()
    # The agent kills what it started when it stops: the script and its child alike.
    children = [int(p.read_text()) for p in tmp_path.glob("sleep-*.pid")]
    for p in [pid, *children]:
        wait_for(lambda p=p: not _alive(p), WAIT, f"pid {p} to be killed")


def test_a_hanging_smartctl_is_killed_at_the_timeout(tmp_path: Path) -> None:
    require(is_root(), "needs root: the agent reads /sys like in production")
    fake = fake_smartctl(tmp_path, hang(tmp_path))
    agent = Agent(
        "blockio:\n  backend: diskstats\nsmart:\n  timeout: 2s\n",
        tmp_path,
        env={"PATH": f"{fake.parent}:{os.environ['PATH']}"},
    )
    try:
        agent.wait_ready()
        s = agent.scrape_until(
            "a timeout reported",
            lambda s: any(k[0] == AVAILABLE and ("reason", "timeout") in k[1] for k in s),
            timeout=WAIT,
        )
        device = next(
            dict(k[1])["device"] for k in s if k[0] == AVAILABLE and ("reason", "timeout") in k[1]
        )
        assert s[("wattbit_disk_smart_reads_total", (("device", device), ("result", "timeout")))]
        assert ("wattbit_disk_smart_healthy", (("device", device),)) not in s
        # The runner reaped the script itself; its child dies of the same group kill, a
        # moment later (nobody waits for it).
        for pid, _ in calls(tmp_path):
            assert not _alive(pid), "the timed-out smartctl still runs"
        for p in tmp_path.glob("sleep-*.pid"):
            child = int(p.read_text())
            wait_for(lambda c=child: not _alive(c), WAIT, f"the script's child {child} to die")
    finally:
        agent.stop()
    assert agent.log.read_text().count(f"smart: {device}: timeout") == 1


# --- the real runner and the exporter, on a captured two-disk /sys --------------------------


@pytest.fixture
def two_disks(tmp_path: Path) -> Path:
    """A captured /sys with two SATA disks, sda and sdb (tests/fixtures/sys/sata_ahci.tar)."""
    with tarfile.open(FIXTURES / "sys" / "sata_ahci.tar") as tar:
        tar.extractall(tmp_path)  # our own fixture archive
    return tmp_path / "sata_ahci"


def test_one_drive_hangs_and_is_killed_while_the_other_reads(
    tmp_path: Path, two_disks: Path
) -> None:
    body = (
        'case "$(eval echo \\${$#})" in\n'
        f"/dev/sda) {hang(tmp_path)} ;;\n"
        f"*) cat {SMART / 'sata_hdd_WDC_WD140EDFZ-11A0VA0.json'} ;;\n"
        "esac"
    )
    fake = fake_smartctl(tmp_path, body)
    e = SmartExporter(
        timeout=3.0,
        concurrency=2,
        sys_root=two_disks,
        runner=SmartctlRunner(str(fake)),
        autostart=False,
    )
    try:
        e.run_cycle()
        assert e.wait_idle(WAIT)
        states = e.states()
        assert states["sdb"].reason == "" and states["sdb"].reading is not None
        assert states["sdb"].reading.temperature_celsius == 32
        assert states["sda"].reason == "timeout" and states["sda"].reading is None
        assert states["sda"].duration is not None and states["sda"].duration >= 3.0
        sleep_pid = int((tmp_path / "sleep-sda.pid").read_text())
        sda_pid = next(pid for pid, argv in calls(tmp_path) if argv[-1] == "/dev/sda")
        assert not _alive(sda_pid)  # reaped by the runner
        wait_for(lambda: not _alive(sleep_pid), WAIT, "the child of the killed group to die")
    finally:
        e.close()


def test_output_is_bounded(tmp_path: Path) -> None:
    fake = fake_smartctl(tmp_path, "exec head -c 5000000 /dev/zero")
    out = SmartctlRunner(str(fake))("/dev/sdz", timeout=60)
    assert out.result == "error" and out.detail == "output larger than 4194304 bytes"
    (pid, _), = calls(tmp_path)  # fmt: skip
    assert not _alive(pid)


def test_standby_and_garbage_through_the_runner(tmp_path: Path) -> None:
    body = f"cat {SMART / 'standby_sat_sdc.json'}\nexit 2"
    out = SmartctlRunner(str(fake_smartctl(tmp_path, body)))("/dev/sdc", timeout=60)
    assert (out.result, out.exit_code) == ("done", 2)
    assert json.loads(out.output)["smartctl"]["exit_status"] == 2

    other = tmp_path / "other"
    other.mkdir()
    out = SmartctlRunner(str(fake_smartctl(other, "echo '{\"smartctl\": ['\nexit 0")))(
        "/dev/sdc", timeout=60
    )
    assert (out.result, out.exit_code, out.output) == ("done", 0, b'{"smartctl": [\n')


def test_smartctl_missing(tmp_path: Path) -> None:
    out = SmartctlRunner(str(tmp_path / "nope"))("/dev/sda", timeout=60)
    assert out.result == "no_smartctl"


def test_find_smartctl_ignores_relative_path_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_smartctl(tmp_path, "exit 0")
    monkeypatch.chdir(tmp_path)  # "bin" now names the directory of the stand-in
    assert find_smartctl(f"bin:{fake.parent}") == str(fake)
    found = find_smartctl("bin:.:")
    assert found != str(fake) and (found is None or os.path.isabs(found))


# --- disks behind a RAID controller: a stand-in smartctl answering as a MegaRAID host -------


def megaraid_host(
    tmp: Path,
    scan: Path,
    hang_slot: int | None = None,
    drive: str = "WD4000FYYX",
    slots: dict[int, tuple[str, int]] | None = None,
) -> Path:
    """A stand-in smartctl at a fixed path answering as scrutiny's PERC H710 host did: its
    scan (scan_megaraid.json, or the file scan), `-d megaraid,N /dev/bus/0` with the real
    captures of slots 0 and 1 of drive (exit 4 as captured), or slots' (file, exit status)
    per slot; hang_slot hangs instead."""
    if slots is None:
        slots = {n: (f"megaraid_sat_{drive}_slot{n}.json", 4) for n in (0, 1)}
    answer = {n: f"cat {SMART / f}; exit {code}" for n, (f, code) in slots.items()}
    if hang_slot is not None:
        # as hang(): a child in the process group holds stdout open
        answer[hang_slot] = f"sleep 600 & echo $! > {tmp}/sleep-{hang_slot}.pid; wait"
    body = (
        'case "$*" in\n'
        f"--scan-open*) cat {scan} ;;\n"
        + "".join(f'*"-d megaraid,{n} /dev/bus/0") {a} ;;\n' for n, a in sorted(answer.items()))
        + f"*) cat {SMART / 'local_vda.json'}; exit 1 ;;\n"
        "esac"
    )
    return fake_smartctl(tmp, body)


def test_raid_members_through_a_stand_in_megaraid_host(tmp_path: Path, two_disks: Path) -> None:
    scan = tmp_path / "scan.json"
    scan.write_bytes((SMART / "scan_megaraid.json").read_bytes())
    fake = megaraid_host(tmp_path, scan)
    e = SmartExporter(
        timeout=30.0, sys_root=two_disks, runner=SmartctlRunner(str(fake)), autostart=False
    )
    try:
        e.run_cycle()
        assert e.wait_idle(WAIT)
        states = e.states()
        assert sorted(states) == ["bus/0:megaraid,0", "bus/0:megaraid,1", "sda", "sdb"]
        m0, m1 = states["bus/0:megaraid,0"], states["bus/0:megaraid,1"]
        assert m0.raid == ("megaraid", "/dev/bus/0", "0")
        assert m1.raid == ("megaraid", "/dev/bus/0", "1")
        assert m1.reading is not None and m1.reason == ""
        assert {a.id: a.raw for a in m1.reading.attributes} == {5: 387, 197: 0, 198: 0}
        assert m1.reading.exit_status == 4  # bit 2, as the capture says
        # each member was run with its own type on the controller's path, nothing else
        argvs = [argv for _, argv in calls(tmp_path)]
        assert ["--scan-open", "--json=c"] in argvs
        for n in (0, 1):
            assert [*SMARTCTL_ARGS, "-d", f"megaraid,{n}", "/dev/bus/0"] in argvs
        # slot 1 is pulled: the next scan no longer lists it, and its series leave
        doc = json.loads(scan.read_bytes())
        doc["devices"] = doc["devices"][:1]
        scan.write_text(json.dumps(doc))
        e.run_cycle()
        assert e.wait_idle(WAIT)
        assert sorted(e.states()) == ["bus/0:megaraid,0", "sda", "sdb"]
    finally:
        e.close()


def test_raid_member_ssds_of_a_second_megaraid_host(tmp_path: Path, two_disks: Path) -> None:
    """XCP-ng's captures (KINGSTON SA400S37240G SSDs, smartctl 7.0, `-d megaraid,N
    /dev/bus/0`, exit 4) through the same path: each member's own reading, its attribute 187
    (the SSD has no 5, 197 or 198), temperature and power-on time as the captures hold them."""
    fake = megaraid_host(tmp_path, SMART / "scan_megaraid.json", drive="KINGSTON_SA400S37240G")
    got = {}
    for n, state in _read_slots_0_and_1(fake, two_disks).items():
        r = state.reading
        assert r is not None
        got[n] = (r.exit_status, r.healthy, r.temperature_celsius, r.power_on_seconds)
        assert {a.id: a.raw for a in r.attributes} == {187: 0}
    assert got == {0: (4, True, 26, 23872 * 3600), 1: (4, True, 23, 23892 * 3600)}


def _read_slots_0_and_1(fake: Path, two_disks: Path) -> dict[int, Any]:
    """One cycle of the exporter over the stand-in host: the states of megaraid slots 0 and 1,
    each with a reading and no failure reason."""
    e = SmartExporter(
        timeout=30.0, sys_root=two_disks, runner=SmartctlRunner(str(fake)), autostart=False
    )
    try:
        e.run_cycle()
        assert e.wait_idle(WAIT)
        states = {n: e.states()[f"bus/0:megaraid,{n}"] for n in (0, 1)}
    finally:
        e.close()
    for state in states.values():
        assert state.reading is not None and state.reason == ""
    return states


def test_sas_raid_members_through_a_stand_in_megaraid_host(tmp_path: Path, two_disks: Path) -> None:
    """SAS drives behind MegaRAID (smartctl_exporter PR 339's captures, `-d megaraid,N`,
    protocol SCSI, exit 0): each slot answered by the capture taken from that same slot
    number (TOSHIBA AL15SEB24EQY from slot 0 on a smartctl 7.4 host, MG08SCA16TEY from slot
    1 on a smartctl 7.1 host) behind scrutiny's scan of slots 0 and 1. Each member is read as
    SCSI: grown defects, the error counter log, temperature, and power-on time where the
    capture has it."""
    slots = {
        0: ("megaraid_sas_TOSHIBA_AL15SEB24EQY_slot0.json", 0),
        1: ("megaraid_sas_TOSHIBA_MG08SCA16TEY_slot1.json", 0),
    }
    fake = megaraid_host(tmp_path, SMART / "scan_megaraid.json", slots=slots)
    got = {}
    for n, state in _read_slots_0_and_1(fake, two_disks).items():
        assert state.raid == ("megaraid", "/dev/bus/0", str(n))
        r = state.reading
        assert r is not None
        assert (r.protocol, r.exit_status, r.healthy, r.attributes) == ("SCSI", 0, True, ())
        got[n] = (r.temperature_celsius, r.power_on_seconds, r.grown_defects, r.scsi_errors)
    assert got == {
        0: (32, 12437 * 3600 + 29 * 60, 0, (("read", 4, 0), ("write", 0, 0), ("verify", 0, 0))),
        1: (31, None, 0, (("read", 374, 0), ("write", 59, 0), ("verify", 160, 0))),
    }
    argvs = [argv for _, argv in calls(tmp_path)]
    for n in (0, 1):
        assert [*SMARTCTL_ARGS, "-d", f"megaraid,{n}", "/dev/bus/0"] in argvs


def test_a_hanging_raid_member_is_killed_while_the_other_reads(
    tmp_path: Path, two_disks: Path
) -> None:
    fake = megaraid_host(tmp_path, SMART / "scan_megaraid.json", hang_slot=0)
    e = SmartExporter(
        timeout=3.0,
        concurrency=2,
        sys_root=two_disks,
        runner=SmartctlRunner(str(fake)),
        autostart=False,
    )
    try:
        e.run_cycle()
        assert e.wait_idle(WAIT)
        states = e.states()
        assert states["bus/0:megaraid,1"].reading is not None
        assert states["bus/0:megaraid,0"].reason == "timeout"
        sleep_pid = int((tmp_path / "sleep-0.pid").read_text())
        wait_for(lambda: not _alive(sleep_pid), WAIT, "the hung member's child to die")
    finally:
        e.close()


# --- disks behind controllers the scan does not list: probed (exporters/smart/probe.py) ------


def probed_host(tmp: Path, hang_3ware: int | None = None) -> Path:
    """A stand-in smartctl answering as the seeds' brick plus an HPE Smart Array would (the
    /sys tree of tests/support/scsitree.py seeds_host, with an hpsa host added): slots
    cciss,0 and 1 behind /dev/sdg and 3ware port 5 behind /dev/twa1 hold real drive captures,
    every other probe gets this VM's real answer to a RAID type on no such controller (exit
    2); hang_3ware: that port of /dev/twa0 hangs with a child holding stdout."""
    empty = f"cat {SMART / 'local_probe_cciss_0_vda.json'}; exit 2"
    hung = ""
    if hang_3ware is not None:
        hung = (
            f'*"-d 3ware,{hang_3ware} /dev/twa0") sleep 600 & echo $! > {tmp}/sleep.pid; wait ;;\n'
        )
    body = (
        'case "$*" in\n'
        f"--scan-open*) cat {SMART / 'local_scan_open.json'} ;;\n"
        f'*"-d cciss,0 /dev/sdg") cat {SMART / "sata_hdd_WDC_WD140EDFZ-11A0VA0.json"} ;;\n'
        f'*"-d cciss,1 /dev/sdg") cat {SMART / "sas_SEAGATE_ST600MP0036.json"} ;;\n'
        f'*"-d 3ware,5 /dev/twa1") cat {SMART / "reallocated_ST3500418AS.json"} ;;\n'
        f"{hung}"
        f"*) {empty} ;;\n"
        "esac"
    )
    return fake_smartctl(tmp, body)


def _probed_tree(tmp: Path) -> Path:
    root = seeds_host(tmp)
    add_host(root, 9, "hpsa")
    add_device(root, "9:0:0:0", 12, "", "sg9")
    add_device(root, "9:1:0:0", 0, "sdg", "sg10", "8:96")
    return root


def test_disks_behind_unscanned_controllers_are_probed_and_read(tmp_path: Path) -> None:
    fake = probed_host(tmp_path)
    e = SmartExporter(
        timeout=30.0,
        sys_root=_probed_tree(tmp_path),
        runner=SmartctlRunner(str(fake)),
        autostart=False,
    )
    try:
        e.run_cycle()
        assert e.wait_idle(WAIT)
        states = e.states()
        assert sorted(states) == ["sdg:cciss,0", "sdg:cciss,1", "twa1:3ware,5"]
        assert states["sdg:cciss,1"].raid == ("cciss", "/dev/sdg", "1")
        sas = states["sdg:cciss,1"].reading
        assert sas is not None and sas.protocol == "SCSI" and sas.grown_defects is not None
        ata = states["twa1:3ware,5"].reading
        assert ata is not None and {a.id: a.raw for a in ata.attributes}[5] > 0
        argvs = [argv for _, argv in calls(tmp_path)]
        # every probe is the agent's own read with the probe's -d type on the controller node
        assert [*SMARTCTL_ARGS, "-d", "cciss,2", "/dev/sdg"] in argvs  # the end of the list
        assert [*SMARTCTL_ARGS, "-d", "cciss,3", "/dev/sdg"] not in argvs
        assert [*SMARTCTL_ARGS, "-d", "3ware,127", "/dev/twa0"] in argvs  # ports have gaps
        assert [*SMARTCTL_ARGS, "-d", "areca,32/8", "/dev/sg6"] in argvs
        assert not any(a[-1] == "/dev/sdf" for a in argvs)  # MegaRAID: the scan's own
    finally:
        e.close()


def test_a_hanging_probe_is_killed_and_the_other_controllers_are_probed(
    tmp_path: Path,
) -> None:
    fake = probed_host(tmp_path, hang_3ware=1)
    e = SmartExporter(
        # long enough that no stand-in run that answers is ever cut on a busy machine; the
        # hung one costs this once
        timeout=10.0,
        sys_root=_probed_tree(tmp_path),
        runner=SmartctlRunner(str(fake)),
        autostart=False,
    )
    try:
        e.run_cycle()
        assert e.wait_idle(WAIT)
        assert sorted(e.states()) == ["sdg:cciss,0", "sdg:cciss,1", "twa1:3ware,5"]
        argvs = [argv for _, argv in calls(tmp_path)]
        assert [*SMARTCTL_ARGS, "-d", "3ware,2", "/dev/twa0"] not in argvs  # round ended
        sleep_pid = int((tmp_path / "sleep.pid").read_text())
        wait_for(lambda: not _alive(sleep_pid), WAIT, "the hung probe's child to die")
    finally:
        e.close()
