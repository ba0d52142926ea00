"""The powercap and hwmon readers' view of a sysfs attribute: a number's text or None, and a
permission error told apart (energy_uj is root-only). The bounded read is exporters/hostfs'."""

from __future__ import annotations

from pathlib import Path

from exporters.hostfs.read import read_bytes

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
        data = read_bytes(path, MAX_ATTR_BYTES)
    except PermissionError:  # EACCES/EPERM
        raise Unreadable(str(path)) from None
    except OSError:
        # absent, a directory, too large, or a driver answering ENODATA or EIO (a channel
        # without a reading)
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
