"""Bounded reads of small sysfs attribute files, shared by the powercap and hwmon readers."""

from __future__ import annotations

import errno
import os
from pathlib import Path

# sysfs attributes are at most a page; the numbers read here are at most 20 digits. A larger
# file is not a sysfs attribute (a mistaken root, a FUSE file system): read no more than this.
MAX_ATTR_BYTES = 4096


class Unreadable(Exception):
    """The attribute exists but may not be read (EACCES/EPERM: energy_uj is root-only)."""


def read_attr(path: Path) -> str | None:
    """The attribute's text, stripped; None when absent or unreadable for another reason.

    Raises Unreadable on a permission error, so callers can say why a zone has no value.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise Unreadable(str(path)) from None
        return None
    try:
        data = os.read(fd, MAX_ATTR_BYTES + 1)
    except OSError as exc:
        # Some drivers answer a read with ENODATA or EIO (a channel without a reading).
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise Unreadable(str(path)) from None
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_ATTR_BYTES:
        return None
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None


def parse_uint(text: str | None, bound: int = 1 << 64) -> int | None:
    """A non-negative decimal integer below bound, else None (never a made-up 0)."""
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 20:
        return None
    value = int(text)
    return value if value < bound else None
