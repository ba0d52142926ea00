"""Read the Prometheus projects' plain-text archives (.ttar) of captured /sys and /proc trees.

node_exporter (collector/fixtures/sys.ttar) and prometheus/procfs (testdata/fixtures.ttar)
keep their captured trees in this format, written by their `ttar` script
(https://github.com/prometheus/procfs/blob/master/ttar). Records are separated by a
"# ttar - - -" line and are one of:

    Directory: PATH / Mode: 755
    Path: PATH / Lines: N / <N lines of content> / Mode: 644
    Path: PATH / SymlinkTo: TARGET

In content, a line ending in "EOF" has no newline of its own, "NULLBYTE" is a NUL byte, and
"\\EOF", "\\NULLBYTE" are the literal words. Only these archives (our own fixtures) are read;
a path leaving the destination, or an absolute one, is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

_NULL = re.compile(r"(?<!\\)NULLBYTE")


def _content(lines: list[str]) -> bytes:
    out = []
    for line in lines:
        newline = True
        if line.endswith("EOF") and not line.endswith("\\EOF"):
            line, newline = line[:-3], False
        line = _NULL.sub("\x00", line).replace("\\NULLBYTE", "NULLBYTE").replace("\\EOF", "EOF")
        out.append(line + ("\n" if newline else ""))
    return "".join(out).encode("utf-8", "surrogateescape")


def extract(
    archive: Path, dest: Path, keep: Callable[[str], bool] = lambda path: True
) -> list[str]:
    """Write the archive's entries whose path keep() accepts under dest; the paths written."""
    lines = archive.read_text(encoding="utf-8", errors="surrogateescape").split("\n")
    written: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        kind, _, path = line.partition(": ")
        if kind not in ("Path", "Directory"):
            continue
        if path.startswith("/") or ".." in path.split("/"):
            raise ValueError(f"{archive}: entry {path!r} leaves the tree")
        target = dest / path
        if kind == "Directory":
            if keep(path):
                target.mkdir(parents=True, exist_ok=True)
                written.append(path)
            continue
        head, _, value = lines[i].partition(": ")
        i += 1
        if head == "SymlinkTo":
            if keep(path):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(value, target)
                written.append(path)
            continue
        if head != "Lines":
            raise ValueError(f"{archive}: entry {path!r} has {head!r}, not Lines or SymlinkTo")
        count = int(value)
        body = lines[i : i + count]
        i += count
        if keep(path):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_content(body))
            written.append(path)
    return written


_SEPARATOR = "# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"


def subset(archive: Path, prefixes: list[str]) -> str:
    """The archive's records (verbatim) whose path is, or is under, one of prefixes."""
    text = archive.read_text(encoding="utf-8", errors="surrogateescape")
    kept = []
    for record in text.split(_SEPARATOR + "\n"):
        first = record.split("\n", 1)[0]
        kind, _, path = first.partition(": ")
        if kind in ("Path", "Directory") and any(
            path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes
        ):
            kept.append(record if record.endswith("\n") else record + "\n")
    return "".join(_SEPARATOR + "\n" + r for r in kept)


if __name__ == "__main__":  # python -m tests.support.ttar SRC.ttar DEST.ttar PREFIX...
    import sys

    src, dest, *keep = sys.argv[1:]
    Path(dest).write_text(subset(Path(src), keep), encoding="utf-8", errors="surrogateescape")
