"""`wattbit collector` configuration: SNMP credentials, PDU targets, outlet mapping, runs.

Secrets (communities, v3 keys, the run API token) may be inline, in a file (`*_file`) or in
an environment variable (`*_env`); they are held as SecretStr, never echoed in errors, logs
or `--print-config`, and resolved before anything starts.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import stat
from pathlib import Path
from typing import Annotated, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    SecretStr,
    field_validator,
    model_validator,
)

from collector.config import (
    Duration,
    DurationOrZero,
    LabelText,
    Regex,
    Strict,
    at_least,
    parse_listen,
)
from collector.daemon.config import COLLECTOR_PORT, Listen, ProcessConfig
from collector.files import FileRefused, read_bounded
from collector.secretfile import read_secret_file
from collector.site.shard import WHOLE, Shard, parse_shard

log = logging.getLogger(__name__)

AuthProtocol = Literal["MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512"]
PrivProtocol = Literal["DES", "AES128", "AES192", "AES256"]
# RFC 3414's MD5 and DES are broken; a site that still has such PDUs must say so.
INSECURE = {"MD5", "DES"}


def _check_secret_file(v: Path | None) -> Path | None:
    """A field validator of *_file keys: the file must hold a usable secret (see above)."""
    if v is not None:
        read_secret_file(v)
    return v


def _resolve(
    inline: SecretStr | None, file: Path | None, env: str | None, what: str
) -> SecretStr | None:
    given = [x for x in (inline, file, env) if x is not None]
    if len(given) > 1:
        raise ValueError(f"give {what} once: inline, {what}_file or {what}_env")
    if file is not None:
        try:
            return SecretStr(read_secret_file(file, warn=False))  # checked (and warned) already
        except ValueError as exc:
            raise ValueError(f"{what}_file: {exc}") from None
    if env is not None:
        value = os.environ.get(env)
        if value is None:
            raise ValueError(f"the environment variable that {what}_env names is not set")
        return SecretStr(value)
    return inline


class AuthConfig(Strict):
    """One set of SNMP credentials, referenced by name from PDU targets."""

    version: Literal["2c", "3"]
    community: SecretStr | None = None
    community_file: Path | None = None
    community_env: str | None = None
    user: str | None = None
    auth_protocol: AuthProtocol | None = None
    auth_key: SecretStr | None = None
    auth_key_file: Path | None = None
    auth_key_env: str | None = None
    priv_protocol: PrivProtocol | None = None
    priv_key: SecretStr | None = None
    priv_key_file: Path | None = None
    priv_key_env: str | None = None
    context_name: str = ""
    allow_insecure: bool = False  # opt in to MD5 / DES

    _files = field_validator("community_file", "auth_key_file", "priv_key_file")(_check_secret_file)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v: object) -> object:
        return str(v) if v in (3, "3", "v3") else ("2c" if v in ("2c", "v2c", "2") else v)

    @model_validator(mode="after")
    def _check(self) -> AuthConfig:
        resolved = {
            "community": _resolve(
                self.community, self.community_file, self.community_env, "community"
            ),
            "auth_key": _resolve(self.auth_key, self.auth_key_file, self.auth_key_env, "auth_key"),
            "priv_key": _resolve(self.priv_key, self.priv_key_file, self.priv_key_env, "priv_key"),
        }
        if self.version == "2c":
            if resolved["community"] is None:
                raise ValueError("SNMPv2c needs community, community_file or community_env")
            if self.user or self.auth_protocol or self.priv_protocol:
                raise ValueError("user, auth_protocol and priv_protocol are SNMPv3 settings")
        else:
            if not self.user:
                raise ValueError("SNMPv3 needs user")
            if (self.auth_protocol is None) != (resolved["auth_key"] is None):
                raise ValueError("auth_protocol and an auth key go together")
            if (self.priv_protocol is None) != (resolved["priv_key"] is None):
                raise ValueError("priv_protocol and a priv key go together")
            if self.priv_protocol and not self.auth_protocol:
                raise ValueError("privacy needs authentication (authPriv), not noAuthPriv")
            for key in ("auth_key", "priv_key"):
                secret = resolved[key]
                if secret is not None and len(secret.get_secret_value()) < 8:
                    raise ValueError(f"{key} must be at least 8 characters (RFC 3414)")
            weak = {p for p in (self.auth_protocol, self.priv_protocol) if p in INSECURE}
            if weak and not self.allow_insecure:
                raise ValueError(
                    f"{'/'.join(sorted(weak))} is insecure; set allow_insecure: true to use it"
                )
        # Keep only the resolved secrets; the file/env references have done their job.
        object.__setattr__(self, "community", resolved["community"])
        object.__setattr__(self, "auth_key", resolved["auth_key"])
        object.__setattr__(self, "priv_key", resolved["priv_key"])
        return self

    @property
    def level(self) -> str:
        """noAuthNoPriv, authNoPriv or authPriv (v3), or v2c."""
        if self.version == "2c":
            return "v2c"
        if self.priv_protocol:
            return "authPriv"
        return "authNoPriv" if self.auth_protocol else "noAuthNoPriv"


class OutletRule(Strict):
    """Labels outlets with the host or component they feed; the first matching rule wins."""

    index: str | int | list[str | int] | None = None
    name: Regex | None = None  # regular expression on the outlet's name
    host: LabelText = ""
    component: LabelText = ""

    @model_validator(mode="after")
    def _check(self) -> OutletRule:
        if self.index is None and self.name is None:
            raise ValueError("an outlet rule needs index or name")
        if not self.host and not self.component:
            raise ValueError("an outlet rule sets host, component or both")
        return self

    def matches(self, index: str, name: str) -> bool:
        """True if this rule applies to the outlet."""
        if self.index is not None:
            wanted = self.index if isinstance(self.index, list) else [self.index]
            if index not in {str(i) for i in wanted}:
                return False
        return self.name is None or re.search(self.name, name) is not None


_FEED = re.compile(r"^(unit|(bank|phase):\d{1,9}(\.\d{1,9}){0,7})$")


class FeedRule(Strict):
    """A whole PDU, one bank or one phase feeding one host or component (a PDU's `feeds:`).

    Many data movers sit alone on a PDU or a bank that meters nothing per outlet: its watts
    and energy become that host's (`wattbit_pdu_feed_*`), as an outlet's do.
    """

    # "unit" | "bank:N" | "phase:N": N is the bank or phase row index as the PDU's MIB forms
    # it (`wattbit pdu detect` lists them), like an outlet's index.
    feed: str
    host: LabelText = ""
    component: LabelText = ""

    @field_validator("feed")
    @classmethod
    def _feed(cls, v: str) -> str:
        if not _FEED.match(v):
            raise ValueError("expected unit, bank:N or phase:N")
        return v

    @model_validator(mode="after")
    def _check(self) -> FeedRule:
        if not self.host and not self.component:
            raise ValueError("a feed sets host, component or both")
        return self


class PduConfig(Strict):
    """One PDU to poll."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]+$")
    address: str
    auth: str
    profile: str | None = None  # default: detected (exporters/pdu/detect.py)
    timeout: Duration = 2.0
    retries: int = Field(default=1, ge=0, le=10)
    max_repetitions: int = Field(default=25, ge=1, le=1000)
    # Limits on what one PDU may send (docs/exporters/pdu.md "Limits"): outlets exported (the
    # rest counted over_limit, in index order) and var-binds one walk may receive (more fails
    # the poll with reason over_limit).
    max_outlets: int = Field(default=512, ge=1, le=10_000)
    max_var_binds: int = Field(default=20_000, ge=100, le=1_000_000)
    host: LabelText = ""  # default host label of every outlet (a PDU inside one server's rack)
    component: LabelText = ""
    outlets: list[OutletRule] = Field(default_factory=list)
    feeds: list[FeedRule] = Field(default_factory=list, max_length=256)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        parse_listen(v, 161)
        return v

    def endpoint(self) -> tuple[str, int]:
        """(host, port) of the agent; port 161 unless given."""
        return parse_listen(self.address, 161)

    def labels_for(self, index: str, name: str) -> tuple[str, str]:
        """(host, component) of an outlet."""
        for rule in self.outlets:
            if rule.matches(index, name):
                return rule.host or self.host, rule.component or self.component
        return self.host, self.component

    def feed_labels(self) -> list[tuple[str, str, str]]:
        """(feed, host, component) of every mapped feed; the PDU's host/component by default."""
        return [(f.feed, f.host or self.host, f.component or self.component) for f in self.feeds]


def _overlap(a: str, b: str) -> bool:
    """Whether two different feeds of one PDU share current: the unit holds all of them, and
    banks sit on phases (two banks, or two phases, do not overlap)."""
    kinds = {a.split(":")[0], b.split(":")[0]}
    return "unit" in kinds or kinds == {"bank", "phase"}


def double_fed(pdus: list[PduConfig]) -> list[tuple[str, str]]:
    """(key, reason) for each host whose power would be counted twice.

    A host is fed either by outlets or by whole PDUs, banks or phases (`feeds:`), never both;
    and one PDU's feeds of one host do not overlap (its unit and one of its banks, a bank and
    a phase). Keys are named, never the host (docs/exporters/pdu.md "Feeds").
    """
    by_outlets: dict[str, str] = {}
    for i, pdu in enumerate(pdus):
        if pdu.host:
            by_outlets.setdefault(pdu.host, f"pdus[{i}].host")
        for j, rule in enumerate(pdu.outlets):
            if rule.host:
                by_outlets.setdefault(rule.host, f"pdus[{i}].outlets[{j}].host")
    problems: list[tuple[str, str]] = []
    for i, pdu in enumerate(pdus):
        seen: list[tuple[str, str, int]] = []  # (host, feed, j) of this PDU
        for j, feed in enumerate(pdu.feeds):
            key = f"pdus[{i}].feeds[{j}]"
            host = feed.host or pdu.host
            if host and host in by_outlets:
                problems.append((
                    f"{key}.host",
                    f"the same host as {by_outlets[host]}, which maps outlets: a host fed "
                    "both by outlets and by a whole PDU, bank or phase would be counted twice",
                ))  # fmt: skip
            for other_host, other_feed, k in seen:
                if feed.feed == other_feed:
                    problems.append((
                        f"{key}.feed",
                        f"the same feed as pdus[{i}].feeds[{k}].feed: one feed's power goes to "
                        "one host",
                    ))  # fmt: skip
                elif host and host == other_host and _overlap(feed.feed, other_feed):
                    problems.append((
                        f"{key}.feed",
                        f"overlaps pdus[{i}].feeds[{k}].feed (the unit holds its banks and "
                        "phases; banks sit on phases) for the same host: its power would be "
                        "counted twice",
                    ))  # fmt: skip
            seen.append((host, feed.feed, j))
    return problems


class ChassisRule(Strict):
    """Labels a BMC's chassis with the host or component it is; the first matching rule wins."""

    id: str | list[str] | None = None  # the chassis' Redfish Id (the last part of its path)
    name: Regex | None = None  # regular expression on the chassis' Name
    host: LabelText = ""
    component: LabelText = ""

    @model_validator(mode="after")
    def _check(self) -> ChassisRule:
        if self.id is None and self.name is None:
            raise ValueError("a chassis rule needs id or name")
        if not self.host and not self.component:
            raise ValueError("a chassis rule sets host, component or both")
        return self

    def matches(self, chassis_id: str, name: str) -> bool:
        """True if this rule applies to the chassis."""
        if self.id is not None:
            wanted = self.id if isinstance(self.id, list) else [self.id]
            if chassis_id not in wanted:
                return False
        return self.name is None or re.search(self.name, name) is not None


# FreeIPMI's workaround flags (freeipmi.conf(5), ipmi-raw(8) --workaround-flags)
IPMI_WORKAROUNDS = frozenset(
    {
        "authcap",
        "idzero",
        "unexpectedauth",
        "forcepermsg",
        "endianseq",
        "noauthcodecheck",
        "intel20",
        "supermicro20",
        "sun20",
        "opensesspriv",
        "integritycheckvalue",
        "assumeio",
        "assumemaxsdrrecordcount",
        "nochecksumcheck",
        "serialalertsdeferred",
        "incrementsolpacketsequence",
        "packetsequence",
    }
)
_REDFISH_ONLY = ("auth", "verify_tls", "ca_file", "allow_plain_http", "max_body", "max_chassis")
_IPMI_ONLY = ("privilege", "workarounds")


MAX_CA_FILE = 1024 * 1024  # a bundle of every public CA is ~200 kB


def read_ca_file(path: str | Path) -> str:
    """A BMC's CA file as PEM text: a regular file only, bounded, never blocking (a FIFO
    would hang whoever opens it: the start, once, issue 34)."""
    data, _ = read_bounded(path, MAX_CA_FILE)
    return data.decode("ascii", "replace")


class BmcConfig(Strict):
    """One BMC to poll for its server's power (docs/exporters/bmc.md)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]+$")
    protocol: Literal["redfish", "ipmi"]
    # redfish: https://HOST[:PORT] (http:// only with allow_plain_http); ipmi: HOST[:PORT] (623)
    address: str
    username: str = Field(default="", max_length=256)
    password: SecretStr | None = None
    password_file: Path | None = None
    password_env: str | None = None
    auth: Literal["session", "basic"] = "session"  # session falls back to Basic without a token
    verify_tls: bool = True  # false: the explicit, logged opt-out
    ca_file: Path | None = None  # trust this CA (PEM) instead of the system's
    allow_plain_http: bool = False
    privilege: Literal["USER", "OPERATOR", "ADMIN"] = "USER"
    workarounds: list[str] = Field(default_factory=list)
    timeout: Duration = 5.0  # per request (Redfish) or session (IPMI)
    deadline: Duration | None = None  # the whole poll; default: the interval
    max_body: int = Field(default=1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    max_chassis: int = Field(default=32, ge=1, le=1024)
    host: LabelText = ""  # the host label of the server's power (unmapped: the BMC's main chassis)
    component: LabelText = ""
    chassis: list[ChassisRule] = Field(default_factory=list)

    _file = field_validator("password_file")(_check_secret_file)

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        if not v.exists():
            raise ValueError("the file does not exist")
        try:  # bounded, never blocking: a FIFO here hung the start (issue 34)
            ssl.create_default_context(cadata=read_ca_file(v))
        except FileRefused as exc:
            raise ValueError(str(exc)) from None
        except (OSError, ssl.SSLError, ValueError):
            raise ValueError("not a readable PEM file of CA certificates") from None
        return v

    @field_validator("workarounds")
    @classmethod
    def _workarounds(cls, v: list[str]) -> list[str]:
        unknown = [w for w in v if w not in IPMI_WORKAROUNDS]
        if unknown:
            raise ValueError(
                f"unknown FreeIPMI workaround; known: {', '.join(sorted(IPMI_WORKAROUNDS))}"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> BmcConfig:
        password = _resolve(self.password, self.password_file, self.password_env, "password")
        given = self.model_fields_set
        if len(self.address) > 2048 or not self.address.isprintable():
            # urlsplit drops a newline or a tab silently and keeps ESC or NUL in the host
            raise ValueError("an address is printable text on one line")
        if self.protocol == "redfish":
            wrong = [k for k in _IPMI_ONLY if k in given]
            url = urlsplit(self.address)
            if url.scheme not in ("https", "http") or not url.hostname:
                raise ValueError("a Redfish address is https://HOST[:PORT]")
            if url.path.strip("/") or url.query or url.fragment or url.username:
                raise ValueError("a Redfish address is https://HOST[:PORT], without path or user")
            try:
                url.port  # noqa: B018 (raises on a bad port)
            except ValueError:
                raise ValueError("the address' port is not a port number") from None
            if url.scheme == "http" and not self.allow_plain_http:
                raise ValueError(
                    "plain http sends the password in clear: use https, or set "
                    "allow_plain_http: true"
                )
            if ":" in self.username:
                raise ValueError("a Redfish user name cannot hold ':' (HTTP Basic)")
        else:
            wrong = [k for k in _REDFISH_ONLY if k in given]
            host, _port = parse_listen(self.address, 623)
            # FreeIPMI reads ',' and '[n-m]' in a host name as several hosts (ipmi-raw(8)
            # "HOSTRANGED SUPPORT"): a name or an address only.
            bad = not re.fullmatch(r"[A-Za-z0-9.:-]+", host) or host.startswith("-")
            if bad or self.address.strip().startswith(":"):
                raise ValueError("an IPMI address is HOST[:PORT]: a host name or an address")
            for what, value, most in (("username", self.username, 16), ("password", None, 20)):
                text = (
                    value
                    if value is not None
                    else (password.get_secret_value() if password is not None else "")
                )
                # IPMI 2.0 limits (section 22.28-22.30); FreeIPMI's configuration cannot carry
                # blanks, '#', '"' or '\\' (it refuses the file, so every poll would fail).
                if len(text) > most or any(c.isspace() or c in '#"\\' for c in text):
                    raise ValueError(
                        f"an IPMI {what} is at most {most} characters, without blanks, "
                        "'#', '\"' or '\\'"
                    )
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: not a setting of protocol {self.protocol}")
        object.__setattr__(self, "password", password)
        return self

    def endpoint(self) -> tuple[str, int]:
        """(host, port): the URL's (Redfish) or HOST[:PORT], port 623 (IPMI)."""
        if self.protocol == "redfish":
            url = urlsplit(self.address)
            return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
        return parse_listen(self.address, 623)

    def labels_for(self, chassis_id: str, name: str) -> tuple[str, str] | None:
        """(host, component) of a mapped chassis; None: not exported."""
        for rule in self.chassis:
            if rule.matches(chassis_id, name):
                return rule.host or self.host, rule.component or self.component
        return None


_DAYS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*d\s*$")
# RFC 6750's b64token: what may follow "Bearer " in an Authorization header.
_TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]+=*$")
MIN_TOKEN_LENGTH = 16


def _long_duration(value: object) -> object:
    """Also accept days ('7d') where a duration may be long."""
    m = _DAYS.match(value) if isinstance(value, str) else None
    return float(m.group(1)) * 86400.0 if m else value


class RunsConfig(Strict):
    """The run registry: who may start and stop runs, and how long ended runs are kept."""

    token: SecretStr | None = None
    token_file: Path | None = None
    token_env: str | None = None
    keep: int = Field(default=100, ge=0, le=100_000)  # ended runs kept and exported, at least
    # runs kept in all (4 series each on /metrics; every change rewrites the file of them)
    max_runs: int = Field(default=1000, ge=1, le=100_000)
    # 0: ended runs are kept by `keep` alone
    retention: Annotated[DurationOrZero, BeforeValidator(_long_duration)] = 7 * 86400.0

    _file = field_validator("token_file")(_check_secret_file)

    @model_validator(mode="after")
    def _check(self) -> RunsConfig:
        if self.keep > self.max_runs:
            raise ValueError("keep must not exceed max_runs (the most runs kept in all)")
        token = _resolve(self.token, self.token_file, self.token_env, "token")
        if token is not None:
            value = token.get_secret_value()
            if len(value) < MIN_TOKEN_LENGTH or not _TOKEN.fullmatch(value):
                raise ValueError(
                    f"the token must be at least {MIN_TOKEN_LENGTH} characters of "
                    "A-Z a-z 0-9 - . _ ~ + / (e.g. from `openssl rand -hex 32`)"
                )
        object.__setattr__(self, "token", token)
        return self


# `shard: 2/3` in the file; "2/3" again in --print-config (not a list of two numbers).
ShardKey = Annotated[
    Shard, BeforeValidator(parse_shard), PlainSerializer(str, return_type=str, when_used="json")
]


class CollectorConfig(ProcessConfig):
    """`wattbit collector` configuration."""

    default_port: ClassVar[int] = COLLECTOR_PORT

    listen: Listen = Listen.default(COLLECTOR_PORT)
    interval: Annotated[Duration, at_least(1)] = 10.0
    concurrency: int = Field(default=32, ge=1, le=1024)  # PDUs polled at once
    profiles_dir: Path | None = None  # extra profiles, next to the built-in ones
    state_dir: Path = Path("/var/lib/wattbit")
    auths: dict[str, AuthConfig] = Field(default_factory=dict)
    pdus: list[PduConfig] = Field(default_factory=list)
    bmcs: list[BmcConfig] = Field(default_factory=list)  # docs/exporters/bmc.md
    runs: RunsConfig = RunsConfig()
    # This collector polls only the PDUs of its shard (collector/site/shard.py); the file may
    # list the whole site's PDUs, identical on every collector but for this key (and the token).
    shard: ShardKey = WHOLE

    @field_validator("profiles_dir")
    @classmethod
    def _profiles_dir(cls, v: Path | None) -> Path | None:
        if v is None:
            return v
        try:
            st = v.stat()
        except FileNotFoundError:
            raise ValueError("the directory does not exist") from None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or "not a valid path"
            raise ValueError(f"cannot read the directory: {reason}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError("not a directory")
        return v

    def polled(self) -> list[PduConfig]:
        """The PDUs this collector polls: those of its shard, in the file's order."""
        return [p for p in self.pdus if self.shard.owns(p.name)]

    def polled_bmcs(self) -> list[BmcConfig]:
        """The BMCs this collector polls: those of its shard (the PDUs' rule), in order."""
        return [b for b in self.bmcs if self.shard.owns(b.name)]

    def cross_check(self) -> list[tuple[str, str]]:
        """(key, reason) for references that do not resolve; load_model raises on the first."""
        problems = []
        names: set[str] = set()
        for i, pdu in enumerate(self.pdus):
            # Never the value: a community pasted into `auth` must not end up in a log.
            if pdu.auth not in self.auths:
                problems.append((f"pdus[{i}].auth", "names no entry of auths"))
            if pdu.name in names:
                problems.append((f"pdus[{i}].name", "the same name as an earlier PDU"))
            names.add(pdu.name)
        bmc_names: set[str] = set()
        for i, bmc in enumerate(self.bmcs):
            if bmc.name in bmc_names:
                problems.append((f"bmcs[{i}].name", "the same name as an earlier BMC"))
            bmc_names.add(bmc.name)
        return problems + double_fed(self.pdus)


def redacted(cfg: CollectorConfig) -> dict[str, object]:
    """The configuration as plain data with every secret replaced by '<redacted>'."""
    data = cfg.model_dump(mode="json", exclude_none=True)
    for auth in data.get("auths", {}).values():
        for key in ("community", "auth_key", "priv_key"):
            if key in auth:
                auth[key] = "<redacted>"
    for bmc in data.get("bmcs", []):
        if "password" in bmc:
            bmc["password"] = "<redacted>"
    runs = data.get("runs")
    if isinstance(runs, dict) and "token" in runs:
        runs["token"] = "<redacted>"
    return data
