"""The Exporter contract (exporters/base.py): every metric source declares it, optional parts
included, so the processes that run them need no special cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.runs.registry import RunRegistry
from exporters.base import Exporter
from exporters.blockio.diskstats import DiskstatsBackend
from exporters.blockio.exporter import BlockioExporter
from exporters.cpu.exporter import CpuExporter
from exporters.nic.exporter import NicExporter
from exporters.pcie.exporter import PcieExporter
from exporters.pdu.exporter import PduExporter
from exporters.power.exporter import PowerExporter
from exporters.smart.exporter import SmartExporter


@pytest.mark.parametrize(
    "cls",
    [
        BlockioExporter,
        NicExporter,
        PduExporter,
        PowerExporter,
        SmartExporter,
        RunRegistry,
        PcieExporter,
        CpuExporter,
    ],
)
def test_every_exporter_is_an_exporter(cls: type[Exporter]) -> None:
    assert issubclass(cls, Exporter)
    assert isinstance(cls.name, str) and cls.name


def test_optional_parts_have_defaults() -> None:
    runs = RunRegistry(None)
    assert runs.startup_note() == ""
    runs.close()  # nothing to release, and no error


def test_an_exporter_without_collect_cannot_be_made() -> None:
    class Incomplete(Exporter):
        name = "incomplete"

    with pytest.raises(TypeError):
        Incomplete()  # type: ignore[abstract]


def test_diskstats_backend_runs_no_bpf(tmp_path: Path) -> None:
    """Backends declare missed_events; None means no such metric, not zero misses."""
    assert DiskstatsBackend(tmp_path).missed_events() is None
