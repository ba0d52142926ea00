"""What the SNMP client is asked and how it fails: credentials, targets, error reasons.

Shared by the client (snmp.py) and its two transports: SNMPv2c over our own socket (udp.py,
ber.py) and SNMPv3 through pysnmp (v3.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .types import Value

# Error reasons. "refused": an ICMP port unreachable came back (SNMPv2c; for SNMPv3, pysnmp
# does not read ICMP errors and a closed port reads as "timeout"). "over_limit": one walk
# received more than the target's max_var_binds; it stops there.
REASONS = frozenset({"timeout", "auth", "too_big", "garbage", "refused", "over_limit", "error"})

# SNMPv3 protocol names as configured; v3.py maps them to pysnmp's. AES-192/256 are not
# standardised: "AES192"/"AES256" are the Blumenthal key extension (draft-blumenthal-aes-usm-04)
# that net-snmp, and so most PDU firmware, implements; "AES192C"/"AES256C" are the Reeder
# extension Cisco uses. The two agree when the auth protocol's localized key is already long
# enough (SHA-256 and up for AES-256).
AUTH_PROTOCOLS = frozenset({None, "MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512"})
PRIV_PROTOCOLS = frozenset({None, "DES", "AES128", "AES192", "AES256", "AES192C", "AES256C"})

# RFC 3416 section 3 error-status names, for messages.
ERROR_STATUS = [
    "noError",
    "tooBig",
    "noSuchName",
    "badValue",
    "readOnly",
    "genErr",
    "noAccess",
    "wrongType",
    "wrongLength",
    "wrongEncoding",
    "wrongValue",
    "noCreation",
    "inconsistentValue",
    "resourceUnavailable",
    "commitFailed",
    "undoFailed",
    "authorizationError",
    "notWritable",
    "inconsistentName",
]


# One var-bind of a response: the OID's arcs (for ordering), the dotted OID, the value.
VarBind = tuple[tuple[int, ...], str, Value]
# What an agent answered: error-status, error-index, var-binds (RFC 3416 section 3).
Answer = tuple[int, int, list[VarBind]]


@dataclass(frozen=True)
class Auth:
    """SNMP credentials: v2c community, or a v3 USM user (secrets never in repr)."""

    version: str  # "2c" or "3"
    community: str | None = field(default=None, repr=False)
    user: str | None = None
    auth_protocol: str | None = None  # MD5 SHA SHA224 SHA256 SHA384 SHA512
    auth_key: str | None = field(default=None, repr=False)
    priv_protocol: str | None = None  # DES AES128 AES192 AES256 (AES192C AES256C: Cisco)
    priv_key: str | None = field(default=None, repr=False)
    context_name: str = ""

    def __post_init__(self) -> None:
        if self.version == "2c":
            if not self.community:
                raise ValueError("SNMPv2c needs a community")
            return
        if self.version != "3":
            raise ValueError(f"SNMP version must be '2c' or '3', not {self.version!r}")
        if not self.user:
            raise ValueError("SNMPv3 needs a user name")
        if self.auth_protocol not in AUTH_PROTOCOLS:
            raise ValueError(f"unknown SNMPv3 auth protocol {self.auth_protocol!r}")
        if self.priv_protocol not in PRIV_PROTOCOLS:
            raise ValueError(f"unknown SNMPv3 privacy protocol {self.priv_protocol!r}")
        if self.priv_protocol and not self.auth_protocol:
            raise ValueError("SNMPv3 privacy needs authentication (RFC 3414 section 3.1.1)")
        # RFC 3414 section 11.2: pass phrases of at least 8 octets
        if self.auth_protocol and len(self.auth_key or "") < 8:
            raise ValueError(f"SNMPv3 auth key of user {self.user!r} is shorter than 8")
        if self.priv_protocol and len(self.priv_key or "") < 8:
            raise ValueError(f"SNMPv3 privacy key of user {self.user!r} is shorter than 8")


@dataclass(frozen=True)
class Target:
    """One SNMP agent: address, credentials and request tuning."""

    host: str
    port: int = 161
    auth: Auth = field(default=None)  # type: ignore[assignment]  # required: no "public"
    timeout: float = 2.0
    retries: int = 1
    max_repetitions: int = 25  # the most var-binds one GETBULK asks for, all subtrees together
    max_var_binds: int = 20_000  # the most var-binds one walk may receive (else "over_limit")

    def __post_init__(self) -> None:
        if not isinstance(self.auth, Auth):
            raise TypeError("Target needs auth=Auth(...)")
        if not 0 < self.port < 65536:
            raise ValueError(f"bad UDP port {self.port}")
        if self.timeout <= 0 or self.retries < 0 or self.max_repetitions < 1:
            raise ValueError("timeout must be > 0, retries >= 0, max_repetitions >= 1")
        if self.max_var_binds < 1:
            raise ValueError("max_var_binds must be >= 1")

    @property
    def endpoint(self) -> str:
        """host:port."""
        return f"{self.host}:{self.port}"

    @property
    def label(self) -> str:
        """host:port, and the v3 user name: what messages call the target."""
        if self.auth.version == "3":
            return f"{self.host}:{self.port} (SNMPv3 user {self.auth.user})"
        return f"{self.host}:{self.port} (SNMPv2c)"


class SnmpError(Exception):
    """An SNMP request failed; `reason` is one short fixed label (see REASONS)."""

    def __init__(self, reason: str, target: str, detail: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown SNMP error reason {reason!r}")
        super().__init__(reason, target, detail)
        self.reason = reason
        self.target = target
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def timeout_error(target: Target, what: str) -> SnmpError:
    """The SnmpError for no answer in all tries."""
    tries = target.retries + 1
    return SnmpError(
        "timeout", target.endpoint, f"{what}: no response in {tries} tries of {target.timeout:g} s"
    )


def status_error(target: Target, kind: str, code: int, index: int, reps: int) -> SnmpError:
    """The SnmpError for an answer with a non-zero error-status."""
    name = ERROR_STATUS[code] if 0 <= code < len(ERROR_STATUS) else str(code)
    reason = "too_big" if code == 1 else "error"
    where = f" at var-bind {index}" if index else ""
    detail = f"{kind} to {target.label}: agent answered {name}({code}){where}"
    if kind == "bulk":
        detail += f" for max-repetitions {reps}"
    return SnmpError(reason, target.endpoint, detail)
