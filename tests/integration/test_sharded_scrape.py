"""Scrapes shared by three scrapers, each target scraped by exactly one: real scrapes.

deploy/prometheus/sharded-scrape.yml is the configuration of one of N Prometheus servers that
share a site's targets by `hashmod` relabelling. Here 60 tiny HTTP targets on 127.0.0.1 (each
its own port, serving one metric) are listed in its `wattbit-agent` job, and three Prometheus
servers run it, each with its own shard number set where the file says (the `shard` external
label and the `keep_shard` rule), scraping every second and remote-writing to one
VictoriaMetrics. Asserted:

* the file is valid (`promtool check config`, no warning), and every job carries the same
  hashmod (modulus 3, on the address) and keep rule, whose number is the `shard` label's;
* each Prometheus scrapes exactly the targets whose hash says so — MD5 of the address, the
  last 8 bytes big-endian, modulo 3, computed here independently — and drops the others, so
  every target is scraped by exactly one server, and every scrape succeeds;
* in VictoriaMetrics every target's `up` series exists once, under the `shard` label of the
  server the hash names;
* vmagent's way (docs/longterm-store.md): three vmagents with the same file minus the two
  relabel rules and `-promscrape.cluster.membersCount=3 -promscrape.cluster.memberNum=N`:
  every target arrives in VictoriaMetrics from exactly one of them. (vmagent's own hash is
  not computed here: only that the shares are disjoint and cover every target.)

No timing is asserted: every wait is bounded polling for a condition.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.env import ROOT, require
from tests.support.realparts import (
    assert_promtool_clean,
    have,
    prometheus_server,
    promtool,
    query_api,
    victoria_metrics,
    vmagent,
    wait_for,
)

EXAMPLE = ROOT / "deploy" / "prometheus" / "sharded-scrape.yml"
SHARDS = 3
TARGETS = 60
JOB = "wattbit-agent"


def expected_shard(address: str, modulus: int = SHARDS) -> int:
    """Prometheus' hashmod of one source label: MD5, the last 8 bytes big-endian, modulo."""
    return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % modulus


class _Target(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'wattbit_exporter_up{exporter="shardtest"} 1\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def targets(n: int) -> Iterator[list[str]]:
    """`n` HTTP servers on 127.0.0.1, each on a port of its own (bound here, so never taken)."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Target) for _ in range(n)]
    for s in servers:
        threading.Thread(target=s.serve_forever, args=(0.1,), daemon=True).start()
    try:
        yield [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        stopping = [threading.Thread(target=s.shutdown) for s in servers]  # all at once
        for t in stopping:
            t.start()
        for t in stopping:
            t.join()
        for s in servers:
            s.server_close()


def example() -> dict[str, Any]:
    return dict(yaml.safe_load(EXAMPLE.read_text()))


def shard_rules(job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job's hashmod and keep_shard rules."""
    rules = job["relabel_configs"]
    hashmod = [r for r in rules if r.get("action") == "hashmod"]
    keep = [r for r in rules if r.get("action") == "keep"]
    assert len(hashmod) == 1 and len(keep) == 1, (job["job_name"], rules)
    return hashmod[0], keep[0]


def shard_config(shard: int, addresses: list[str], vm: str, site: str) -> dict[str, Any]:
    """The example for server `shard`: its number set, the agent job listing `addresses`."""
    cfg = example()
    cfg["global"].update(scrape_interval="1s", scrape_timeout="1s")
    cfg["global"]["external_labels"] = {"site": site, "shard": str(shard)}
    cfg["remote_write"][0]["url"] = vm + "/api/v1/write"
    cfg["remote_write"][0]["queue_config"] = {"batch_send_deadline": "1s"}  # 5s: a test waits
    agent = next(j for j in cfg["scrape_configs"] if j["job_name"] == JOB)
    agent["static_configs"] = [{"targets": addresses}]
    _, keep = shard_rules(agent)
    keep["regex"] = str(shard)
    cfg["scrape_configs"] = [agent]  # the collector and node jobs list placeholder hosts
    return cfg


def test_the_example_is_valid_and_every_job_is_sharded_alike() -> None:
    require(have("promtool"), "promtool (Debian package prometheus) missing")
    assert_promtool_clean(promtool("check", "config", str(EXAMPLE.relative_to(ROOT))))
    cfg = example()
    assert "rule_files" not in cfg, "shards run no rules: docs/longterm-store.md"
    shard = cfg["global"]["external_labels"]["shard"]
    assert cfg["global"]["external_labels"]["site"]
    jobs = cfg["scrape_configs"]
    assert {j["job_name"] for j in jobs} == {"wattbit-agent", "wattbit-collector", "node"}
    for job in jobs:
        hashmod, keep = shard_rules(job)
        assert hashmod["source_labels"] == ["__address__"]
        assert hashmod["modulus"] == SHARDS and hashmod["target_label"] == "__tmp_shard"
        assert keep["source_labels"] == ["__tmp_shard"] and keep["regex"] == shard
        # the shard rules come after the host relabel (which reads the unhashed address)
        kinds = [r.get("action", "replace") for r in job["relabel_configs"]]
        assert kinds[-2:] == ["hashmod", "keep"], kinds


def up_by_instance(vm: str, site: str) -> dict[str, list[str]]:
    """{instance: [shard labels of its `up` series]} in VictoriaMetrics, for one site label."""
    query = f'last_over_time(up{{job="{JOB}", site="{site}"}}[1m])'
    res = query_api(vm, "/api/v1/query", {"query": query, "nocache": "1"})
    out: dict[str, list[str]] = {}
    for r in res["result"]:
        out.setdefault(r["metric"]["instance"], []).append(r["metric"].get("shard", ""))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str], Path]]:
    """A VictoriaMetrics and 60 targets; (its URL, the targets' addresses, a directory)."""
    for cmd in ("prometheus", "victoria-metrics", "vmagent"):
        require(have(cmd), f"{cmd} is not installed (scripts/bootstrap.sh)")
    tmp = tmp_path_factory.mktemp("sharded")
    with victoria_metrics(tmp) as vm, targets(TARGETS) as addresses:
        yield vm, addresses, tmp


@pytest.mark.timeout(180)
def test_every_target_is_scraped_by_exactly_one_prometheus(
    store: tuple[str, list[str], Path],
) -> None:
    vm, addresses, tmp = store
    site = "prometheus-shards"
    want = {n: {a for a in addresses if expected_shard(a) == n} for n in range(SHARDS)}
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(prometheus_server(
                yaml.safe_dump(shard_config(n, addresses, vm, site)), tmp, f"prometheus-{n}"))
            for n in range(SHARDS)
        ]  # fmt: skip
        for n, url in enumerate(urls):

            def scraped(url: str = url, n: int = n) -> dict[str, Any] | None:
                t = query_api(url, "/api/v1/targets")
                active = {a["labels"]["instance"]: a["health"] for a in t["activeTargets"]}
                done = set(active) == want[n] and all(h == "up" for h in active.values())
                return t if done else None

            found = wait_for(scraped, 60, f"shard {n}: its {len(want[n])} targets up")
            dropped = {d["discoveredLabels"]["__address__"] for d in found["droppedTargets"]}
            assert dropped == set(addresses) - want[n], n
        # every target once, under the shard the hash names, in the store
        expected = {a: [str(n)] for n, share in want.items() for a in share}
        wait_for(lambda: up_by_instance(vm, site) == expected, 60,
                 "every target's up series in VictoriaMetrics, once")  # fmt: skip
    assert sum(len(s) for s in want.values()) == TARGETS
    print({n: len(s) for n, s in want.items()})


@pytest.mark.timeout(180)
def test_vmagent_cluster_members_share_the_targets(store: tuple[str, list[str], Path]) -> None:
    vm, addresses, tmp = store
    site = "vmagent-shards"
    with contextlib.ExitStack() as stack:
        for n in range(SHARDS):
            cfg = shard_config(n, addresses, vm, site)
            job = cfg["scrape_configs"][0]
            job["relabel_configs"] = [
                r for r in job["relabel_configs"] if r.get("action") not in ("hashmod", "keep")
            ]
            # vmagent takes where to write, and the labels to add, as flags
            labels = cfg["global"].pop("external_labels")
            del cfg["remote_write"]
            stack.enter_context(vmagent(
                yaml.safe_dump(cfg), tmp, vm + "/api/v1/write", f"vmagent-{n}",
                *(f"-remoteWrite.label={k}={v}" for k, v in labels.items()),
                f"-promscrape.cluster.membersCount={SHARDS}",
                f"-promscrape.cluster.memberNum={n}", "-remoteWrite.flushInterval=1s",
            ))  # fmt: skip

        def shared() -> dict[str, list[str]] | None:
            seen = up_by_instance(vm, site)
            return seen if set(seen) == set(addresses) else None

        seen = wait_for(shared, 60, "every target's up series from the vmagents")
        twice = {a: s for a, s in seen.items() if len(s) != 1}
        assert not twice, twice
        shares = {n: sum(s == [str(n)] for s in seen.values()) for n in range(SHARDS)}
        assert sum(shares.values()) == TARGETS, shares
        print(shares)
