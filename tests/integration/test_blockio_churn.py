"""The churn tier (issue 26): hundreds of loop devices (and veths) created and destroyed while
the tracer runs. Gone disks leave the BPF maps and /metrics, a disk re-created with the same
dev_t starts from zero, and a full map is counted, never silent.

Loop devices are created with LOOP_CTL_ADD at numbers of this test's own (a range chosen from
the process id, far above what `losetup --find` hands out), so the same dev_t comes back
again and again, as NVMe-oF reconnects and hot-swaps do, and other tests' loop devices are
never touched. Every assertion counts only this test's own devices, or holds for whatever
the other tests do at the same time (a count of entries of devices present now).

Counts are compared with /proc/diskstats as "never more, and not missing": on this kernel
(6.18) under heavy load a tp_btf program is sometimes not run for a block_rq_complete that
ftrace sees (a few per 100,000, with recursion_misses 0, before this change too, every BPF
program loaded at the time missing the same ones), so no tracer here can promise equality
under load. A disk that inherited its predecessor's counts shows more than the kernel; one
the full map left out shows none.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporters.blockio.bcc_backend import BccBackend
from exporters.blockio.core.backend import OBJECT, CoreBackend
from exporters.blockio.devt import decode
from exporters.blockio.model import DEFAULT_LAT_BOUNDS_SECONDS, DeviceStats
from tests.support.env import require
from tests.support.realparts import (
    Agent,
    bcc_importable,
    diskstats,
    have,
    is_root,
    parse_samples,
    wait_for,
)

pytestmark = [pytest.mark.root, pytest.mark.bpf]

LOOP_CTL_ADD, LOOP_CTL_REMOVE = 0x4C80, 0x4C81  # include/uapi/linux/loop.h
BASE = 3000 + (os.getpid() % 400) * 8  # loop3000..loop6199: this process' own 8 numbers + ...
WIDTH = 20  # ... and the next 12: numbers re-used round after round
READS = 7  # prime: a lost or doubled completion cannot hide


@contextlib.contextmanager
def _loop_ctl() -> Iterator[int]:
    fd = os.open("/dev/loop-control", os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


class Loops:
    """Loop devices at chosen numbers over sparse files in tmpfs; removed on exit."""

    def __init__(self, ctl: int, directory: Path) -> None:
        self.ctl = ctl
        self.dir = directory
        self.mine: set[int] = set()

    def add(self, n: int) -> str | None:
        """/dev/loopN attached to a fresh file, or None if the number is someone else's."""
        try:
            fcntl.ioctl(self.ctl, LOOP_CTL_ADD, n)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                return None  # exists: not ours to use
            raise
        self.mine.add(n)
        f = self.dir / f"d{n}.img"
        with open(f, "wb") as fh:
            fh.truncate(8 << 20)
        r = subprocess.run(["losetup", f"/dev/loop{n}", str(f)], capture_output=True, text=True)
        if r.returncode != 0:
            return None  # taken by another test's `losetup --find` in between
        return f"loop{n}"

    def remove(self, n: int) -> None:
        """Detach and delete the device (a removed disk: its dev_t is free again)."""
        subprocess.run(["losetup", "-d", f"/dev/loop{n}"], capture_output=True, check=False)
        for _ in range(100):  # the detach completes asynchronously: EBUSY for a moment
            try:
                fcntl.ioctl(self.ctl, LOOP_CTL_REMOVE, n)
                break
            except OSError as exc:
                if exc.errno == errno.ENODEV:
                    break
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.02)
        self.mine.discard(n)
        (self.dir / f"d{n}.img").unlink(missing_ok=True)

    def close(self) -> None:
        """Remove every device still ours."""
        for n in sorted(self.mine):
            self.remove(n)


@pytest.fixture
def loops() -> Iterator[Loops]:
    require(is_root(), "needs root for loop devices and BPF")
    require(have("losetup"), "needs losetup")
    require(Path("/dev/loop-control").exists(), "needs /dev/loop-control (the loop driver)")
    d = Path(tempfile.mkdtemp(prefix="wattbit-churn-", dir="/dev/shm"))
    with _loop_ctl() as ctl:
        lo = Loops(ctl, d)
        try:
            yield lo
        finally:
            lo.close()
            shutil.rmtree(d, ignore_errors=True)


def _read(name: str, n: int = READS) -> None:
    """n direct 4 KiB reads: n block-layer read completions (nothing merges, nothing caches)."""
    subprocess.run(
        ["dd", f"if=/dev/{name}", "of=/dev/null", "bs=4096", f"count={n}", "iflag=direct"],
        check=True,
        capture_output=True,
    )


def _kernel_reads(name: str) -> int:
    return diskstats()[name][0]


def _core(**kw: object) -> CoreBackend:
    require(OBJECT.exists(), f"{OBJECT} is not built (scripts/build-bpf.sh)")
    return CoreBackend(DEFAULT_LAT_BOUNDS_SECONDS, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_queues", [0, None], ids=["hash-map", "array-slots"])
def test_churn_keeps_every_new_disk_counted_exactly(loops: Loops, max_queues: int | None) -> None:
    """600 disks at 20 re-used numbers (the same dev_t 30 times each), each read 7 times and
    checked against /proc/diskstats: the hash map (512 entries, fewer than the disks) never
    fills because gone disks' entries are deleted, and a re-created disk never shows its
    predecessor's counts (the bug showed 6 I/Os for 1)."""
    backend = _core(max_queues=max_queues, stats_entries=512)
    try:
        rounds, counted, done = 30, 0, 0
        for _ in range(rounds):
            names = {n: name for n in range(BASE, BASE + WIDTH) if (name := loops.add(n))}
            for name in names.values():
                _read(name)
            got = backend.read()
            for name in names.values():
                # No udev here and nothing else reads our devices: the kernel's count since
                # the disk was created bounds what the tracer shows (see the module's note).
                assert _kernel_reads(name) == READS
                assert 0 < got[name].ops["read"].ios <= READS, name
                counted += got[name].ops["read"].ios
                done += READS
            for n in names:
                loops.remove(n)
        assert counted >= 0.99 * done, (counted, done)
        backend.read()  # the last round's disks leave
        stats_entries = list(backend.values())
        hashed = [k for k, _ in stats_entries if k is not None]
        present = {
            decode(int(line.split()[0]) << 20 | int(line.split()[1]))
            for line in Path("/proc/diskstats").read_text().splitlines()
        }
        # Every hash entry left is a disk present now (counted here: others' too).
        assert all(decode(dev) in present for dev, _op, _seq in hashed), hashed
        assert not any(decode(dev)[1] in range(BASE, BASE + WIDTH) for dev, *_ in hashed)
        assert backend.map_full() == {"stats": 0, "start": 0}
    finally:
        backend.close()


def test_bcc_churn_deletes_gone_disks(loops: Loops) -> None:
    """bcc, the fall-back: 200 disks at the same 20 numbers through a statistics map of 64
    entries. Its tracepoints carry no diskseq, so a re-created disk is told by its diskseq in
    /sys at a read: read after creating the disks, and each is counted exactly from zero."""
    require(bcc_importable(), "bcc (python3-bpfcc) is not importable")
    backend = BccBackend(max_stats=64)
    ours = range(BASE, BASE + WIDTH)

    def foreign() -> int:
        """Entries of disks not ours: the map counts every disk of the machine (on a shared
        machine others' loop devices come and go; a CI run saw 1,028 rejected updates)."""
        return sum(1 for k in backend.bpf[b"stats"] if decode(k.dev)[1] not in ours)

    most_foreign = 0
    try:
        for _ in range(10):
            names = {n: name for n in ours if (name := loops.add(n))}
            backend.read()  # sees the new diskseqs: the predecessors' entries go
            most_foreign = max(most_foreign, foreign())
            for name in names.values():
                _read(name)
            got = backend.read()
            most_foreign = max(most_foreign, foreign())
            for name in names.values():
                assert _kernel_reads(name) == READS
                assert 0 < got[name].ops["read"].ios <= READS, name
            for n in names:
                loops.remove(n)
        backend.read()
        assert not any(decode(k.dev)[1] in ours for k in backend.bpf[b"stats"])
        # Our 20 disks' reads take 20 entries at a time: with the gone ones deleted, the map
        # (64) fills only if other disks of the machine took the rest (seen at a read).
        if most_foreign + WIDTH < 64 - 8:
            assert backend.map_full() == {"stats": 0}, most_foreign
    finally:
        backend.close()


def _three_disks_reading(
    backend: CoreBackend | BccBackend, loops: Loops
) -> tuple[list[str], dict[str, DeviceStats], int]:
    """Three disks of ours each read 101 times, then the backend read and closed: (their
    names, what it read, how much its stats map-full counter rose meanwhile)."""
    try:
        names = [name for n in range(BASE, BASE + 3) if (name := loops.add(n))]
        assert len(names) == 3, "our loop numbers are taken"
        full0 = backend.map_full()["stats"]
        for name in names:
            _read(name, 101)
        got = backend.read()
        full = backend.map_full()["stats"] - full0
    finally:
        backend.close()
    return names, got, full


def test_bcc_full_map_is_counted(loops: Loops) -> None:
    """bcc with 2 statistics entries and 3 disks reading: as for core."""
    require(bcc_importable(), "bcc (python3-bpfcc) is not importable")
    names, got, full = _three_disks_reading(BccBackend(max_stats=2), loops)
    missing = [n for n in names if n not in got or not got[n].ops.get("read")]
    assert missing, "3 disks fitted into 2 entries"
    # bcc's counts may miss a completion the kernel skipped (another BPF program on the CPU).
    assert all(got[n].ops["read"].ios <= 101 for n in names if n not in missing)
    assert full >= 101 * len(missing) - 1


def test_a_full_map_is_counted(loops: Loops) -> None:
    """A hash map of 2 entries and 3 disks reading: a disk that found no room has none of its
    completions counted, and every one of them is in the map-full counter."""
    names, got, full = _three_disks_reading(_core(max_queues=0, stats_entries=2), loops)
    # Other tests' disks may take the entries too: at least one of ours is left out.
    missing = [n for n in names if n not in got or not got[n].ops.get("read")]
    counted = [n for n in names if n not in missing]
    assert missing, "3 disks fitted into 2 entries"
    # each counted one exactly: counted, or (born after the attach, so exact from its first
    # read) reported unseen when the kernel did not run the program for a completion
    assert all(got[n].ops["read"].ios + got[n].ops["read"].unseen == 101 for n in counted)
    assert full >= 101 * len(missing)


# --- the agent under churn: /metrics, maps, memory, scrape time --------------------------

AGENT_CONFIG = """\
blockio:
  backend: core
nic:
  exclude: '^(docker|br-|virbr|vnet)'
smart:
  enabled: false
tcp:
  # off: it follows every socket of the machine, and the suite's other workers open and
  # close thousands (its memory under socket churn is test_tcp_real's and bench's subject)
  enabled: false
"""
DEVICE_SERIES = re.compile(r'^wattbit_disk_\w+\{[^}]*device="([^"]+)"', re.M)
IFACE_SERIES = re.compile(r'^wattbit_nic_\w+\{[^}]*interface="([^"]+)"', re.M)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _agent_map_ids(pid: int) -> set[int]:
    """The ids of the BPF maps the agent holds (a map fd's fdinfo names its map_id)."""
    ids = set()
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        with contextlib.suppress(OSError):
            m = re.search(r"^map_id:\s*(\d+)", fd.read_text(), re.M)
            if m:
                ids.add(int(m.group(1)))
    return ids


def _hash_devs(pid: int) -> list[int]:
    """dev of every entry in the agent's `stats` hash map."""
    out = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True)
    ids = _agent_map_ids(pid)
    (stats,) = [m for m in json.loads(out.stdout) if m["id"] in ids and m["name"] == "stats"]
    out = subprocess.run(
        ["bpftool", "-j", "map", "dump", "id", str(stats["id"])], capture_output=True, text=True
    )
    devs = []
    for entry in json.loads(out.stdout or "[]"):
        key = entry.get("key") or entry.get("formatted", {}).get("key")
        if isinstance(key, dict):
            devs.append(int(key["dev"]))
        else:
            devs.append(int.from_bytes(bytes(int(b, 16) for b in key[:4]), "little"))
    return devs


def _veths(prefix: str, n: int) -> list[str]:
    batch = "".join(f"link add {prefix}{i}a type veth peer name {prefix}{i}b\n" for i in range(n))
    batch += "".join(f"link set {prefix}{i}a up\nlink set {prefix}{i}b up\n" for i in range(n))
    subprocess.run(["ip", "-batch", "-"], input=batch, text=True, check=True, capture_output=True)
    return [f"{prefix}{i}{end}" for i in range(n) for end in "ab"]


def _del_veths(prefix: str, n: int) -> None:
    batch = "".join(f"link del {prefix}{i}a\n" for i in range(n))
    subprocess.run(["ip", "-force", "-batch", "-"], input=batch, text=True, capture_output=True)


def test_agent_returns_to_baseline_after_churn(loops: Loops, tmp_path: Path) -> None:
    """300 loop devices and 200 veths come and go while the agent is scraped: afterwards no
    series names a gone disk or interface, the hash map holds only present disks, RSS and
    scrape time are back near their baseline, and a new disk at a re-used dev_t is counted
    exactly as the kernel counts it."""
    require(have("bpftool"), "needs bpftool (Debian bpftool)")
    require(have("ip"), "needs iproute2")
    require(OBJECT.exists(), f"{OBJECT} is not built (scripts/build-bpf.sh)")
    prefix = f"wbch{os.getpid() % 10000}x"
    agent = Agent(AGENT_CONFIG, tmp_path)
    try:
        agent.wait_ready()
        # Baseline after one warm-up round (imports, caches, the first disk and veth).
        warm = [name for n in range(BASE, BASE + 4) if (name := loops.add(n))]
        for name in warm:
            _read(name)
        _veths(prefix, 2)
        agent.scrape_text()
        for n in range(BASE, BASE + 4):
            loops.remove(n)
        _del_veths(prefix, 2)
        agent.scrape_text()
        rss0 = _rss_kb(agent.proc.pid)

        for r in range(15):  # 15 x 20 = 300 disks, 15 x (2 x 7) = 210 veths
            names = [name for n in range(BASE, BASE + WIDTH) if (name := loops.add(n))]
            for name in names:
                _read(name)
            _veths(f"{prefix}{r}y", 7)
            text = agent.scrape_text()
            assert all(f'device="{name}"' in text for name in names), r
            for n in range(BASE, BASE + WIDTH):
                loops.remove(n)
            _del_veths(f"{prefix}{r}y", 7)
            agent.scrape_text()

        def clean() -> str | None:
            text = agent.scrape_text()
            disks = set(os.listdir("/sys/class/block"))
            ifaces = set(os.listdir("/sys/class/net"))
            gone = {d for d in DEVICE_SERIES.findall(text) if d not in disks}
            gone |= {i for i in IFACE_SERIES.findall(text) if i not in ifaces}
            return None if gone else text  # (another test's device may just have left)

        text = wait_for(clean, 60, "no series of gone devices", interval=0.5)
        assert not re.search(r'device="\d+:\d+"', text)
        assert prefix not in text
        assert not any(
            decode(dev)[1] in range(BASE, BASE + WIDTH) for dev in _hash_devs(agent.proc.pid)
        )
        # RSS: a generous multiple (the bug: +27 MB for 200 disks). The scrape's time, x50
        # with the bug, is not asserted (a loaded machine stretches any time): what made it
        # grow, series and map entries of gone devices, is checked exactly above.
        rss1 = _rss_kb(agent.proc.pid)
        assert rss1 < rss0 * 1.5, (rss0, rss1)

        # A new disk at a dev_t used 15 times before: counted from zero, exactly as a witness
        # that never saw its predecessors counts it (a tracer loaded here, now), and as the
        # kernel counts it where the kernel ran the programs for every completion (module
        # note).
        witness = _core()
        try:
            name = loops.add(BASE)
            assert name is not None, "our loop number was taken"
            _read(name, 1009)
            seen = witness.read()[name].ops["read"].ios
        finally:
            witness.close()
        assert _kernel_reads(name) == 1009
        assert 0.99 * 1009 <= seen <= 1009

        def counted() -> float | None:
            s = parse_samples(agent.scrape_text())
            return s.get(("wattbit_disk_ios_total", (("device", name), ("op", "read"))))

        # Never its predecessors' (which would show more than the kernel's 1009), and, when
        # the witness saw every completion, exactly the kernel's count.
        got = wait_for(counted, 30, f"{name} on /metrics", interval=0.2)
        assert 0.99 * 1009 <= got <= 1009
        if seen == 1009:
            wait_for(lambda: counted() == 1009, 30, f"{name}: 1009 reads", interval=0.2)
        full = parse_samples(agent.scrape_text())
        assert full[("wattbit_blockio_bpf_map_full_total", (("map", "stats"),))] == 0
    finally:
        agent.stop()
        _del_veths(prefix, 2)
        for r in range(15):
            _del_veths(f"{prefix}{r}y", 7)
