"""PDU polling shards: which collector of a site polls which PDU (`shard: K/N`, docs/scaling.md).

A PDU belongs to shard ``shard_of(name, N)``: the last 8 bytes of the MD5 digest of its name
(UTF-8), read as a big-endian unsigned 64-bit integer, modulo N, plus one. That is exactly
Prometheus' ``hashmod`` relabel action on the name (Go's ``sum64(md5.Sum(name)) % N``) shifted
to 1..N, so the assignment depends on nothing but the name and N: not on the process, the
Python version (``hash()`` of a str is salted per process), the order of the PDUs in the file or
the other PDUs. MD5 is used as a checksum here, not for security. Anyone can reproduce it:

    printf %s rack1-a | md5sum | cut -c17-32    # then (0x<that> mod N) + 1
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

MAX_SHARDS = 1024  # a site with more collectors than this has other problems first
_SHARD = re.compile(r"^\s*([0-9]{1,6})\s*/\s*([0-9]{1,6})\s*$")


class Shard(NamedTuple):
    """This collector's share: shard `k` (numbered from 1) of `n`."""

    k: int
    n: int

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    def owns(self, name: str) -> bool:
        """True when the PDU named `name` is polled by this shard."""
        return shard_of(name, self.n) == self.k


WHOLE = Shard(1, 1)  # no `shard:` key: this collector polls every PDU


def shard_of(name: str, count: int) -> int:
    """The shard (1..count) that polls the PDU named `name`: Prometheus' hashmod, plus one."""
    if count < 1:
        raise ValueError("the number of shards must be at least 1")
    digest = hashlib.md5(name.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % count + 1


def parse_shard(value: object) -> Shard:
    """A Shard from "K/N" with 1 <= K <= N <= MAX_SHARDS; ValueError (never echoing) else."""
    if isinstance(value, Shard):
        return value
    m = _SHARD.match(value) if isinstance(value, str) else None
    if m is None:
        raise ValueError("expected K/N, this collector's shard K of N collectors (e.g. 2/3)")
    index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"N (the number of shards) must be 1-{MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ValueError("K must be 1-N (shards are numbered from 1)")
    return Shard(index, count)
