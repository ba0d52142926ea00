"""Collector configuration: the minimal file, secrets from files and env, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.config import ConfigError, load_model
from collector.site.config import CollectorConfig, redacted

MINIMAL = """\
interval: 10s
auths:
  lab-v2:
    version: 2c
    community: public
pdus:
  - name: rack1-a
    address: 127.0.0.1:1161
    auth: lab-v2
"""


def _load(tmp_path: Path, text: str) -> CollectorConfig:
    f = tmp_path / "collector.yml"
    f.write_text(text)
    return load_model(CollectorConfig, f)


def test_minimal_file_works_as_it_stands(tmp_path: Path) -> None:
    cfg = _load(tmp_path, MINIMAL)
    assert cfg.interval == 10.0
    pdu = cfg.pdus[0]
    assert pdu.endpoint() == ("127.0.0.1", 1161)
    assert pdu.profile is None  # detected from sysObjectID
    assert cfg.auths["lab-v2"].level == "v2c"


def test_secrets_from_file_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "community").write_text("s3cr3t-community\n")
    (tmp_path / "community").chmod(0o600)  # a world-readable secret file is refused
    monkeypatch.setenv("WB_AUTH_KEY", "auth-key-123456")
    monkeypatch.setenv("WB_PRIV_KEY", "priv-key-654321")
    cfg = _load(
        tmp_path,
        f"""\
auths:
  v2:
    version: 2c
    community_file: {tmp_path / "community"}
  v3:
    version: 3
    user: wattbit
    auth_protocol: SHA256
    auth_key_env: WB_AUTH_KEY
    priv_protocol: AES256
    priv_key_env: WB_PRIV_KEY
pdus: []
""",
    )
    assert cfg.auths["v2"].community is not None
    assert cfg.auths["v2"].community.get_secret_value() == "s3cr3t-community"
    v3 = cfg.auths["v3"]
    assert v3.level == "authPriv"
    dump = str(redacted(cfg)) + repr(cfg) + str(cfg)
    for secret in ("s3cr3t-community", "auth-key-123456", "priv-key-654321"):
        assert secret not in dump


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        (MINIMAL.replace("interval: 10s", "interval: 500ms"), "interval", "at least 1s"),
        (MINIMAL.replace("auth: lab-v2", "auth: nope"), "pdus[0].auth", "names no entry of auths"),
        (MINIMAL.replace("version: 2c", "version: 4"), "auths.lab-v2.version", "'2c' or '3'"),
        (MINIMAL.replace("    community: public\n", ""), "auths.lab-v2", "needs community"),
        (
            MINIMAL.replace("address: 127.0.0.1:1161", "address: 'a:b:c'"),
            "pdus[0].address",
            "HOST:PORT",
        ),
        (
            MINIMAL.replace("    auth: lab-v2\n", "    auth: lab-v2\n    retries: -1\n"),
            "pdus[0].retries",
            "greater than or equal",
        ),
        (
            MINIMAL + "  - name: rack1-a\n    address: 127.0.0.1:1162\n    auth: lab-v2\n",
            "pdus[1].name",
            "the same name as an earlier PDU",
        ),
        (
            MINIMAL.replace("community: public", "community_env: WB_NOT_SET_ANYWHERE"),
            "auths.lab-v2",
            "is not set",
        ),
        (
            MINIMAL.replace(
                "    auth: lab-v2\n", "    auth: lab-v2\n    outlets:\n      - index: 3\n"
            ),
            "pdus[0].outlets[0]",
            "host, component",
        ),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, text: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert err.value.key == key
    assert reason in err.value.reason
    assert "public" not in str(err.value) or "public" in reason


def test_v3_rules(tmp_path: Path) -> None:
    base = "auths:\n  v3:\n    version: 3\n    user: u\n"
    with pytest.raises(ConfigError, match="insecure"):
        _load(tmp_path, base + "    auth_protocol: MD5\n    auth_key: abcdefgh\n")
    cfg = _load(
        tmp_path,
        base + "    auth_protocol: MD5\n    auth_key: abcdefgh\n    allow_insecure: true\n",
    )
    assert cfg.auths["v3"].level == "authNoPriv"
    with pytest.raises(ConfigError, match="at least 8"):
        _load(tmp_path, base + "    auth_protocol: SHA\n    auth_key: short\n")
    with pytest.raises(ConfigError, match="go together"):
        _load(tmp_path, base + "    auth_protocol: SHA\n")
    with pytest.raises(ConfigError) as err:
        _load(
            tmp_path,
            base + "    auth_protocol: SHA256\n    auth_key: my-secret-key-1\n"
            "    priv_protocol: AES512\n    priv_key: other-secret-2\n",
        )
    assert "my-secret-key-1" not in str(err.value) and "other-secret-2" not in str(err.value)
    assert cfg.auths["v3"].level


def test_outlet_rules_first_match_wins(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        MINIMAL
        + """    host: rack1
    outlets:
      - index: [1, 2]
        host: srv01
        component: server
      - name: '^sw'
        component: switch
""",
    )
    pdu = cfg.pdus[0]
    assert pdu.labels_for("1", "anything") == ("srv01", "server")
    assert pdu.labels_for("2", "sw-core") == ("srv01", "server")
    assert pdu.labels_for("7", "sw-core") == ("rack1", "switch")
    assert pdu.labels_for("8", "display") == ("rack1", "")
