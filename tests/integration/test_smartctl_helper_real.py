"""The root smartctl helper, run as systemd runs it (one process per connection, the
connection as stdin and stdout) with the real /usr/sbin/smartctl, /sys and /dev: what it
answers, checked against smartctl run directly, and what it refuses (Netdata's ndsudo was a
local root through PATH, CVE-2024-32019: here PATH, PYTHONPATH, options smuggled as device
names, traversal, unknown devices, long lines and slow clients), and the agent reading a
drive through it as an unprivileged uid without any capability.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.env import require
from tests.support.realparts import ROOT, Agent, have, is_root, loop_disks, sample, wait_for
from tests.support.sockact import Activator

HELPER = ROOT / "packaging" / "libexec" / "smartctl-helper"
SMARTCTL = "/usr/sbin/smartctl"
PYTHON = "/usr/bin/python3"

pytestmark = [pytest.mark.root]


@pytest.fixture
def rundir() -> Iterator[Path]:
    require(is_root(), "the helper runs as root (it is systemd's root service)")
    require(Path(SMARTCTL).exists(), "needs smartmontools' /usr/sbin/smartctl")
    d = Path(tempfile.mkdtemp(prefix="wattbit-privilege-helper-"))
    d.chmod(0o755)
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


@pytest.fixture
def helper(rundir: Path) -> Iterator[Activator]:
    act = Activator(rundir / "smartctl.sock", [PYTHON, "-IS", str(HELPER)], rundir / "helper.log")
    yield act
    act.close()


def ask(path: Path, request: bytes, timeout: float = 120.0, shut: bool = False) -> dict:
    """Send request, read the one-line JSON answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(request)
        if shut:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                # The helper left part of an over-long request unread: the kernel reports
                # that as a reset after its answer (net/unix/af_unix.c, unix_release_sock).
                assert data.endswith(b"\n")
                break
            if not chunk:
                break
            data += chunk
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    return json.loads(data)


def direct(*args: str) -> dict:
    """smartctl's own JSON for the same arguments (the independent source)."""
    out = subprocess.run([SMARTCTL, *args], capture_output=True, check=False, cwd="/")
    return json.loads(out.stdout)


def _same(answer: dict, expected: dict) -> None:
    # (a refusal says why: seen once under load 18 as a bare KeyError, cause unknown)
    assert "output" in answer, answer
    got = json.loads(answer["output"])
    assert answer["exit_code"] == expected["smartctl"]["exit_status"]
    for doc in (got, expected):
        doc.pop("local_time", None)  # the only field that moves between two runs
    assert got == expected


def whole_disk() -> str:
    """A whole disk of this machine that is not virtual (the VM's virtio disk)."""
    for name in sorted(os.listdir("/sys/block")):
        if "/virtual/" not in os.path.realpath(f"/sys/block/{name}"):
            return name
    pytest.fail("no non-virtual block device on this machine")


def test_scan_and_read_answer_what_smartctl_says(helper: Activator) -> None:
    _same(ask(helper.path, b"scan\n"), direct("--scan-open", "--json=c"))
    name = whole_disk()
    args = ("--json=c", "--nocheck=standby", "--info", "--health", "--attributes")
    args += ("--log=error", "--log=selftest")
    _same(
        ask(helper.path, f"read /dev/{name} auto\n".encode()),
        direct(*args, f"/dev/{name}"),
    )


def test_a_loop_device_of_sys_block_is_read(helper: Activator) -> None:
    require(have("losetup"), "needs losetup")
    with loop_disks(1, size_mb=16) as (disk,):
        answer = ask(helper.path, f"read {disk.device} auto\n".encode())
        assert isinstance(answer["exit_code"], int)
        assert json.loads(answer["output"])["smartctl"]["argv"][-2:] == [
            "--log=selftest",
            disk.device,
        ]


REFUSED = [
    # path traversal and what is not a device node of /sys/block
    (b"read /dev/../etc/shadow auto\n", "not a device name"),
    (b"read /dev/./sda auto\n", "not a device name"),
    (b"read /etc/shadow auto\n", "not a device name"),
    (b"read /dev/null auto\n", "not a device smartctl's scan or /sys/block lists"),
    (b"read /dev/nosuchdisk auto\n", "not a device smartctl's scan or /sys/block lists"),
    (b"read /dev/vda1 auto\n", "not a device smartctl's scan or /sys/block lists"),
    (b"read /dev/disk/by-id/x auto\n", "not a device smartctl's scan or /sys/block lists"),
    # options smuggled as a device or a type
    (b"read -d auto\n", "not a device name"),
    (b"read -- auto\n", "not a device name"),
    (b"read --scan /dev/vda\n", "not a device name"),
    (b"read /dev/vda -d\n", "not a device type"),
    (b"read /dev/vda auto,-r\n", "not a device type"),
    (b"read /dev/vda sat --all\n", "requests are 'scan' or 'read DEVICE TYPE'"),
    (b"read /dev/vda megaraid,01\n", "not a device type"),
    (b"read /dev/vda test\n", "not a device type"),
    # a type the table allows, but no scan lists the pair: a whole disk is auto/ata/scsi/sat/nvme
    (b"read /dev/vda megaraid,0\n", "not a device smartctl's scan or /sys/block lists"),
    # shell and format
    (b"read /dev/vda auto;id\n", "not a device type"),
    (b"read $(id) auto\n", "not a device name"),
    (b"scan --all\n", "requests are 'scan' or 'read DEVICE TYPE'"),
    (b"read  /dev/vda auto\n", "requests are 'scan' or 'read DEVICE TYPE'"),
    (b"\n", "requests are 'scan' or 'read DEVICE TYPE'"),
    (b"read /dev/vd\xc3\xa4 auto\n", "a request is ASCII"),
    (b"scan\nscan\n", "a request is one line of at most 256 bytes"),
    (b"read /dev/" + b"a" * 300 + b" auto\n", "a request is one line of at most 256 bytes"),
]


@pytest.mark.parametrize(
    ("request_", "error"), REFUSED, ids=[r[0][:30].decode("ascii", "replace") for r in REFUSED]
)
def test_refusals(helper: Activator, request_: bytes, error: str) -> None:
    assert ask(helper.path, request_) == {"error": error}


def test_a_long_line_is_refused_without_reading_it_all(helper: Activator) -> None:
    """A megabyte of request: refused after 257 bytes; the helper does not wait for more."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(str(helper.path))
        s.sendall(b"x" * 4096)  # no newline, never finished
        answer = s.makefile("rb").readline()
    assert json.loads(answer) == {"error": "a request is one line of at most 256 bytes"}


def test_slow_and_silent_clients_are_dropped(helper: Activator) -> None:
    """A client that sends half a request, or none, gets an answer and the helper exits,
    by its own deadline (5 s): no process left behind per idle connection."""
    answer = ask(helper.path, b"sc", timeout=60)
    assert answer == {"error": "no request in time"}
    assert ask(helper.path, b"", timeout=60) == {"error": "no request in time"}
    assert ask(helper.path, b"scan", shut=True) == {"error": "the request ended without a newline"}
    wait_for(
        lambda: all(c.poll() is not None for c in helper.children),
        30,
        "every helper process exited",
    )


def test_path_and_pythonpath_are_not_followed(rundir: Path) -> None:
    """ndsudo's hole: a caller's PATH choosing the binary. The helper runs
    /usr/sbin/smartctl whatever PATH says, and python3 -I ignores PYTHONPATH."""
    evil = rundir / "evil"
    evil.mkdir()
    marker = rundir / "pwned"
    (evil / "smartctl").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (evil / "smartctl").chmod(0o755)
    (evil / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = {"PATH": str(evil), "PYTHONPATH": str(evil)}
    act = Activator(
        rundir / "evil.sock", [PYTHON, "-IS", str(HELPER)], rundir / "evil.log", env=env
    )
    try:
        _same(ask(act.path, b"scan\n"), direct("--scan-open", "--json=c"))
    finally:
        act.close()
        for f in evil.iterdir():
            f.unlink()
        evil.rmdir()
    assert not marker.exists()


def test_arguments_are_refused() -> None:
    require(Path(SMARTCTL).exists(), "needs smartctl")
    out = subprocess.run([PYTHON, "-IS", str(HELPER), "/dev/sda"], capture_output=True, check=False)
    assert out.returncode == 2 and b"takes no arguments" in out.stderr


def test_agent_without_capabilities_reads_through_the_helper(rundir: Path) -> None:
    """The agent as uid 65534 with no capability at all, auto mode: it finds the helper's
    socket, says so, and publishes for the VM's disk what a root agent running smartctl
    itself publishes."""
    require(have("setpriv"), "needs setpriv")
    name = whole_disk()
    act = Activator(
        rundir / "smartctl.sock", [PYTHON, "-IS", str(HELPER)], rundir / "helper.log", mode=0o666
    )
    config = (
        "blockio:\n  backend: diskstats\n"
        f"smart:\n  interval: 60s\n  timeout: 50s\n  devices: '^{name}$'\n"
        f"  helper_socket: {act.path}\n"
    )
    unpriv = Agent(config, rundir, user="65534", caps=[])
    try:
        unpriv.wait_ready()
        s = unpriv.scrape_until(
            "the helper's reading",
            lambda s: any(k[0] == "wattbit_disk_smart_available" for k in s),
            timeout=120,
        )
    finally:
        unpriv.stop()
        act.close()
    assert (
        sample(s, "wattbit_smart_runner_info", runner="helper", reason="missing CAP_SYS_RAWIO")
        == 1.0
    )
    via_helper = {k: v for k, v in s.items() if k[0].startswith("wattbit_disk_smart_available")}
    root = Agent(config.replace("devices:", "smartctl: direct\n  devices:"), rundir)
    try:
        root.wait_ready()
        s2 = root.scrape_until(
            "the direct reading",
            lambda s: any(k[0] == "wattbit_disk_smart_available" for k in s),
            timeout=120,
        )
    finally:
        root.stop()
    direct_ = {k: v for k, v in s2.items() if k[0].startswith("wattbit_disk_smart_available")}
    assert via_helper == direct_ and via_helper
    assert f"smartctl-helper: read /dev/{name} auto: exit" in (rundir / "helper.log").read_text()


# --- the bounds of one run, on real processes standing in for a hung or chatty smartctl --------


def _module():  # type: ignore[no-untyped-def]
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("smartctl_helper_run", str(HELPER))
    spec = importlib.util.spec_from_loader("smartctl_helper_run", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


H = _module()


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # killed (its reaper is this test process)


def test_a_run_past_its_deadline_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with pytest.raises(H.Refused, match="did not finish in time"):
        H.run(["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 600"], time.monotonic() + 1)
    pid = int(pidfile.read_text())
    wait_for(lambda: _gone(pid), 30, "the hung stand-in killed")


def test_an_output_past_the_bound_is_refused() -> None:
    argv = ["/bin/sh", "-c", "exec head -c 3000000 /dev/zero"]
    with pytest.raises(H.Refused, match="output is too large"):
        H.run(argv, time.monotonic() + 60, max_output=1 << 20)
    code, out = H.run(argv, time.monotonic() + 60, max_output=4 << 20)
    assert code == 0 and len(out) == 3000000


def test_a_client_that_hangs_up_ends_the_run(tmp_path: Path) -> None:
    """The agent gave up (its timeout is shorter than the helper's): smartctl is killed then,
    not at the helper's own deadline; a half-close after the request is not a hang-up."""
    pidfile = tmp_path / "pid"
    a, b = socket.socketpair()
    with a, b:
        b.shutdown(socket.SHUT_WR)  # half-close: still there
        code, out = H.run(
            ["/bin/sh", "-c", "sleep 0.2; echo hi"], time.monotonic() + 60, client=a.fileno()
        )
        assert (code, out) == (0, b"hi\n")
        errors: list[BaseException] = []

        def run() -> None:
            try:
                H.run(
                    ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 600"],
                    time.monotonic() + 600,
                    client=a.fileno(),
                )
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=run)
        t.start()
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 30, "the stand-in")
        b.close()  # the client is gone
        t.join(timeout=60)
    assert not t.is_alive()
    assert len(errors) == 1 and "the client went away" in str(errors[0])
    pid = int(pidfile.read_text())
    wait_for(lambda: _gone(pid), 30, "the stand-in killed")


# --- disks behind a RAID controller: the helper's own scan decides -------------------------

FIXTURES_SMART = ROOT / "tests" / "fixtures" / "smart"


def test_the_helpers_read_is_the_agents_read() -> None:
    from exporters.smart.runner import SCAN_ARGS, SMARTCTL_ARGS

    assert H.READ_ARGS == SMARTCTL_ARGS and H.SCAN_ARGS == SCAN_ARGS


def test_a_raid_member_is_read_only_when_the_helpers_scan_lists_it(tmp_path: Path) -> None:
    """A stand-in smartctl answering as scrutiny's MegaRAID host (its scan, the real capture
    of slot 1): the (path, type) pair the scan lists is read with -d TYPE; another slot on
    the same path, or the listed slot on another path, is refused."""
    calls = tmp_path / "calls"
    fake = tmp_path / "smartctl"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in\n'
        f"--scan-open*) cat {FIXTURES_SMART / 'scan_megaraid.json'} ;;\n"
        f'*"-d megaraid,1 /dev/bus/0") cat {FIXTURES_SMART}/megaraid_sat_WD4000FYYX_slot1.json'
        "; exit 4 ;;\n"
        "*) exit 1 ;;\n"
        "esac\n"
    )
    fake.chmod(0o755)
    got = H.answer(H.parse_request(b"read /dev/bus/0 megaraid,1\n"), smartctl=str(fake))
    assert got["exit_code"] == 4
    assert json.loads(str(got["output"]))["device"]["type"] == "sat+megaraid,1"
    for line in (b"read /dev/bus/0 megaraid,7\n", b"read /dev/bus/1 megaraid,1\n"):
        with pytest.raises(H.Refused, match="not a device smartctl's scan"):
            H.answer(H.parse_request(line), smartctl=str(fake))
    runs = calls.read_text().splitlines()
    assert runs[0] == "--scan-open --json=c"
    assert runs[1] == " ".join([*H.READ_ARGS, "-d", "megaraid,1", "/dev/bus/0"])
    assert runs[2:] == ["--scan-open --json=c"] * 2  # refused: scanned, never read
