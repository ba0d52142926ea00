"""SNMP secrets never leave `wattbit collector`: not in logs, /metrics, --print-config or errors.

Every secret is distinctive and given each way the configuration allows (inline, `*_file`,
`*_env`), on PDUs that answer and on PDUs that fail (wrong keys, a dead port), with the
collector logging at debug level.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import wattbit
from tests.support.env import RECORDINGS, require
from tests.support.realparts import (
    ROOT,
    Collector,
    free_port,
    parse_samples,
    sample,
    stop_process,
)
from tests.support.snmpagents import SnmpSim, V3User, have_snmpsim, silent_udp_port

APC = RECORDINGS / "apc_ap8641.snmprec"

# v2c communities: snmpsim serves the recording under each working one.
COMM_INLINE = "wbsec-comm-inline-4Rt8"
COMM_FILE = "wbsec-comm-file-9Lp2"
COMM_ENV = "wbsec-comm-env-6Vw1"
COMM_WRONG = "wbsec-comm-wrong-3Xq7"
# SNMPv3 users (SHA-256 + AES-256 authPriv), one per way of giving the keys.
USER_INLINE = V3User(
    "wb-inline", "SHA256", "wbsec-auth-inline-8Hn5", "AES256", "wbsec-priv-inline-2Cj4"
)
USER_FILE = V3User("wb-file", "SHA256", "wbsec-auth-file-5Gm3", "AES256", "wbsec-priv-file-7Ty6")
USER_ENV = V3User("wb-env", "SHA256", "wbsec-auth-env-1Bz9", "AES256", "wbsec-priv-env-4Nk2")
# Users the collector has a wrong key for. Each is a user of its own: PDUs on one agent with
# one user name and different keys disturb each other (see test_collector_faults).
USER_WRONG_AUTH = V3User(
    "wb-wrong-auth", "SHA256", "wbsec-agent-auth-1Qe5", "AES256", "wbsec-agent-priv-2We6"
)
USER_WRONG_PRIV = V3User(
    "wb-wrong-priv", "SHA256", "wbsec-agent-auth-3Rt7", "AES256", "wbsec-agent-priv-4Ty8"
)
AUTH_WRONG = "wbsec-auth-wrong-6Ds8"
PRIV_WRONG = "wbsec-priv-wrong-0Ew3"
USERS = [USER_INLINE, USER_FILE, USER_ENV, USER_WRONG_AUTH, USER_WRONG_PRIV]
SECRETS = [
    COMM_INLINE,
    COMM_FILE,
    COMM_ENV,
    COMM_WRONG,
    AUTH_WRONG,
    PRIV_WRONG,
    *(str(k) for u in USERS for k in (u.auth_key, u.priv_key)),
]
ENV = {
    "WB_TEST_COMMUNITY": COMM_ENV,
    "WB_TEST_AUTH_KEY": str(USER_ENV.auth_key),
    "WB_TEST_PRIV_KEY": str(USER_ENV.priv_key),
}
GOOD = ["c-inline", "c-file", "c-env", "v3-inline", "v3-file", "v3-env"]
BAD = ["c-wrong", "c-dead", "v3-wrong-auth", "v3-wrong-priv", "v3-dead"]


def _crypto_ok() -> bool:
    try:  # pysnmp 7's AES needs cryptography >= 43 (hazmat.decrepit)
        from cryptography.hazmat.decrepit.ciphers.modes import CFB  # noqa: F401
    except ImportError:
        return False
    return True


def forms(secret: str) -> list[str]:
    """The secret as text and as the hex dumps a debug log might print of a packet or key."""
    raw = secret.encode()
    return [
        secret,
        raw.hex(),
        raw.hex().upper(),
        raw.hex(" "),
        raw.hex(" ").upper(),
        raw.hex(":"),
        raw.hex(":").upper(),
    ]


def leaks(text: str) -> list[str]:
    """The secrets found in text, in any of their forms."""
    return [s for s in SECRETS if any(f in text for f in forms(s))]


def write_secret_files(tmp: Path) -> dict[str, Path]:
    """The *_file secrets, each in a file of its own (with a trailing newline, as editors do)."""
    files = {
        "community": tmp / "community.txt",
        "auth_key": tmp / "auth.key",
        "priv_key": tmp / "priv.key",
    }
    files["community"].write_text(COMM_FILE + "\n")
    files["auth_key"].write_text(f"{USER_FILE.auth_key}\n")
    files["priv_key"].write_text(f"{USER_FILE.priv_key}\n")
    for f in files.values():
        f.chmod(0o600)
    return files


def site_config(files: dict[str, Path], sim_port: int, dead_port: int, interval: str) -> str:
    """Auths giving each secret inline, by file and by environment; working and failing PDUs."""

    def v3(user: str, auth: str, priv: str) -> str:
        return (
            f"    version: 3\n    user: {user}\n"
            f"    auth_protocol: SHA256\n    {auth}\n"
            f"    priv_protocol: AES256\n    {priv}\n"
            "    context_name: apc_ap8641\n"
        )

    auths = {
        "c-inline": f"    version: 2c\n    community: {COMM_INLINE}\n",
        "c-file": f"    version: 2c\n    community_file: {files['community']}\n",
        "c-env": "    version: '2c'\n    community_env: WB_TEST_COMMUNITY\n",
        "c-wrong": f"    version: 2c\n    community: '{COMM_WRONG}'\n",
        "v3-inline": v3(
            USER_INLINE.user,
            f"auth_key: {USER_INLINE.auth_key}",
            f"priv_key: {USER_INLINE.priv_key}",
        ),
        "v3-file": v3(
            USER_FILE.user,
            f"auth_key_file: {files['auth_key']}",
            f"priv_key_file: {files['priv_key']}",
        ),
        "v3-env": v3(
            USER_ENV.user, "auth_key_env: WB_TEST_AUTH_KEY", "priv_key_env: WB_TEST_PRIV_KEY"
        ),
        "v3-wrong-auth": v3(
            USER_WRONG_AUTH.user,
            f'auth_key: "{AUTH_WRONG}"',
            f"priv_key: {USER_WRONG_AUTH.priv_key}",
        ),
        "v3-wrong-priv": v3(
            USER_WRONG_PRIV.user,
            f"auth_key: '{USER_WRONG_PRIV.auth_key}'",
            f"priv_key: {PRIV_WRONG}",
        ),
    }
    pdus = {
        "c-inline": ("c-inline", sim_port),
        "c-file": ("c-file", sim_port),
        "c-env": ("c-env", sim_port),
        "c-wrong": ("c-wrong", sim_port),
        "c-dead": ("c-inline", dead_port),
        "v3-inline": ("v3-inline", sim_port),
        "v3-file": ("v3-file", sim_port),
        "v3-env": ("v3-env", sim_port),
        "v3-wrong-auth": ("v3-wrong-auth", sim_port),
        "v3-wrong-priv": ("v3-wrong-priv", sim_port),
        "v3-dead": ("v3-env", dead_port),
    }
    text = f"interval: {interval}\nauths:\n"
    text += "".join(f"  {name}:\n{body}" for name, body in auths.items())
    text += "pdus:\n"
    for name, (auth, port) in pdus.items():
        # The failing PDUs time out fast; the answering ones get most of the interval, so that
        # a busy machine (a parallel suite beside one snmpsim) cannot take one down.
        timeout = "0.5s" if name in BAD else "2.5s"
        text += (
            f"  - name: {name}\n    address: 127.0.0.1:{port}\n    auth: {auth}\n"
            f"    timeout: {timeout}\n    retries: 0\n"
        )
    return text


class DebugCollector(Collector):
    """realparts.Collector, started with `--log-level debug` on its command line."""

    def __init__(self, config: str, tmp: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.config = tmp / "collector.yml"
        self.config.write_text(config)
        self.netns = None
        self.log = tmp / "collector.log"
        self._log = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "collector.cli", "collector", "--config", str(self.config)]
        cmd += ["--listen", f"127.0.0.1:{self.port}", "--log-level", "debug"]
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        )
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def stop(self) -> None:
        """SIGTERM, a short grace, then SIGKILL: how it shuts down is not what this file tests."""
        stop_process(self.proc, 3)
        super().stop()


@pytest.fixture
def sim() -> Iterator[SnmpSim]:
    require(have_snmpsim(), "snmpsim-command-responder is not installed in this venv")
    require(APC.exists(), f"PDU recordings missing in {RECORDINGS}")
    require(_crypto_ok(), "pysnmp needs cryptography >= 43 for AES")
    recordings = {COMM_INLINE: APC, COMM_FILE: APC, COMM_ENV: APC, "apc_ap8641": APC}
    with SnmpSim(recordings, v3_users=USERS) as s:
        yield s


# --- a running collector -----------------------------------------------------------------------


def test_no_secret_in_logs_metrics_or_print_config(sim: SnmpSim, tmp_path: Path) -> None:
    """Debug logging, answering and failing PDUs, a few polls: no secret anywhere it writes."""
    files = write_secret_files(tmp_path)
    with silent_udp_port() as dead:
        config = site_config(files, sim.port, dead, "3s")
        collector = DebugCollector(config, tmp_path, ENV)
        try:
            collector.wait_ready()
            deadline = time.monotonic() + 60
            while True:  # every PDU polled (and every failing one failed) at least 3 times
                text = collector.scrape_text()
                s = parse_samples(text)
                ups = {p: sample(s, "wattbit_pdu_up", pdu=p) for p in GOOD + BAD}
                fails = {
                    p: sum(
                        v
                        for (n, labels), v in s.items()
                        if n == "wattbit_pdu_poll_failures_total" and ("pdu", p) in labels
                    )
                    for p in BAD
                }
                if (
                    all(ups[p] == 1.0 for p in GOOD)
                    and all(ups[p] == 0.0 for p in BAD)
                    and min(fails.values()) >= 3
                ):
                    break
                if time.monotonic() > deadline:
                    pytest.fail(f"{ups} {fails}\n{collector.log.read_text()[-4000:]}")
                time.sleep(0.3)
        finally:
            collector.stop()
        log = collector.log.read_text(errors="replace")

    # the run was real: debug logging on, working PDUs read, failing ones for their reasons
    assert " DEBUG " in log, log[-2000:]
    for p in GOOD:
        power = [k for k in s if k[0] == "wattbit_pdu_outlet_power_watts" and ("pdu", p) in k[1]]
        assert len(power) == 24, p
    # (a first poll may also miss its deadline on a busy machine: the SNMP engine starts in it)
    reasons = {
        p: {
            dict(labels)["reason"]
            for (n, labels), v in s.items()
            if n == "wattbit_pdu_poll_failures_total" and ("pdu", p) in labels and v > 0
        }
        - {"deadline"}
        for p in BAD
    }
    assert reasons == {
        "c-wrong": {"timeout"},  # an agent drops an unknown community without a word
        "c-dead": {"timeout"},
        "v3-wrong-auth": {"auth"},
        "v3-wrong-priv": {"auth"},
        "v3-dead": {"timeout"},
    }
    for user in (USER_WRONG_AUTH, USER_WRONG_PRIV):  # named, not keyed
        assert f"127.0.0.1:{sim.port} (SNMPv3 user {user.user})" in log

    assert leaks(log) == [], log[-3000:]
    assert leaks(text) == []

    # --print-config: the whole configuration, every secret redacted
    out = wattbit("collector", "--config", str(collector.config), "--print-config", env=ENV)
    assert out.returncode == 0, out.stderr
    assert leaks(out.stdout + out.stderr) == []
    printed = json.loads(out.stdout)
    assert len(printed["pdus"]) == len(GOOD + BAD)
    for name, auth in printed["auths"].items():
        secrets = ["community"] if name.startswith("c-") else ["auth_key", "priv_key"]
        assert {k: auth[k] for k in secrets} == dict.fromkeys(secrets, "<redacted>"), name
    assert printed["auths"]["c-file"]["community_file"] == str(files["community"])
    assert printed["auths"]["v3-env"]["auth_key_env"] == "WB_TEST_AUTH_KEY"


# --- configuration errors next to secrets ------------------------------------------------------

AUTH_HEAD = "auths:\n  a:\n"
PDU_TAIL = "pdus:\n  - {name: p, address: '127.0.0.1:1161', auth: a}\n"
SHORT_KEY = "wbK7#q2"  # 7 characters: too short, and itself a secret


CONFIG_ERRORS = [
    pytest.param(
        f"    version: 2c\n    community: {COMM_INLINE}\n    comunity_file: /x\n",
        "auths.a.comunity_file",
        "unknown key",
        id="unknown-key-next-to-community",
    ),
    pytest.param(
        f"    version: 3\n    user: u\n    auth_protocol: SHA256\n"
        f"    auth_key: {USER_INLINE.auth_key}\n    priv_protocol: AES257\n"
        f"    priv_key: {USER_INLINE.priv_key}\n",
        "auths.a.priv_protocol",
        "Input should be",
        id="bad-protocol-next-to-keys",
    ),
    pytest.param(
        f"    version: 3\n    user: u\n    auth_protocol: SHA256\n    auth_key: {SHORT_KEY}\n",
        "auths.a",
        "at least 8 characters",
        id="short-auth-key",
    ),
    pytest.param(
        f"    version: 2c\n    community: [{COMM_INLINE}, {COMM_FILE}]\n",
        "auths.a.community",
        "valid string",
        id="community-of-wrong-type",
    ),
    pytest.param(
        f"    version: 3\n    user: u\n    auth_protocol: SHA256\n"
        f"    auth_key: {USER_INLINE.auth_key}\n    auth_key_env: WB_TEST_AUTH_KEY\n",
        "auths.a",
        "give auth_key once",
        id="key-given-twice",
    ),
    pytest.param(
        f"    version: 2c\n    community: {COMM_INLINE}\n    user: u\n",
        "auths.a",
        "SNMPv3 settings",
        id="v3-setting-on-v2c",
    ),
    pytest.param(
        f"    version: 3\n    user: u\n    priv_protocol: AES256\n"
        f"    priv_key: {USER_INLINE.priv_key}\n    auth_key: {USER_INLINE.auth_key}\n",
        "auths.a",
        "go together",
        id="key-without-protocol",
    ),
    pytest.param(
        f"    version: 2c\n    community: {COMM_INLINE}: oops\n",
        "",
        "not valid YAML at line 4",
        id="yaml-error-on-the-secret-line",
    ),
]


@pytest.mark.parametrize(("body", "key", "reason"), CONFIG_ERRORS)
def test_config_error_names_file_and_key_not_secret(
    tmp_path: Path, body: str, key: str, reason: str
) -> None:
    """Exit 2; stderr names the file, the key and the reason, never the secret beside it."""
    cfg = tmp_path / "collector.yml"
    cfg.write_text(AUTH_HEAD + body + PDU_TAIL)
    for extra in ([], ["--print-config"]):
        r = wattbit("collector", "--config", str(cfg), *extra, env=ENV)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert r.stdout == ""
        assert str(cfg) in r.stderr
        if key:
            assert f"key '{key}'" in r.stderr, r.stderr
        assert reason in r.stderr, r.stderr
        assert leaks(r.stderr) == [] and SHORT_KEY not in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("body", "key", "reason"),
    [pytest.param(*case.values, id=case.id) for case in CONFIG_ERRORS],
)
def test_config_error_traceback_holds_no_secret(
    tmp_path: Path, body: str, key: str, reason: str
) -> None:
    """In-process: the ConfigError, formatted with its chained causes, quotes no secret."""
    from collector.config import ConfigError, load_model
    from collector.site.config import CollectorConfig

    cfg = tmp_path / "collector.yml"
    cfg.write_text(AUTH_HEAD + body + PDU_TAIL)
    with pytest.raises(ConfigError) as info:
        load_model(CollectorConfig, cfg)
    assert info.value.key == key and reason in info.value.reason
    shown = "".join(traceback.format_exception(info.value))  # what log.exception() would write
    assert str(cfg) in shown
    assert leaks(shown) == [] and SHORT_KEY not in shown, shown


def test_secret_file_and_env_errors_name_the_source_not_the_secret(tmp_path: Path) -> None:
    """A missing key file: the file named, exit 2. An unset environment variable: the key named,
    not the variable (the value of a *_env key may be a secret pasted in the wrong place)."""
    cfg = tmp_path / "collector.yml"
    missing = tmp_path / "no-such.key"
    for body, named in (
        (f"    version: 2c\n    community_file: {missing}\n", str(missing)),
        ("    version: 2c\n    community_env: WB_TEST_NOT_SET\n", "community_env names is not set"),
    ):
        cfg.write_text(AUTH_HEAD + body + PDU_TAIL)
        r = wattbit("collector", "--config", str(cfg), env=ENV)
        assert r.returncode == 2, r.stderr
        assert named in r.stderr and str(cfg) in r.stderr and "auths.a" in r.stderr
        assert leaks(r.stderr) == []


# --- in-process: repr and str of everything built from the configuration -------------------------


def test_repr_of_config_objects_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The validated config, its sections, the poller's targets: repr, str and dumps."""
    from collector.config import load_model
    from collector.site import main as site
    from collector.site.config import CollectorConfig, redacted

    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    files = write_secret_files(tmp_path)
    cfg_path = tmp_path / "collector.yml"
    cfg_path.write_text(site_config(files, 1161, 1162, "10s"))
    cfg = load_model(CollectorConfig, cfg_path)

    # the secrets were resolved (else this test proves nothing)
    assert cfg.auths["c-file"].community is not None
    assert cfg.auths["c-file"].community.get_secret_value() == COMM_FILE
    assert cfg.auths["c-env"].community is not None
    assert cfg.auths["c-env"].community.get_secret_value() == COMM_ENV
    v3_env = cfg.auths["v3-env"]
    assert v3_env.auth_key is not None and v3_env.priv_key is not None
    assert v3_env.auth_key.get_secret_value() == USER_ENV.auth_key
    assert v3_env.priv_key.get_secret_value() == USER_ENV.priv_key

    targets = [site.pdu_target(p, cfg.auths[p.auth]) for p in cfg.pdus]
    assert targets[0].target.auth.community == COMM_INLINE  # handed to the SNMP layer
    texts = [
        repr(cfg),
        str(cfg),
        repr(cfg.model_dump()),
        cfg.model_dump_json(),
        json.dumps(redacted(cfg), default=str),
        *(repr(a) for a in cfg.auths.values()),
        *(str(a) for a in cfg.auths.values()),
        *(repr(p) for p in cfg.pdus),
        *(repr(t) for t in targets),
        *(repr(t.target) for t in targets),
        *(str(t.target) for t in targets),
        *(t.target.label for t in targets),
        *(repr(t.target.auth) for t in targets),
    ]
    assert [t for t in texts if leaks(t)] == []
