"""The kernel-internal dev_t encoding that block tracepoints report.

Inside the kernel dev_t is MKDEV(major, minor) = major << 20 | minor (include/linux/kdev_t.h,
MINORBITS = 20). This is *not* the userspace encoding glibc's makedev() and os.major() use, so
tracepoint values must be decoded here and nowhere else.
"""

from __future__ import annotations

MINORBITS = 20
MINORMASK = (1 << MINORBITS) - 1


def decode(dev: int) -> tuple[int, int]:
    """Split a kernel-internal dev_t into (major, minor)."""
    return dev >> MINORBITS, dev & MINORMASK


def encode(major: int, minor: int) -> int:
    """Build a kernel-internal dev_t from (major, minor)."""
    if not (0 <= major < (1 << 12) and 0 <= minor <= MINORMASK):
        raise ValueError(f"major {major} / minor {minor} out of the kernel dev_t range")
    return (major << MINORBITS) | minor
