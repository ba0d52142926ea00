"""`wattbit collector --check`: every configured PDU and BMC polled once, as the collector
polls them (the PDU poller with `wattbit pdu detect`'s one-shot poll, the BMC poller), all
at once with a bound per target, and what the collector needs of this host: no capability,
ipmi-raw where a BMC speaks IPMI, a writable state directory where it keeps the runs."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from collector.pdu.cli import _poll_once
from collector.preflight.report import Report
from collector.site.bmcs import bmc_target
from collector.site.config import CollectorConfig, PduConfig
from collector.site.main import holds_registry
from collector.site.targets import pdu_target
from exporters.bmc.ipmi import IPMI_RAW
from exporters.bmc.poller import BmcPoller, BmcState
from exporters.hostfs import caps
from exporters.pdu.poller import PduState
from exporters.pdu.profile import Profile

SLACK = 5.0  # seconds past a target's own timeouts before the check gives up on it


def check_collector(cfg: CollectorConfig, profiles: list[Profile]) -> Report:
    """Every check of the collector's configuration on this host and its network."""
    report = Report("collector")
    held = caps.current()
    if held.effective:
        report.add(
            "collector",
            "capabilities",
            "warn",
            f"holds {len(caps.names(held.effective))} capabilities and needs none",
            "run it as an unprivileged user with no capability (the packaged unit does)",
        )
    else:
        report.add("collector", "capabilities", "ok", "none held, none needed")
    _state_dir(report, cfg)
    if any(b.protocol == "ipmi" for b in cfg.polled_bmcs()):
        found = shutil.which(IPMI_RAW)
        if found:
            report.add("bmc", "ipmi-raw", "ok", f"{found} (FreeIPMI; runs unprivileged)")
        else:
            report.add("bmc", "ipmi-raw", "fail", "not found", "install freeipmi-tools")
    asyncio.run(_targets(report, cfg, profiles))
    if not cfg.pdus and not cfg.bmcs:
        report.add("collector", "targets", "warn", "no PDU and no BMC configured")
    return report


def _state_dir(report: Report, cfg: CollectorConfig) -> None:
    if not holds_registry(cfg) or cfg.runs.token is None:
        report.add("runs", "state_dir", "ok", "read-only run registry: nothing written")
        return
    d = cfg.state_dir
    probe = d if d.exists() else next((p for p in d.parents if p.exists()), Path("/"))
    if os.access(probe, os.W_OK | os.X_OK):
        report.add("runs", "state_dir", "ok", f"{d} writable")
    else:
        report.add(
            "runs",
            "state_dir",
            "fail",
            f"{d} not writable by this user",
            "chown it to the collector's user (the package: wattbit, /var/lib/wattbit)",
        )


T = TypeVar("T")


async def _bounded(what: Awaitable[T], seconds: float) -> T | None:
    try:
        return await asyncio.wait_for(what, seconds)
    except TimeoutError:
        return None


async def _targets(report: Report, cfg: CollectorConfig, profiles: list[Profile]) -> None:
    limit = asyncio.Semaphore(cfg.concurrency)

    async def pdu(p: PduConfig) -> PduState | None:
        async with limit:
            t = pdu_target(p, cfg.auths[p.auth])
            # _poll_once's poll has a deadline of max(10 s, timeout); a PDU no profile
            # matches is then asked for the MIB shapes it answers: as long again at most.
            bound = 2 * max(10.0, t.target.timeout) + SLACK
            got = await _bounded(_poll_once(t, profiles), bound)
            return got[0] if got is not None else None

    bmc_targets = [bmc_target(b, cfg.interval) for b in cfg.polled_bmcs()]
    poller = BmcPoller(bmc_targets, cfg.interval, cfg.concurrency)

    async def bmc(i: int) -> BmcState | None:
        t = bmc_targets[i]
        return await _bounded(poller.poll(t), t.deadline + SLACK)

    pdus = cfg.polled()
    try:
        results = await asyncio.gather(
            *(pdu(p) for p in pdus), *(bmc(i) for i in range(len(bmc_targets)))
        )
    finally:
        await poller.close()
    for p, state in zip(pdus, results[: len(pdus)], strict=True):
        assert state is None or isinstance(state, PduState)
        _pdu_finding(report, p.name, p.address, state)
    for t, bstate in zip(bmc_targets, results[len(pdus) :], strict=True):
        assert bstate is None or isinstance(bstate, BmcState)
        _bmc_finding(report, t.name, t.protocol, bstate)


def _pdu_finding(report: Report, name: str, address: str, state: PduState | None) -> None:
    if state is None:
        report.add(
            "pdu",
            name,
            "fail",
            f"{address}: no complete poll in time",
            "is it reachable (route, firewall, UDP 161)?",
        )
    elif state.up and state.reading is not None:
        r = state.reading
        model = r.identity.get("model", "") or "model unknown"
        report.add(
            "pdu", name, "ok", f"{address}: {state.profile}, {model}, {len(r.outlets)} outlets"
        )
    elif state.error == "no_profile":
        report.add(
            "pdu",
            name,
            "fail",
            f"{address}: answers, but no profile matches",
            "`wattbit pdu detect` says what it answers (docs/exporters/pdu.md)",
        )
    elif state.error == "timeout":
        report.add(
            "pdu",
            name,
            "fail",
            f"{address}: no SNMP answer",
            "reachable? the right community or SNMPv3 user (auths)?",
        )
    else:
        report.add(
            "pdu",
            name,
            "fail",
            f"{address}: {state.error}",
            "docs/exporters/pdu.md, failure reasons",
        )


def _bmc_finding(report: Report, name: str, protocol: str, state: BmcState | None) -> None:
    if state is None:
        report.add(
            "bmc",
            name,
            "fail",
            f"{protocol}: no complete poll in time",
            "is it reachable (route, firewall)?",
        )
    elif state.up:
        ident = dict(state.identity)
        what = ", ".join(v for k, v in sorted(ident.items()) if v)[:80] or "answers"
        watts = sum(m.power.power_watts is not None for m in state.mapped)
        report.add(
            "bmc",
            name,
            "ok" if watts else "warn",
            f"{protocol}: {what}; {watts} chassis with a power reading",
            "" if watts else "map chassis with power (docs/exporters/bmc.md)",
        )
    else:
        report.add(
            "bmc",
            name,
            "fail",
            f"{protocol}: {state.error}",
            "docs/exporters/bmc.md, failure reasons",
        )
