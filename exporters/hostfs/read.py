"""Bounded reads of /sys attribute files and /proc pseudo-files, and the roots they are read
under.

Every exporter reads the host through these, so each read is bounded the same way: a file is
opened non-blocking (a FIFO planted in a tree must not hang a scrape), must be a regular file
(sysfs attributes and procfs files are; a device node or a FIFO is refused), and is read up to a
cap (a file longer than the cap is refused whole, never parsed cut short). The roots are
arguments of every reader, never read from a global, so the parsers run on captured trees
(tests/fixtures/sys, tests/fixtures/proc) as on the live host.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import stat
from pathlib import Path

log = logging.getLogger(__name__)

SYS_ROOT = Path("/sys")
PROC_ROOT = Path("/proc")

# A sysfs attribute holds at most a page (PAGE_SIZE: 4 KiB on x86, up to 64 KiB on arm64 and
# ppc64le; fs/sysfs/file.c sysfs_kf_seq_show); binary attributes read here, SCSI VPD pages, are
# below 64 KiB by SPC-4 (a 16-bit page length).
ATTR_MAX = 1 << 16
# /proc/interrupts is about 100 bytes per IRQ per 10 CPUs (1 MiB on a large host), /proc/stat
# about 150 bytes per CPU; beyond 32 MiB a file is not one the kernel wrote.
PROC_MAX = 32 << 20
# A read() asks for _FIRST_READ, then twice the last, up to _CHUNK: the bytes object each
# read() allocates is that large until it is cut to what came. Always 1 MiB, as before, it
# put ~0.6 MB into every scrape's peak (nic, pcie, cpu and blockio each read a few /proc files,
# all far smaller) that glibc kept resident: ~0.9 MB of the agent's VmRSS at 48 disks under
# load (issue 35, docs/benchmarks.md).
_FIRST_READ = 1 << 16
_CHUNK = 1 << 20

_STRIP = " \t\r\n\x00"
_noted: set[tuple[str, str]] = set()
_MAX_NOTED = 256  # paths said once; past that, at debug (the set must not grow without end)


class TooLarge(OSError):
    """The file holds more than the cap allows (EFBIG): refused whole."""

    def __init__(self, path: str | os.PathLike[str], limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))


class NotAFile(OSError):
    """The path is a directory, FIFO, socket or device, not a regular file (EINVAL)."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file but a {kind}", os.fspath(path))


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def read_bytes(path: str | os.PathLike[str], limit: int, *, follow: bool = True) -> bytes:
    """The whole content of a regular file of at most limit bytes.

    follow=False refuses a symlink as the last component (ELOOP), for paths already resolved
    inside a root: a file replaced by a link meanwhile leads nowhere. Raises OSError: the
    system's (ENOENT, EACCES, EIO from an attribute's show() ...), TooLarge or NotAFile.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(path, _kind(st.st_mode))
        # procfs says a size of 0 whatever a file holds, and a seq_file may answer in parts:
        # read to the end, and stop one byte past the cap. A file with a size (a sysfs
        # attribute says a page, a captured file its own) has given everything when a read
        # comes back short: kernfs hands an attribute's whole show() output to one read.
        chunks: list[bytes] = []
        total = 0
        ask = _FIRST_READ
        while total <= limit:
            want = min(ask, limit + 1 - total)
            ask = min(2 * ask, _CHUNK)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if st.st_size > 0 and len(chunk) < want:
                break
    finally:
        os.close(fd)
    if total > limit:
        raise TooLarge(path, limit)
    return b"".join(chunks)


def read_attr(path: str | os.PathLike[str], limit: int = ATTR_MAX, *, follow: bool = True) -> str:
    """A sysfs attribute's text, stripped of blanks and NULs; "" when missing or unreadable.

    The many attributes a driver may lack or refuse (EIO, ENODATA, EACCES) all read as "":
    callers treat "" as unknown, never as a value.
    """
    try:
        data = read_bytes(path, limit, follow=follow)
    except (TooLarge, NotAFile) as exc:
        note(exc)
        return ""
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return ""
    return attr_text(data)


def attr_text(data: bytes) -> str:
    """An attribute's bytes as read_attr gives them: decoded, stripped of blanks and NULs."""
    return data.decode("utf-8", "replace").strip(_STRIP)


def read_proc(path: str | os.PathLike[str], limit: int = PROC_MAX) -> str:
    """A /proc file's text; "" when missing or unreadable (a file a kernel lacks, a gone netns).

    A file over the cap or not a regular file is said once (warning): it means a wrong root,
    not a kernel that lacks the file.
    """
    try:
        data = read_bytes(path, limit)
    except (TooLarge, NotAFile) as exc:
        note(exc)
        return ""
    except (OSError, ValueError):
        return ""
    return data.decode("utf-8", "replace")


def note(exc: OSError) -> None:
    """Warn once per path and reason about a file refused for its size or kind."""
    key = (str(exc.filename), exc.strerror or "")
    if key in _noted:
        return
    if len(_noted) < _MAX_NOTED:
        _noted.add(key)
        log.warning("%s: %s: not read (said once)", exc.filename, exc.strerror)
    else:
        log.debug("%s: %s: not read", exc.filename, exc.strerror)


class HeldAttrs:
    """Attributes of the live /sys read through descriptors kept open: one pread() each.

    kernfs writes an attribute's text afresh on every read at offset 0 (fs/seq_file.c,
    seq_read_iter: "if request is to read from zero offset, reset iterator"), so a held
    descriptor gives the value now in one system call, where read_attr() walks the path (and
    sysfs' links) and opens, checks, reads and closes the file: a scrape reads ~13 attributes
    per interface and one per disk (issue 35). Only for the live /sys: a captured tree's file
    replaced by another would keep its old text here. A descriptor whose device went away
    reads ENODEV: it is dropped and the path opened again (its successor's, else "" as for
    a missing file). Callers clear() it when what a path names may have changed without
    the old device leaving (a rename: the directory listing changed).
    Bounded: at most max_open descriptors (by default an eighth of the open-file limit, at
    most 512); past that, attributes are read by path.
    """

    def __init__(self, max_open: int | None = None) -> None:
        if max_open is None:
            # an eighth of the open-file limit each (the agent holds two of these, and the HTTP
            # server keeps its connections under half): 128 under a shell's 1024, 512 at most
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            max_open = 512 if soft == resource.RLIM_INFINITY else min(512, soft // 8)
        self.max_open = max_open
        self._fds: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._fds)

    def read(self, path: str | os.PathLike[str]) -> str:
        """The attribute's text as read_attr() gives it ("" when missing or unreadable)."""
        key = os.fspath(path)
        fd = self._fds.get(key)
        if fd is None:
            if len(self._fds) >= self.max_open:
                return read_attr(key)
            fd = self._open(key)
            if fd is None:
                return ""
        try:
            data = os.pread(fd, ATTR_MAX + 1, 0)
        except OSError:
            # ENODEV: the device this descriptor was opened on left, and the path may name
            # its successor now (a loop device removed and added again under its number);
            # EIO &c.: the attribute refuses. Either way: once more by the path.
            self._drop(key)
            fd = self._open(key)
            if fd is None:
                return ""
            try:
                data = os.pread(fd, ATTR_MAX + 1, 0)
            except OSError:
                self._drop(key)
                return ""
        if len(data) > ATTR_MAX:
            self._drop(key)
            note(TooLarge(key, ATTR_MAX))
            return ""
        return data.decode("utf-8", "replace").strip(_STRIP)

    def _open(self, key: str) -> int | None:
        try:
            fd = os.open(key, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, ValueError):
            return None
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            os.close(fd)
            return None
        if not stat.S_ISREG(mode):
            os.close(fd)
            note(NotAFile(key, _kind(mode)))
            return None
        self._fds[key] = fd
        return fd

    def _drop(self, key: str) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def clear(self) -> None:
        """Close every held descriptor (the next reads open them again)."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    close = clear


def listing(path: str | os.PathLike[str]) -> frozenset[tuple[str, int]]:
    """A directory's entries with their inode numbers (one getdents); empty when unreadable.

    The inodes tell a rename apart from no change: sysfs moves an entry's node on a rename
    (kernfs_rename_ns), so two interfaces that swapped names show swapped inodes.
    """
    try:
        with os.scandir(path) as it:
            return frozenset((e.name, e.inode()) for e in it)
    except OSError:
        return frozenset()
