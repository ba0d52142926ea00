"""IPMI DCMI against real BMC simulators, cross-checked with ipmitool.

The poller reads through FreeIPMI's ipmi-raw; ipmitool is the independent reader. pyghmi's BMC
server with a DCMI Get Power Reading handler (tests/support/ipmisim.py) answers
ipmitool and the poller alike over RMCP+ (lanplus) on 127.0.0.1; OpenIPMI's ipmi_sim has no
DCMI (it answers "invalid command"), the unsupported case. Several BMCs are polled at once.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporters.bmc.exporter import BmcExporter
from exporters.bmc.ipmi import IpmiTarget
from exporters.bmc.poller import BmcPoller, BmcTarget
from tests.support.bmcs import (
    IpmiSim,
    OpenIpmiSim,
    have_ipmi_sim,
    have_ipmitool,
    ipmitool,
    ipmitool_power,
)
from tests.support.env import require
from tests.support.realparts import free_port, parse_samples

PASSWORD = "Ipmi-test-S3cret"


def ipmi_target(name: str, port: int, password: str = PASSWORD, **kw: object) -> BmcTarget:
    """An IPMI BMC on 127.0.0.1:port."""
    t = IpmiTarget("127.0.0.1", port, "wattbit", password, timeout=3, **kw)  # type: ignore[arg-type]
    return BmcTarget(name, "ipmi", ipmi=t, labels=(f"host-{name}", ""), deadline=20)


def render(poller: BmcPoller) -> dict:
    """The exporter's exposition, parsed."""
    registry = CollectorRegistry()
    registry.register(BmcExporter(poller))
    return parse_samples(generate_latest(registry).decode())


def watts_of(samples: dict, bmc: str) -> float | None:
    """wattbit_bmc_power_watts of one BMC, None when absent."""
    for (name, labels), v in samples.items():
        if name == "wattbit_bmc_power_watts" and ("bmc", bmc) in labels:
            assert dict(labels)["protocol"] == "ipmi"
            return v
    return None


def test_dcmi_readings_equal_ipmitool_and_failures_are_clean(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Every reading equals ipmitool's; deactivated -> no series (ipmitool says 0 W); no DCMI
    (ipmi_sim) -> unsupported; a wrong password -> auth; nobody there -> timeout."""
    require(shutil.which("ipmi-raw") is not None, "ipmi-raw (Debian freeipmi-tools) is missing")
    require(have_ipmitool(), "ipmitool (Debian ipmitool) is not installed")
    require(have_ipmi_sim(), "ipmi_sim (Debian openipmi) is not installed")
    caplog.set_level(logging.DEBUG)
    with (
        IpmiSim(tmp_path, PASSWORD, watts=312) as a,
        IpmiSim(tmp_path, PASSWORD, watts=95) as b,
        OpenIpmiSim(tmp_path, PASSWORD) as nodcmi,
    ):
        targets = [
            ipmi_target("a", a.port),
            ipmi_target("b", b.port),
            # ipmi_sim grants no session below its users' maximum privilege unless asked
            # with FreeIPMI's opensesspriv workaround; then it answers DCMI with 0xC1.
            ipmi_target("nodcmi", nodcmi.port, privilege="ADMIN", workarounds=("opensesspriv",)),
            ipmi_target("badpw", a.port, "Wrong-password-1"),
            ipmi_target("dead", free_port(kind=2)),
        ]
        poller = BmcPoller(targets, interval=30, concurrency=8)

        async def poll() -> dict:
            await poller.poll_all()
            return render(poller)

        loop = asyncio.new_event_loop()
        try:
            for wa, wb in ((312, 95), (287, 1450), (0, 60)):
                a.set(wa)
                b.set(wb)
                samples = loop.run_until_complete(poll())
                assert ipmitool_power(a.port, a.user, PASSWORD) == (wa, "activated")
                assert ipmitool_power(b.port, b.user, PASSWORD) == (wb, "activated")
                assert watts_of(samples, "a") == wa  # an active 0 W is a reading: exported
                assert watts_of(samples, "b") == wb
            states = poller.states
            assert states["nodcmi"].error == "unsupported"
            assert states["badpw"].error == "auth"
            assert states["dead"].error == "timeout"
            nodcmi_answer = ipmitool(
                nodcmi.port, nodcmi.user, PASSWORD, ["dcmi", "power", "reading"]
            )
            assert "Invalid command" in nodcmi_answer.stdout + nodcmi_answer.stderr

            # The measurement deactivated: ipmitool prints 0 W, wattbit exports nothing.
            b.set(0, active=False)
            samples = loop.run_until_complete(poll())
            assert ipmitool_power(b.port, b.user, PASSWORD) == (0, "deactivated")
            assert watts_of(samples, "b") is None
            assert samples[("wattbit_bmc_up", (("bmc", "b"),))] == 1.0
            assert (
                samples[
                    ("wattbit_bmc_invalid_values_total", (("bmc", "b"), ("reason", "inactive")))
                ]
                == 1.0
            )
            loop.run_until_complete(poller.close())
            mc = ipmitool(a.port, a.user, PASSWORD, ["mc", "info"]).stdout
            mc_info = {
                k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in mc.splitlines())
            }
            assert mc_info["Manufacturer ID"] == "343"
        finally:
            loop.close()
    for name, reason in (("nodcmi", "unsupported"), ("badpw", "auth"), ("dead", "timeout")):
        assert samples[("wattbit_bmc_up", (("bmc", name),))] == 0.0
        assert (
            samples[("wattbit_bmc_poll_failures_total", (("bmc", name), ("reason", reason)))] >= 1
        )
    info = {dict(k[1])["bmc"]: dict(k[1]) for k in samples if k[0] == "wattbit_bmc_info"}
    assert info["a"]["vendor"] == "Intel"  # IANA 343, as ipmitool's mc info said
    assert info["a"]["firmware"] == mc_info["Firmware Revision"]
    assert PASSWORD not in caplog.text
    assert "Wrong-password-1" not in caplog.text


def _ipmi_raw_children(port: int) -> list[str]:
    """PIDs of ipmi-raw processes talking to 127.0.0.1:port."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"ipmi-raw") and f"127.0.0.1:{port}".encode() in b" ".join(cmd):
            pids.append(proc.name)
    return pids


def test_a_silent_bmc_is_cut_at_the_deadline_and_leaves_no_process(tmp_path: Path) -> None:
    """A UDP port that swallows every datagram: FreeIPMI would wait its 20 s session timeout;
    the poll's 2 s deadline ends it (reason deadline) and its ipmi-raw is gone, while a good
    BMC polled at the same time answers."""
    require(shutil.which("ipmi-raw") is not None, "ipmi-raw (Debian freeipmi-tools) is missing")
    import socket

    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent,
        IpmiSim(tmp_path, PASSWORD, watts=222) as good,
    ):
        silent.bind(("127.0.0.1", 0))
        port = silent.getsockname()[1]
        slow = BmcTarget(
            "silent",
            "ipmi",
            ipmi=IpmiTarget("127.0.0.1", port, "wattbit", PASSWORD, timeout=20),
            deadline=2,
        )
        poller = BmcPoller([slow, ipmi_target("good", good.port)], interval=30)

        async def poll() -> list[str]:
            task = asyncio.create_task(poller.poll_all())
            seen: list[str] = []
            while not task.done() and not seen:  # the child exists while the poll waits
                seen = _ipmi_raw_children(port)
                await asyncio.sleep(0.05)
            await task
            return seen

        assert asyncio.run(poll()), "the reader of /proc found no ipmi-raw while it ran"
        assert poller.states["silent"].error == "deadline"
        assert [m.power.power_watts for m in poller.states["good"].mapped] == [222.0]
        assert _ipmi_raw_children(port) == []
