"""PDU polling shards for real: three `wattbit collector` processes (shards 1/3, 2/3, 3/3) share
one configuration of 100 simulated PDUs and one state directory; one of them has the run token.

Every PDU must be polled by exactly one collector — seen on the collectors' /metrics and,
independently, by the PDUs themselves (which source address asked each one) — and the union
must be all 100. Only the token holder keeps the run registry: the others refuse writes with
403, list no runs and export no run series, although the registry's file is in their
state_dir too. The shard function is also checked against Prometheus' own `hashmod`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from collector.site.shard import shard_of
from tests.support.env import require
from tests.support.pdufarm import PduFarm
from tests.support.realparts import (
    Collector,
    Samples,
    have,
    prometheus_server,
    sample,
    wait_for,
)

PDUS = 100
SHARDS = 3
TOKEN = "Zr8tQ2wLx5vN9cK3mB7pH4"
NAMES = [f"rack{i:03d}-pdu" for i in range(1, PDUS + 1)]


def site_config(ports: list[int], shard: str, state: Path, token: bool) -> str:
    """The site's one configuration; only `shard` (and the token) differ between collectors."""
    lines = [
        "interval: 60s",  # one poll in the test's time: the first, right at start
        f"state_dir: {state}",
        f"shard: {shard}",
        "auths:",
        "  lab: {version: 2c, community: public}",
        "pdus:",
    ]
    for name, port in zip(NAMES, ports, strict=True):
        lines.append(
            f'  - {{name: {name}, address: "127.0.0.1:{port}", auth: lab, profile: apc_rpdu2}}'
        )
    if token:
        lines += ["runs:", f"  token: {TOKEN}"]
    return "\n".join(lines) + "\n"


def http(method: str, url: str, body: object = None) -> tuple[int, Any]:
    """One request with the run token; (status, decoded JSON)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def pdus_up(s: Samples) -> set[str]:
    """The PDUs whose last poll succeeded, by their `pdu` label."""
    return {
        dict(labels)["pdu"] for (name, labels), v in s.items() if name == "wattbit_pdu_up" and v
    }


def pdus_seen(s: Samples) -> set[str]:
    """Every PDU the collector has any series of."""
    return {dict(labels)["pdu"] for (_, labels) in s if "pdu" in dict(labels)}


def test_three_shards_poll_every_pdu_exactly_once(tmp_path: Path) -> None:
    state = tmp_path / "state"  # one state_dir for all three, as one shared file gives
    with PduFarm(PDUS) as farm, ExitStack() as stack:
        collectors: list[Collector] = []

        def start(k: int) -> Collector:
            d = tmp_path / f"shard{k}"
            d.mkdir()
            c = Collector(site_config(farm.ports, f"{k}/{SHARDS}", state, token=k == 1), d)
            stack.callback(c.stop)
            c.wait_ready(timeout=60)
            return c

        # The registry holder first, with a run going: the others then find its file.
        collectors.append(start(1))
        url = f"http://127.0.0.1:{collectors[0].port}/api/v1/runs"
        status, body = http("POST", url, {"name": "sharded", "labels": {"site": "lab"}})
        assert status == 201, body
        assert (state / "runs.json").exists()
        collectors += [start(2), start(3)]

        mine = {k: {n for n in NAMES if shard_of(n, SHARDS) == k} for k in (1, 2, 3)}
        scrapes: dict[int, Samples] = {}
        for k, c in enumerate(collectors, start=1):
            # every PDU it polls read once (which ones those are is asserted below)
            scrapes[k] = c.scrape_until(
                f"shard {k}/{SHARDS}: every PDU it polls up",
                lambda s: 0 < len(pdus_up(s)) == sample(s, "wattbit_pdu_polled_pdus"),
                timeout=90,
            )

        # /metrics: each collector exactly its shard's PDUs, nothing of anyone else's
        for k, s in scrapes.items():
            assert sample(s, "wattbit_pdu_shard_info", shard=str(k), shards="3") == 1.0
            assert sample(s, "wattbit_pdu_configured_pdus") == PDUS
            assert sample(s, "wattbit_pdu_polled_pdus") == len(mine[k]) > 0
            assert pdus_up(s) == pdus_seen(s) == mine[k]
            outlets = {
                dict(labels)["pdu"]
                for (name, labels) in s
                if name == "wattbit_pdu_outlet_power_watts"
            }
            assert outlets == mine[k]  # read, not only answered
        seen = [pdus_seen(s) for s in scrapes.values()]
        assert sum(len(x) for x in seen) == PDUS  # no PDU twice ...
        assert set().union(*seen) == set(NAMES)  # ... and none missing

        # the PDUs' side: each port asked from exactly one address, one address per collector
        asked = farm.asked_by()
        assert set(asked) == set(farm.ports)
        assert all(len(peers) == 1 for peers in asked.values()), asked
        by_peer: dict[tuple[str, int], set[str]] = {}
        for name, port in zip(NAMES, farm.ports, strict=True):
            by_peer.setdefault(next(iter(asked[port])), set()).add(name)
        assert sorted(by_peer.values(), key=sorted) == sorted(mine.values(), key=sorted)

        # the run registry: the token holder's alone
        for k, c in enumerate(collectors, start=1):
            base = f"http://127.0.0.1:{c.port}/api/v1/runs"
            status, body = http("POST", base, {"name": f"from-shard-{k}"})
            listed = http("GET", base)
            s = c.scrape()
            run_series = {n for (n, _) in s if n.startswith("wattbit_run_")}
            if k == 1:
                assert status == 201, body
                assert {r["name"] for r in listed[1]} == {"sharded", "from-shard-1"}
                assert sample(s, "wattbit_run_active", run="sharded") == 1.0
                assert sample(s, "wattbit_exporter_up", exporter="runs") == 1.0
            else:
                assert status == 403 and "runs.token" in body["error"], body
                assert listed == (200, [])  # the holder's file in its state_dir is not read
                assert run_series == set()
                assert ("wattbit_exporter_up", (("exporter", "runs"),)) not in s
                assert http("POST", f"{base}/sharded/stop")[0] == 403
        runs = json.loads((state / "runs.json").read_text())["runs"]
        assert {r["name"] for r in runs} == {"sharded", "from-shard-1"}

        for c in collectors:
            c.stop()
            assert c.proc.returncode == 0, c.log.read_text()[-2000:]
        for k in (2, 3):
            assert "run registry is another collector's" in collectors[k - 1].log.read_text()


MODULI = (2, 3, 7, 1000003)


def test_the_shard_is_prometheus_hashmod_plus_one(tmp_path: Path) -> None:
    """docs/scaling.md promises Prometheus' hashmod; ask a real Prometheus."""
    require(have("prometheus"), "prometheus is not installed (Debian package prometheus)")
    names = [*NAMES[:40], "rack1-a", "10.1.2.3", "lab:pdu_7", "A", "mover01.psu"]
    targets = "\n".join(
        f'      - targets: ["127.0.0.1:{i + 1}"]\n        labels: {{pdu: "{n}"}}'
        for i, n in enumerate(names)
    )
    relabel = "\n".join(
        f"      - {{source_labels: [pdu], modulus: {m}, target_label: m{m}, action: hashmod}}"
        for m in MODULI
    )
    config = (
        "global: {scrape_interval: 1h}\nscrape_configs:\n  - job_name: hashmod\n"
        f"    static_configs:\n{targets}\n    relabel_configs:\n{relabel}\n"
    )
    with prometheus_server(config, tmp_path) as url:

        def targets_listed() -> list[dict[str, str]] | None:
            with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as r:
                active = json.loads(r.read())["data"]["activeTargets"]
            return [t["labels"] for t in active] if len(active) == len(names) else None

        labels = wait_for(targets_listed, 60, "Prometheus lists the targets", interval=0.5)
    assert len(labels) == len(names)
    for lab in labels:
        for m in MODULI:
            assert int(lab[f"m{m}"]) == shard_of(lab["pdu"], m) - 1, (lab, m)
