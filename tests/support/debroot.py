"""Fresh Debian 12 roots for the package tier (tests/integration/test_package_*.py).

* `built()`: `packaging/build.sh` once per test run, shared by the xdist workers (the wheel,
  its dependencies as wheels, the .deb, the RPM), from this tree.
* `base_tarball()`: a Debian 12 root made by mmdebstrap from Debian's archive, cached under
  /var/cache/wattbit-test/ and keyed by the hash of its package list (a changed list makes a
  new root; an unchanged one is reused across sessions).
* `DebRoot`: one such root unpacked into a test's directory; `run()` executes in it with
  /proc, /sys (so /sys/kernel/btf) and /dev bind-mounted, in a private mount namespace of its
  own, so that nothing stays mounted on the test machine when the command ends.
* `Unit` / `setpriv_argv()`: a unit file's user, group and capabilities, applied with setpriv
  as systemd would apply them (the tier cannot run systemd: PID 1 here is not systemd).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.env import ROOT

CACHE = Path(os.environ.get("WATTBIT_TEST_CACHE", "/var/cache/wattbit-test"))
SUITE = "bookworm"
# What a Debian 12 data mover has before wattbit: the package's Depends and Recommends (so the
# install needs no download), python3-venv (the wheel's tier), python3-apt (Ansible's apt
# module), systemd (systemctl and systemd-analyze on the units). No compiler among them.
PACKAGES = (
    "adduser",
    "ca-certificates",
    "freeipmi-tools",
    "libbpf1",
    "python3",
    "python3-apt",
    "python3-venv",
    "python3.11",
    "smartmontools",
    "systemd",
)
COMPILERS = ("gcc", "cc", "c++", "clang", "llc", "cpp", "g++", "ld", "as")

_built: dict[str, Path] | None = None
_installed: tuple[DebRoot, dict[str, tuple[int, int, int]]] | None = None
_lintian: subprocess.Popen[str] | None = None


def built() -> dict[str, Path]:
    """dist/'s wheel, .deb and RPM and build/wheelhouse, built once per session."""
    global _built
    # WATTBIT_TEST_PREBUILT=1: take dist/ as it is (a developer re-running one test)
    if _built is None and os.environ.get("WATTBIT_TEST_PREBUILT") != "1":
        _build_once_per_run()
    if _built is None:
        dist = ROOT / "dist"
        _built = {
            "wheel": _one(dist.glob("wattbit-*-py3-none-any.whl")),
            "deb": _one(dist.glob("wattbit_*_amd64.deb")),
            "rpm": _one(dist.glob("wattbit-*.x86_64.rpm")),
            "wheelhouse": ROOT / "build" / "wheelhouse",
        }
    return _built


def _build_once_per_run() -> None:
    """`packaging/build.sh` into dist/, once per pytest run even across xdist workers.

    The package tests are split between the serial lane (test_package_deb: loop disks, BPF)
    and a group of their own on another worker (tests/conftest.py): both read dist/, which a
    build rewrites. Under a lock, the first worker builds and stamps dist/ with the run's id
    (pytest-xdist's PYTEST_XDIST_TESTRUNUID, the same on every worker of a run); the others
    wait for it and take its packages. Without xdist the process builds once, as before.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid-{os.getpid()}")
    (ROOT / "build").mkdir(exist_ok=True)
    stamp = ROOT / "build" / ".packages-built-for"
    with open(ROOT / "build" / ".packages.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == run:
            return
        stamp.unlink(missing_ok=True)
        env = dict(os.environ, PACKAGES="deb rpm")
        r = subprocess.run(
            ["bash", "packaging/build.sh"], cwd=ROOT, env=env, capture_output=True, text=True
        )
        if r.returncode != 0:
            raise RuntimeError(f"make package failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
        stamp.write_text(run)


def lintian_started() -> subprocess.Popen[str]:
    """lintian on the session's .deb, started once in the background (it takes a minute of
    mostly waiting on disk; the tier's other tests run meanwhile); read it with communicate()."""
    global _lintian
    if _lintian is None:
        cmd = ["lintian", "--tag-display-limit", "0", "--fail-on", "error,warning"]
        _lintian = subprocess.Popen(
            [*cmd, str(built()["deb"])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return _lintian


def installed_root(base: Path) -> tuple[DebRoot, dict[str, tuple[int, int, int]]]:
    """A fresh root with the .deb installed by apt, and its files just after, once a session
    (test_package_deb runs in it; test_package_ansible compares the role's root with it)."""
    global _installed
    if _installed is None:
        r = DebRoot.fresh(base / "installed-root")
        r.apt_install(built()["deb"])
        _installed = (r, r.files())
    return _installed


def _one(paths: object) -> Path:
    found = sorted(paths)  # type: ignore[call-overload]
    if len(found) != 1:
        raise RuntimeError(f"expected one package, found {found}")
    return Path(found[0])


# Ubuntu 24.04 only to show that the Debian 12 package does not install there (docs/install.md).
# Debian 12 has no Ubuntu archive keyring package: the throwaway root's sources are trusted
# without a signature check, and its package lists are kept so that the test needs no network.
NOBLE = (
    "noble",
    ("python3", "libbpf1", "adduser"),
    ["deb [trusted=yes] http://archive.ubuntu.com/ubuntu noble main universe"],
    ["--skip=cleanup/apt/lists"],
)


def base_tarball(
    suite: str = SUITE,
    packages: tuple[str, ...] = PACKAGES,
    mirrors: list[str] | None = None,
    options: list[str] | None = None,
) -> Path:
    """A cached root (made by mmdebstrap on first use, under a lock), keyed by what it holds."""
    spec = f"{suite} apt {' '.join(sorted(packages))} {mirrors} {options}"
    key = hashlib.sha256(spec.encode()).hexdigest()[:16]
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"{'debian12' if suite == SUITE else suite}-{key}.tar.zst"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions: one builds, the other waits
        if not tarball.exists():
            tmp = tarball.with_suffix(f".tmp{os.getpid()}.tar.zst")
            cmd = ["mmdebstrap", "--variant=apt", f"--include={','.join(packages)}"]
            cmd += [*(options or []), suite, str(tmp), *(mirrors or [])]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            if r.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise RuntimeError(f"mmdebstrap failed: {r.stderr[-3000:]}")
            os.replace(tmp, tarball)
    return tarball


@dataclass
class DebRoot:
    """A fresh Debian 12 root unpacked at `path`."""

    path: Path

    @classmethod
    def fresh(cls, path: Path, tarball: Path | None = None) -> DebRoot:
        """Unpack the cached root (default: Debian 12's) into `path` (made empty first)."""
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        tarball = tarball or base_tarball()
        subprocess.run(["tar", "--zstd", "-xpf", str(tarball), "-C", str(path)], check=True)
        return cls(path)

    def argv(self, argv: list[str], binds: bool = True) -> list[str]:
        """A command line that runs `argv` chrooted here, in a private mount namespace."""
        mounts = 'for d in proc sys dev; do mount --rbind /$d "$R/$d"; done; ' if binds else ""
        script = f'set -e; R={shlex.quote(str(self.path))}; {mounts}cd "$R"; exec chroot "$R" "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]

    def run(
        self, *argv: str, check: bool = True, timeout: float = 600, binds: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run in the root; output captured; CalledProcessError (with it) if check fails."""
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/root"}
        env["DEBIAN_FRONTEND"] = "noninteractive"
        r = subprocess.run(
            self.argv(list(argv), binds), capture_output=True, text=True, timeout=timeout, env=env
        )
        if check and r.returncode != 0:
            raise AssertionError(
                f"{argv} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            )
        return r

    def copy_in(self, src: Path, dest: str) -> str:
        """Copy a file into the root; its path inside."""
        target = self.path / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        return dest

    def apt_install(self, deb: Path) -> subprocess.CompletedProcess[str]:
        """`apt-get install` of a local .deb, as a site would; nothing downloaded (the root has
        every dependency, from Debian: apt's --no-download refuses local files, hence the check)."""
        inside = self.copy_in(deb, f"/tmp/{deb.name}")
        r = self.run("apt-get", "install", "-y", inside)
        fetched = [x for x in r.stdout.splitlines() if x.startswith("Get:") and " /tmp/" not in x]
        assert not fetched, fetched
        return r

    def files(self) -> dict[str, tuple[int, int, int]]:
        """Every path under the root (relative) -> (mode, uid, gid), /proc /sys /dev excluded."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.path):
            rel_dir = os.path.relpath(dirpath, self.path)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d not in ("proc", "sys", "dev")]
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                st = os.lstat(full)
                out[os.path.normpath(os.path.join(rel_dir, name))] = (
                    st.st_mode,
                    st.st_uid,
                    st.st_gid,
                )
        return out

    def compilers(self) -> list[str]:
        """Compilers or assemblers on the root's PATH directories (there should be none)."""
        found = []
        for d in ("usr/bin", "usr/local/bin", "bin"):
            base = self.path / d
            if not base.is_dir():
                continue
            for entry in base.iterdir():
                name = entry.name
                stem = name.split("-")[0]
                if (
                    name in COMPILERS
                    or stem in ("gcc", "clang", "llc", "g++")
                    or name.startswith(("llvm", "x86_64-linux-gnu-gcc", "clang"))
                ):
                    found.append(f"/{d}/{name}")
        return sorted(found)


@dataclass
class Unit:
    """What a unit's [Service] section says about who runs and with what."""

    user: str = "root"
    group: str = "root"
    ambient: list[str] = field(default_factory=list)
    bounding: list[str] | None = None  # None: not restricted
    no_new_privs: bool = False
    exec_start: list[str] = field(default_factory=list)
    exec_start_pre: list[str] = field(default_factory=list)
    settings: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Unit:
        """Parse a unit file's [Service] section (the keys the tier applies)."""
        section, settings = "", dict[str, list[str]]()
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            if section == "Service" and "=" in line:
                key, _, value = line.partition("=")
                settings.setdefault(key.strip(), []).append(value.strip())
        u = cls(settings=settings)
        u.user = settings.get("User", ["root"])[-1]
        u.group = settings.get("Group", [u.user])[-1]
        u.ambient = _caps(settings.get("AmbientCapabilities", []))
        if "CapabilityBoundingSet" in settings:
            u.bounding = _caps(settings["CapabilityBoundingSet"])
        u.no_new_privs = settings.get("NoNewPrivileges", ["no"])[-1] in ("yes", "true", "1")
        u.exec_start = shlex.split(settings["ExecStart"][-1])
        u.exec_start_pre = settings.get("ExecStartPre", [])
        return u


def _caps(values: list[str]) -> list[str]:
    """systemd's rule: each line adds; an empty assignment resets."""
    caps: list[str] = []
    for v in values:
        caps = [] if not v else caps + v.split()
    return caps


def setpriv_argv(unit: Unit) -> list[str]:
    """setpriv options that give a process the unit's user, groups and capabilities."""

    def spec(caps: list[str]) -> str:
        return ",".join(["-all", *(f"+{c.lower().removeprefix('cap_')}" for c in caps)])

    argv = ["setpriv", f"--reuid={unit.user}", f"--regid={unit.group}", "--init-groups"]
    argv += [f"--inh-caps={spec(unit.ambient)}", f"--ambient-caps={spec(unit.ambient)}"]
    if unit.bounding is not None:
        argv.append(f"--bounding-set={spec(unit.bounding)}")
    if unit.no_new_privs:
        argv.append("--no-new-privs")
    return [*argv, "--"]


def proc_status(pid: int, task: str | None = None) -> dict[str, str]:
    """/proc/PID/status (or one thread's, /proc/PID/task/TID/status) as a dict."""
    out = {}
    path = Path(f"/proc/{pid}/task/{task}/status" if task else f"/proc/{pid}/status")
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def bytecode_problems(tree: Path, installed: str = "/opt/wattbit") -> tuple[int, list[str]]:
    """(.py files checked, problems) of a package's environment unpacked at `tree`.

    Each .py under tree's lib/ must have its .pyc beside it (importlib's cache path), written
    for this Python, hash-based and unchecked (used whatever the source's mtime: PEP 552), of
    that very source, and naming the source by its installed path (tracebacks, coverage).
    """
    import importlib.util
    import marshal

    checked, problems = 0, []
    for py in sorted((tree / "lib").rglob("*.py")):
        checked += 1
        pyc = Path(importlib.util.cache_from_source(str(py)))
        where = f"{installed}/{py.relative_to(tree)}"
        if not pyc.is_file():
            problems.append(f"{where}: no {pyc.name}")
            continue
        data = pyc.read_bytes()
        flags = int.from_bytes(data[4:8], "little")
        if data[:4] != importlib.util.MAGIC_NUMBER or flags != 0b01:  # hash-based, unchecked
            problems.append(f"{where}: magic {data[:4].hex()} flags {flags:#b}")
        elif data[8:16] != importlib.util.source_hash(py.read_bytes()):
            problems.append(f"{where}: the .pyc is of another source")
        elif marshal.loads(data[16:]).co_filename != where:
            problems.append(f"{where}: compiled as {marshal.loads(data[16:]).co_filename}")
    return checked, problems
