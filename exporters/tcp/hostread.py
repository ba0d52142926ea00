"""The tcp exporter's reads of /proc and /sys under an injected root, in one module: files
through the shared room (exporters/hostfs/read.py: bounded, regular files only), and the
directory listings, links and the cgroup walk it needs besides."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from exporters.hostfs.read import read_bytes

MAX_SMALL = 64 << 10  # /proc/PID/stat, comm, a sysctl: far below this


def read_small(root: Path, rel: str, limit: int = MAX_SMALL) -> str | None:
    """The file's text (at most `limit` bytes; longer files give None), or None if unreadable."""
    try:
        data = read_bytes(os.path.join(root, rel), limit)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    return data.decode("utf-8", "replace")


def list_dir(root: Path, rel: str, limit: int) -> list[str]:
    """At most `limit` names of a directory ([] when unreadable)."""
    out: list[str] = []
    try:
        with os.scandir(os.path.join(root, rel)) as it:
            for entry in it:
                if len(out) >= limit:
                    break
                out.append(entry.name)
    except OSError:
        return []
    return out


def readlink(root: Path, rel: str) -> str | None:
    """The link's target, or None."""
    try:
        return os.readlink(os.path.join(root, rel))
    except OSError:
        return None


def exists(root: Path, rel: str) -> bool:
    """True when the path exists."""
    return os.path.exists(os.path.join(root, rel))


def walk_dirs(root: Path, rel: str, limit: int) -> Iterator[tuple[str, int]]:
    """(path relative to rel, inode) of rel and the directories below it on the same file
    system (other mounts are not followed), at most `limit`."""
    base = os.path.join(root, rel)
    try:
        dev = os.stat(base).st_dev
    except OSError:
        return
    stack = [""]
    seen = 0
    while stack and seen < limit:
        sub = stack.pop()
        path = os.path.join(base, sub) if sub else base
        try:
            st = os.stat(path)
            if st.st_dev != dev:
                continue
            with os.scandir(path) as it:
                children = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        seen += 1
        yield sub, st.st_ino
        stack.extend(os.path.join(sub, c) for c in sorted(children, reverse=True))


def inode(root: Path, rel: str) -> int | None:
    """The inode number the path leads to (a namespace's, for self/ns/net), or None."""
    try:
        return os.stat(os.path.join(root, rel)).st_ino
    except OSError:
        return None
