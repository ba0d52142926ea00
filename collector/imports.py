"""A package's submodules without its __init__, for the daemons' lean imports (issue 35).

aiohttp/__init__.py imports its client, prometheus_client/__init__.py its HTTP servers,
push-gateway client and OpenSSL's ssl module: megabytes and milliseconds the agent never
uses. Submodules need only their parent in sys.modules with the right __path__ (the import
system's "Packages" and "The module cache", docs.python.org/3/reference/import.html), so a
bare module carrying the real package's spec stands in for it. importlib.util.LazyLoader does
not serve here: it runs the whole __init__ at the first submodule import (the parent's
__path__ is an attribute access).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types


class BarePackage(types.ModuleType):
    """A package's stand-in: its submodules import as usual; the first other attribute it
    lacks runs the real __init__ in it (then everything the package exports is there)."""

    def __getattr__(self, name: str) -> object:
        state = self.__dict__.get("_bare_state")
        if name.startswith("__") or state is not None:  # completing or complete
            raise AttributeError(name)
        # `from . import values` asks hasattr(package, "values") first, and imports the
        # submodule only when that is False (importlib._bootstrap._handle_fromlist)
        if importlib.machinery.PathFinder.find_spec(name, self.__path__) is not None:
            raise AttributeError(name)
        spec = self.__spec__
        if spec is None or spec.loader is None:
            raise AttributeError(name)
        self.__dict__["_bare_state"] = "completing"
        try:
            spec.loader.exec_module(self)
        except BaseException:
            del self.__dict__["_bare_state"]  # the next access tries (and says why) again
            raise
        self.__dict__["_bare_state"] = "complete"
        return object.__getattribute__(self, name)


def bare_package(name: str, **attrs: object) -> BarePackage | None:
    """A stand-in for package `name` (not put in sys.modules), with attrs set; None where the
    package is not installed or not a package."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations or spec.origin is None:
        return None
    stub = BarePackage(name)
    stub.__path__ = list(spec.submodule_search_locations)
    stub.__spec__ = spec
    stub.__file__ = spec.origin
    stub.__package__ = name
    for key, value in attrs.items():
        setattr(stub, key, value)
    return stub


def stand_in(name: str) -> bool:
    """Put a bare stand-in for package `name` into sys.modules, for the process's life; False
    where it is imported already or is no installed package."""
    if name in sys.modules:
        return False
    stub = bare_package(name)
    if stub is None:
        return False
    sys.modules[name] = stub
    return True
