"""What this process may do: its Linux capability sets, read (through read.py) and dropped.

Every exporter decides from its capabilities, never from ``euid == 0``: root in a container or
under a systemd unit with ``CapabilityBoundingSet=`` may hold almost none, and the packaged
agent runs as the ``wattbit`` user holding exactly CAP_BPF and CAP_PERFMON
(docs/privileges.md). The sets are read from /proc/self/status (``parse_status`` is a pure
function over its text); they are lowered with capset(2) and prctl(2) through libc (ctypes:
the standard library has neither, and python-prctl/pycapng are not in Debian 12 for 3.11).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .read import PROC_ROOT, read_proc

# include/uapi/linux/capability.h, in its order (CAP_LAST_CAP is 40 since Linux 5.9).
_ALL = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)
CAP_NUMBERS = {name: i for i, name in enumerate(_ALL)}
CAP_NAMES = {v: k for k, v in CAP_NUMBERS.items()}
CAP_SYS_ADMIN = CAP_NUMBERS["CAP_SYS_ADMIN"]
CAP_SYS_RAWIO = CAP_NUMBERS["CAP_SYS_RAWIO"]
CAP_PERFMON = CAP_NUMBERS["CAP_PERFMON"]
CAP_BPF = CAP_NUMBERS["CAP_BPF"]
CAP_SETPCAP = CAP_NUMBERS["CAP_SETPCAP"]

_SET_LINE = re.compile(r"^Cap(Inh|Prm|Eff|Bnd|Amb):\s*([0-9a-fA-F]{1,16})\s*$")


@dataclass(frozen=True)
class CapSets:
    """A process's five capability sets, as bit masks (bit n: capability n)."""

    inheritable: int = 0
    permitted: int = 0
    effective: int = 0
    bounding: int = 0
    ambient: int = 0

    def has(self, cap: int) -> bool:
        """Whether cap is in the effective set (what the kernel checks)."""
        return bool(self.effective >> cap & 1)


def parse_status(text: str) -> CapSets:
    """The capability sets in a /proc/PID/status text (absent lines: empty sets)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = _SET_LINE.match(line)
        if m:
            found[m.group(1)] = int(m.group(2), 16)
    return CapSets(
        inheritable=found.get("Inh", 0),
        permitted=found.get("Prm", 0),
        effective=found.get("Eff", 0),
        bounding=found.get("Bnd", 0),
        ambient=found.get("Amb", 0),
    )


def current(proc_root: Path = PROC_ROOT, pid: str = "thread-self") -> CapSets:
    """The capability sets of a task (default: this thread: the kernel keeps them per
    thread, and /proc/self is the process's main thread); empty sets when unreadable."""
    return parse_status(read_proc(proc_root / pid / "status", 1 << 16))


def names(mask: int) -> list[str]:
    """The capability names in a mask, lowest first ("cap_41" for one without a name here)."""
    return [CAP_NAMES.get(b, f"cap_{b}") for b in range(64) if mask >> b & 1]


def mask(caps: Iterable[int]) -> int:
    """The bit mask of some capability numbers."""
    out = 0
    for c in caps:
        out |= 1 << c
    return out


def _kernel(release: str | None) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release or os.uname().release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def cap_last_cap(proc_root: Path = PROC_ROOT, release: str | None = None) -> int:
    """The highest capability this kernel knows (/proc/sys/kernel/cap_last_cap, Linux 3.2+;
    else guessed from the release: CAP_BPF came in 5.8, CAP_CHECKPOINT_RESTORE in 5.9)."""
    text = read_proc(proc_root / "sys" / "kernel" / "cap_last_cap", 64).strip()
    if text.isascii() and text.isdigit() and len(text) <= 3:
        return int(text)
    k = _kernel(release)
    return 40 if k >= (5, 9) else CAP_BPF if k >= (5, 8) else 37


def bpf_tracing_missing(eff: int, last_cap: int | None = None) -> list[str]:
    """The capabilities missing to load and attach a tracing BPF program (tp_btf, kprobes,
    tracepoints); [] when eff suffices. last_cap: cap_last_cap() (default: this kernel's).

    On a kernel that knows CAP_BPF (mainline 5.8, commit a17b53c4a4b5 "bpf, capability:
    Introduce CAP_BPF", or a distribution kernel with it backported: decided by what the
    kernel knows, not by its version) BPF_PROG_LOAD wants CAP_BPF, and for tracing program
    types also CAP_PERFMON (kernel/bpf/syscall.c, is_perfmon_prog_type); CAP_SYS_ADMIN still
    implies both. A kernel without CAP_BPF wants CAP_SYS_ADMIN.
    """
    if eff >> CAP_SYS_ADMIN & 1:
        return []
    if (cap_last_cap() if last_cap is None else last_cap) < CAP_BPF:
        return ["CAP_SYS_ADMIN"]
    return [CAP_NAMES[c] for c in (CAP_BPF, CAP_PERFMON) if not eff >> c & 1]


# --- lowering the sets -----------------------------------------------------------------------

_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
PR_CAP_AMBIENT_CLEAR_ALL = 4


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass(frozen=True)
class DropResult:
    """What drop_to() left: the sets after, and the bounding-set entries it could not drop."""

    after: CapSets
    bounding_kept: list[str]  # could not be dropped from the bounding set (no CAP_SETPCAP)


def drop_to(
    keep: Iterable[int], proc_root: Path = Path("/proc"), effective: Iterable[int] = ()
) -> DropResult:
    """Lower every set of this process to keep, with an effective set of only those of keep
    also in effective (never raises a capability).

    keep alone stays permitted, inheritable and ambient: for what the process executes
    (smartctl's child). effective: kept in the permitted and effective sets only, for the
    process itself (its threads started later inherit them): the bpf() map reads of a kernel
    that refuses them without CAP_BPF (bpf_read_keep).

    The bounding set first (that needs CAP_SETPCAP, which the packaged unit does not grant:
    then the bounding set stays as the unit set it, which is harmless: with empty
    inheritable and ambient sets and NoNewPrivileges, nothing this process executes gains
    from it), then the ambient set, then effective/permitted/inheritable with capset(2).
    Applies to the calling thread: call it before starting threads (the kernel keeps
    capabilities per thread). Raises OSError when capset fails.
    """
    libc = _libc()
    before = current(proc_root)
    own = mask(effective) & before.permitted
    want = mask(keep) & before.permitted
    kept_bounding = []
    for cap in range(64):
        dropping = before.bounding >> cap & 1 and not (want | own) >> cap & 1
        if dropping and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            kept_bounding.append(CAP_NAMES.get(cap, f"cap_{cap}"))
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    hdr = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    for i in range(2):
        word = want >> (32 * i) & 0xFFFFFFFF
        mine = own >> (32 * i) & 0xFFFFFFFF
        # A kept one is for what the process executes (permitted + inheritable, and ambient
        # below), never effective; one the process itself still uses stays permitted and
        # effective, and is not handed to what it executes.
        data[i].inheritable = word
        data[i].permitted = word | mine
        data[i].effective = mine
    if libc.capset(ctypes.byref(hdr), data) != 0:
        err = ctypes.get_errno() or errno.EPERM
        raise OSError(err, f"capset: {os.strerror(err)}")
    # Kept capabilities also go to what this process executes (smartctl run directly by a
    # non-root agent): ambient, which needs them permitted and inheritable (just set).
    for cap in range(64):
        if want >> cap & 1:
            libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0)
    return DropResult(current(proc_root), kept_bounding)


def raise_effective(cap: int) -> bool:
    """Make a permitted capability effective in the calling thread only (capset(2) acts on
    the calling thread): for an exporter's own thread that uses one it kept (the tcp exporter
    reading other processes' /proc/PID/fd needs CAP_SYS_PTRACE). Whether it is effective now;
    never raises one that is not permitted."""
    libc = _libc()
    hdr = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if libc.capget(ctypes.byref(hdr), data) != 0:
        return False
    word, bit = divmod(cap, 32)
    if not data[word].permitted >> bit & 1:
        return False
    if data[word].effective >> bit & 1:
        return True
    data[word].effective |= 1 << bit
    return bool(libc.capset(ctypes.byref(hdr), data) == 0)


# --- what the process needs after the drop ---------------------------------------------------

# bpf_capable() (include/linux/capability.h): CAP_BPF, or CAP_SYS_ADMIN which implies it.
BPF_CAPABLE = (CAP_BPF, CAP_SYS_ADMIN)


def _capget(libc: ctypes.CDLL) -> tuple[_Header, ctypes.Array[_Data]]:
    hdr = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if libc.capget(ctypes.byref(hdr), data) != 0:
        err = ctypes.get_errno() or errno.EPERM
        raise OSError(err, f"capget: {os.strerror(err)}")
    return hdr, data


def _capset(libc: ctypes.CDLL, hdr: _Header, data: ctypes.Array[_Data]) -> None:
    if libc.capset(ctypes.byref(hdr), data) != 0:
        err = ctypes.get_errno() or errno.EPERM
        raise OSError(err, f"capset: {os.strerror(err)}")


def needs(lower: Iterable[int], action: Callable[[], object]) -> bool:
    """Whether action fails with EPERM once lower is taken out of the calling thread's
    effective set (the permitted set untouched: capset(2) on this thread only); the effective
    set is put back afterwards whatever happens. Another OSError, or none: False. Raises
    OSError when the sets cannot be read or changed."""
    libc = _libc()
    hdr, saved = _capget(libc)
    low = (_Data * 2)()
    for i in range(2):
        low[i].permitted, low[i].inheritable = saved[i].permitted, saved[i].inheritable
        low[i].effective = saved[i].effective & ~(mask(lower) >> (32 * i) & 0xFFFFFFFF)
    _capset(libc, hdr, low)
    try:
        action()
    except OSError as exc:
        return exc.errno == errno.EPERM
    finally:
        # Effective back to what it was: always allowed (a subset of the same permitted set).
        _capset(libc, hdr, saved)
    return False


def bpf_read_keep(read: Callable[[], object], proc_root: Path = PROC_ROOT) -> frozenset[int]:
    """The capability to keep effective after the drop so that read (one real bpf() read of a
    map or iterator this process created) still works: {CAP_BPF} (CAP_SYS_ADMIN where the
    kernel has no CAP_BPF or the process holds only that), or none where the read needs no
    capability. Call it before the drop, before other threads start.

    Linux 5.8 to 6.4 refuse every bpf() command, map reads included, without bpf_capable()
    while kernel.unprivileged_bpf_disabled is set (the check at the top of __sys_bpf, moved
    into map_create() and bpf_prog_load() by commit 1d28635abcf1 "bpf: Move unprivileged
    checks into map_create() and bpf_prog_load()", Linux 6.5, backported to 6.4.y; vendor
    kernels differ). The version cannot tell (backports): the read is tried without them.
    """
    held = current(proc_root).effective
    if not held & mask(BPF_CAPABLE):
        return frozenset()
    try:
        refused = needs(BPF_CAPABLE, read)
    except OSError:  # the sets could not be changed (a seccomp filter): keep, to be safe
        refused = True
    if not refused:
        return frozenset()
    if cap_last_cap(proc_root) >= CAP_BPF and held >> CAP_BPF & 1:
        return frozenset({CAP_BPF})
    return frozenset({CAP_SYS_ADMIN})


def bpf_read_reason(proc_root: Path = PROC_ROOT) -> str:
    """Why bpf_read_keep kept a capability, for logs and the preflight."""
    value = read_proc(proc_root / "sys" / "kernel" / "unprivileged_bpf_disabled", 16).strip()
    shown = value if value.isascii() and value.isdigit() and len(value) <= 3 else "?"
    return (
        "this kernel refuses bpf() map reads without it "
        f"(kernel.unprivileged_bpf_disabled={shown}; Linux < 6.5)"
    )
