"""What `wattbit agent` does before its heavy imports: the process's malloc arenas capped, what it
never uses kept out of it, and blockio's BPF program loaded in a thread while the rest of the
agent is imported.

Kept free of prometheus_client, aiohttp and the exporters' own modules (blockio's core backend
and the few light modules it needs are imported here): the point is to start the load before
they are imported (issue 35, docs/benchmarks.md "the BPF load beside the imports").
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from collector.agent.config import AgentConfig
    from exporters.blockio.model import Backend

# mallopt(3)'s M_ARENA_MAX (glibc's malloc.h). glibc gives a thread that allocates while
# another holds the main arena an arena of its own (up to 8 per core), each keeping the
# memory freed into it: the agent's few threads (the HTTP loop, the WSGI pool, the smart
# reads, the tcp sampler) kept ~0.8 MB more resident that way (issue 35, docs/benchmarks.md).
# Not M_MMAP_THRESHOLD as well: held at 128 KiB it saved ~1.0 MB at 48 disks, and cost
# 0.6-0.9 ms of CPU a scrape in page faults (the scrape's text mmap'ed anew every time).
M_ARENA_MAX = -8
MALLOC_ARENAS = 1


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas before any thread starts; False where not glibc or set.

    An operator's MALLOC_ARENA_MAX (the environment, read by glibc itself) wins.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


# OpenSSL's libraries (libcrypto, libssl) and their modules: ~4.8 MB of the agent's VmRSS
# (issue 35, docs/benchmarks.md), loaded by hashlib (for pydantic's `secrets`) and by asyncio's
# and aiohttp's ssl, used by neither unless the agent serves TLS. hashlib and hmac use Python's
# own hashes without _hashlib (Lib/hashlib.py, Lib/hmac.py); asyncio and aiohttp run without
# ssl as on a Python built without OpenSSL (Lib/asyncio/sslproto.py, aiohttp/web_protocol.py:
# `try: import ssl`). None in sys.modules makes an import raise ImportError
# (docs.python.org/3/reference/import.html, "The module cache").
HASHLIB_MODULES = ("_hashlib",)
SSL_MODULES = ("ssl", "_ssl")
# Python's own SHA-256 (3.11's module; 3.12 merged it into _sha2): hashlib without _hashlib
# offers sha256 only where one of them is there
_BUILTIN_SHA256 = ("_sha256", "_sha2")
# Packages whose __init__ imports what the agent never uses: prometheus_client's, its HTTP
# servers, push-gateway client and the ssl module. Their submodules import as usual.
BARE_PACKAGES = ("prometheus_client",)


def _keep_out(modules: tuple[str, ...]) -> bool:
    """Make importing `modules` fail; False (and nothing done) where one is imported already."""
    if any(m in sys.modules for m in modules):
        return False
    for m in modules:
        sys.modules[m] = None  # type: ignore[assignment]  # the import system's "halted"
    return True


def lean_imports() -> list[str]:
    """Before the configuration is read: keep _hashlib (hence libcrypto) and BARE_PACKAGES'
    __init__ out of the process; what was kept out."""
    from collector.imports import stand_in

    kept = [f"{name}/__init__" for name in BARE_PACKAGES if stand_in(name)]
    builtin = any(importlib.util.find_spec(m) is not None for m in _BUILTIN_SHA256)
    if builtin and _keep_out(HASHLIB_MODULES):
        kept.append("_hashlib")
    return kept


def without_tls() -> list[str]:
    """The configuration serves no TLS: keep the ssl module (hence libssl) out; what was."""
    return ["ssl"] if _keep_out(SSL_MODULES) else []


class Pending(Protocol):
    """A backend begun, not finished (CoreBackend(beside=True))."""

    def finish(self) -> None:
        """Wait for what was begun; complete the backend."""
        ...

    def close(self) -> None:
        """Free it, finished or not."""
        ...


class CoreLoad:
    """blockio's core backend begun before the agent's heavy imports: its object opened and
    configured here, its load (libbpf's relocations, the kernel's verifier: ~25 ms at 48
    disks' sizes) going on in a thread of its own, one C call with the GIL released, on
    another CPU than the imports that follow (exporters.hostfs.libbpf.Loading).

    take() finishes it and hands it over, or raises what beginning or finishing it raised
    (BackendUnavailable: the exporter falls back or refuses exactly as when it builds the
    backend itself). Not taken (the agent stopped before building its exporters): close()
    frees it.
    """

    def __init__(self, begin: Callable[[], Pending]) -> None:
        self._backend: Pending | None = None
        self._error: Exception | None = None
        self._taken = False
        try:
            self._backend = begin()
        except Exception as exc:  # raised where the exporter is built, as there before
            self._error = exc

    def take(self) -> Backend:
        """The finished backend; raises what beginning or finishing it raised."""
        if self._taken:
            raise RuntimeError("the preloaded blockio backend was taken already")
        self._taken = True
        if self._error is not None:
            raise self._error
        assert self._backend is not None
        try:
            self._backend.finish()
        except BaseException:
            self._backend.close()
            raise
        return cast("Backend", self._backend)

    def close(self) -> None:
        """Free the backend if it was never taken."""
        if not self._taken and self._backend is not None:
            self._backend.close()
        self._taken = True


def start(cfg: AgentConfig, sys_root: Path, proc_root: Path) -> CoreLoad | None:
    """Cap the arenas, then begin blockio's core backend where the configuration will ask for
    it (backend auto or core); None otherwise."""
    limit_malloc_arenas()
    b = cfg.blockio
    if not b.enabled or b.backend not in ("auto", "core"):
        return None
    bounds, sizes = list(b.latency_buckets), b.size_histogram

    def begin() -> Pending:
        from exporters.blockio.core.backend import CoreBackend

        return CoreBackend(bounds, sizes, sys_root, proc_root, beside=True)

    return CoreLoad(begin)
