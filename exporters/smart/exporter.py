"""The smart exporter: drive health from smartctl, read off the scrape path.

A background thread wakes every ``interval``, lists the disks (the blockio exporter's set:
whole disks under /sys/class/block, its exclude pattern applied, read by exporters/hostfs)
and hands each one not already being read to a bounded pool of workers, each running one
smartctl (runner.py) and publishing its device's result the moment it has it. A scrape only
renders the last results: it never waits for a drive, and one drive's hang holds one worker
for at most ``timeout`` while the others publish on their own.

After the kernel's disks have started, the cycle runs ``smartctl --scan-open`` (bounded like a
read) and reads each disk it finds behind a RAID controller (``-d megaraid,N /dev/bus/0`` ...)
the same way, labelled ``PATH:CONTROLLER,SLOT``; a member the scan stops listing leaves, a
scan that fails keeps the last members (docs/exporters/smart.md "Disks behind RAID
controllers"). The controllers that scan does not cover (HPE Smart Array, 3ware, Adaptec,
Areca, HighPoint: probe.py) are found from the SCSI hosts' drivers in /sys, and their slots
are tried with their ``-d`` types every ``probe_every`` cycles; the slots that answered are
read every cycle like the scan's members.

Per device, the last good reading is kept while the drive sleeps (``-n standby``: never woken),
times out or errors, with ``wattbit_disk_smart_last_read_timestamp_seconds`` saying how old it
is; it is dropped when the device goes away or another disk takes its name (a different
dev_t or serial in /sys). Devices the kernel keeps under devices/virtual/block (loop, zram,
dm, md) have no hardware and are reported ``no_smart`` without running anything.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from exporters.base import Exporter
from exporters.hostfs import caps
from exporters.hostfs.blockdevs import BLOCK_EXCLUDE, excluded, is_virtual_block, read_topology
from exporters.hostfs.read import SYS_ROOT
from exporters.hostfs.scsihosts import cciss_controllers, scsi_hosts

from .parse import (
    EXIT_STATUS_BITS,
    NVME_CRITICAL_WARNING_BITS,
    NVME_DATA_UNIT_BYTES,
    RaidMember,
    SmartReading,
    parse_scan,
    parse_smartctl,
    raid_type,
)
from .probe import Controller, plan
from .runner import HelperRunner, Runner, RunnerChoice, RunOutcome, SmartctlRunner

log = logging.getLogger(__name__)

# The reasons of wattbit_disk_smart_available 0, and the results of a read.
NO_SMART, STANDBY, TIMEOUT, ERROR, NO_SMARTCTL = (
    "no_smart",
    "standby",
    "timeout",
    "error",
    "no_smartctl",
)
READ_RESULTS = ("ok", STANDBY, TIMEOUT, ERROR)  # wattbit_disk_smart_reads_total{result}
_SILENT = (NO_SMART, NO_SMARTCTL)  # only wattbit_disk_smart_available is exported for these
_SCAN = " scan"  # the scan's key among the logged states (no device label has a space)

# Kernel block device names smartctl may be given as /dev/NAME. The kernel writes a "/" of a
# device name as "!" in sysfs (cciss!c0d0 is /dev/cciss/c0d0).
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+!-]{0,63}$")

Identity = tuple[int, int, str]  # (major, minor, serial) of the disk behind a name
Raid = tuple[str, str, str]  # a RAID member's (controller, path, slot)


@dataclass(frozen=True)
class DeviceState:
    """One device's published state: the last outcome and the last good reading."""

    identity: Identity
    reason: str = ""  # "" while readable, else a reason of wattbit_disk_smart_available 0
    reading: SmartReading | None = None  # the last reading with status ok
    last_ok: float | None = None  # wall-clock time of that reading
    duration: float | None = None  # how long the last read took
    reads: Mapping[str, int] = field(default_factory=dict)  # result -> count
    raid: Raid | None = None  # behind a RAID controller: wattbit_disk_raid_member_info


@dataclass(frozen=True)
class Disk:
    """A disk the exporter reads: its label, identity, whether it is virtual, how to open it."""

    name: str  # the device label: a kernel name ("sda"), or "bus/0:megaraid,0" (raid_disk)
    identity: Identity
    virtual: bool
    path: str = ""  # what smartctl opens ("": device_path(name))
    dtype: str = "auto"  # smartctl's -d TYPE
    raid: Raid | None = None

    @property
    def open_path(self) -> str:
        """The path given to smartctl."""
        return self.path or device_path(self.name)


def raid_disk(m: RaidMember) -> Disk:
    """The Disk of a RAID member: labelled PATH:CONTROLLER,SLOT ("bus/0:megaraid,0").

    A sat+ prefix is left out of the label (it says how smartctl talks to the disk, not which
    disk it is); the type, with it, is the identity, so a change starts the device afresh."""
    name = f"{m.path.removeprefix('/dev/')}:{m.controller},{m.slot}"
    return Disk(name, (-1, -1, m.dtype), False, m.path, m.dtype, (m.controller, m.path, m.slot))


def list_disks(sys_root: Path, exclude: str, devices: str = "auto") -> list[Disk]:
    """The whole disks blockio exports (exclude applied), narrowed by devices unless "auto"."""
    excl = re.compile(exclude)
    only = None if devices == "auto" else re.compile(devices)
    out = []
    for name, info in read_topology(sys_root).items():
        if info.parent or info.size_bytes <= 0 or excluded(excl, info):
            continue  # partitions, unbound loop devices, ram/zram/fd/sr by default
        if only is not None and not only.search(name):
            continue
        if not _DEVICE_NAME.match(name) or ".." in name:
            continue
        virtual = is_virtual_block(sys_root, name)
        out.append(Disk(name, (info.major, info.minor, info.serial), virtual))
    return out


def device_path(name: str) -> str:
    """/dev path of a kernel block device name ("cciss!c0d0" -> "/dev/cciss/c0d0")."""
    return "/dev/" + name.replace("!", "/")


class SmartExporter(Exporter):
    """Drive health (SMART attributes, NVMe health log, SCSI health) read by smartctl."""

    name = "smart"

    def __init__(
        self,
        interval: float = 300.0,
        timeout: float = 30.0,
        devices: str = "auto",
        exclude: str = BLOCK_EXCLUDE,
        concurrency: int = 4,
        raid: bool = True,
        sys_root: Path = SYS_ROOT,
        runner: Runner | None = None,
        wall_clock: Callable[[], float] = time.time,
        autostart: bool = True,
        choice: RunnerChoice | None = None,
        probe_every: int = 12,
    ) -> None:
        """choice: how the runner was picked (wattbit_smart_runner_info; None: not shown);
        raid: also read the disks behind RAID controllers that ``smartctl --scan-open`` finds,
        and probe the slots of those it does not list every probe_every cycles (probe.py)."""
        self.raid = raid
        self.probe_every = max(1, probe_every)
        self._members: list[Disk] = []  # the RAID members of the last scan that answered
        self._probed: list[Disk] = []  # the slots that answered the last probe round
        self.interval = interval
        self.timeout = timeout
        self.devices = devices
        self.exclude = exclude
        self.sys_root = sys_root
        self.runner: Runner = runner if runner is not None else SmartctlRunner()
        self.choice = choice
        self._wall = wall_clock
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="smart")
        self._lock = threading.Condition()
        self._disks: dict[str, Identity] = {}  # the disks of the last cycle
        self._states: dict[str, DeviceState] = {}  # devices read at least once
        self._inflight: dict[str, object] = {}  # device -> token of the read going on
        self._cycles = 0
        self._logged: dict[str, str] = {}  # device -> reason last logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if autostart:
            self.start()

    # --- the background loop ------------------------------------------------------------

    def start(self, delay: float = 0.0) -> None:
        """Start the background reads (a first cycle after ``delay`` s, then every interval)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, args=(delay,), name="smart-cycle", daemon=True
            )
            self._thread.start()

    def _loop(self, delay: float = 0.0) -> None:
        if delay > 0 and self._stop.wait(delay):
            return
        while not self._stop.is_set():
            try:
                self.run_cycle()
            except Exception:  # /sys unreadable, a pool refusing work at shutdown ...
                log.exception("smart: a read cycle failed")
            if self._stop.wait(self.interval):
                return

    def run_cycle(self) -> None:
        """List the disks and start a read of every one not being read; does not wait for
        the reads (the RAID scan, bounded by ``timeout``, runs after the kernel's disks have
        started)."""
        disks = list_disks(self.sys_root, self.exclude, self.devices)
        if not self.raid:
            self._start(disks, disks, last=True)
            return
        before = [*disks, *self._members, *self._probed]
        self._start(before, before, last=False)
        started = {d.name for d in before}
        members = self._scan()
        if members is not None:
            self._members = members  # a member the scan no longer shows leaves with its state
        if self._cycles % self.probe_every == 0:
            self._probed = self._probe_round({d.name for d in self._members})
        after = [*disks, *self._members, *self._probed]
        self._start(after, [d for d in after if d.name not in started], last=True)

    def _probe_round(self, listed: set[str]) -> list[Disk]:
        """The slots of the controllers smartctl's scan does not cover that hold a disk now.

        Each controller's slots are tried in turn in this (the cycle's) thread, each run
        bounded by ``timeout``; a controller whose probe times out is left for this round
        (a hung controller costs one timeout, not one per slot), logged once."""
        hosts = scsi_hosts(self.sys_root)
        only = None if self.devices == "auto" else re.compile(self.devices)
        found: list[Disk] = []
        for ctrl in plan(hosts, cciss_controllers(self.sys_root)):
            found += [
                d
                for d in self._probe(ctrl)
                if d.name not in listed and (only is None or only.search(d.name))
            ]
        return found

    def _probe(self, ctrl: Controller) -> list[Disk]:
        """The slots of one controller whose read gives health data (or a sleeping disk)."""
        out: list[Disk] = []
        for dtype in ctrl.types:
            if self._stop.is_set():
                break
            kind = raid_type(dtype)
            outcome = self.runner(ctrl.path, self.timeout, dtype)
            if outcome.result == "timeout":
                key = f" probe {ctrl.path}"
                with self._lock:
                    if self._logged.get(key) != dtype:
                        self._logged[key] = dtype
                        log.warning(
                            "smart: probing %s (%s) timed out at -d %s; its other slots are"
                            " tried next round",
                            ctrl.path,
                            ctrl.driver,
                            dtype,
                        )
                break
            status = ""
            if outcome.result == "done":
                status = parse_smartctl(outcome.output, outcome.exit_code).status
            if kind is not None and status in ("ok", STANDBY):
                out.append(raid_disk(RaidMember(ctrl.path, dtype, *kind)))
            elif ctrl.contiguous:
                break  # an index without gaps: the first empty slot is the end
        return out

    def _scan(self) -> list[Disk] | None:
        """The RAID members smartctl's scan shows now (None: the scan failed; logged)."""
        outcome = self.runner.scan(self.timeout)
        found = parse_scan(outcome.output) if outcome.result == "done" else None
        with self._lock:
            if found is None:
                why = outcome.detail or "not a scan output"
                if self._logged.get(_SCAN) != why:  # once per change, not once per cycle
                    self._logged[_SCAN] = why
                    log.warning("smart: smartctl --scan-open: %s; RAID members kept", why)
                return None
            self._logged.pop(_SCAN, None)
        only = None if self.devices == "auto" else re.compile(self.devices)
        members = [raid_disk(m) for m in found]
        return [d for d in members if only is None or only.search(d.name)]

    def _start(self, disks: list[Disk], start: list[Disk], last: bool) -> None:
        """Make disks the current set; start a read of each of start not being read."""
        to_read: list[tuple[Disk, object]] = []
        with self._lock:
            self._disks = {d.name: d.identity for d in disks}
            for name in list(self._states):
                if self._states[name].identity != self._disks.get(name):
                    del self._states[name]  # gone, or another disk took the name
                    self._logged.pop(name, None)
            for d in start:
                if d.virtual:
                    self._states[d.name] = DeviceState(d.identity, reason=NO_SMART)
                    self._log(d.name, NO_SMART, "a virtual block device, no hardware")
                elif d.name not in self._inflight:
                    token = self._inflight[d.name] = object()
                    to_read.append((d, token))
            if last:
                self._cycles += 1
            self._lock.notify_all()
        for d, token in to_read:
            try:
                self._pool.submit(self._read, d, token)
            except RuntimeError:  # the pool is shut down: the agent is stopping
                self._done(d.name, token)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until a cycle has run and no read is in flight; False if timeout passed first."""
        with self._lock:
            return self._lock.wait_for(lambda: self._cycles > 0 and not self._inflight, timeout)

    def wait_until(
        self, predicate: Callable[[Mapping[str, DeviceState]], bool], timeout: float
    ) -> bool:
        """Wait until predicate(states) holds after some publication; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(self._states), timeout)

    def _read(self, disk: Disk, token: object) -> None:
        try:
            if disk.dtype == "auto":
                outcome = self.runner(disk.open_path, self.timeout)
            else:
                outcome = self.runner(disk.open_path, self.timeout, disk.dtype)
            reading = None
            if outcome.result == "done":
                reading = parse_smartctl(outcome.output, outcome.exit_code)
            self._publish(disk, token, outcome, reading)
        except Exception:
            log.exception("smart: reading %s failed", disk.name)
            self._publish(disk, token, RunOutcome("error", detail="internal error"), None)
        finally:
            self._done(disk.name, token)

    def _done(self, name: str, token: object) -> None:
        """The read `token` of device name is over, published or not."""
        with self._lock:
            if self._inflight.get(name) is token:  # not a newer read of the device
                del self._inflight[name]
            self._lock.notify_all()

    def _publish(
        self, disk: Disk, token: object, outcome: RunOutcome, reading: SmartReading | None
    ) -> None:
        """Fold one read into the device's state (kept readings: see the module docstring)."""
        reason: str
        if outcome.result == "done" and reading is not None:
            reason = "" if reading.status == "ok" else reading.status
            detail = reading.detail
        else:
            reason = {"timeout": TIMEOUT, "no_smartctl": NO_SMARTCTL}.get(outcome.result, ERROR)
            detail = outcome.detail
        with self._lock:
            if self._stop.is_set():
                return  # stopping: the run was killed by close(), not by the drive
            if self._disks.get(disk.name) != disk.identity:
                return  # the device went away (or was replaced) while it was read
            state = self._states.get(disk.name) or DeviceState(disk.identity, raid=disk.raid)
            if reason in _SILENT:
                new = DeviceState(disk.identity, reason=reason, raid=disk.raid)
            else:
                reads = dict(state.reads)
                result = reason or "ok"
                reads[result] = reads.get(result, 0) + 1
                new = dataclasses.replace(
                    state, reason=reason, duration=outcome.duration, reads=reads
                )
                if not reason:
                    new = dataclasses.replace(new, reading=reading, last_ok=self._wall())
            self._states[disk.name] = new
            if self._inflight.get(disk.name) is token:
                del self._inflight[disk.name]  # published, hence done: a new read may start
            self._log(disk.name, reason, detail)
            self._lock.notify_all()

    def _log(self, name: str, reason: str, detail: str) -> None:
        """Log a device's change of state once (called with the lock held)."""
        before = self._logged.get(name)
        if before == reason:
            return
        self._logged[name] = reason
        if reason == NO_SMART:
            log.info("smart: %s has no SMART (%s); reported unavailable", name, detail)
        elif reason == NO_SMARTCTL:
            # One line for the host, not one per disk.
            if not any(r == NO_SMARTCTL for n, r in self._logged.items() if n != name):
                log.warning("smart: no disk read: %s", detail)
        elif reason == STANDBY:
            log.debug("smart: %s is asleep (%s); not woken, last reading kept", name, detail)
        elif reason in (TIMEOUT, ERROR):
            log.warning("smart: %s: %s (%s)", name, reason, detail)
        elif before in (TIMEOUT, ERROR, NO_SMARTCTL):
            log.info("smart: %s read again", name)

    # --- the Exporter contract ----------------------------------------------------------

    def startup_note(self) -> str:
        """Which smartctl runs, how often, with which timeout (or that there is none)."""
        how = f"every {self.interval:g}s, timeout {self.timeout:g}s"
        if self.choice is not None:
            how += f"; via {self.choice.runner} ({self.choice.reason})"
        if isinstance(self.runner, HelperRunner):
            return f"helper {self.runner.path} {how}"
        if isinstance(self.runner, SmartctlRunner):
            binary = self.runner.resolve()
            if binary is None:
                return f"smartctl not found (install smartmontools): no_smartctl; {how}"
            return f"{binary} {how}"
        return how

    def close(self) -> None:
        """Stop the loop and kill every smartctl still running."""
        self._stop.set()
        self.runner.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def states(self) -> dict[str, DeviceState]:
        """A snapshot of every device's state."""
        with self._lock:
            return dict(self._states)

    def kept_capabilities(self) -> frozenset[int]:
        """CAP_SYS_RAWIO and CAP_SYS_ADMIN (NVMe admin commands) while smartctl runs as this
        process's child; none through the helper."""
        if isinstance(self.runner, HelperRunner):
            return frozenset()
        return frozenset({caps.CAP_SYS_RAWIO, caps.CAP_SYS_ADMIN})

    def collect(self) -> Iterator[Metric]:
        """Render the last published state of every device (never reads a drive)."""
        yield from render(self.states())
        if self.choice is not None:
            info = GaugeMetricFamily(
                "wattbit_smart_runner_info",
                "How the agent runs smartctl: itself (runner=smartctl) or through the root "
                "helper's socket (runner=helper), and why.",
                labels=["runner", "reason"],
            )
            info.add_metric([self.choice.runner, self.choice.reason], 1.0)
            yield info


def _families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    """The smart families, empty, in the order they are exposed."""
    dev = ["device"]
    available = GaugeMetricFamily(
        "wattbit_disk_smart_available",
        "1 if smartctl read the drive's health at the last attempt; else 0 and why "
        "(no_smart, standby, timeout, error, no_smartctl).",
        labels=["device", "reason"],
    )
    healthy = GaugeMetricFamily(
        "wattbit_disk_smart_healthy",
        "1 if the drive's overall SMART health self-assessment passed, 0 if it failed.",
        labels=dev,
    )
    attribute = GaugeMetricFamily(
        "wattbit_disk_smart_attribute_raw",
        "Raw count of an ATA SMART attribute (5, 187, 188, 197, 198), named as smartctl "
        "names it for this drive.",
        labels=["device", "id", "attribute"],
    )
    temperature = GaugeMetricFamily(
        "wattbit_disk_temperature_celsius", "Drive temperature reported by the drive.", labels=dev
    )
    power_on = GaugeMetricFamily(
        "wattbit_disk_power_on_seconds", "Drive power-on time reported by the drive.", labels=dev
    )
    warning = GaugeMetricFamily(
        "wattbit_nvme_critical_warning",
        "1 if the NVMe critical warning bit is set (spare, temperature, reliability, "
        "read_only, volatile_backup, pmr_read_only).",
        labels=["device", "bit"],
    )
    media_errors = CounterMetricFamily(
        "wattbit_nvme_media_errors",
        "NVMe unrecovered data integrity errors (Media and Data Integrity Errors).",
        labels=dev,
    )
    error_log = CounterMetricFamily(
        "wattbit_nvme_error_log_entries",
        "NVMe error information log entries over the controller's life.",
        labels=dev,
    )
    used = GaugeMetricFamily(
        "wattbit_nvme_percentage_used_ratio",
        "NVMe estimate of the life used (Percentage Used / 100; may exceed 1).",
        labels=dev,
    )
    spare = GaugeMetricFamily(
        "wattbit_nvme_available_spare_ratio", "NVMe available spare capacity (0-1).", labels=dev
    )
    spare_threshold = GaugeMetricFamily(
        "wattbit_nvme_available_spare_threshold_ratio",
        "NVMe available spare below which the spare critical warning is raised (0-1).",
        labels=dev,
    )
    grown = GaugeMetricFamily(
        "wattbit_scsi_grown_defects",
        "SCSI/SAS: elements in the grown defect list (sectors remapped since manufacture).",
        labels=dev,
    )
    last_read = GaugeMetricFamily(
        "wattbit_disk_smart_last_read_timestamp_seconds",
        "When the drive's health was last read successfully (Unix time).",
        labels=dev,
    )
    duration = GaugeMetricFamily(
        "wattbit_disk_smart_read_duration_seconds",
        "How long the last smartctl run on the drive took.",
        labels=dev,
    )
    reads = CounterMetricFamily(
        "wattbit_disk_smart_reads",
        "smartctl runs on the drive by result (ok, standby, timeout, error).",
        labels=["device", "result"],
    )
    return {
        "available": available,
        "healthy": healthy,
        "attribute": attribute,
        "temperature": temperature,
        "power_on": power_on,
        "warning": warning,
        "media_errors": media_errors,
        "error_log": error_log,
        "used": used,
        "spare": spare,
        "spare_threshold": spare_threshold,
        "grown": grown,
        **_log_families(),
        "last_read": last_read,
        "duration": duration,
        "reads": reads,
    }


def _log_families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    """The families of smartctl's exit status, the drives' logs and counters, RAID members."""
    dev = ["device"]
    exit_bit = GaugeMetricFamily(
        "wattbit_disk_smartctl_exit_bit",
        "1 if the bit of smartctl's exit status was set at the last good read (command_failed, "
        "disk_failing, prefail_below_threshold, past_below_threshold, error_log, "
        "self_test_log: smartctl(8) EXIT STATUS bits 2-7).",
        labels=["device", "bit"],
    )
    scsi_corrected = CounterMetricFamily(
        "wattbit_scsi_errors_corrected",
        "SCSI/SAS error counter log: errors corrected (by ECC, rereads or rewrites), by "
        "operation (read, write, verify).",
        labels=["device", "operation"],
    )
    scsi_uncorrected = CounterMetricFamily(
        "wattbit_scsi_errors_uncorrected",
        "SCSI/SAS error counter log: errors the drive could not correct, by operation (read, "
        "write, verify).",
        labels=["device", "operation"],
    )
    nvme_read = CounterMetricFamily(
        "wattbit_nvme_read_bytes",
        "NVMe Data Units Read in bytes (units of 512,000 bytes, rounded up by the drive).",
        labels=dev,
    )
    nvme_written = CounterMetricFamily(
        "wattbit_nvme_written_bytes",
        "NVMe Data Units Written in bytes (units of 512,000 bytes, rounded up by the drive).",
        labels=dev,
    )
    power_cycles = CounterMetricFamily(
        "wattbit_disk_power_cycles",
        "Power-on cycles the drive counts (ATA attribute 12, NVMe Power Cycles).",
        labels=dev,
    )
    self_test = GaugeMetricFamily(
        "wattbit_disk_self_test_passed",
        "1 if the newest completed self-test in the drive's log passed, 0 if it failed.",
        labels=dev,
    )
    raid = GaugeMetricFamily(
        "wattbit_disk_raid_member_info",
        "A drive behind a RAID controller, found by smartctl --scan-open or a probe: its "
        "controller type, the path smartctl opens and its slot there.",
        labels=["device", "controller", "path", "slot"],
    )
    return {
        "exit_bit": exit_bit,
        "scsi_corrected": scsi_corrected,
        "scsi_uncorrected": scsi_uncorrected,
        "nvme_read": nvme_read,
        "nvme_written": nvme_written,
        "power_cycles": power_cycles,
        "self_test": self_test,
        "raid": raid,
    }


def render(states: Mapping[str, DeviceState]) -> Iterator[Metric]:
    """The smart metric families of a set of device states (pure)."""
    f = _families()
    for name in sorted(states):
        st = states[name]
        f["available"].add_metric([name, st.reason], 0.0 if st.reason else 1.0)
        if st.raid is not None:
            f["raid"].add_metric([name, *st.raid], 1.0)
        if st.reason in _SILENT:
            continue
        for result in READ_RESULTS:
            f["reads"].add_metric([name, result], float(st.reads.get(result, 0)))
        if st.duration is not None:
            f["duration"].add_metric([name], st.duration)
        if st.last_ok is not None:
            f["last_read"].add_metric([name], st.last_ok)
        if st.reading is not None:
            _add_reading(f, name, st.reading)
    yield from f.values()


def _add_reading(
    f: dict[str, GaugeMetricFamily | CounterMetricFamily], name: str, r: SmartReading
) -> None:
    """One device's last good reading into the families."""
    if r.healthy is not None:
        f["healthy"].add_metric([name], 1.0 if r.healthy else 0.0)
    for a in r.attributes:
        f["attribute"].add_metric([name, str(a.id), a.name], float(a.raw))
    if r.temperature_celsius is not None:
        f["temperature"].add_metric([name], float(r.temperature_celsius))
    if r.power_on_seconds is not None:
        f["power_on"].add_metric([name], float(r.power_on_seconds))
    if r.grown_defects is not None:
        f["grown"].add_metric([name], float(r.grown_defects))
    if r.exit_status is not None:
        for bit, label in EXIT_STATUS_BITS:
            f["exit_bit"].add_metric([name, label], float(r.exit_status >> bit & 1))
    for op, corrected, uncorrected in r.scsi_errors:
        if corrected is not None:
            f["scsi_corrected"].add_metric([name, op], float(corrected))
        if uncorrected is not None:
            f["scsi_uncorrected"].add_metric([name, op], float(uncorrected))
    if r.power_cycles is not None:
        f["power_cycles"].add_metric([name], float(r.power_cycles))
    if r.self_test_passed is not None:
        f["self_test"].add_metric([name], 1.0 if r.self_test_passed else 0.0)
    n = r.nvme
    if n is None:
        return
    if n.critical_warning is not None:
        for bit, label in NVME_CRITICAL_WARNING_BITS:
            f["warning"].add_metric([name, label], float(n.critical_warning >> bit & 1))
    for key, value, scale in (
        ("nvme_read", _bytes(n.data_units_read), 1),
        ("nvme_written", _bytes(n.data_units_written), 1),
        ("media_errors", n.media_errors, 1),
        ("error_log", n.error_log_entries, 1),
        ("used", n.percentage_used, 100),
        ("spare", n.available_spare, 100),
        ("spare_threshold", n.available_spare_threshold, 100),
    ):
        if value is not None:
            f[key].add_metric([name], float(value) / scale)


def _bytes(units: int | None) -> int | None:
    """NVMe data units in bytes."""
    return None if units is None else units * NVME_DATA_UNIT_BYTES
