"""The Debian package on a fresh Debian 12 root (issue 30, "Proven on a fresh root").

`make package`'s .deb, installed with apt into a root made by mmdebstrap from Debian's
archive; then, chrooted with /proc, /sys (its /sys/kernel/btf) and /dev bind-mounted:
* the packaged agent as `wattbit` with exactly the capabilities its unit declares (read from
  the installed unit, applied with setpriv): the CO-RE backend, a loop disk's reads counted as
  /proc/diskstats counts them, CapEff empty once attached, /metrics served;
* the packaged collector as `wattbit` with no capability: snmpsim serving a real recording and
  sushy-static serving a real Redfish mockup, polled;
* the wheel in a fresh virtualenv of that root: the agent the same way;
* the files, the user, the units (`systemd-analyze verify`, the exposure docs/install.md
  records), no compiler, lintian, and install → upgrade → remove → purge with the run
  registry kept until the purge.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.demo.procs import free_port, wait_for
from tests.support.bmcs import MOCKUPS, SushyStatic, sushy_static_path
from tests.support.debroot import (
    DebRoot,
    Unit,
    built,
    bytecode_problems,
    installed_root,
    lintian_started,
    proc_status,
    setpriv_argv,
)
from tests.support.env import FIXTURES, ROOT, require
from tests.support.realparts import (
    LoopDisk,
    diskstats,
    have,
    is_root,
    loop_disks,
    parse_samples,
    stop_process,
)
from tests.support.snmpagents import SnmpSim, have_snmpsim

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.timeout(1500)]

UNITS = "lib/systemd/system"
TOKEN = "package-tier-token-0123456789abcdef"
READS = 1009  # prime: a lost or doubled completion cannot hide


@pytest.fixture(scope="module")
def packages() -> dict[str, Path]:
    require(is_root(), "needs root (chroot, mounts, loop devices, BPF)")
    for tool in ("mmdebstrap", "dpkg-deb", "rpmbuild", "unshare", "setpriv"):
        require(have(tool), f"{tool} is missing (scripts/bootstrap.sh installs it)")
    return built()


@pytest.fixture(scope="module")
def root(packages: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> DebRoot:
    if have("lintian"):
        lintian_started()  # runs while the root is made and the daemons are tested
    return installed_root(tmp_path_factory.getbasetemp())[0]


class InRoot:
    """A daemon started in the root through setpriv with a unit's identity (stopped by stop())."""

    def __init__(self, root: DebRoot, unit: Unit, argv: list[str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        self._fh = log.open("wb")
        cmd = root.argv([*setpriv_argv(unit), *argv, "--listen", f"127.0.0.1:{self.port}"])
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
        # unshare, sh and chroot exec one another: this pid is the daemon's own
        self.proc = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.STDOUT, env=env)
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")

    def text(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as r:
            return str(r.read().decode())

    def until(self, what: str, ok: object, timeout: float = 90.0) -> dict:
        def check() -> dict | None:
            s = parse_samples(self.text())
            return s if ok(s) else None  # type: ignore[operator]

        return wait_for(check, timeout, what, alive=self.alive, logs=[self.log], interval=0.3)

    def stop(self) -> None:
        stop_process(self.proc, 30)
        self._fh.close()


def _value(samples: dict, name: str, **labels: str) -> float | None:
    for (n, lab), v in samples.items():
        if n == name and all(dict(lab).get(k) == x for k, x in labels.items()):
            return float(v)
    return None


def _read_direct(disk: LoopDisk, n: int) -> None:
    """n 4 KiB reads with O_DIRECT (one request each) from the test machine."""
    subprocess.run(
        ["dd", f"if={disk.device}", "of=/dev/null", "bs=4096", f"count={n}", "iflag=direct"],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def disk() -> Iterator[LoopDisk]:
    with loop_disks(1, size_mb=64) as (d,):
        yield d


def _agent_on_disk(r: DebRoot, argv: list[str], disk: LoopDisk, log: Path) -> None:
    """The agent as its unit runs it: core backend, exact counts, capabilities dropped."""
    unit = Unit.read(r.path / UNITS / "wattbit-agent.service")
    assert (unit.user, unit.group) == ("wattbit", "wattbit")
    assert sorted(unit.ambient) == sorted(unit.bounding or []) == ["CAP_BPF", "CAP_PERFMON"]
    agent = InRoot(r, unit, argv, log)
    try:
        # a disk's series appear with its first completion since the attach (none yet: 0)
        s = agent.until(
            "the blockio backend",
            lambda s: _value(s, "wattbit_blockio_backend_info") is not None,
        )
        backends = [dict(k[1]) for k in s if k[0] == "wattbit_blockio_backend_info"]
        # ASSERTION PENDING the privilege work (issue 30 item 2): CO-RE as non-root
        assert backends and backends[0]["backend"] == "core", backends
        status = proc_status(agent.proc.pid)
        uid = r.run("id", "-u", "wattbit").stdout.strip()
        assert status["Uid"].split() == [uid] * 4
        assert int(status["CapBnd"], 16) & ~((1 << 38) | (1 << 39)) == 0  # BPF 39, PERFMON 38
        # docs/install.md: every capability dropped once the tracer is attached, in every
        # thread (the kernel keeps capabilities per task)
        tasks = sorted(Path(f"/proc/{agent.proc.pid}/task").iterdir())
        assert tasks
        for task in tasks:
            st = proc_status(agent.proc.pid, task.name)
            for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
                assert int(st[key], 16) == 0, (task.name, key, st[key])

        def seen(s: dict) -> float:
            """Completions counted, plus those reported unseen (the kernel did not run the
            program for them: docs/exporters/blockio.md)."""
            return sum(
                _value(s, name, device=disk.name, op="read") or 0.0
                for name in ("wattbit_disk_ios_total", "wattbit_disk_ios_unseen_total")
            )

        before, counted0 = seen(s), _value(s, "wattbit_disk_ios_total", device=disk.name, op="read")
        k0 = diskstats()[disk.name][0]
        _read_direct(disk, READS)
        k1 = diskstats()[disk.name][0]
        assert k1 - k0 == READS
        s = agent.until("the reads counted", lambda s: seen(s) - before >= READS)
        assert seen(s) - before == k1 - k0
        counted = _value(s, "wattbit_disk_ios_total", device=disk.name, op="read") or 0.0
        assert 0 < counted - (counted0 or 0.0) <= k1 - k0
        assert "wattbit_exporter_up" in agent.text()
    finally:
        agent.stop()
    assert agent.proc.returncode == 0, log.read_text()[-3000:]


def test_installs_what_the_issue_names_and_no_compiler(root: DebRoot) -> None:
    p = root.path
    assert os.readlink(p / "usr/bin/wattbit") == "/opt/wattbit/bin/wattbit"
    for unit in ("wattbit-agent.service", "wattbit-collector.service"):
        assert (p / UNITS / unit).is_file()
    assert (p / UNITS / "wattbit-smartctl.socket").is_file()
    assert (p / UNITS / "wattbit-smartctl@.service").is_file()
    for helper in ("rapl-access", "smartctl-helper"):
        assert os.access(p / "usr/lib/wattbit" / helper, os.X_OK)
    passwd = root.run("getent", "passwd", "wattbit").stdout.split(":")
    assert passwd[5] == "/var/lib/wattbit" and passwd[6].strip() == "/usr/sbin/nologin"
    uid = int(passwd[2])
    assert uid < 1000  # a system user
    st = (p / "var/lib/wattbit").stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (uid, "0o750")
    conffiles = root.run("dpkg-query", "-W", "-f=${Conffiles}", "wattbit").stdout
    assert "/etc/wattbit/agent.yml" in conffiles and "/etc/wattbit/collector.yml" in conffiles
    # enabled on install: the agent and its smartctl socket; the collector waits for a config
    wants = p / "etc/systemd/system"
    assert (wants / "multi-user.target.wants/wattbit-agent.service").is_symlink()
    assert (wants / "sockets.target.wants/wattbit-smartctl.socket").is_symlink()
    assert not (wants / "multi-user.target.wants/wattbit-collector.service").exists()
    # the defaults are valid configurations
    root.run("wattbit", "collector", "--config", "/etc/wattbit/collector.yml", "--print-config")
    assert root.compilers() == []
    pkgs = root.run("dpkg-query", "-W", "-f=${Package}\\n").stdout.split()
    # gcc-12-base is Essential (libgcc-s1's documentation directory), no compiler
    compilers = re.compile(r"^(gcc|g\+\+|clang|llvm|cpp|binutils)(-[0-9.]+)?(-x86-64.*)?$")
    assert [x for x in pkgs if compilers.match(x)] == []


def test_every_module_ships_its_bytecode_as_installed(packages: dict[str, Path], tmp_path) -> None:
    """The .deb's .pyc: one per .py, unchecked-hash, of that source, named as installed."""
    subprocess.run(["dpkg-deb", "-x", str(packages["deb"]), str(tmp_path)], check=True)
    checked, problems = bytecode_problems(tmp_path / "opt/wattbit")
    assert checked > 1000 and problems == [], problems[:20]


def test_the_installed_agent_imports_from_the_shipped_bytecode(root: DebRoot) -> None:
    """As its unit runs it (user wattbit, /opt read-only to it), the agent compiles nothing:
    every module of /opt/wattbit comes from its shipped .pyc (issue #35), and they are the
    package's own (dpkg --verify: unchanged, none written since)."""
    r = root.run(
        "setpriv", "--reuid=wattbit", "--regid=wattbit", "--clear-groups",
        "/opt/wattbit/bin/python3", "-v", "/opt/wattbit/bin/wattbit", "agent", "--check",
        "--json", check=False,
    )  # fmt: skip
    assert '"process": "agent"' in r.stdout, r.stderr[-3000:]
    # importlib -v: "# code object from '<.pyc>'" when the bytecode is used, and
    # "# code object from <.py>" when the source is compiled instead
    used = re.findall(r"^# code object from '(/opt/wattbit/\S+\.pyc)'$", r.stderr, re.M)
    compiled = re.findall(r"^# code object from (/opt/wattbit/\S+\.py)$", r.stderr, re.M)
    assert compiled == [] and len(used) > 100, (compiled[:20], len(used))
    assert any("/exporters/blockio/" in u for u in used) and any("/pydantic/" in u for u in used)
    changed = root.run("dpkg", "--verify", "wattbit", check=False).stdout
    assert "__pycache__" not in changed, changed


def test_units_verify_clean_and_their_exposure_is_the_documented_one(root: DebRoot) -> None:
    units = [f"/{UNITS}/{u}" for u in ("wattbit-agent.service", "wattbit-collector.service")]
    units += [f"/{UNITS}/wattbit-smartctl.socket"]
    r = root.run("systemd-analyze", "verify", "--man=no", *units, check=False, binds=False)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    documented = dict(
        re.findall(
            r"^\| `(wattbit-[a-z@.]+)` \| ([0-9.]+) ", (ROOT / "docs/install.md").read_text(), re.M
        )
    )
    for unit in ("wattbit-agent.service", "wattbit-collector.service", "wattbit-smartctl@.service"):
        out = root.run(
            "systemd-analyze", "security", "--offline=true", "--no-pager", f"/{UNITS}/{unit}",
            check=False, binds=False,
        ).stdout  # fmt: skip
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
        assert m, out[-2000:]
        assert documented.get(unit) == m.group(1), (unit, m.group(1), documented)


def test_packaged_agent_runs_as_its_unit_says(root: DebRoot, disk: LoopDisk, tmp_path) -> None:
    unit = Unit.read(root.path / UNITS / "wattbit-agent.service")
    assert unit.exec_start[:2] == ["/usr/bin/wattbit", "agent"]
    # ExecStartPre=+rapl-access would chgrp this machine's own /sys/class/powercap files to a
    # gid of the root's: not run here (test_rapl_access_real runs the helper)
    assert unit.exec_start_pre == ["+/usr/lib/wattbit/rapl-access"]
    _agent_on_disk(root, unit.exec_start, disk, tmp_path / "agent.log")


def test_packaged_collector_polls_a_pdu_and_a_bmc_without_capabilities(
    root: DebRoot, tmp_path: Path
) -> None:
    require(have_snmpsim(), "snmpsim is not installed in the virtualenv")
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")
    unit = Unit.read(root.path / UNITS / "wattbit-collector.service")
    assert unit.ambient == [] and unit.bounding == [] and unit.no_new_privs
    recording = FIXTURES / "pdu" / "recordings" / "dell_rpdu-dell6606.snmprec"  # 24 metered
    with SnmpSim([recording]) as sim, SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp_path) as bmc:
        secrets = root.path / "etc/wattbit/secrets"
        for name, value in (("snmp-community", recording.stem), ("bmc-pw", "Rf-Pkg-S3cret-1")):
            (secrets / name).write_text(value + "\n")
            root.run("chown", "wattbit:wattbit", f"/etc/wattbit/secrets/{name}")
            (secrets / name).chmod(0o600)
        (root.path / "etc/wattbit/collector.yml").write_text(f"""
interval: 2s
state_dir: /var/lib/wattbit
auths:
  site: {{version: 2c, community_file: /etc/wattbit/secrets/snmp-community}}
pdus:
  - name: rack1
    address: "127.0.0.1:{sim.port}"
    auth: site
    outlets: [{{index: [1], host: mover01}}]
bmcs:
  - name: mover02-bmc
    protocol: redfish
    address: {bmc.url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_file: /etc/wattbit/secrets/bmc-pw
    host: mover02
""")
        coll = InRoot(root, unit, unit.exec_start, tmp_path / "collector.log")
        try:
            s = coll.until(
                "the PDU and the BMC polled",
                lambda s: (
                    _value(s, "wattbit_pdu_up", pdu="rack1") == 1.0
                    and _value(s, "wattbit_bmc_power_watts") is not None
                ),
            )
            status = proc_status(coll.proc.pid)
        finally:
            coll.stop()
    assert _value(s, "wattbit_pdu_outlet_power_watts", host="mover01") is not None
    assert _value(s, "wattbit_bmc_power_watts", host="mover02") == 97.0  # the mockup's reading
    for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(status[key], 16) == 0, (key, status[key])
    assert "Rf-Pkg-S3cret-1" not in coll.log.read_text()


def test_report_in_the_package_names_the_extra(root: DebRoot) -> None:
    r = root.run("wattbit", "report", "x", "--prometheus", "http://127.0.0.1:9", check=False)
    assert r.returncode == 1
    assert "pip install 'wattbit[report]'" in r.stderr


def test_the_wheel_in_a_fresh_venv_runs_the_agent_the_same_way(
    root: DebRoot, packages: dict[str, Path], disk: LoopDisk, tmp_path: Path
) -> None:
    house = "/tmp/wheelhouse"
    for whl in packages["wheelhouse"].glob("*.whl"):
        root.copy_in(whl, f"{house}/{whl.name}")
    root.copy_in(packages["wheel"], f"{house}/{packages['wheel'].name}")
    root.run("python3", "-m", "venv", "/srv/wheel-venv")
    root.run(
        "/srv/wheel-venv/bin/pip", "install", "-q", "--no-index", "--find-links", house, "wattbit"
    )
    root.run("chmod", "-R", "a+rX", "/srv/wheel-venv")
    assert (
        root.path
        / "srv/wheel-venv/lib/python3.11/site-packages/exporters/blockio/core/blockio.bpf.o"
    ).is_file()
    assert not list((root.path / "srv/wheel-venv/lib/python3.11/site-packages").glob("matplotlib*"))
    assert root.compilers() == []
    _agent_on_disk(root, ["/srv/wheel-venv/bin/wattbit", "agent"], disk, tmp_path / "agent.log")


def test_lintian_is_clean_or_each_override_says_why(packages: dict[str, Path]) -> None:
    require(have("lintian"), "lintian is missing")
    proc = lintian_started()  # started with the module (the root fixture)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-5000:]
    overrides = (ROOT / "packaging/deb/lintian-overrides").read_text().split("\n\n")
    for block in overrides:
        lines = [x for x in block.strip().splitlines() if x]
        assert lines[0].startswith("#"), f"an override without its reason: {block}"


def test_the_agent_stops_cleanly_on_sigterm_as_systemd_stops_it(root: DebRoot, tmp_path) -> None:
    """systemd stops with SIGTERM: the packaged agent exits 0 (not a failure of the unit)."""
    unit = Unit.read(root.path / UNITS / "wattbit-agent.service")
    agent = InRoot(root, unit, unit.exec_start, tmp_path / "agent.log")
    try:
        agent.until("the agent", lambda s: True)
        agent.proc.send_signal(signal.SIGTERM)
        assert agent.proc.wait(30) == 0
    finally:
        agent.stop()


def test_upgrade_keeps_the_registry_remove_keeps_it_purge_deletes_it(
    root: DebRoot, packages: dict[str, Path], tmp_path: Path
) -> None:
    """A run started on the installed package survives the upgrade (the collector of the new
    version lists it) and the remove; the purge deletes the registry and the configuration."""
    secrets = root.path / "etc/wattbit/secrets"
    (secrets / "run-token").write_text(TOKEN + "\n")
    root.run("chown", "wattbit:wattbit", "/etc/wattbit/secrets/run-token")
    (secrets / "run-token").chmod(0o600)
    (root.path / "etc/wattbit/collector.yml").write_text(
        "state_dir: /var/lib/wattbit\nruns: {token_file: /etc/wattbit/secrets/run-token}\n"
    )
    unit = Unit.read(root.path / UNITS / "wattbit-collector.service")

    def with_collector(*args: str) -> str:
        coll = InRoot(root, unit, unit.exec_start, tmp_path / "collector.log")
        try:
            coll.until("the collector", lambda s: True)
            env = dict(os.environ, WATTBIT_TOKEN=TOKEN, PYTHONPATH=str(ROOT))
            url = f"http://127.0.0.1:{coll.port}"
            r = subprocess.run(
                [sys.executable, "-m", "collector.cli", "run", *args, "--collector", url],
                capture_output=True, text=True, env=env, timeout=60,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            return r.stdout
        finally:
            coll.stop()

    with_collector("start", "pkg-upgrade-run")
    registry = sorted((root.path / "var/lib/wattbit").iterdir())
    assert registry, "the collector wrote no run registry"
    # the upgrade: the same tree as a newer version (every file replaced)
    newer = _rebuilt(packages["deb"], tmp_path, "+upgrade1")
    r = root.apt_install(newer)
    assert "Unpacking wattbit" in r.stdout
    assert root.run("dpkg-query", "-W", "-f=${Version}", "wattbit").stdout.endswith("+upgrade1")
    assert "pkg-upgrade-run" in with_collector("list")
    assert TOKEN in (secrets / "run-token").read_text()
    root.run("apt-get", "remove", "-y", "wattbit")
    assert not (root.path / "usr/bin/wattbit").exists()
    assert not (root.path / "opt/wattbit").exists()
    assert sorted((root.path / "var/lib/wattbit").iterdir()) == registry
    assert (root.path / "etc/wattbit/collector.yml").exists()  # remove keeps conffiles
    root.run("apt-get", "purge", "-y", "wattbit")
    assert not (root.path / "var/lib/wattbit").exists()
    assert not (root.path / "etc/wattbit").exists()
    assert root.run("dpkg-query", "-W", "wattbit", check=False).returncode != 0


def _rebuilt(deb: Path, tmp: Path, suffix: str) -> Path:
    """The same package with a higher version (for an upgrade from the first)."""
    tree = tmp / "deb-tree"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN" / "control"
    text = control.read_text()
    version = re.search(r"^Version: (\S+)$", text, re.M)
    assert version
    control.write_text(text.replace(version.group(0), f"Version: {version.group(1)}{suffix}"))
    out = tmp / f"wattbit_{version.group(1)}{suffix}_amd64.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "-z1", "--build", str(tree), str(out)], check=True,
                   capture_output=True)  # fmt: skip
    return out
