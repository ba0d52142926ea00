"""Who owns a socket: its cgroup v2 (by id) and its process (by inode), cached and bounded."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from exporters.base import clean_text
from exporters.tcp import hostread

MAX_CGROUP_DIRS = 50_000
MAX_FDS = 500_000  # readlinks per process scan: beyond, the rest of /proc waits for the next
MAX_LABEL = 128
_CONTAINER = re.compile(r"(?:^|[-:])([0-9a-f]{64})(?:\.scope)?$")
_UNIT = re.compile(r"^[\w@.\\:-]+\.(?:service|scope)$")


def cgroup_name(path: str) -> str:
    """The label for a cgroup v2 path (relative to the mount): container, unit, else the path.

    `system.slice/docker-<64 hex>.scope` -> `container:<12 hex>`;
    `system.slice/nginx.service` -> `nginx.service`; the root -> `/`.
    """
    parts = [p for p in path.split("/") if p]
    for p in reversed(parts):
        m = _CONTAINER.search(p)
        if m:
            return "container:" + m.group(1)[:12]
    for p in reversed(parts):
        if _UNIT.match(p):
            return p[:MAX_LABEL]
    # a directory name is anyone's text: printable, one line (exporters.base.clean_text)
    return clean_text("/" + "/".join(parts), MAX_LABEL)


class CgroupNames:
    """cgroup id -> label, from one bounded walk of the cgroup v2 tree, redone when an unknown
    id shows up (at most every `refresh` seconds)."""

    def __init__(
        self, sys_root: Path, refresh: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sys_root = sys_root
        self.refresh = refresh
        self.clock = clock
        self.names: dict[int, str] = {}
        self.walked: float | None = None

    def _mount(self) -> str:
        """Where cgroup v2 is: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host
        (systemd's hybrid layout: v1 controllers beside a v2 tree for process tracking)."""
        if hostread.exists(self.sys_root, "fs/cgroup/cgroup.controllers"):
            return "fs/cgroup"
        return "fs/cgroup/unified"

    def name(self, cgroup_id: int | None) -> str:
        """The label of a cgroup id ("" when unknown or not given)."""
        if cgroup_id is None:
            return ""
        got = self.names.get(cgroup_id)
        if got is None:
            now = self.clock()
            if self.walked is None or now - self.walked >= self.refresh:
                self.walked = now
                self.names = {
                    ino: cgroup_name(path)
                    for path, ino in hostread.walk_dirs(
                        self.sys_root, self._mount(), MAX_CGROUP_DIRS
                    )
                }
                got = self.names.get(cgroup_id)
        return got or ""


def parse_stat_cpu(text: str) -> int | None:
    """Field 39 (`processor`, the CPU last run on) of /proc/PID/stat; None if absent.

    The second field, the command, is in parentheses and may hold spaces and ')': split after
    the last ')' (proc(5)).
    """
    end = text.rfind(")")
    if end < 0:
        return None
    rest = text[end + 1 :].split()
    # rest[0] is field 3 (state): field 39 is rest[36]
    if len(rest) < 37 or not rest[36].isdigit():
        return None
    return int(rest[36])


class Processes:
    """socket inode -> (pid, comm), from a bounded scan of /proc/*/fd at most every `refresh`."""

    def __init__(
        self, proc_root: Path, refresh: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.proc_root = proc_root
        self.refresh = refresh
        self.clock = clock
        self.by_inode: dict[int, tuple[int, str]] = {}
        self.scanned: float | None = None

    def due(self) -> bool:
        """True when a scan may run now."""
        return self.scanned is None or self.clock() - self.scanned >= self.refresh

    def scan(self) -> None:
        """Rebuild the map (what left /proc leaves it)."""
        self.scanned = self.clock()
        out: dict[int, tuple[int, str]] = {}
        budget = MAX_FDS
        for name in hostread.list_dir(self.proc_root, "", 1 << 22):
            if not name.isdigit() or budget <= 0:
                continue
            fds = hostread.list_dir(self.proc_root, f"{name}/fd", budget)
            budget -= len(fds)
            comm: str | None = None
            for fd in fds:
                target = hostread.readlink(self.proc_root, f"{name}/fd/{fd}")
                if not target or not target.startswith("socket:["):
                    continue
                inode = target[8:-1]
                if not inode.isdigit():
                    continue
                if comm is None:
                    # comm is the program's own choice (prctl PR_SET_NAME): any bytes
                    text = hostread.read_small(self.proc_root, f"{name}/comm") or ""
                    comm = clean_text(text.rstrip("\n"), 64)  # the kernel ends it with \n
                out.setdefault(int(inode), (int(name), comm))
        self.by_inode = out

    def owner(self, inode: int) -> tuple[int, str] | None:
        """(pid, comm) owning the socket, as of the last scan."""
        return self.by_inode.get(inode)

    def cpu(self, pid: int) -> int | None:
        """The CPU the process last ran on."""
        text = hostread.read_small(self.proc_root, f"{pid}/stat")
        return parse_stat_cpu(text) if text else None
