"""A FUSE file system that makes a disk slow or failing, for tests on real block devices.

A passthrough over a directory (in tmpfs): every file of SOURCE appears under MOUNTPOINT.
Reads and writes of file data go through ``mode``:

* ``delay``: sleep ``delay_ms`` milliseconds, then do the I/O (a slow drive);
* ``eio``: fail with EIO (a failing drive);
* ``pass``: do the I/O at once.

The mode can be changed while mounted by writing ``delay``, ``eio`` or ``pass`` (optionally
followed by a number of milliseconds, ``delay 50``) into the control file (``--control``, a
path outside the mount); it is re-read at most every 50 ms.

The file system is mounted with ``direct_io``: the kernel sends every read and write to it
instead of serving them from (or collecting them in) the page cache of the FUSE file. A loop
device over a file here, set up with ``losetup --direct-io=off`` (the default), does buffered
I/O on the backing file, so each block request reaches this process and the delay or error is
what the block layer sees between issue and completion.

Run as a separate process (``python tests/support/fusedelay.py SOURCE MOUNTPOINT ...``; it stays
in the foreground until unmounted with ``fusermount -u``) or through :func:`mounted`, which
starts it, waits for the mount, and always unmounts and stops it afterwards.

Needs fusepy (the ``test`` extra) and Debian's ``libfuse2`` (fusepy speaks the FUSE 2 API) and
``fuse3`` (``fusermount``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

MODES = ("delay", "eio", "pass")


class _Mode:
    """The current mode, from the command line, overridden by the control file when present."""

    def __init__(self, mode: str, delay_ms: float, control: str | None) -> None:
        self.mode, self.delay_ms, self.control = mode, delay_ms, control
        self._checked = 0.0
        self._lock = threading.Lock()

    def current(self) -> tuple[str, float]:
        if self.control is None:
            return self.mode, self.delay_ms
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= 0.05:
                self._checked = now
                with contextlib.suppress(OSError, ValueError):
                    words = Path(self.control).read_text().split()
                    if words and words[0] in MODES:
                        self.mode = words[0]
                        if len(words) > 1:
                            self.delay_ms = float(words[1])
            return self.mode, self.delay_ms


def make_operations(source: str, mode: _Mode):  # type: ignore[no-untyped-def]
    """A fusepy Operations passthrough over source whose data I/O obeys mode."""
    from fuse import FuseOSError, Operations

    class DelayFS(Operations):  # type: ignore[misc]
        def __init__(self) -> None:
            self.root = os.path.realpath(source)

        def _p(self, path: str) -> str:
            return os.path.join(self.root, path.lstrip("/"))

        def _io_gate(self) -> None:
            m, ms = mode.current()
            if m == "eio":
                raise FuseOSError(errno.EIO)
            if m == "delay" and ms > 0:
                time.sleep(ms / 1000.0)

        # --- metadata: passed through at once -------------------------------------------
        def getattr(self, path: str, fh: int | None = None) -> dict:
            st = os.lstat(self._p(path))
            keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink")
            out = {k: getattr(st, k) for k in keys}
            out.update(st_size=st.st_size, st_uid=st.st_uid)
            return out

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._p(path))]

        def statfs(self, path: str) -> dict:
            sv = os.statvfs(self._p(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
            return {k: getattr(sv, k) for k in (*keys, "f_files", "f_flag", "f_frsize")}

        def access(self, path: str, amode: int) -> None:
            if not os.access(self._p(path), amode):
                raise FuseOSError(errno.EACCES)

        def chmod(self, path: str, m: int) -> None:
            os.chmod(self._p(path), m)

        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            os.truncate(self._p(path), length)

        def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
            os.utime(self._p(path), times)

        # --- files ----------------------------------------------------------------------
        def open(self, path: str, flags: int) -> int:
            return os.open(self._p(path), flags & ~os.O_DIRECT)

        def create(self, path: str, m: int, fi: object = None) -> int:
            return os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, m)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            self._io_gate()
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            self._io_gate()
            return os.pwrite(fh, data, offset)

        def flush(self, path: str, fh: int) -> None:
            return None

        def fsync(self, path: str, datasync: int, fh: int) -> None:
            os.fsync(fh)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

    return DelayFS()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("mountpoint")
    ap.add_argument("--mode", choices=MODES, default="delay")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--control", help="file whose content overrides the mode while mounted")
    args = ap.parse_args(argv)
    from fuse import FUSE

    ops = make_operations(args.source, _Mode(args.mode, args.delay_ms, args.control))
    # direct_io: no page cache on the FUSE side, every read/write reaches this process.
    # Multi-threaded so that concurrent requests overlap their sleeps as a device queue would.
    FUSE(ops, args.mountpoint, foreground=True, nothreads=False, direct_io=True)
    return 0


def _is_mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def unmount(mountpoint: Path) -> None:
    """fusermount -u, lazily if busy; no error if it is not mounted."""
    if not _is_mounted(mountpoint):
        return
    r = subprocess.run(["fusermount", "-u", str(mountpoint)], capture_output=True, check=False)
    if r.returncode != 0:
        subprocess.run(["fusermount", "-u", "-z", str(mountpoint)], capture_output=True)


@contextlib.contextmanager
def mounted(
    source: Path,
    mountpoint: Path,
    mode: str = "delay",
    delay_ms: float = 20.0,
    control: Path | None = None,
    log: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Mount the delaying file system in a child process; always unmounted afterwards."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, str(source), str(mountpoint), f"--mode={mode}"]
    cmd += [f"--delay-ms={delay_ms}"]
    if control is not None:
        cmd += [f"--control={control}"]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while not _is_mounted(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log else ""
                raise RuntimeError(f"fusedelay did not mount {mountpoint}: {text}")
            time.sleep(0.05)
        yield proc
    finally:
        unmount(mountpoint)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


if __name__ == "__main__":
    sys.exit(main())
