"""Loop devices over files in tmpfs, the demo's and the tests' (tests/support/realparts.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoopDisk:
    """A loop device over a file."""

    device: str  # /dev/loopN
    backing: Path

    @property
    def name(self) -> str:
        """Kernel name, e.g. loop3."""
        return Path(self.device).name


@contextlib.contextmanager
def loop_disks(
    n: int,
    size_mb: int = 64,
    directory: Path | None = None,
    nomerges: bool = True,
    *,
    fill: bool = False,
    prefix: str = "wattbit-disks-",
) -> Iterator[list[LoopDisk]]:
    """n loop devices over files of size_mb MiB; always detached afterwards.

    The files go into `directory`, or into a new directory /dev/shm/<prefix>… that is removed
    afterwards. They are sparse unless `fill`: then real random bytes, for a stream that must
    load the disks (a read of a hole costs the loop driver nothing). `nomerges`: the block
    layer merges nothing on these disks (queue/nomerges = 2), so one I/O is one block request.
    """
    own_dir = directory is None
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/dev/shm")) if directory is None else directory
    disks: list[LoopDisk] = []
    try:
        for i in range(n):
            f = d / f"disk{i}.img"
            with open(f, "wb") as fh:
                if fill:
                    chunk = os.urandom(1 << 20)
                    for _ in range(size_mb):
                        fh.write(chunk)
                else:
                    fh.truncate(size_mb * 2**20)
            dev = subprocess.run(
                ["losetup", "--find", "--show", str(f)], check=True, capture_output=True, text=True
            ).stdout.strip()
            disks.append(LoopDisk(dev, f))
            if nomerges:
                Path(f"/sys/block/{Path(dev).name}/queue/nomerges").write_text("2")
        yield disks
    finally:
        for disk in disks:
            subprocess.run(["losetup", "-d", disk.device], check=False, capture_output=True)
        if own_dir:
            shutil.rmtree(d, ignore_errors=True)
