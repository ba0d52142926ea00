"""The same attacks on every Redfish document, string and number the poller reads (issue 34:
"other strings, other documents and other endpoints than the ones named").

One real mockup (DMTF's public-rackmount1: service root, chassis collection, chassis, Power,
EnvironmentMetrics, PowerSubsystem, the supplies' collection, each supply and its metrics, the
manager) served by tests/support/hostilebmc.py's `mutate` mode, which changes one document,
one key's numbers or every name-like string at a time (synthetic by nature); the session
login's answer is a document too. Each case is one real poll over HTTP with a session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import tracemalloc
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from collector.web.exposition import TextRenderer
from exporters.bmc.exporter import BmcExporter
from exporters.bmc.poller import BmcPoller, BmcState, BmcTarget
from exporters.bmc.redfish import RedfishTarget
from tests.support.bmcs import MOCKUPS, HostileBmc
from tests.support.hostilebmc import STRINGS
from tests.support.realparts import parse_samples

MOCKUP = MOCKUPS / "dmtf-public-rackmount1"
MB = 1024 * 1024

# Every document a poll of this mockup reads, by the end of its path ("Sessions": the login's
# answer), and the part of the tree each stands for.
DOCUMENTS = {
    "/redfish/v1": "ServiceRoot",
    "/Chassis": "the Chassis collection",
    "/Chassis/1U": "a Chassis",
    "/Power": "Power",
    "/EnvironmentMetrics": "EnvironmentMetrics",
    "/PowerSubsystem": "PowerSubsystem",
    "/PowerSupplies": "the PowerSupplies collection",
    "/PowerSupplies/Bay1": "a PowerSupply",
    "/Bay1/Metrics": "PowerSupplyMetrics",
    "/Managers/BMC": "the Manager",
    "Sessions": "the Session a login answers",
}


def numeric_keys() -> list[str]:
    """Every key holding a number anywhere in the mockup (the fields a poll may read)."""
    keys: set[str] = set()

    def walk(doc: object) -> None:
        if isinstance(doc, dict):
            for k, v in doc.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    keys.add(k)
                walk(v)
        elif isinstance(doc, list):
            for v in doc:
                walk(v)

    for f in sorted(MOCKUP.rglob("index.json")):
        walk(json.loads(f.read_text()))
    return sorted(keys)


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileBmc]:
    tmp = tmp_path_factory.mktemp("mutate")
    srv = HostileBmc("mutate", tmp, extra=["--mockup", str(MOCKUP), "--size", str(4 * MB - 4096)])
    try:
        yield srv
    finally:
        srv.stop()


def configure(srv: HostileBmc, **how: str) -> None:
    """Tell the mutate mode what to change from now on."""
    url = f"{srv.url}/_set?{urllib.parse.urlencode(how)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert json.loads(r.read()) == how


def poll_once(srv: HostileBmc, max_body: int = 4 * MB) -> tuple[BmcPoller, BmcState, int]:
    """One poll by a new poller (so identity is read too), a session login included: the
    poller, its state, and the peak of Python's allocations meanwhile."""
    rf = RedfishTarget(srv.url, "wattbit", "pw", auth="session", timeout=10, max_body=max_body)
    poller = BmcPoller([BmcTarget("m", "redfish", redfish=rf, deadline=60)], interval=60)

    async def poll() -> BmcState:
        try:
            return (await poller.poll_all())[0]
        finally:
            await poller.close()

    tracemalloc.start()
    try:
        state = asyncio.run(poll())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return poller, state, peak


def test_the_mockup_polls_clean(bmc: HostileBmc) -> None:
    """The baseline: unchanged, the poll reads the chassis' power and Bay1's output."""
    configure(bmc)
    _, state, _ = poll_once(bmc)
    assert state.up, state.error
    assert [m.power.power_watts for m in state.mapped] == [374.0]
    assert [s.watts for m in state.mapped for s in m.power.supplies] == [937.4]


@pytest.mark.parametrize("attack", ["bloat", "deep", "big"])
@pytest.mark.parametrize("doc", list(DOCUMENTS), ids=[d.strip("/") for d in DOCUMENTS])
def test_every_document_is_bounded(bmc: HostileBmc, doc: str, attack: str) -> None:
    """Each document in turn padded to just under max_body with [{},{},...] (a million
    objects), nested 100,000 levels, or one string over max_body: the poll fails cleanly with
    the reason (never RecursionError, never the objects built), and Python's allocations during
    the poll stay a few times max_body (a decoded 4 MiB [{},...] was ~150 MB)."""
    configure(bmc, doc=doc, attack=attack)
    max_body = 4 * MB if attack != "big" else MB
    _, state, peak = poll_once(bmc, max_body=max_body)
    want = {"bloat": "too_big", "deep": "too_deep", "big": "too_big"}[attack]
    assert state.error == want, (DOCUMENTS[doc], state.error)
    assert peak < 6 * max_body, (DOCUMENTS[doc], peak)


@pytest.mark.parametrize(
    "number", ["9" * 400, "1e400", "-1e400", "NaN"], ids=["400-digits", "1e400", "-1e400", "nan"]
)
def test_huge_numbers_in_every_numeric_field(bmc: HostileBmc, number: str) -> None:
    """Every key holding a number in the mockup, one at a time, given a 400-digit integer,
    1e400 (inf), -1e400 or NaN: the poll succeeds, the value is dropped and counted, never a
    failed poll (issue 34: one 400-digit watts failed it; a 400-digit PowerCapacityWatts still
    did, float() overflowing), and the exposition renders."""
    failed = {}
    for key in numeric_keys():
        configure(bmc, key=key, number=number)
        poller, state, _ = poll_once(bmc)
        if not state.up:
            failed[key] = state.error
            continue
        registry = CollectorRegistry()
        registry.register(BmcExporter(poller))
        text = TextRenderer(registry).render().decode()
        for (name, _labels), value in parse_samples(text).items():
            if name == "wattbit_bmc_power_watts":
                assert 0 <= value <= 1e6, (key, value)
    assert not failed, failed
    assert len(numeric_keys()) > 10  # the walk found the fields (Reading, *Watts, …)


def _clean(text: str) -> bool:
    return text.isprintable() and len(text) <= 128


@pytest.mark.parametrize("kind", list(STRINGS))
def test_hostile_strings_cost_their_label_at_most(
    bmc: HostileBmc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every Name, Manufacturer, Model, SerialNumber, FirmwareVersion, MemberId, Vendor and Id
    of every document (chassis, supplies, manager, service root) carrying NULs, C1 controls
    and a bidi override, a megabyte, bytes that are not UTF-8, or a lone surrogate: the poll
    succeeds, the power is read, every label is printable and bounded, the page renders."""
    caplog.set_level(logging.DEBUG)
    configure(bmc, strings=kind)
    # A megabyte in each of a chassis' five names is over the default max_body (a clean
    # too_big, test_every_document_is_bounded): here the documents are let in whole, so that
    # what is checked is what a megabyte of name costs a label.
    poller, state, _ = poll_once(bmc, max_body=16 * MB if kind == "megabyte" else 4 * MB)
    assert state.up, state.error
    assert [m.power.power_watts for m in state.mapped] == [374.0]
    registry = CollectorRegistry()
    registry.register(BmcExporter(poller))
    text = TextRenderer(registry).render().decode("utf-8")  # strict: the page is UTF-8
    samples = parse_samples(text)
    labels = [v for (_n, ls) in samples for _k, v in ls]
    assert labels and all(_clean(v) for v in labels), [v for v in labels if not _clean(v)][:3]
    info = [dict(ls) for (n, ls) in samples if n == "wattbit_bmc_info"]
    assert info and info[0]["vendor"].startswith("Contoso"), info
    supplies = [v for (n, _ls), v in samples.items() if n == "wattbit_bmc_supply_power_watts"]
    assert supplies == [937.4], supplies  # Bay1's output, as unchanged
    assert len(text) < 64 * 1024  # a megabyte of name costs its label's 128 characters
    logged = caplog.text
    assert "\x1b" not in logged and "\x00" not in logged and "\x9b" not in logged
    assert "Traceback" not in logged
