"""The Exporter contract (exporters/base.py): every metric source declares it, optional parts
included, so the processes that run them need no special cases."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import exporters
from collector.agent.config import AgentConfig
from collector.agent.main import build_exporters as agent_exporters
from collector.runs.registry import RunRegistry
from collector.site.config import CollectorConfig
from collector.site.main import build_exporters as site_exporters
from collector.site.main import profiles_for
from exporters.base import Exporter
from exporters.blockio.diskstats import DiskstatsBackend
from exporters.smart.runner import RunOutcome
from exporters.snmp.client import SnmpClient


class _NoSmartctl:
    """A smartctl that is never there (the contract needs no drive)."""

    def __call__(self, device: str, timeout: float) -> RunOutcome:
        return RunOutcome("no_smartctl")

    def scan(self, timeout: float) -> RunOutcome:
        return RunOutcome("no_smartctl")

    def close(self) -> None:
        pass


def _built(tmp: Path) -> Iterator[Exporter]:
    """Every exporter the two daemons build, each enabled, on an empty machine and site."""
    (tmp / "sys").mkdir()
    (tmp / "proc").mkdir()
    agent = AgentConfig.model_validate(
        {"blockio": {"backend": "diskstats"}, "cpu": {"enabled": True}}
    )
    site = CollectorConfig.model_validate(
        {
            "state_dir": str(tmp / "state"),
            "auths": {"lab": {"version": "2c", "community": "public"}},
            "pdus": [{"name": "p", "address": "127.0.0.1:9", "auth": "lab"}],
            "bmcs": [
                {
                    "name": "b",
                    "protocol": "redfish",
                    "address": "http://127.0.0.1:9",
                    "allow_plain_http": True,
                    "auth": "basic",
                    "username": "u",
                    "password": "p",
                }
            ],
            "runs": {"token": "contract-token-0123456789"},
        }
    )
    built = agent_exporters(
        agent, sys_root=tmp / "sys", proc_root=tmp / "proc", smartctl=_NoSmartctl()
    )
    _, _, more = site_exporters(site, profiles_for(site), SnmpClient(), RunRegistry(None))
    try:
        yield from [*built, *more]
    finally:
        for e in [*built, *more]:
            e.close()


def _defined() -> set[type[Exporter]]:
    """Every concrete Exporter class defined under exporters/ (each module imported)."""
    for mod in pkgutil.walk_packages(exporters.__path__, "exporters."):
        importlib.import_module(mod.name)
    found: set[type[Exporter]] = set()
    todo = list(Exporter.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("exporters.") and not getattr(
            cls, "__abstractmethods__", None
        ):
            found.add(cls)
    return found


def test_every_built_exporter_is_an_exporter(tmp_path: Path) -> None:
    built = list(_built(tmp_path))
    names = [e.name for e in built]
    assert names == ["blockio", "nic", "smart", "power", "pcie", "cpu", "tcp", "pdu", "bmc", "runs"]
    for e in built:
        assert isinstance(e, Exporter)
        assert isinstance(type(e).name, str) and type(e).name


def test_the_builders_build_every_exporter(tmp_path: Path) -> None:
    # an exporter class nobody builds is an exporter the daemons forgot (as the site's BMC
    # exporter once was: its golden test added it by hand)
    built = {type(e) for e in _built(tmp_path)}
    missing = sorted(c.__qualname__ for c in _defined() - built)
    assert not missing, f"exporters no daemon builds: {missing}"


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
