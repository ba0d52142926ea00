"""The web config file (TLS, basic auth, headers) in Prometheus exporter-toolkit's format.

The format is the one `node_exporter --web.config.file` reads, documented in
prometheus/exporter-toolkit docs/web-configuration.md, so one file can serve both.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    SecretStr,
    StrictBool,
    ValidationInfo,
    field_validator,
)

from collector.config import ConfigError, Strict, load_model
from collector.files import MAX_CONFIG_FILE, FileRefused, read_bounded

__all__ = [
    "ClientAuthType",
    "HTTPServerConfig",
    "TLSServerConfig",
    "TLSVersionName",
    "WebConfig",
    "load_web_config",
]

ClientAuthType = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
TLSVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]

_TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# exporter-toolkit only lets these headers be set, some only to fixed values, so that every
# Prometheus exporter behaves the same; an empty list means "any value".
_ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

# Keys exporter-toolkit knows but wattbit does not implement. They are rejected rather than
# ignored, because silently dropping e.g. client_allowed_sans or cipher_suites would quietly
# weaken what the operator asked for; the distinct message says it is not a typo.
_UNSUPPORTED_KEYS = MappingProxyType(
    dict.fromkeys(
        (
            "tls_server_config.cert",
            "tls_server_config.key",
            "tls_server_config.client_ca",
            "tls_server_config.client_allowed_sans",
            "tls_server_config.curve_preferences",
            "rate_limit",
        ),
        "exporter-toolkit option not supported by wattbit",
    )
)

# TLS 1.2 suites wattbit offers: forward-secret (ECDHE) and AEAD (AES-GCM, ChaCha20-Poly1305),
# by Go's names (crypto/tls, as exporter-toolkit's cipher_suites takes them) -> OpenSSL's.
# Go's "..._CHACHA20_POLY1305" without "_SHA256" are its older aliases of the same suites.
_TLS12_SUITES: Mapping[str, str] = MappingProxyType(
    {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    }
)
# The default: every suite above (OpenSSL picks its own order unless the list is configured).
DEFAULT_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# TLS 1.3 suites are all AEAD and forward-secret, and not configurable (as in Go): named in
# cipher_suites they are accepted, so one file still serves node_exporter too, and ignored.
_TLS13_SUITES = frozenset(
    ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
)
# Suites Go knows that wattbit refuses: no forward secrecy (RSA key exchange), or CBC/RC4/3DES.
_REFUSED_SUITES = frozenset(
    (
        "TLS_RSA_WITH_RC4_128_SHA",
        "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_RSA_WITH_AES_128_CBC_SHA",
        "TLS_RSA_WITH_AES_256_CBC_SHA",
        "TLS_RSA_WITH_AES_128_CBC_SHA256",
        "TLS_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    )
)

# A bcrypt hash in modular crypt format: version, two-digit cost 04..31, then 22 characters
# of salt and 31 of checksum in bcrypt's base64 alphabet. Checked by shape rather than by a
# trial bcrypt.checkpw, which would cost 2**cost rounds per user at every start.
_BCRYPT_RE = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def _check_bcrypt(value: SecretStr) -> SecretStr:
    """Accept only a well-formed $2a$/$2b$/$2y$ bcrypt hash."""
    # The message must not echo the value: it is a password hash.
    if not _BCRYPT_RE.fullmatch(value.get_secret_value()):
        raise ValueError("not a bcrypt hash (expected $2a$, $2b$ or $2y$, cost 04-31, 60 chars)")
    return value


BcryptHash = Annotated[SecretStr, AfterValidator(_check_bcrypt)]


class TLSServerConfig(Strict):
    """The `tls_server_config` section: server certificate and client-certificate policy."""

    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: ClientAuthType = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: TLSVersionName = "TLS12"
    max_version: TLSVersionName = "TLS13"
    # Go names; TLS 1.2 only. None or empty: DEFAULT_TLS12_CIPHERS.
    cipher_suites: list[str] | None = None
    prefer_server_cipher_suites: StrictBool = True

    @field_validator("cert_file", "key_file", "client_ca_file", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """Treat an empty path as not set, as exporter-toolkit does."""
        return None if value == "" else value

    @field_validator("cert_file", "key_file", "client_ca_file", mode="after")
    @classmethod
    def _resolve(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        """Make a relative path relative to the web config file's directory."""
        # exporter-toolkit joins relative paths with the config file's directory (not the
        # working directory), so a config moved together with its certs keeps working.
        base = info.context.get("base_dir") if isinstance(info.context, dict) else None
        if value is None or value.is_absolute() or base is None:
            return value
        return Path(base) / value

    @field_validator("client_auth_type", mode="before")
    @classmethod
    def _empty_auth_type(cls, value: Any) -> Any:
        """Treat an empty client_auth_type as NoClientCert, as exporter-toolkit does."""
        return "NoClientCert" if value == "" else value


class HTTPServerConfig(Strict):
    """The `http_server_config` section: extra response headers; `http2` is accepted."""

    # Accepted for compatibility and ignored: the server (aiohttp) speaks HTTP/1.1 only.
    http2: StrictBool = True
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers", mode="after")
    @classmethod
    def _check_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        """Allow only the headers (and values) exporter-toolkit allows."""
        for name, value in headers.items():
            allowed = _ALLOWED_HEADERS.get(name)
            if allowed is None:
                raise ValueError(
                    f"header {name!r} can not be configured "
                    f"(allowed: {', '.join(sorted(_ALLOWED_HEADERS))})"
                )
            if allowed and value not in allowed:
                raise ValueError(f"invalid value for header {name!r}, expected one of {allowed}")
            # A CR or LF would let the value split the response into extra headers.
            if "\r" in value or "\n" in value:
                raise ValueError(f"value of header {name!r} contains a line break")
        return headers


def _none_to_empty(value: Any) -> Any:
    """Map a YAML null section to an empty mapping, like Go's zero value."""
    return {} if value is None else value


class WebConfig(Strict):
    """A whole web config file: TLS, HTTP headers and basic-auth users."""

    unsupported_keys: ClassVar[Mapping[str, str]] = _UNSUPPORTED_KEYS

    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)
    basic_auth_users: dict[str, BcryptHash] = Field(default_factory=dict)

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("http_server_config", "basic_auth_users", mode="before")
    @classmethod
    def _null_section(cls, value: Any) -> Any:
        """Accept an empty (null) section as its default."""
        return _none_to_empty(value)

    @property
    def source(self) -> Path | None:
        """The file this config was loaded from, if any."""
        return self._source

    @property
    def tls_enabled(self) -> bool:
        """Whether the endpoint serves HTTPS."""
        # An empty or null section means plain HTTP, as in exporter-toolkit. Any key in it
        # (even only min_version) means TLS was intended, so cert_file/key_file are then
        # required instead of quietly serving plain text.
        tls = self.tls_server_config
        return tls is not None and bool(tls.model_fields_set)

    def ssl_context(self) -> ssl.SSLContext | None:
        """Build the server-side SSL context, or None when TLS is not configured."""
        if not self.tls_enabled or self.tls_server_config is None:
            return None
        return _build_ssl_context(self.tls_server_config, self._source)


class _PassphraseRequiredError(Exception):
    """Raised from the key password callback: encrypted keys are not supported."""


def _refuse_passphrase() -> bytes:
    """Refuse to decrypt a key, instead of OpenSSL prompting on the terminal."""
    raise _PassphraseRequiredError


def _readable(path: Path, key: str, source: Path | None) -> None:
    """Fail with the key and file name unless `path` can be opened and read."""
    try:
        read_bounded(path, MAX_CONFIG_FILE)  # OpenSSL then opens it: a FIFO would block it
    except FileRefused as exc:
        raise ConfigError(source or "", key, f"file '{path}': {exc}") from None


def _build_ssl_context(tls: TLSServerConfig, source: Path | None) -> ssl.SSLContext:
    """Check the TLS section and its files, and build a server-side SSL context."""
    src: str | Path = source or ""
    section = "tls_server_config"
    if tls.cert_file is None:
        raise ConfigError(src, f"{section}.cert_file", "required when TLS is configured")
    if tls.key_file is None:
        raise ConfigError(src, f"{section}.key_file", "required together with cert_file")

    min_v, max_v = _TLS_VERSIONS[tls.min_version], _TLS_VERSIONS[tls.max_version]
    for key, version in (("min_version", tls.min_version), ("max_version", tls.max_version)):
        if _TLS_VERSIONS[version] < ssl.TLSVersion.TLSv1_2:
            raise ConfigError(
                src,
                f"{section}.{key}",
                f"{version} is not offered: wattbit's suites are all AEAD, which needs TLS12+",
            )
    if min_v > max_v:
        raise ConfigError(src, f"{section}.max_version", f"{tls.max_version} is below min_version")
    ciphers = _tls12_ciphers(tls.cipher_suites or [], src)
    if tls.cipher_suites and ciphers is None and max_v < ssl.TLSVersion.TLSv1_3:
        raise ConfigError(
            src, f"{section}.cipher_suites", "names no TLS 1.2 suite, and max_version is TLS12"
        )

    auth = tls.client_auth_type
    if auth == "RequireAnyClientCert":
        # Go can demand a certificate without verifying it; Python's ssl module cannot (it
        # always verifies a requested certificate against the loaded CAs), and guessing
        # stricter or looser semantics would surprise someone either way.
        raise ConfigError(
            src,
            f"{section}.client_auth_type",
            "RequireAnyClientCert cannot be enforced by Python's ssl module; "
            "use RequireAndVerifyClientCert with client_ca_file",
        )
    if tls.client_ca_file is not None and auth == "NoClientCert":
        # Same rule as exporter-toolkit: a CA without a policy is almost surely a mistake.
        raise ConfigError(
            src, f"{section}.client_ca_file", "set without a client_auth_type that uses it"
        )
    verifying = auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
    if verifying and tls.client_ca_file is None:
        # Go would fall back to the system roots, i.e. accept any publicly issued
        # certificate as a client credential; require an explicit CA instead.
        raise ConfigError(src, f"{section}.client_ca_file", f"required by {auth}")

    _readable(tls.cert_file, f"{section}.cert_file", source)
    _readable(tls.key_file, f"{section}.key_file", source)
    if tls.client_ca_file is not None:
        _readable(tls.client_ca_file, f"{section}.client_ca_file", source)

    # A scratch context tells a bad certificate apart from a bad or mismatched key, which a
    # single load_cert_chain() reports alike as "PEM lib".
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        probe.load_verify_locations(cafile=str(tls.cert_file))
    except ssl.SSLError:
        raise ConfigError(
            src, f"{section}.cert_file", f"no PEM certificate found in '{tls.cert_file}'"
        ) from None

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = min_v
    ctx.maximum_version = max_v
    # Client-initiated renegotiation only costs the server CPU; nothing here needs it.
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    # TLS 1.2 suites (1.3 ones are not configurable, and all fine).
    ctx.set_ciphers(ciphers or DEFAULT_TLS12_CIPHERS)
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file), password=_refuse_passphrase)
    except _PassphraseRequiredError:
        raise ConfigError(
            src, f"{section}.key_file", f"'{tls.key_file}' is encrypted; passphrases unsupported"
        ) from None
    except ssl.SSLError:
        raise ConfigError(
            src,
            f"{section}.key_file",
            f"'{tls.key_file}' is not a private key matching cert_file '{tls.cert_file}'",
        ) from None

    if tls.client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=str(tls.client_ca_file))
        except ssl.SSLError:
            raise ConfigError(
                src,
                f"{section}.client_ca_file",
                f"no PEM certificate found in '{tls.client_ca_file}'",
            ) from None

    # RequestClientCert asks for a certificate but never checks or uses it; not asking at
    # all grants exactly the same access, and Python cannot ask without verifying.
    ctx.verify_mode = {
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }.get(auth, ssl.CERT_NONE)
    # Advertise only HTTP/1.1 so a client offering h2 does not expect it (http2 is ignored).
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _tls12_ciphers(names: list[str], src: str | Path) -> str | None:
    """The OpenSSL cipher string for Go suite names (None: no TLS 1.2 suite named)."""
    key = "tls_server_config.cipher_suites"
    chosen: list[str] = []
    for name in names:
        if name in _TLS13_SUITES:
            continue
        if name in _REFUSED_SUITES:
            raise ConfigError(
                src,
                key,
                f"{name} is refused: only forward-secret AEAD suites (ECDHE with AES-GCM or "
                f"ChaCha20-Poly1305) are offered",
            )
        openssl = _TLS12_SUITES.get(name)
        if openssl is None:
            raise ConfigError(
                src,
                key,
                f"unknown cipher suite {name!r} (known: {', '.join(sorted(_TLS12_SUITES))})",
            )
        if openssl not in chosen:
            chosen.append(openssl)
    return ":".join(chosen) or None


def load_web_config(path: str | Path) -> WebConfig:
    """Read, validate and check (including cert/key files) a web config file."""
    path = Path(path)
    # An empty file is valid: plain HTTP, no auth, as in exporter-toolkit. Relative file
    # names are relative to the file's own directory (base_dir), as in exporter-toolkit.
    config = load_model(WebConfig, path, context={"base_dir": path.absolute().parent})
    config._source = path
    # Build the SSL context once now so a missing or bad cert fails before anything starts.
    config.ssl_context()
    return config
