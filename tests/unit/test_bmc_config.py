"""`bmcs:` in collector.yml: what is accepted, and every refusal names file, key and reason
(never the value), through the CLI's exit 2 and through the loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.config import ConfigError, load_model
from collector.site.bmcs import bmc_target
from collector.site.config import CollectorConfig, redacted
from collector.site.shard import parse_shard
from tests.support.cli import wattbit

SECRET = "Bmc-unit-S3cret-55"


def _load(tmp_path: Path, text: str) -> CollectorConfig:
    f = tmp_path / "collector.yml"
    f.write_text(text)
    return load_model(CollectorConfig, f)


def _bmc(**keys: object) -> str:
    lines = "".join(f"    {k}: {v}\n" for k, v in keys.items())
    return f"bmcs:\n  - name: b1\n{lines}"


def test_redfish_and_ipmi_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both protocols; the password from a file and from the environment; mapped chassis."""
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\n")
    pw.chmod(0o600)
    monkeypatch.setenv("WB_BMC_PW", SECRET)
    cfg = _load(
        tmp_path,
        f"""\
interval: 15s
bmcs:
  - name: rf1
    protocol: redfish
    address: https://10.0.0.5
    username: monitor
    password_file: {pw}
    chassis:
      - id: [Blade1, Blade2]
        host: blade
      - name: "^Enclosure"
        component: enclosure
  - name: ipmi1
    protocol: ipmi
    address: 10.0.0.6
    username: monitor
    password_env: WB_BMC_PW
    host: node-6
""",
    )
    rf, ipmi = cfg.bmcs
    assert rf.password is not None and rf.password.get_secret_value() == SECRET
    assert rf.endpoint() == ("10.0.0.5", 443) and ipmi.endpoint() == ("10.0.0.6", 623)
    assert rf.labels_for("Blade2", "x") == ("blade", "")
    assert rf.labels_for("E1", "Enclosure 1") == ("", "enclosure")
    assert rf.labels_for("Baseboard", "board") is None
    t = bmc_target(ipmi, cfg.interval)
    assert t.ipmi is not None and t.ipmi.password == SECRET and t.deadline == 15.0
    assert SECRET not in repr(t) and SECRET not in repr(t.ipmi)
    assert SECRET not in str(redacted(cfg))
    assert bmc_target(rf, cfg.interval).mapper is not None


def test_shard_rule_is_the_pdus(tmp_path: Path) -> None:
    """shard: K/N splits BMCs by name as it splits PDUs; every BMC is polled by one shard."""
    bmcs = "".join(
        f"  - name: bmc{i}\n    protocol: ipmi\n    address: 10.0.1.{i}\n" for i in range(30)
    )
    owned = []
    for k in (1, 2, 3):
        cfg = _load(tmp_path, f"shard: {k}/3\nbmcs:\n{bmcs}")
        owned.append({b.name for b in cfg.polled_bmcs()})
        assert owned[-1] == {b.name for b in cfg.bmcs if parse_shard(f"{k}/3").owns(b.name)}
    assert sorted(n for o in owned for n in o) == sorted(f"bmc{i}" for i in range(30))


@pytest.mark.parametrize(
    ("keys", "key", "reason"),
    [
        ({"protocol": "redfish", "address": "10.0.0.5"}, "bmcs[0]", "https://HOST"),
        ({"protocol": "redfish", "address": "http://10.0.0.5"}, "bmcs[0]", "allow_plain_http"),
        (
            {"protocol": "redfish", "address": "https://10.0.0.5/redfish/v1"},
            "bmcs[0]",
            "without path",
        ),
        (
            {"protocol": "redfish", "address": "https://h", "privilege": "ADMIN"},
            "bmcs[0]",
            "not a setting",
        ),
        ({"protocol": "ipmi", "address": "h", "verify_tls": "false"}, "bmcs[0]", "not a setting"),
        (
            {"protocol": "ipmi", "address": "h", "workarounds": "[nosuch]"},
            "bmcs[0].workarounds",
            "unknown",
        ),
        (
            {"protocol": "ipmi", "address": "h", "password": "'has space'"},
            "bmcs[0]",
            "without blanks",
        ),
        ({"protocol": "ipmi", "address": "h", "password": "x" * 21}, "bmcs[0]", "at most 20"),
        # FreeIPMI's configuration file refuses them: every poll failed (issue 34)
        ({"protocol": "ipmi", "address": "h", "password": "'a\"b'"}, "bmcs[0]", "'\"'"),
        ({"protocol": "ipmi", "address": "h", "password": "'a\\b'"}, "bmcs[0]", "'\"'"),
        ({"protocol": "ipmi", "address": "h:99999"}, "bmcs[0]", "port"),
        ({"protocol": "ipmi", "address": "'node[1-9]'"}, "bmcs[0]", "host"),
        ({"protocol": "ipmi", "address": "':623'"}, "bmcs[0]", "a host name or an address"),
        ({"protocol": "ipmi", "address": "'a,b'"}, "bmcs[0]", "a host name or an address"),
        (
            {"protocol": "redfish", "address": "https://h", "ca_file": "/nonexistent/ca.pem"},
            "bmcs[0].ca_file",
            "does not exist",
        ),
        (
            {"protocol": "redfish", "address": "https://h", "password_env": "WB_NOT_SET_X"},
            "bmcs[0]",
            "not set",
        ),
        ({"protocol": "snmp", "address": "h"}, "bmcs[0].protocol", ""),
        ({"protocol": "redfish", "address": "https://h", "timeout": "-1s"}, "bmcs[0].timeout", ""),
    ],
)
def test_refusals_name_key_and_reason(tmp_path: Path, keys: dict, key: str, reason: str) -> None:
    """Each bad BMC entry: ConfigError naming the file and the key, with the reason."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _bmc(**keys))
    assert err.value.key.startswith(key), (err.value.key, key)
    assert reason in err.value.reason, err.value.reason
    assert str(tmp_path / "collector.yml") in str(err.value)


def test_password_file_world_readable_and_duplicates(tmp_path: Path) -> None:
    """A world-readable password file and a second BMC of the same name are refused."""
    pw = tmp_path / "pw"
    pw.write_text(SECRET + "\n")
    pw.chmod(0o644)
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _bmc(protocol="ipmi", address="h", password_file=pw))
    assert err.value.key == "bmcs[0].password_file" and "every user" in err.value.reason
    with pytest.raises(ConfigError) as err:
        _load(
            tmp_path,
            "bmcs:\n  - {name: a, protocol: ipmi, address: h}\n"
            "  - {name: a, protocol: ipmi, address: g}\n",
        )
    assert err.value.key == "bmcs[1].name"


def test_cli_exits_2_and_never_echoes_the_password(tmp_path: Path) -> None:
    """`wattbit collector` with a bad BMC entry: exit 2 before anything starts, no secret."""
    cfg = tmp_path / "collector.yml"
    cfg.write_text(_bmc(protocol="ipmi", address="h", password=f"'{SECRET} x'"))
    r = wattbit("collector", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    assert "bmcs[0]" in r.stderr and str(cfg) in r.stderr
    assert SECRET not in r.stderr + r.stdout


def test_a_ca_file_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO as ca_file: refused naming the key, never opened (it hung the start, issue 34);
    run as the CLI in a child with a timeout so a regression fails instead of hanging."""
    import os

    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    f = tmp_path / "collector.yml"
    f.write_text(_bmc(protocol="redfish", address="https://h", ca_file=str(fifo)))
    r = wattbit("collector", "--config", str(f), "--print-config", timeout=30)
    assert r.returncode == 2, r.stderr
    assert "bmcs[0].ca_file" in r.stderr and "not a regular file" in r.stderr, r.stderr


def test_one_tls_context_per_trust_setting(tmp_path: Path) -> None:
    """Every BMC with the same trust shares one TLS context (building one costs ~20 ms of CPU:
    1,000 unreachable BMCs took a whole CPU, issue 34); another CA gets its own."""
    from exporters.bmc.redfish import RedfishTarget, ssl_context
    from tests.support.bmcs import Certs

    certs = Certs(tmp_path)
    ca = certs.ca.read_text()
    a = ssl_context(RedfishTarget("https://a.example"))
    b = ssl_context(RedfishTarget("https://b.example", timeout=2.0))
    assert a is b
    c = ssl_context(RedfishTarget("https://c.example", ca_data=ca))
    d = ssl_context(RedfishTarget("https://d.example", ca_data=ca))
    assert c is d and c is not a
    assert ssl_context(RedfishTarget("https://e.example", verify_tls=False)) is False
