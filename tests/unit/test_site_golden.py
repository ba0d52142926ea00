"""The whole site collector's /metrics, byte for byte, as the agent's golden does for the agent:
a change in the pdu exporter, the SNMP client's counters or the run registry shows as one
reviewable diff of tests/fixtures/metrics/site.prom.

The collector is built as `wattbit collector` builds it (profiles_for, build_exporters) from a
collector.yml of three PDUs, polled once over UDP on the loopback through the product's
responder (collector/pdu/responder.py): the demo's SIMULATED APC AP8641
(deploy/demo/apc_ap8641.snmprec, outlets mapped to a host and a switch), a real Raritan PX2
recording (tests/fixtures/pdu/recordings/raritan_px2-12outlet.snmprec, provenance in that
folder's README), and one that never answers (a bound socket nobody reads: up 0, a timeout);
and one BMC (`bmcs:`), polled once over HTTP on the loopback: DMTF's real public-rackmount1
Redfish mockup (tests/fixtures/bmc, provenance there) served file for file by a few lines of
aiohttp in this process (sushy-static, a process, serves it in the integration tests). The run
registry is the collector's own RunRegistry in memory with a fixed clock: one ended run and
one going, a phase of it. What varies from run to run is normalised: the process_* families
are left out, and the durations, the poll timestamps and the SNMP message counts (a resend
under load adds one) read 0.

After an intended change, rewrite the golden with WATTBIT_UPDATE_GOLDEN=1 and review the diff;
by default a mismatch fails.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
from pathlib import Path

import pytest
from aiohttp import web

from collector.daemon.serve import build_registry
from collector.pdu.responder import Responder
from collector.pdu.snmprec import read_recording
from collector.runs.registry import RunRegistry
from collector.site.config import CollectorConfig
from collector.site.main import build_exporters, profiles_for
from collector.web.exposition import metrics_app
from exporters.snmp.client import SnmpClient
from tests.support.bmcs import MOCKUPS
from tests.support.env import FIXTURES, ROOT
from tests.support.golden import assert_golden, normalise, promtool_accepts, scrape

GOLDEN = FIXTURES / "metrics" / "site.prom"
BMC_MOCKUP = "dmtf-public-rackmount1"
DEMO = ROOT / "deploy" / "demo" / "apc_ap8641.snmprec"
RARITAN = FIXTURES / "pdu" / "recordings" / "raritan_px2-12outlet.snmprec"
T0 = 1_764_000_000.0  # the registry's clock: 2025-11-24T16:00:00Z, then a minute a tick

VARYING = (
    "wattbit_exporter_duration_seconds",
    "wattbit_pdu_poll_duration_seconds",
    "wattbit_pdu_last_poll_timestamp_seconds",
    "wattbit_bmc_poll_duration_seconds",
    "wattbit_bmc_last_poll_timestamp_seconds",
    "wattbit_snmp_messages_sent_total",
    "wattbit_snmp_messages_received_total",
    "wattbit_snmp_var_binds_received_total",
    "wattbit_snmp_datagrams_discarded_total",
)


def _config(demo: int, raritan: int, silent: int, bmc: int, tmp: Path) -> CollectorConfig:
    return CollectorConfig.model_validate(
        {
            "state_dir": str(tmp),
            "auths": {"lab": {"version": "2c", "community": "public"}},
            "pdus": [
                {
                    "name": "rack1-a",
                    "address": f"127.0.0.1:{demo}",
                    "auth": "lab",
                    "timeout": "3s",
                    "retries": 2,
                    "outlets": [
                        {"index": [1, 2], "host": "mover01", "component": "server"},
                        {"index": 3, "host": "", "component": "switch"},
                    ],
                },
                {
                    "name": "rack2-b",
                    "address": f"127.0.0.1:{raritan}",
                    "auth": "lab",
                    "timeout": "3s",
                    "retries": 2,
                    "host": "mover02",
                    "component": "server",
                },
                {
                    "name": "rack3-gone",
                    "address": f"127.0.0.1:{silent}",
                    "auth": "lab",
                    "timeout": "1s",
                    "retries": 0,
                },
            ],
            "bmcs": [
                {
                    "name": "rack1-bmc",
                    "protocol": "redfish",
                    "address": f"http://127.0.0.1:{bmc}",
                    "allow_plain_http": True,
                    "auth": "basic",
                    "username": "wattbit",
                    "password": "golden-bmc-password",
                    "timeout": "3s",
                    "host": "mover03",
                    "component": "server",
                }
            ],
            "runs": {"token": "golden-token-0123456789"},
        }
    )


async def _serve_mockup(mockup: Path) -> tuple[web.AppRunner, int]:
    """A Redfish mockup's files over HTTP as sushy-static serves them: a path's index.json,
    else a 404 (what a BMC answers for a resource it lacks)."""

    async def get(request: web.Request) -> web.Response:
        rel = request.path.removeprefix("/redfish/v1").strip("/")
        doc = mockup / rel / "index.json"
        if ".." in rel.split("/") or not doc.is_file():
            return web.json_response(
                {"error": {"code": "Base.1.0.ResourceMissingAtURI"}}, status=404
            )
        return web.Response(body=doc.read_bytes(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/{tail:.*}", get)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # a free port, held from here on
    await web.SockSite(runner, sock).start()
    return runner, sock.getsockname()[1]


def _registry() -> RunRegistry:
    ticks = itertools.count()
    runs = RunRegistry(None, clock=lambda: T0 + 60.0 * next(ticks))
    runs.start("baseline", {"streams": "0"})
    runs.stop("baseline")
    runs.start("stream-42g", {"streams": "4"})
    runs.start("stream-42g-full", {"phase": "full", "part_of": "stream-42g"})
    return runs


@pytest.fixture(scope="module")
def site_metrics(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    tmp = tmp_path_factory.mktemp("site")
    with (
        Responder(read_recording(DEMO), "public") as demo,
        Responder(read_recording(RARITAN), "public") as raritan,
        # bound, never read: no answer and no ICMP port unreachable, so always a timeout
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent,
    ):
        silent.bind(("127.0.0.1", 0))
        runs = _registry()

        async def poll_and_scrape() -> tuple[bytes, bytes]:
            # the SNMP sockets belong to this loop: everything, closing too, happens on it
            bmc, bmc_port = await _serve_mockup(MOCKUPS / BMC_MOCKUP)
            cfg = _config(demo.port, raritan.port, silent.getsockname()[1], bmc_port, tmp)
            poller, bmcs, exporters = build_exporters(cfg, profiles_for(cfg), SnmpClient(), runs)
            try:
                await poller.poll_all()
                await bmcs.poll_all()
                app = metrics_app(build_registry(exporters))
                return scrape(app), scrape(app)
            finally:
                for e in exporters:
                    e.close()
                await bmcs.close()
                await bmc.cleanup()

        first, second = asyncio.run(poll_and_scrape())
    assert normalise(second, VARYING) == normalise(first, VARYING)  # nothing but time varies
    return normalise(first, VARYING)


def test_golden_metrics(site_metrics: bytes) -> None:
    assert_golden(GOLDEN, site_metrics.decode())


def test_golden_covers_every_part(site_metrics: bytes) -> None:
    text = site_metrics.decode()
    for exporter in ("pdu", "bmc", "runs"):
        assert f'wattbit_exporter_up{{exporter="{exporter}"}} 1.0\n' in text
    assert 'wattbit_pdu_up{pdu="rack1-a"} 1.0\n' in text
    assert 'wattbit_pdu_up{pdu="rack2-b"} 1.0\n' in text
    assert 'wattbit_pdu_up{pdu="rack3-gone"} 0.0\n' in text
    assert 'wattbit_pdu_poll_failures_total{pdu="rack3-gone",reason="timeout"} 1.0\n' in text
    assert re.search(r'wattbit_pdu_outlet_power_watts\{component="server",host="mover01"', text)
    assert re.search(r'wattbit_pdu_outlet_power_watts\{component="server",host="mover02"', text)
    assert 'wattbit_run_active{run="stream-42g"} 1.0\n' in text
    assert 'wattbit_run_active{run="baseline"} 0.0\n' in text
    assert 'wattbit_bmc_up{bmc="rack1-bmc"} 1.0\n' in text
    assert re.search(
        r'wattbit_bmc_power_watts\{bmc="rack1-bmc",component="server",host="mover03"', text
    )
    assert "process_" not in text and "golden-token" not in text and "golden-bmc" not in text


def test_promtool_accepts_the_golden() -> None:
    promtool_accepts(GOLDEN)
