"""The smart exporter with a scripted runner: which disks it reads, that a hanging drive never
holds back another's result (shown with Events, not clocks), what is kept through standby,
timeouts and errors, and the exposition of real smartctl outputs (tests/fixtures/smart)."""

from __future__ import annotations

import json
import logging
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporters.hostfs.blockdevs import BLOCK_EXCLUDE, read_topology
from exporters.smart.exporter import SmartExporter, device_path, list_disks
from exporters.smart.runner import RunOutcome
from tests.support.env import FIXTURES

SMART = FIXTURES / "smart"
WAIT = 60.0  # an upper bound for a wait that normally ends at once, never asserted on

Script = RunOutcome | Callable[[], RunOutcome]
# this project's VM answering `smartctl --scan-open --json` (no RAID, no devices at all)
SCAN_NONE = RunOutcome("done", (FIXTURES / "smart" / "local_scan_open.json").read_bytes(), 0)


def done(name: str, exit_code: int = 0, duration: float = 0.25) -> RunOutcome:
    """A finished smartctl run that printed the recorded output name."""
    return RunOutcome("done", (SMART / name).read_bytes(), exit_code, duration)


class ScriptedRunner:
    """Plays, per device path, a list of outcomes (the last one repeats)."""

    def __init__(self, script: dict[str, list[Script]]) -> None:
        self.script = script
        self.calls: list[str] = []  # device paths ("/dev/bus/0 megaraid,0" with a type)
        self.scans = 0
        self.closed = False
        self._lock = threading.Lock()

    def __call__(self, device: str, timeout: float, dtype: str = "auto") -> RunOutcome:
        key = device if dtype == "auto" else f"{device} {dtype}"
        with self._lock:
            self.calls.append(key)
            steps = self.script[key]
            step = steps.pop(0) if len(steps) > 1 else steps[0]
        return step() if callable(step) else step

    def scan(self, timeout: float) -> RunOutcome:
        with self._lock:
            self.scans += 1
            steps = self.script.get("scan", [SCAN_NONE])
            step = steps.pop(0) if len(steps) > 1 else steps[0]
        return step() if callable(step) else step

    def close(self) -> None:
        self.closed = True


class Blocking:
    """A run that hangs until released: started is set when it begins."""

    def __init__(self, then: RunOutcome) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.then = then

    def __call__(self) -> RunOutcome:
        self.started.set()
        assert self.release.wait(WAIT), "the test never released the hanging run"
        return self.then


def machine(tmp_path: Path, name: str) -> Path:
    """A captured /sys tree (tests/fixtures/sys/NAME.tar), extracted."""
    with tarfile.open(FIXTURES / "sys" / f"{name}.tar") as tar:
        tar.extractall(tmp_path)  # our own fixture archive
    return tmp_path / name


class Clock:
    """A wall clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


_MADE: list[SmartExporter] = []


def exporter(sys_root: Path, runner: ScriptedRunner, clock: Clock, **kw: object) -> SmartExporter:
    """An exporter driven by the test (no background loop), closed after the test."""
    e = SmartExporter(sys_root=sys_root, runner=runner, wall_clock=clock, autostart=False, **kw)  # type: ignore[arg-type]
    _MADE.append(e)
    return e


def cycle(e: SmartExporter) -> None:
    """One whole cycle: start every read and wait until all have published."""
    e.run_cycle()
    assert e.wait_idle(WAIT)


def samples(e: SmartExporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What a scrape of the exporter shows, through prometheus_client's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(e)  # type: ignore[arg-type]
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def of(
    got: dict[tuple[str, tuple[tuple[str, str], ...]], float], device: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of one device, its device label left out."""
    out = {}
    for (name, labels), value in got.items():
        lab = dict(labels)
        if lab.pop("device", None) == device:
            out[(name, tuple(sorted(lab.items())))] = value
    return out


def attr(attr_id: int, name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The key of one wattbit_disk_smart_attribute_raw sample of a device."""
    return ("wattbit_disk_smart_attribute_raw", (("attribute", name), ("id", str(attr_id))))


def exit_bits(status: int) -> dict:
    """The wattbit_disk_smartctl_exit_bit samples of one exit status."""
    names = ("command_failed", "disk_failing", "prefail_below_threshold",
             "past_below_threshold", "error_log", "self_test_log")  # fmt: skip
    return {
        ("wattbit_disk_smartctl_exit_bit", (("bit", n),)): float(status >> (i + 2) & 1)
        for i, n in enumerate(names)
    }


def reads(ok: int = 0, standby: int = 0, timeout: int = 0, error: int = 0) -> dict:
    return {
        ("wattbit_disk_smart_reads_total", (("result", r),)): float(n)
        for r, n in (("ok", ok), ("standby", standby), ("timeout", timeout), ("error", error))
    }


# --- which disks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "disks", "virtual"),
    [
        ("sata_ahci", ["sda", "sdb"], []),
        ("dm_md", ["dm-0", "md0", "sda", "sdb"], ["dm-0", "md0"]),
        # native multipath heads live under devices/virtual/nvme-subsystem: real namespaces
        ("nvme_multipath", ["nvme0n1", "nvme1n1"], []),
        ("sas_mpt3sas", ["sdb", "sdc"], []),
        ("captured_vm", ["vda"], []),  # its loop devices are unbound, zram0 excluded
    ],
)
def test_the_disks_are_blockios_whole_disks(
    tmp_path: Path, tree: str, disks: list[str], virtual: list[str]
) -> None:
    sys_root = machine(tmp_path, tree)
    got = list_disks(sys_root, BLOCK_EXCLUDE)
    assert [d.name for d in got] == disks
    assert [d.name for d in got if d.virtual] == virtual
    # every one is a whole disk of wattbit_disk_info: the join on `device` always finds it
    topo = read_topology(sys_root)
    assert all(topo[d.name].parent == "" and topo[d.name].size_bytes > 0 for d in got)


def test_devices_narrows_by_name(tmp_path: Path) -> None:
    sys_root = machine(tmp_path, "dm_md")
    assert [d.name for d in list_disks(sys_root, BLOCK_EXCLUDE, r"^sd")] == ["sda", "sdb"]
    assert [d.name for d in list_disks(sys_root, r"^(dm|md)", "auto")] == ["sda", "sdb"]


def test_device_path() -> None:
    assert device_path("nvme0n1") == "/dev/nvme0n1"
    assert device_path("cciss!c0d0") == "/dev/cciss/c0d0"


def test_virtual_devices_are_no_smart_without_running_anything(
    tmp_path: Path, clock: Clock
) -> None:
    runner = ScriptedRunner(
        {"/dev/sda": [done("sata_ssd_Samsung_SSD_860_EVO_500GB.json")], "/dev/sdb": [
            done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json")]}
    )  # fmt: skip
    e = exporter(machine(tmp_path, "dm_md"), runner, clock)
    cycle(e)
    assert sorted(runner.calls) == ["/dev/sda", "/dev/sdb"]
    got = samples(e)
    for dev in ("dm-0", "md0"):
        assert of(got, dev) == {("wattbit_disk_smart_available", (("reason", "no_smart"),)): 0.0}


# --- one device never delays another ------------------------------------------------------


def test_a_hanging_drive_does_not_hold_back_another(tmp_path: Path, clock: Clock) -> None:
    hang = Blocking(RunOutcome("timeout", duration=30.0, detail="no answer in 30s"))
    runner = ScriptedRunner(
        {"/dev/sda": [hang], "/dev/sdb": [done("sata_hdd_WDC_WD181KRYZ-01AGBB0.json")]}
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock, concurrency=2)
    try:
        e.run_cycle()  # returns at once: the reads run in the pool
        assert hang.started.wait(WAIT)
        assert e.wait_until(lambda s: "sdb" in s, WAIT)
        assert not hang.release.is_set() and "sda" not in e.states()  # sda still hangs...
        got = samples(e)  # ...and a scrape answers meanwhile, with sdb's reading
        assert of(got, "sdb")[("wattbit_disk_smart_healthy", ())] == 1.0
        assert of(got, "sdb")[("wattbit_disk_temperature_celsius", ())] == 49.0
        assert of(got, "sda") == {}
        # the next cycle does not pile a second smartctl onto the hanging drive
        e.run_cycle()
        assert e.wait_until(lambda s: s["sdb"].reads.get("ok") == 2, WAIT)
        assert runner.calls.count("/dev/sda") == 1
    finally:
        hang.release.set()
    assert e.wait_idle(WAIT)
    sda = of(samples(e), "sda")
    assert sda[("wattbit_disk_smart_available", (("reason", "timeout"),))] == 0.0
    assert sda[("wattbit_disk_smart_read_duration_seconds", ())] == 30.0
    assert {k: v for k, v in sda.items() if k[0].endswith("_reads_total")} == reads(timeout=1)
    assert ("wattbit_disk_smart_last_read_timestamp_seconds", ()) not in sda  # never read


# --- what is kept ----------------------------------------------------------------------------


def test_standby_timeout_and_error_keep_the_last_reading(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner(
        {
            "/dev/sda": [
                done("failing_HGST_HUS726060ALA640.json"),
                done("standby_sat_sdc.json", exit_code=2, duration=0.01),
                RunOutcome("timeout", duration=30.0, detail="no answer in 30s"),
                RunOutcome("error", duration=0.5, detail="output larger than 4194304 bytes"),
                done("reallocated_ST3500418AS.json"),
            ],
            "/dev/sdb": [done("local_vda.json", exit_code=1)],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    cycle(e)
    first_read = clock.now
    kept = {
        ("wattbit_disk_smart_healthy", ()): 1.0,
        ("wattbit_disk_temperature_celsius", ()): 29.0,
        ("wattbit_disk_power_on_seconds", ()): 43177 * 3600.0,
        attr(5, "Reallocated_Sector_Ct"): 1040.0,
        attr(197, "Current_Pending_Sector"): 878.0,
        attr(198, "Offline_Uncorrectable"): 1272.0,
        ("wattbit_disk_power_cycles_total", ()): 55.0,
        **exit_bits(0),
        ("wattbit_disk_smart_last_read_timestamp_seconds", ()): first_read,
    }
    assert of(samples(e), "sda") == {
        ("wattbit_disk_smart_available", (("reason", ""),)): 1.0,
        **kept,
        ("wattbit_disk_smart_read_duration_seconds", ()): 0.25,
        **reads(ok=1),
    }
    # sdb says "Unable to detect device type": nothing but available 0
    assert of(samples(e), "sdb") == {
        ("wattbit_disk_smart_available", (("reason", "no_smart"),)): 0.0
    }

    for reason, duration, counts in (
        ("standby", 0.01, reads(ok=1, standby=1)),
        ("timeout", 30.0, reads(ok=1, standby=1, timeout=1)),
        ("error", 0.5, reads(ok=1, standby=1, timeout=1, error=1)),
    ):
        clock.now += 300
        cycle(e)
        assert of(samples(e), "sda") == {
            ("wattbit_disk_smart_available", (("reason", reason),)): 0.0,
            **kept,
            ("wattbit_disk_smart_read_duration_seconds", ()): duration,
            **counts,
        }, reason

    clock.now += 300
    cycle(e)  # readable again: the new reading replaces the kept one
    sda = of(samples(e), "sda")
    assert sda[("wattbit_disk_smart_available", (("reason", ""),))] == 1.0
    assert sda[("wattbit_disk_smart_last_read_timestamp_seconds", ())] == clock.now
    key = (
        "wattbit_disk_smart_attribute_raw",
        (("attribute", "Reallocated_Sector_Ct"), ("id", "5")),
    )
    assert sda[key] == 304.0
    assert sda[("wattbit_disk_temperature_celsius", ())] == 33.0


def _dev_file(sys_root: Path, name: str) -> Path:
    return (sys_root / "class" / "block" / name).resolve() / "dev"


def test_another_disk_under_the_same_name_starts_afresh(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner(
        {
            "/dev/sda": [
                done("failing_Hitachi_HDS721050DLE630.json", exit_code=216),
                done("standby_sat_sdc.json", exit_code=2),
            ],
            "/dev/sdb": [done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json")],
        }
    )
    sys_root = machine(tmp_path, "sata_ahci")
    e = exporter(sys_root, runner, clock)
    cycle(e)
    assert of(samples(e), "sda")[("wattbit_disk_smart_healthy", ())] == 0.0
    # The failing disk is pulled and another one comes up as sda (a new dev_t): its sleep
    # must not show the old disk's failing health.
    _dev_file(sys_root, "sda").write_text("8:64\n")
    cycle(e)
    sda = of(samples(e), "sda")
    assert sda[("wattbit_disk_smart_available", (("reason", "standby"),))] == 0.0
    assert ("wattbit_disk_smart_healthy", ()) not in sda
    assert sda == {
        ("wattbit_disk_smart_available", (("reason", "standby"),)): 0.0,
        ("wattbit_disk_smart_read_duration_seconds", ()): 0.25,
        **reads(standby=1),
    }


def test_a_removed_disk_loses_its_series(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner(
        {
            "/dev/sda": [done("sata_ssd_WDC_WDS400T1R0A-68A4W0.json")],
            "/dev/sdb": [done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json")],
        }
    )
    sys_root = machine(tmp_path, "sata_ahci")
    e = exporter(sys_root, runner, clock)
    cycle(e)
    assert of(samples(e), "sdb")
    (sys_root / "class" / "block" / "sdb").unlink()
    cycle(e)
    assert of(samples(e), "sdb") == {}
    assert of(samples(e), "sda")


# --- values in the exposition ----------------------------------------------------------------


def test_nvme_exposition(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner(
        {
            "/dev/nvme0n1": [done("nvme_critical_warning_SAMSUNG_MZWLL3T2HAJQ-00005.json", 8)],
            "/dev/nvme1n1": [done("nvme_media_errors_Samsung_SSD_970_EVO_500GB.json")],
        }
    )
    e = exporter(machine(tmp_path, "nvme_multipath"), runner, clock)
    cycle(e)
    got = samples(e)
    bits = ("spare", "temperature", "reliability", "read_only", "volatile_backup", "pmr_read_only")
    warning = {("wattbit_nvme_critical_warning", (("bit", b),)): 0.0 for b in bits}
    assert of(got, "nvme0n1") == {
        ("wattbit_disk_smart_available", (("reason", ""),)): 1.0,
        ("wattbit_disk_smart_healthy", ()): 0.0,
        ("wattbit_disk_temperature_celsius", ()): 40.0,
        ("wattbit_disk_power_on_seconds", ()): 18376 * 3600.0,
        ("wattbit_disk_power_cycles_total", ()): 6.0,
        **exit_bits(8),
        ("wattbit_disk_smartctl_exit_bit", (("bit", "disk_failing"),)): 1.0,
        # data units of 512,000 bytes
        ("wattbit_nvme_read_bytes_total", ()): 146935678 * 512000.0,
        ("wattbit_nvme_written_bytes_total", ()): 147556750 * 512000.0,
        **warning,
        ("wattbit_nvme_critical_warning", (("bit", "volatile_backup"),)): 1.0,  # 16 = bit 4
        ("wattbit_nvme_media_errors_total", ()): 0.0,
        ("wattbit_nvme_error_log_entries_total", ()): 0.0,
        ("wattbit_nvme_percentage_used_ratio", ()): 0.0,
        ("wattbit_nvme_available_spare_ratio", ()): 1.0,
        ("wattbit_nvme_available_spare_threshold_ratio", ()): 0.1,
        ("wattbit_disk_smart_last_read_timestamp_seconds", ()): clock.now,
        ("wattbit_disk_smart_read_duration_seconds", ()): 0.25,
        **reads(ok=1),
    }
    nvme1 = of(got, "nvme1n1")
    assert nvme1[("wattbit_nvme_media_errors_total", ())] == 7.0
    assert nvme1[("wattbit_nvme_error_log_entries_total", ())] == 62.0
    assert nvme1[("wattbit_nvme_percentage_used_ratio", ())] == 0.03
    assert nvme1[("wattbit_nvme_available_spare_ratio", ())] == 0.99
    assert nvme1[("wattbit_disk_smart_healthy", ())] == 1.0
    assert not any(k[0] == "wattbit_disk_smart_attribute_raw" for k in nvme1)


def test_sas_exposition(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner(
        {
            "/dev/sdb": [done("sas_SEAGATE_ST600MP0036.json")],
            "/dev/sdc": [done("nosmart_Intel_Raid_1_Volume.json", 4)],
        }
    )
    e = exporter(machine(tmp_path, "sas_mpt3sas"), runner, clock)
    cycle(e)
    got = samples(e)
    assert of(got, "sdb") == {
        ("wattbit_disk_smart_available", (("reason", ""),)): 1.0,
        ("wattbit_disk_smart_healthy", ()): 1.0,
        ("wattbit_disk_temperature_celsius", ()): 29.0,
        ("wattbit_disk_power_on_seconds", ()): 4665 * 3600.0 + 46 * 60,
        ("wattbit_scsi_grown_defects", ()): 0.0,
        **exit_bits(0),
        ("wattbit_scsi_errors_corrected_total", (("operation", "read"),)): 170693715.0,
        ("wattbit_scsi_errors_corrected_total", (("operation", "write"),)): 0.0,
        ("wattbit_scsi_errors_corrected_total", (("operation", "verify"),)): 26102529.0,
        ("wattbit_scsi_errors_uncorrected_total", (("operation", "read"),)): 0.0,
        ("wattbit_scsi_errors_uncorrected_total", (("operation", "write"),)): 0.0,
        ("wattbit_scsi_errors_uncorrected_total", (("operation", "verify"),)): 0.0,
        ("wattbit_disk_self_test_passed", ()): 1.0,
        ("wattbit_disk_smart_last_read_timestamp_seconds", ()): clock.now,
        ("wattbit_disk_smart_read_duration_seconds", ()): 0.25,
        **reads(ok=1),
    }
    # a RAID volume answers but has no health: its temperature 0 is not exported
    assert of(got, "sdc") == {("wattbit_disk_smart_available", (("reason", "no_smart"),)): 0.0}


# --- missing smartctl, failures, logging --------------------------------------------------


def test_no_smartctl_is_reported_and_logged_once(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    missing = RunOutcome("no_smartctl", detail="smartctl not found (install smartmontools)")
    runner = ScriptedRunner({"/dev/sda": [missing], "/dev/sdb": [missing]})
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    with caplog.at_level(logging.INFO, logger="exporters.smart.exporter"):
        cycle(e)
        cycle(e)
    got = samples(e)
    for dev in ("sda", "sdb"):
        assert of(got, dev) == {("wattbit_disk_smart_available", (("reason", "no_smartctl"),)): 0.0}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "install smartmontools" in warnings[0].getMessage()


def test_no_smart_is_logged_once_per_device(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = ScriptedRunner({"/dev/vda": [done("local_vda.json", exit_code=1)]})
    e = exporter(machine(tmp_path, "captured_vm"), runner, clock)
    with caplog.at_level(logging.DEBUG, logger="exporters.smart.exporter"):
        for _ in range(5):
            cycle(e)
    assert len(runner.calls) == 5
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["smart: vda has no SMART (/dev/vda: Unable to detect device type); "
                     "reported unavailable"]  # fmt: skip


def test_a_runner_that_raises_is_an_error(tmp_path: Path, clock: Clock) -> None:
    def boom() -> RunOutcome:
        raise OSError("unexpected")

    runner = ScriptedRunner({"/dev/sda": [boom], "/dev/sdb": [done("local_vda.json", 1)]})
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    cycle(e)
    sda = of(samples(e), "sda")
    assert sda[("wattbit_disk_smart_available", (("reason", "error"),))] == 0.0
    assert sda[("wattbit_disk_smart_reads_total", (("result", "error"),))] == 1.0


def test_the_background_loop_reads_and_close_stops_it(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner({"/dev/vda": [done("local_vda.json", exit_code=1)]})
    e = SmartExporter(sys_root=machine(tmp_path, "captured_vm"), runner=runner, wall_clock=clock)
    try:
        assert e.wait_idle(WAIT)  # the first cycle runs at start, not after one interval
        assert runner.calls == ["/dev/vda"]
        assert e.startup_note() == "every 300s, timeout 30s"
    finally:
        e.close()
    assert runner.closed
    assert e._thread is not None and not e._thread.is_alive()


@pytest.fixture(autouse=True)
def _close_exporters() -> Iterator[None]:
    yield
    while _MADE:
        _MADE.pop().close()
    assert not [t for t in threading.enumerate() if t.name == "smart-cycle"]


def test_the_first_cycle_waits_its_delay_and_close_cuts_it_short(
    tmp_path: Path, clock: Clock
) -> None:
    """start(delay): no read before the delay (the agent's first scrape runs meanwhile, issue
    35); a close during it ends the loop without any read."""
    from collector.agent.main import SMART_FIRST_READ, start_exporters

    assert SMART_FIRST_READ > 0
    sys_root = machine(tmp_path, "captured_vm")
    runner = ScriptedRunner({"/dev/vda": [done("local_vda.json", exit_code=1)]})
    e = exporter(sys_root, runner, clock)
    start_exporters([e], smart_delay=3600.0)
    assert e._thread is not None and e._thread.is_alive()
    assert e._cycles == 0 and runner.calls == []  # waiting out the delay
    e.close()
    assert not e._thread.is_alive() and runner.calls == []
    at_once = ScriptedRunner({"/dev/vda": [done("local_vda.json", exit_code=1)]})
    started = exporter(sys_root, at_once, clock)
    start_exporters([started], smart_delay=0.0)
    assert started.wait_idle(WAIT) and at_once.calls == ["/dev/vda"]


def test_a_sas_drive_with_smart_disabled_and_uncorrected_errors(
    tmp_path: Path, clock: Clock
) -> None:
    runner = ScriptedRunner(
        {
            "/dev/sdb": [done("scsi_smart_disabled_SEAGATE_ST373453LC.json")],
            "/dev/sdc": [done("scsi_uncorrected_SEAGATE_ST373453LC.json")],
        }
    )
    e = exporter(machine(tmp_path, "sas_mpt3sas"), runner, clock)
    cycle(e)
    got = samples(e)
    sdb = of(got, "sdb")  # "disabled": exception reporting off, everything still read
    assert sdb[("wattbit_disk_smart_available", (("reason", ""),))] == 1.0
    assert sdb[("wattbit_disk_smart_healthy", ())] == 1.0
    assert sdb[("wattbit_disk_temperature_celsius", ())] == 34.0
    assert sdb[("wattbit_disk_power_on_seconds", ())] == 91691 * 3600.0 + 24 * 60
    assert sdb[("wattbit_scsi_grown_defects", ())] == 0.0
    sdc = of(got, "sdc")
    assert sdc[("wattbit_scsi_grown_defects", ())] == 260.0
    assert sdc[("wattbit_scsi_errors_uncorrected_total", (("operation", "read"),))] == 1.0
    assert sdc[("wattbit_scsi_errors_uncorrected_total", (("operation", "write"),))] == 535.0
    assert ("wattbit_scsi_errors_uncorrected_total", (("operation", "verify"),)) not in sdc


# --- disks behind RAID controllers -----------------------------------------------------------

SCAN_MEGARAID = done("scan_megaraid.json")  # scrutiny's capture of a MegaRAID host's scan


def test_raid_members_are_found_read_with_their_type_and_labelled(
    tmp_path: Path, clock: Clock
) -> None:
    runner = ScriptedRunner(
        {
            "scan": [SCAN_MEGARAID],
            "/dev/sda": [done("nosmart_Intel_Raid_1_Volume.json", 4)],  # the RAID volume
            "/dev/sdb": [done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json")],
            "/dev/bus/0 megaraid,0": [done("megaraid_sat_WD4000FYYX_slot0.json", 4)],
            "/dev/bus/0 megaraid,1": [done("megaraid_sat_WD4000FYYX_slot1.json", 4)],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    cycle(e)
    assert sorted(runner.calls) == [
        "/dev/bus/0 megaraid,0", "/dev/bus/0 megaraid,1", "/dev/sda", "/dev/sdb"
    ]  # fmt: skip
    assert runner.scans == 1
    got = samples(e)
    # the volume has no SMART; the disks it hides do, each under its own label
    assert of(got, "sda") == {("wattbit_disk_smart_available", (("reason", "no_smart"),)): 0.0}
    m1 = of(got, "bus/0:megaraid,1")
    assert m1[("wattbit_disk_smart_available", (("reason", ""),))] == 1.0
    assert m1[attr(5, "Reallocated_Sector_Ct")] == 387.0
    assert m1[("wattbit_disk_temperature_celsius", ())] == 36.0
    info = ("wattbit_disk_raid_member_info",
            (("controller", "megaraid"), ("path", "/dev/bus/0"), ("slot", "1")))  # fmt: skip
    assert m1[info] == 1.0
    assert of(got, "bus/0:megaraid,0")[attr(5, "Reallocated_Sector_Ct")] == 0.0
    assert not any(k[0] == "wattbit_disk_raid_member_info" for k in of(got, "sdb"))


def test_sas_raid_members_export_the_scsi_families(tmp_path: Path, clock: Clock) -> None:
    # SAS drives behind MegaRAID (smartctl_exporter PR 339's captures, `-d megaraid,N`,
    # protocol SCSI), each answering the slot number it was captured from
    runner = ScriptedRunner(
        {
            "scan": [SCAN_MEGARAID],
            "/dev/sda": [done("nosmart_Intel_Raid_1_Volume.json", 4)],
            "/dev/sdb": [done("sata_hdd_WDC_WD140EDFZ-11A0VA0.json")],
            "/dev/bus/0 megaraid,0": [done("megaraid_sas_TOSHIBA_AL15SEB24EQY_slot0.json")],
            "/dev/bus/0 megaraid,1": [done("megaraid_sas_TOSHIBA_MG08SCA16TEY_slot1.json")],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    cycle(e)
    got = samples(e)
    m0, m1 = of(got, "bus/0:megaraid,0"), of(got, "bus/0:megaraid,1")
    for n, m in ((0, m0), (1, m1)):
        info = ("wattbit_disk_raid_member_info",
                (("controller", "megaraid"), ("path", "/dev/bus/0"), ("slot", str(n))))  # fmt: skip
        assert m[info] == 1.0
        assert m[("wattbit_disk_smart_healthy", ())] == 1.0
        assert m[("wattbit_scsi_grown_defects", ())] == 0.0
        assert not any(k[0] == "wattbit_disk_smart_attribute_raw" for k in m)  # SCSI: none
    corrected = "wattbit_scsi_errors_corrected_total"
    assert m1[(corrected, (("operation", "read"),))] == 374.0
    assert m1[(corrected, (("operation", "write"),))] == 59.0
    assert m1[(corrected, (("operation", "verify"),))] == 160.0
    assert m0[(corrected, (("operation", "read"),))] == 4.0
    assert m0[("wattbit_disk_temperature_celsius", ())] == 32.0
    assert m0[("wattbit_disk_power_on_seconds", ())] == 12437 * 3600 + 29 * 60
    assert ("wattbit_disk_power_on_seconds", ()) not in m1  # smartctl 7.1 wrote none


def test_a_member_that_leaves_the_scan_leaves_the_metrics(tmp_path: Path, clock: Clock) -> None:
    one = json.loads((SMART / "scan_megaraid.json").read_bytes())
    one["devices"] = one["devices"][:1]  # slot 1 pulled
    runner = ScriptedRunner(
        {
            "scan": [SCAN_MEGARAID, RunOutcome("done", json.dumps(one).encode(), 0)],
            "/dev/sda": [done("local_vda.json", 1)],
            "/dev/sdb": [done("local_vda.json", 1)],
            "/dev/bus/0 megaraid,0": [done("megaraid_sat_WD4000FYYX_slot0.json", 4)],
            "/dev/bus/0 megaraid,1": [done("megaraid_sat_WD4000FYYX_slot1.json", 4)],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    cycle(e)
    assert of(samples(e), "bus/0:megaraid,1")
    cycle(e)
    assert of(samples(e), "bus/0:megaraid,1") == {}
    assert of(samples(e), "bus/0:megaraid,0")


def test_a_failed_scan_keeps_the_members_and_logs_once(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = ScriptedRunner(
        {
            "scan": [SCAN_MEGARAID, RunOutcome("timeout", detail="no answer in 30s")],
            "/dev/sda": [done("local_vda.json", 1)],
            "/dev/sdb": [done("local_vda.json", 1)],
            "/dev/bus/0 megaraid,0": [done("megaraid_sat_WD4000FYYX_slot0.json", 4)],
            "/dev/bus/0 megaraid,1": [done("megaraid_sat_WD4000FYYX_slot1.json", 4)],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    cycle(e)
    with caplog.at_level(logging.WARNING, logger="exporters.smart.exporter"):
        cycle(e)
        cycle(e)
    assert runner.calls.count("/dev/bus/0 megaraid,1") == 3  # still read every cycle
    assert of(samples(e), "bus/0:megaraid,1")
    assert [r.getMessage() for r in caplog.records] == [
        "smart: smartctl --scan-open: no answer in 30s; RAID members kept"
    ]


def test_a_hanging_member_never_holds_back_the_others(tmp_path: Path, clock: Clock) -> None:
    hang = Blocking(RunOutcome("timeout", duration=30.0, detail="no answer in 30s"))
    runner = ScriptedRunner(
        {
            "scan": [SCAN_MEGARAID],
            "/dev/sda": [done("local_vda.json", 1)],
            "/dev/sdb": [done("local_vda.json", 1)],
            "/dev/bus/0 megaraid,0": [hang],
            "/dev/bus/0 megaraid,1": [done("megaraid_sat_WD4000FYYX_slot1.json", 4)],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock)
    e.run_cycle()
    try:
        assert hang.started.wait(WAIT)
        assert e.wait_until(lambda st: st.get("bus/0:megaraid,1") is not None, WAIT)
        m1 = of(samples(e), "bus/0:megaraid,1")
        assert m1[attr(5, "Reallocated_Sector_Ct")] == 387.0
    finally:
        hang.release.set()
    assert e.wait_idle(WAIT)


def test_raid_false_never_scans(tmp_path: Path, clock: Clock) -> None:
    runner = ScriptedRunner(
        {
            "scan": [SCAN_MEGARAID],
            "/dev/sda": [done("local_vda.json", 1)],
            "/dev/sdb": [done("local_vda.json", 1)],
        }
    )
    e = exporter(machine(tmp_path, "sata_ahci"), runner, clock, raid=False)
    cycle(e)
    assert runner.scans == 0 and sorted(runner.calls) == ["/dev/sda", "/dev/sdb"]
