"""A captured or live /sys tree walked *inside* its root: symlinks resolved by us, not the OS.

A captured tree must never lead a parser into the real /sys of the machine running the tests.
sysfs only creates relative links (fs/sysfs/symlink.c via kernfs), so an absolute link, or one
climbing above the root, means a foreign or broken tree and is treated as missing. Paths are
tuples of components relative to the root (``Rel``); every read is bounded (read.py).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from .read import ATTR_MAX, read_attr, read_bytes

Rel = tuple[str, ...]  # a path relative to the root, one component per item

_MAX_SYMLINKS = 40  # the same bound as the kernel's own path walk (MAXSYMLINKS)


def _path(root: str, rel: Sequence[str]) -> str:
    """root/rel as a string: pathlib's joinpath parses every part again, and a 48-disk host's
    topology resolves ~1 700 paths (issue 35: a third of read_topology's time)."""
    return root + "/" + "/".join(rel) if rel else root


def resolve_in(root: Path | str, rel: Sequence[str], base: Rel = ()) -> Rel | None:
    """Resolve base/rel inside root like realpath(3) under chroot; None if missing or escaping.

    base must already be resolved. Every component of the result exists and is not a symlink.
    """
    top = os.fspath(root)
    current = list(base)
    prefix = _path(top, current)  # the resolved directory so far, as a string
    pending = list(reversed(rel))
    links = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                return None  # climbing above the root
            current.pop()
            prefix = _path(top, current)
            continue
        candidate = prefix + "/" + part
        try:
            target = os.readlink(candidate)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # exists and is not a symlink
                current.append(part)
                prefix = candidate
                continue
            return None  # missing, not a directory, unreadable
        except ValueError:  # a NUL in a name
            return None
        links += 1
        if links > _MAX_SYMLINKS or os.path.isabs(target):
            return None
        pending.extend(reversed(target.split("/")))
    return tuple(current)


def bytes_in(root: Path | str, base: Rel, *rel: str) -> bytes | None:
    """The content of base/rel inside root (bounded), None when missing or unreadable."""
    path = resolve_in(root, rel, base)
    if path is None:
        return None
    try:
        return read_bytes(_path(os.fspath(root), path), ATTR_MAX, follow=False)
    except OSError:  # missing, a directory, EACCES, EIO from an attribute's show(), too large
        return None


def attr_in(root: Path | str, base: Rel, *rel: str) -> str:
    """The stripped text of the attribute base/rel inside root, "" when missing or unreadable."""
    path = resolve_in(root, rel, base)
    if path is None:
        return ""
    return read_attr(_path(os.fspath(root), path), follow=False)


def is_file_in(root: Path | str, base: Rel, *rel: str) -> bool:
    """True if base/rel inside root is a regular file."""
    path = resolve_in(root, rel, base)
    return path is not None and os.path.isfile(_path(os.fspath(root), path))


def entries_in(root: Path | str, base: Rel, *rel: str) -> list[str]:
    """The entries of the directory base/rel inside root, [] when missing or unreadable."""
    path = resolve_in(root, rel, base)
    if path is None:
        return []
    try:
        return os.listdir(_path(os.fspath(root), path))
    except OSError:
        return []
