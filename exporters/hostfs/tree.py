"""A captured or live /sys tree walked *inside* its root: symlinks resolved by us, not the OS.

A captured tree must never lead a parser into the real /sys of the machine running the tests.
sysfs only creates relative links (fs/sysfs/symlink.c via kernfs), so an absolute link, or one
climbing above the root, means a foreign or broken tree and is treated as missing. Paths are
tuples of components relative to the root (``Rel``); every read is bounded (read.py).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from .read import ATTR_MAX, NotAFile, TooLarge, attr_text, note, read_bytes

Rel = tuple[str, ...]  # a path relative to the root, one component per item

_MAX_SYMLINKS = 40  # the same bound as the kernel's own path walk (MAXSYMLINKS)


def _path(root: str, rel: Sequence[str]) -> str:
    """root/rel as a string: pathlib's joinpath parses every part again, and a 48-disk host's
    topology resolves ~1 700 paths (issue 35: a third of read_topology's time)."""
    return root + "/" + "/".join(rel) if rel else root


def resolve_in(
    root: Path | str, rel: Sequence[str], base: Rel = (), known: set[str] | None = None
) -> Rel | None:
    """Resolve base/rel inside root like realpath(3) under chroot; None if missing or escaping.

    base must already be resolved. Every component of the result exists and is not a symlink.
    known: paths already found no link, shared by the calls of one walk (the ~100 devices of a
    48-disk host's class/block all lead through devices/, devices/virtual/ ...: issue 35); the
    paths this call finds no link are added.
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
        if known is not None and candidate in known:
            current.append(part)
            prefix = candidate
            continue
        try:
            target = os.readlink(candidate)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # exists and is not a symlink
                if known is not None:
                    known.add(candidate)
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


def _resolved(top: str, base: Rel, rel: Sequence[str]) -> str:
    """root/base/rel resolved inside root; raises FileNotFoundError when missing or escaping."""
    path = resolve_in(top, rel, base)
    if path is None:
        raise FileNotFoundError(errno.ENOENT, "missing or outside the root", _path(top, rel))
    return _path(top, path)


def _head_resolved(top: str, base: Rel, rel: Sequence[str]) -> str | None:
    """root/base/rel with every component but the last resolved inside root, for a call that
    refuses a link as the last name (an open with O_NOFOLLOW, an lstat); None when the last is
    not a plain name (resolve the whole instead). Raises FileNotFoundError as _resolved.

    That spares the readlink that finds an attribute is no link, one per attribute read (issue
    35: with resolve_in's known and blockdevs' device/ read once, a 48-disk host's topology
    went from 1 769 readlinks to 499; docs/benchmarks.md "the topology's walk"). A last name
    the caller finds a link is then resolved as every other component.
    """
    last = rel[-1] if rel else ""
    if last in ("", ".", "..") or "/" in last:
        return None
    return _resolved(top, base, rel[:-1]) + "/" + last


def _read_in(root: Path | str, base: Rel, rel: Sequence[str]) -> bytes:
    """The content of base/rel inside root (bounded); raises OSError (read_bytes's, or ENOENT
    when missing or escaping)."""
    top = os.fspath(root)
    path = _head_resolved(top, base, rel)
    if path is not None:
        try:
            return read_bytes(path, ATTR_MAX, follow=False)
        except OSError as exc:
            if exc.errno != errno.ELOOP:  # ELOOP: the last name is a link
                raise
    return read_bytes(_resolved(top, base, rel), ATTR_MAX, follow=False)


def bytes_in(root: Path | str, base: Rel, *rel: str) -> bytes | None:
    """The content of base/rel inside root (bounded), None when missing or unreadable."""
    try:
        return _read_in(root, base, rel)
    except (OSError, ValueError):  # missing, a directory, EACCES, EIO, too large; ValueError: a NUL
        return None


def attr_in(root: Path | str, base: Rel, *rel: str) -> str:
    """The stripped text of the attribute base/rel inside root, "" when missing or unreadable."""
    try:
        return attr_text(_read_in(root, base, rel))
    except (TooLarge, NotAFile) as exc:
        note(exc)
        return ""
    except (OSError, ValueError):  # ValueError: a NUL in a name
        return ""


def is_file_in(root: Path | str, base: Rel, *rel: str) -> bool:
    """True if base/rel inside root is a regular file."""
    top = os.fspath(root)
    try:
        path = _head_resolved(top, base, rel)
        if path is not None:
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode):
                return stat.S_ISREG(mode)
        return os.path.isfile(_resolved(top, base, rel))
    except (OSError, ValueError):  # missing, escaping; ValueError: a NUL in a name
        return False


def entries_in(root: Path | str, base: Rel, *rel: str) -> list[str]:
    """The entries of the directory base/rel inside root, [] when missing or unreadable."""
    path = resolve_in(root, rel, base)
    if path is None:
        return []
    try:
        return os.listdir(_path(os.fspath(root), path))
    except OSError:
        return []
