"""`wattbit collector` polling BMCs: a real Redfish mockup (sushy-static, over HTTPS with a CA
file) and a real IPMI simulator (pyghmi's, DCMI), passwords from a file and from the
environment; the values on /metrics, the passwords nowhere (log at debug, /metrics,
--print-config)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

from tests.support.bmcs import MOCKUPS, Certs, HostileBmc, IpmiSim, SushyStatic, sushy_static_path
from tests.support.cli import wattbit
from tests.support.env import RECORDINGS, require
from tests.support.realparts import Collector, running
from tests.support.snmpagents import SnmpSim, have_snmpsim

RF_PASSWORD = "Rf-collector-S3cret-77"
IPMI_PASSWORD = "Ipmi-coll-S3cret9"
APC = RECORDINGS / "apc_ap8641.snmprec"


def test_collector_polls_redfish_and_ipmi(tmp_path: Path) -> None:
    """Both protocols through the collector's configuration; chassis rules; no secret leaks."""
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")
    require(shutil.which("ipmi-raw") is not None, "ipmi-raw (Debian freeipmi-tools) is missing")
    certs = Certs(tmp_path)
    pw = tmp_path / "rf.pw"
    pw.write_text(RF_PASSWORD + "\n")
    pw.chmod(0o600)
    with (
        SushyStatic(MOCKUPS / "intel-s2600bpb", tmp_path, certs.good) as intel,
        SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp_path) as dl325,
        IpmiSim(tmp_path, IPMI_PASSWORD, watts=415) as ipmi,
    ):
        config = f"""
interval: 2s
log_level: debug
state_dir: {tmp_path / "state"}
bmcs:
  - name: intel-bmc
    protocol: redfish
    address: {intel.url}
    username: wattbit
    password_file: {pw}
    ca_file: {certs.ca}
    chassis:
      - id: Baseboard
        host: node-7
  - name: dl325-bmc
    protocol: redfish
    address: {dl325.url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_env: WB_TEST_RF_PASSWORD
    host: node-8
  - name: ipmi-bmc
    protocol: ipmi
    address: 127.0.0.1:{ipmi.port}
    username: {ipmi.user}
    password_env: WB_TEST_IPMI_PASSWORD
    host: node-9
    component: psu
"""
        env = {"WB_TEST_RF_PASSWORD": RF_PASSWORD, "WB_TEST_IPMI_PASSWORD": IPMI_PASSWORD}
        coll = Collector(config, tmp_path, env=env)
        with running(coll):

            def power(s: dict) -> dict[str, float]:
                return {
                    dict(k[1])["host"]: v for k, v in s.items() if k[0] == "wattbit_bmc_power_watts"
                }

            samples = coll.scrape_until(
                "three BMCs' power", lambda s: len(power(s)) == 3, timeout=60
            )
            text = coll.scrape_text()
        log = coll.log.read_text()
    assert power(samples) == {"node-7": 148.0, "node-8": 97.0, "node-9": 415.0}
    labels = {dict(k[1])["bmc"]: dict(k[1]) for k in samples if k[0] == "wattbit_bmc_power_watts"}
    assert labels["ipmi-bmc"]["protocol"] == "ipmi" and labels["ipmi-bmc"]["component"] == "psu"
    assert labels["intel-bmc"]["protocol"] == "redfish"
    for bmc in ("intel-bmc", "dl325-bmc", "ipmi-bmc"):
        assert samples[("wattbit_bmc_up", (("bmc", bmc),))] == 1.0
        assert samples[("wattbit_exporter_up", (("exporter", "bmc"),))] == 1.0
    printed = wattbit("collector", "--config", str(coll.config), "--print-config", env=env).stdout
    basic = base64.b64encode(f"wattbit:{RF_PASSWORD}".encode()).decode()
    for secret in (RF_PASSWORD, IPMI_PASSWORD, basic):
        assert secret not in text
        assert secret not in log
        assert secret not in printed
    assert "<redacted>" in printed


def test_hostile_bmc_strings_never_break_the_page(tmp_path: Path) -> None:
    """A BMC whose every name, vendor, model, firmware and Id holds a lone surrogate (valid
    JSON), an ESC sequence and a newline, beside a healthy BMC and a healthy PDU: every scrape
    answers, every healthy series is there, and the hostile BMC's own power too (a bad string
    costs its label at most); no log line is forged (issue 34)."""
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")
    require(have_snmpsim(), "snmpsim-command-responder is not installed in this venv")
    require(APC.exists(), f"PDU recordings missing in {APC.parent}")
    mockup = str(MOCKUPS / "dmtf-public-rackmount1")
    with (
        HostileBmc("strings", tmp_path, extra=["--mockup", mockup]) as hostile,
        SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp_path) as dl325,
        SnmpSim([APC]) as pdu,
    ):
        config = f"""
interval: 1s
state_dir: {tmp_path / "state"}
auths:
  apc: {{version: 2c, community: apc_ap8641}}
pdus:
  - name: pdu-ok
    address: 127.0.0.1:{pdu.port}
    auth: apc
bmcs:
  - name: hostile-bmc
    protocol: redfish
    address: {hostile.url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_env: WB_TEST_RF_PASSWORD
    host: node-h
  - name: dl325-bmc
    protocol: redfish
    address: {dl325.url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_env: WB_TEST_RF_PASSWORD
    host: node-8
"""
        coll = Collector(config, tmp_path, env={"WB_TEST_RF_PASSWORD": RF_PASSWORD})
        with running(coll):

            def complete(s: dict) -> bool:
                hosts = {dict(k[1]).get("host") for k in s if k[0] == "wattbit_bmc_power_watts"}
                outlets = [k for k in s if k[0] == "wattbit_pdu_outlet_power_watts"]
                info = [k for k in s if k[0] == "wattbit_bmc_info"]
                return hosts == {"node-h", "node-8"} and len(outlets) == 24 and len(info) == 2

            coll.scrape_until("both BMCs' power and the PDU's outlets", complete, timeout=60)
            for _ in range(5):  # every scrape, not one lucky one
                samples = coll.scrape()
                assert complete(samples)
        log = coll.log.read_text()
    info = {dict(k[1])["bmc"]: dict(k[1]) for k in samples if k[0] == "wattbit_bmc_info"}
    assert info["hostile-bmc"]["vendor"].startswith("Contoso")
    assert "\x1b" not in info["hostile-bmc"]["model"]
    supplies = [dict(k[1]) for k in samples if k[0] == "wattbit_bmc_supply_power_watts"]
    assert any(s["bmc"] == "hostile-bmc" for s in supplies)
    assert "Traceback" not in log
    assert "\x1b" not in log
    assert not any(line.startswith("FORGED") for line in log.splitlines())


def peak_rss(pid: int) -> int:
    """The process' peak resident set size in bytes (VmHWM of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_bloated_bmcs_cost_bounded_memory(tmp_path: Path) -> None:
    """Three BMCs answering every document just under their max_body of 4 MiB, of [{},{},...]
    (each decodes to a million objects; 33 such took the collector to 4.3 GB): the real
    collector's peak RSS stays under 300 MB over several polls of each, the documents fail as
    too_big, a healthy BMC beside them stays up (issue 34)."""
    require(sushy_static_path() is not None, "sushy-static (PyPI sushy-tools) is not installed")
    size = ["--size", str(4 * 1024 * 1024 - 1024)]
    with (
        HostileBmc("bloat", tmp_path, extra=size) as b1,
        HostileBmc("bloat", tmp_path, extra=size) as b2,
        HostileBmc("bloat", tmp_path, extra=size) as b3,
        SushyStatic(MOCKUPS / "hpe-dl325-gen10plus", tmp_path) as dl325,
    ):
        bmcs = "".join(
            f"""
  - name: {name}
    protocol: redfish
    address: {url}
    allow_plain_http: true
    auth: basic
    username: wattbit
    password_env: WB_TEST_RF_PASSWORD
    host: {name}-host
    max_body: 4194304
"""
            for name, url in (
                ("bloat-1", b1.url),
                ("bloat-2", b2.url),
                ("bloat-3", b3.url),
                ("dl325-bmc", dl325.url),
            )
        )
        # 3 s: each poll's deadline lets it read many of the 33 documents (at 1 s it gave up
        # early and hid the cost); max_body 4 MiB: the bound under test is the object count.
        config = f"interval: 3s\nstate_dir: {tmp_path / 'state'}\nbmcs:{bmcs}"
        coll = Collector(config, tmp_path, env={"WB_TEST_RF_PASSWORD": RF_PASSWORD})
        with running(coll):
            polls: dict[str, set[float]] = {f"bloat-{i}": set() for i in (1, 2, 3)}

            def three_polls_each(s: dict) -> bool:
                for k, v in s.items():
                    if k[0] == "wattbit_bmc_last_poll_timestamp_seconds":
                        polls.get(dict(k[1])["bmc"], set()).add(v)
                return all(len(p) >= 3 for p in polls.values())

            samples = coll.scrape_until("three polls of each bloated BMC", three_polls_each, 120)
            peak = peak_rss(coll.proc.pid)
    assert peak < 300 * 1024 * 1024, f"peak RSS {peak / 2**20:.0f} MiB"
    for i in (1, 2, 3):
        key = ("wattbit_bmc_poll_failures_total", (("bmc", f"bloat-{i}"), ("reason", "too_big")))
        assert samples[key] >= 1
    assert samples[("wattbit_bmc_up", (("bmc", "dl325-bmc"),))] == 1.0
