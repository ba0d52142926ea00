"""Strict: the pydantic base of every model wattbit reads from YAML (configs and PDU profiles).

Unknown keys are errors (a typo must not pass silently) and instances are immutable. The one
loader, ``collector.config.load_model``, reads a file into such a model and turns every
problem into a ConfigError naming file, key and reason; ``unsupported_keys`` and
``cross_check`` below are what it asks of the model it loads.

This module lives in exporters/ (``collector.config`` re-exports it) because exporters/ never
imports collector/, and the PDU profiles the poller runs on are Strict models too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType
from typing import ClassVar

from pydantic import BaseModel, ConfigDict


def _no_pydantic_plugins() -> None:
    """Load no pydantic plugins, without importing pydantic's plugin loader.

    pydantic looks plugins up when it builds its first model: its loader
    (``pydantic.plugin._loader``, imported there, not with pydantic) imports importlib.metadata
    and scans the entry points of every installed distribution: ~18 ms of importing the
    agent's config models, with the system's site-packages on the path (issue 35,
    docs/benchmarks.md "pydantic's plugin scan"). wattbit uses no plugin: this stand-in
    answers as pydantic's loader does under ``PYDANTIC_DISABLE_PLUGINS=__all__``
    (https://docs.pydantic.dev/latest/concepts/plugins/), minus the import and the scan. Left
    alone where the loader is already imported.
    """
    name = "pydantic.plugin._loader"
    if name in sys.modules:
        return
    loader = ModuleType(name, "wattbit: no pydantic plugins (exporters.strict)")

    def get_plugins() -> Iterable[object]:
        """No plugins, as pydantic's loader under PYDANTIC_DISABLE_PLUGINS=__all__."""
        return ()

    loader.get_plugins = get_plugins  # type: ignore[attr-defined]
    sys.modules[name] = loader


_no_pydantic_plugins()  # before the first model below is built


class Strict(BaseModel):
    """Base of every YAML-described model: unknown keys are errors, instances immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    unsupported_keys: ClassVar[Mapping[str, str]] = MappingProxyType({})
    """On the model a file is loaded into: keys (as the loader names them, 'a.b[0].c') that
    the file's format defines but wattbit does not implement, each with the reason to give
    instead of 'unknown key'."""

    def cross_check(self) -> list[tuple[str, str]]:
        """(key, reason) of each problem between sections; the loader raises on the first.

        For rules a field validator cannot name the key of (a reference to another section).
        """
        return []
