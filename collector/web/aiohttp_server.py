"""aiohttp's HTTP server modules, imported without the package's __init__ when nothing has yet.

aiohttp/__init__.py imports the client too, and aiohttp.connector builds two TLS client
contexts at import (loading the system's CA bundle): 40 ms of an idle 2-vCPU machine's
start, 170 ms of a busy one's, about half of the agent's import of aiohttp, for a client
the agent never uses (issue 35: the agent ready sooner). The server needs only web_protocol,
web_server, web_request and web_response. The package is stood in by a bare module
(collector.imports) for the import only; whoever imports `aiohttp` itself afterwards (the
collector's Redfish client) gets the real package as usual, the submodules shared through
sys.modules. The stand-in carries the real __version__ (aiohttp.http puts it
into the Server header), read from the package's first line; where it is not there, or
anything fails, the package is imported whole.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from typing import Any

from collector.imports import bare_package

MODULES = ("web_protocol", "web_server", "http_exceptions", "web_request", "web_response")
_VERSION = re.compile(rb'__version__ = "([0-9A-Za-z.+-]{1,40})"')


def _version(origin: str | None) -> str | None:
    """The __version__ that aiohttp/__init__.py sets on its first line, or None."""
    if not origin:
        return None
    try:
        with open(origin, "rb") as f:
            m = _VERSION.match(f.read(200))
    except OSError:
        return None
    return m.group(1).decode() if m else None


def load() -> tuple[Any, ...]:
    """The MODULES of aiohttp, in that order."""
    names = [f"aiohttp.{m}" for m in MODULES]
    if "aiohttp" in sys.modules:
        return tuple(importlib.import_module(n) for n in names)
    spec = importlib.util.find_spec("aiohttp")
    version = _version(spec.origin) if spec else None
    stub = bare_package("aiohttp", __version__=version) if version is not None else None
    if stub is None:
        return tuple(importlib.import_module(n) for n in names)
    sys.modules["aiohttp"] = stub
    try:
        return tuple(importlib.import_module(n) for n in names)
    finally:
        if sys.modules.get("aiohttp") is stub:
            del sys.modules["aiohttp"]
