"""What `wattbit agent` does before its heavy imports: the process's malloc arenas capped, and
blockio's BPF program loaded in a thread while the rest of the agent is imported.

Kept free of prometheus_client, aiohttp and the exporters' own modules (blockio's core backend
and the few light modules it needs are imported here): the point is to start the load before
they are imported (issue 35, docs/benchmarks.md "the BPF load beside the imports").
"""

from __future__ import annotations

import ctypes
import os
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
