"""The one bounded reader of the files an operator names: configs, profiles, secrets, TLS files.

Every such file is hostile until checked (a typo, a link to ``/dev/zero``, a FIFO left in a
profiles directory): it must be a regular file (after following links) no larger than a
stated limit, and it is opened without blocking, so a FIFO or a device never hangs the
start and never fills memory. Messages say what is wrong with the file, never what it holds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# YAML configs, profiles and PEM files. A 1 MiB collector.yml (728 PDUs with 24 mapped
# outlets each) takes PyYAML ~6 s and ~130 MB to parse on a loaded 2-CPU VM: 4 MiB is
# room for ~2,900 PDUs in one file (shard beyond that) with a bounded cost. docs/configuration.md
MAX_CONFIG_FILE = 4 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefused(ValueError):
    """A file that cannot be used; the message says why, without the file's name or content."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bounded(path: str | Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The whole content of a regular file of at most ``limit`` bytes, and its stat.

    Checked before it is opened (a device is never opened: opening some has effects), then
    opened with O_NONBLOCK (a FIFO swapped in between cannot block) and checked again on the
    descriptor; read until EOF or ``limit + 1`` bytes. FileRefused says why it cannot be used.
    """
    try:
        before = os.stat(path)
    except (OSError, ValueError) as exc:
        raise FileRefused(f"cannot read: {_strerror(exc)}") from None
    if not stat.S_ISREG(before.st_mode):
        raise FileRefused(f"not a regular file ({_kind(before.st_mode)})")
    if before.st_size > limit:
        raise FileRefused(f"larger than {limit} bytes")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        raise FileRefused(f"cannot read: {_strerror(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"not a regular file ({_kind(st.st_mode)})")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the file may have grown since fstat
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileRefused(f"cannot read: {_strerror(exc)}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(f"larger than {limit} bytes")
    return b"".join(chunks), st


def _strerror(exc: OSError | ValueError) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return "not a valid path"  # a NUL byte in the name
