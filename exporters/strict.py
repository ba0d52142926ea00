"""Strict: the pydantic base of every model wattbit reads from YAML (configs and PDU profiles).

Unknown keys are errors (a typo must not pass silently) and instances are immutable. The one
loader, ``collector.config.load_model``, reads a file into such a model and turns every
problem into a ConfigError naming file, key and reason; ``unsupported_keys`` and
``cross_check`` below are what it asks of the model it loads.

This module lives in exporters/ (``collector.config`` re-exports it) because exporters/ never
imports collector/, and the PDU profiles the poller runs on are Strict models too.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

from pydantic import BaseModel, ConfigDict


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
