"""Basic auth of the HTTP server: the cache of successful logins and its expiry."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
from collections.abc import Iterator

import bcrypt
import pytest

from collector.web.server import _BasicAuth

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4))


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(2) as p:
        yield p


def test_successes_are_cached_for_a_short_time(
    pool: concurrent.futures.ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    auth = _BasicAuth({"alice": HASH}, pool, clock=clock, ttl=60)
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return bool(real(password, hashed))

    monkeypatch.setattr(bcrypt, "checkpw", counting)

    async def check(h: str) -> bool:
        return await auth.check(h)

    assert asyncio.run(check(header("alice", "pw")))
    assert asyncio.run(check(header("alice", "pw")))
    assert len(calls) == 1
    clock.t = 59
    assert asyncio.run(check(header("alice", "pw")))
    assert len(calls) == 1
    clock.t = 61  # expired: bcrypt again
    assert asyncio.run(check(header("alice", "pw")))
    assert len(calls) == 2
    # Failures are never cached, and never evict the cached success.
    assert not asyncio.run(check(header("alice", "nope")))
    assert not asyncio.run(check(header("alice", "nope")))
    assert len(calls) == 4
    assert asyncio.run(check(header("alice", "pw")))
    assert len(calls) == 4


def test_bcrypt_sees_at_most_72_bytes(
    pool: concurrent.futures.ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = bcrypt.checkpw

    def recording(password: bytes, hashed: bytes) -> bool:
        seen.append(len(password))
        return bool(real(password, hashed))

    monkeypatch.setattr(bcrypt, "checkpw", recording)
    auth = _BasicAuth({"alice": HASH}, pool)
    assert not asyncio.run(auth.check(header("alice", "x" * 5000)))
    assert seen == [72]
