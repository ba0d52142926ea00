"""The preflight report's two renderings and its verdict (pure)."""

from __future__ import annotations

import json

from collector.preflight.agent import describe
from collector.preflight.report import Report
from exporters.hostfs import caps


def _report() -> Report:
    r = Report("agent")
    r.add("blockio", "program loads and attaches", "ok", "core (CO-RE, libbpf)")
    r.add("nic", "link speeds known", "warn", "1 of 2; none for eth0", "set nic.link_speeds")
    return r


def test_warnings_do_not_fail() -> None:
    r = _report()
    assert r.ok and r.exit_code() == 0
    doc = json.loads(r.to_json())
    assert doc["process"] == "agent" and doc["ok"] is True
    assert doc["findings"][1] == {
        "exporter": "nic",
        "check": "link speeds known",
        "status": "warn",
        "detail": "1 of 2; none for eth0",
        "fix": "set nic.link_speeds",
    }
    table = r.to_table(width=160)
    assert "everything configured can run (1 warning(s))" in table
    assert "\x1b[" not in table  # no colour unless asked (a pipe, a file)
    assert "core (CO-RE, libbpf)" in table and "set nic.link_speeds" in table


def test_a_failure_fails() -> None:
    r = _report()
    r.add("smart", "smartctl", "fail", "no CAP_SYS_RAWIO, no helper", "enable the socket")
    assert not r.ok and r.exit_code() == 1
    assert json.loads(r.to_json())["ok"] is False
    table = r.to_table(width=160)
    assert "1 check(s) failed: not everything configured can run here" in table
    assert "\x1b[" in r.to_table(width=160, color=True)


def test_describe_capabilities() -> None:
    assert describe(0) == "none"
    tracer = caps.mask([caps.CAP_BPF, caps.CAP_PERFMON])
    assert describe(tracer) == "CAP_BPF, CAP_PERFMON"
    assert describe(tracer | caps.mask([0, 1])) == "CAP_BPF, CAP_PERFMON (and 2 others)"


def test_after_start_counts_what_tcp_processes_keeps() -> None:
    """tcp.processes keeps CAP_SYS_PTRACE permitted (exporters/tcp kept_capabilities): the
    row says so instead of "drops every capability"."""
    from collector.agent.config import AgentConfig
    from collector.preflight.agent import _after_start

    held = caps.CapSets(permitted=caps.mask([caps.CAP_BPF, caps.CAP_PERFMON,
                                             caps.CAP_NUMBERS["CAP_SYS_PTRACE"]]))  # fmt: skip
    off = {"smart": {"enabled": False}}
    rows = {}
    for processes in (False, True):
        r = Report("agent")
        cfg = AgentConfig.model_validate({**off, "tcp": {"processes": processes}})
        _after_start(r, cfg, held)
        rows[processes] = r.findings[0].detail
    assert rows[False] == "drops every capability once attached"
    assert rows[True] == (
        "drops the rest; keeps CAP_SYS_PTRACE permitted (never effective) for the tcp "
        "exporter's owning processes (tcp.processes: true)"
    )
