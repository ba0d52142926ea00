"""Reading a secret from a file (a community, a v3 key, a run token, Prometheus credentials):
the collector's configuration, `wattbit run`, `wattbit report` and the demo all read them by
these rules (docs/configuration.md#secret-files)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from collector.files import FileRefused, read_bounded

log = logging.getLogger(__name__)

__all__ = ["MAX_SECRET_FILE", "read_secret_file"]

MAX_SECRET_FILE = 64 * 1024  # a community, key or token is a line; refuse to slurp a huge file


def read_secret_file(path: Path, warn: bool = True) -> str:
    """The secret in a file: its first line, stripped; the rest of the file must be empty.

    Refused (ValueError) when the file is not a regular file, cannot be read, is readable by
    every user (mode o+r, as ssh refuses such a key), is empty or has more lines; a file
    readable by its group is accepted with a warning. Messages name the file, never its content.
    """
    try:
        raw, st = read_bounded(path, MAX_SECRET_FILE)  # regular, capped, never blocking
    except FileRefused as exc:
        raise ValueError(f"{path}: {exc}") from None
    if st.st_mode & stat.S_IROTH:
        raise ValueError(
            f"{path} is readable by every user (mode {stat.S_IMODE(st.st_mode):04o}): "
            "make it readable by its owner only (chmod 600)"
        )
    if st.st_mode & stat.S_IRGRP and warn:
        log.warning(
            "secret file %s is readable by its group (mode %04o); chmod 600 unless meant",
            path,
            stat.S_IMODE(st.st_mode),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not valid UTF-8") from None
    first, _, rest = text.partition("\n")
    if rest.strip():
        raise ValueError(f"{path} must hold one line (the secret), it has more")
    value = first.strip()
    if not value:
        raise ValueError(f"{path} is empty")
    return value
