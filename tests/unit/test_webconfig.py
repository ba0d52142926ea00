"""Web config (exporter-toolkit format): good files load, bad ones name the key, never a secret."""

from __future__ import annotations

import ssl
import subprocess
import traceback
from pathlib import Path

import bcrypt
import pytest

from collector.config import ConfigError
from collector.web.config import WebConfig, load_web_config

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def make_cert(directory: Path, name: str = "server", cn: str = "localhost") -> tuple[Path, Path]:
    """Write a self-signed certificate and its unencrypted key with the openssl CLI."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-subj", f"/CN={cn}",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def write(path: Path, text: str) -> Path:
    """Write a config file, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load_error(path: Path) -> ConfigError:
    """Load `path` and return the ConfigError it must raise."""
    with pytest.raises(ConfigError) as info:
        load_web_config(path)
    return info.value


def full_text(err: ConfigError) -> str:
    """Everything a user could see of an error: message, repr and the whole traceback."""
    return "".join([str(err), repr(err), *traceback.format_exception(err)])


def test_good_file_loads_everything(tmp_path: Path) -> None:
    make_cert(tmp_path / "certs")
    cfg_path = write(
        tmp_path / "web.yml",
        f"""\
tls_server_config:
  cert_file: certs/server.crt
  key_file: certs/server.key
  client_auth_type: NoClientCert
  min_version: TLS13
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    X-Content-Type-Options: nosniff
    Content-Security-Policy: "default-src 'self'"
basic_auth_users:
  alice: {HASH}
""",
    )
    cfg = load_web_config(cfg_path)
    assert cfg.tls_enabled
    assert cfg.tls_server_config is not None
    assert cfg.tls_server_config.cert_file == tmp_path / "certs" / "server.crt"
    assert cfg.tls_server_config.min_version == "TLS13"
    assert cfg.http_server_config.headers["X-Frame-Options"] == "deny"
    assert cfg.basic_auth_users["alice"].get_secret_value() == HASH
    assert HASH not in repr(cfg)  # hashes are SecretStr, so a logged config does not show them
    assert cfg.source == cfg_path

    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode == ssl.CERT_NONE


def test_empty_file_means_plain_http_without_auth(tmp_path: Path) -> None:
    cfg = load_web_config(write(tmp_path / "web.yml", ""))
    assert cfg.model_dump() == WebConfig().model_dump()
    assert cfg.tls_server_config is None
    assert not cfg.tls_enabled
    assert cfg.ssl_context() is None
    assert cfg.basic_auth_users == {}


def test_default_min_version_is_tls12(tmp_path: Path) -> None:
    make_cert(tmp_path)
    cfg = load_web_config(
        write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n"
              "  key_file: server.key\n")
    )  # fmt: skip
    ctx = cfg.ssl_context()
    assert ctx is not None
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_relative_paths_are_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "etc" / "wattbit"
    make_cert(conf)
    ca_cert, _ = make_cert(tmp_path / "ca", name="ca", cn="client-ca")
    write(
        conf / "web.yml",
        f"tls_server_config:\n  cert_file: server.crt\n  key_file: ./server.key\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca_cert}\n",
    )
    # From another working directory, and with the config itself named relatively.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_web_config(Path("..") / "etc" / "wattbit" / "web.yml")
    tls = cfg.tls_server_config
    assert tls is not None
    assert tls.cert_file is not None and tls.key_file is not None
    assert tls.cert_file.resolve() == (conf / "server.crt").resolve()
    assert tls.key_file.resolve() == (conf / "server.key").resolve()
    assert tls.cert_file.is_absolute()
    assert tls.client_ca_file == ca_cert  # absolute stays as written
    ctx = cfg.ssl_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("tls_server_config:\n  certfile: x.crt\n", "tls_server_config.certfile"),
        ("basic_auth_user:\n  alice: x\n", "basic_auth_user"),
        ("http_server_config:\n  header: {}\n", "http_server_config.header"),
    ],
)
def test_unknown_key_is_named(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path / "web.yml", text)
    err = load_error(path)
    assert err.key == key
    assert err.file == str(path)
    assert "unknown key" in err.reason
    assert key in str(err)


def test_exporter_toolkit_key_that_wattbit_lacks_is_rejected_not_ignored(tmp_path: Path) -> None:
    text = "tls_server_config:\n  curve_preferences: [X25519]\n"
    err = load_error(write(tmp_path / "web.yml", text))
    assert err.key == "tls_server_config.curve_preferences"
    assert "not supported" in err.reason


def _tls(tmp_path: Path, extra: str) -> Path:
    make_cert(tmp_path)
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra
    return write(tmp_path / "web.yml", text)


def _tls12_names(ctx: ssl.SSLContext) -> set[str]:
    return {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}


def test_default_tls12_suites_are_forward_secret_aead_only(tmp_path: Path) -> None:
    ctx = load_web_config(_tls(tmp_path, "")).ssl_context()
    assert ctx is not None
    names = _tls12_names(ctx)
    assert names == {
        "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
    }  # fmt: skip
    assert ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE


def test_cipher_suites_take_go_names(tmp_path: Path) -> None:
    extra = (
        "  cipher_suites:\n    - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n"
        "    - TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305\n"
        "    - TLS_AES_128_GCM_SHA256\n"  # TLS 1.3: accepted, always on, not configurable
        "  prefer_server_cipher_suites: false\n"
    )
    ctx = load_web_config(_tls(tmp_path, extra)).ssl_context()
    assert ctx is not None
    assert _tls12_names(ctx) == {"ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"}
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE


@pytest.mark.parametrize(
    ("extra", "key", "reason"),
    [
        ("  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n", "cipher_suites", "refused"),
        ("  cipher_suites: [TLS_RSA_WITH_AES_128_GCM_SHA256]\n", "cipher_suites", "forward-secret"),
        ("  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]\n", "cipher_suites", "refused"),
        ("  cipher_suites: [AES128-SHA]\n", "cipher_suites", "unknown cipher suite 'AES128-SHA'"),
        ("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n  max_version: TLS12\n",
         "cipher_suites", "no TLS 1.2 suite"),
        ("  min_version: TLS10\n", "min_version", "not offered"),
        ("  min_version: TLS11\n  max_version: TLS11\n", "min_version", "not offered"),
        ("  prefer_server_cipher_suites: 'yes'\n", "prefer_server_cipher_suites", "boolean"),
    ],
)  # fmt: skip
def test_bad_tls_suites_and_versions_name_the_key(
    tmp_path: Path, extra: str, key: str, reason: str
) -> None:
    err = load_error(_tls(tmp_path, extra))
    assert err.key == f"tls_server_config.{key}"
    assert reason in err.reason


def test_missing_cert_file_names_key_and_file(tmp_path: Path) -> None:
    _, key = make_cert(tmp_path)
    path = write(
        tmp_path / "web.yml", f"tls_server_config:\n  cert_file: nope.crt\n  key_file: {key}\n"
    )
    err = load_error(path)
    assert err.key == "tls_server_config.cert_file"
    assert str(tmp_path / "nope.crt") in err.reason
    assert "No such file" in err.reason


def test_unreadable_key_file_names_key_and_file(tmp_path: Path) -> None:
    make_cert(tmp_path)
    (tmp_path / "keydir").mkdir()  # a directory cannot be read as a file, even by root
    path = write(
        tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: keydir\n"
    )
    err = load_error(path)
    assert err.key == "tls_server_config.key_file"
    assert str(tmp_path / "keydir") in err.reason


def test_cert_without_key_is_rejected(tmp_path: Path) -> None:
    make_cert(tmp_path)
    err = load_error(write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n"))
    assert err.key == "tls_server_config.key_file"


def test_tls_options_without_cert_are_rejected(tmp_path: Path) -> None:
    err = load_error(write(tmp_path / "web.yml", "tls_server_config:\n  min_version: TLS13\n"))
    assert err.key == "tls_server_config.cert_file"


def test_key_not_matching_cert_is_rejected(tmp_path: Path) -> None:
    make_cert(tmp_path)
    make_cert(tmp_path, name="other")
    path = write(
        tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n"
    )
    err = load_error(path)
    assert err.key == "tls_server_config.key_file"
    assert "matching" in err.reason
    assert "PRIVATE KEY" not in full_text(err)


def test_key_given_as_cert_is_rejected(tmp_path: Path) -> None:
    make_cert(tmp_path)
    path = write(
        tmp_path / "web.yml",
        "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
    )
    err = load_error(path)
    assert err.key == "tls_server_config.cert_file"
    assert "PRIVATE KEY" not in full_text(err)


def test_encrypted_key_is_rejected_without_prompting(tmp_path: Path) -> None:
    _, key = make_cert(tmp_path)
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-aes256", "-passout", "pass:pw",
         "-out", str(tmp_path / "enc.key")],
        check=True, capture_output=True,
    )  # fmt: skip
    path = write(
        tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: enc.key\n"
    )
    err = load_error(path)
    assert err.key == "tls_server_config.key_file"
    assert "encrypted" in err.reason


@pytest.mark.parametrize(
    "bad",
    [
        "hunter2-plain-password",
        "$1$saltsalt$qjXMvbEw8oaL.CzflDugX/",  # md5-crypt
        HASH[:-1],  # truncated
        HASH[:-1] + "!",  # a character outside bcrypt's alphabet
        "$2x$" + HASH[4:],  # a bcrypt variant exporter-toolkit's users never produce
        HASH[:4] + "03" + HASH[6:],  # cost below bcrypt's minimum
    ],
    # fixed ids: HASH has a random salt, and pytest-xdist's workers must collect the same ids
    ids=["plain", "md5-crypt", "truncated", "outside-alphabet", "2x-variant", "cost-03"],
)
def test_bad_hash_is_rejected_and_never_shown(tmp_path: Path, bad: str) -> None:
    path = write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: '{bad}'\n  bob: {HASH}\n")
    err = load_error(path)
    assert err.key == "basic_auth_users.alice"
    assert "bcrypt" in err.reason
    shown = full_text(err)
    assert bad not in shown
    assert HASH not in shown
    assert err.__cause__ is None and err.__suppress_context__


def test_non_string_hash_is_rejected(tmp_path: Path) -> None:
    err = load_error(write(tmp_path / "web.yml", "basic_auth_users:\n  alice: 12345\n"))
    assert err.key == "basic_auth_users.alice"
    assert "12345" not in full_text(err)


def test_yaml_error_quotes_no_line_text(tmp_path: Path) -> None:
    # An unterminated quote: PyYAML's own message would quote the line holding the hash.
    path = write(tmp_path / "web.yml", f"basic_auth_users:\n  alice: '{HASH}\n  bob: x\n")
    err = load_error(path)
    assert err.key == ""
    assert "not valid YAML" in err.reason
    assert "line" in err.reason
    shown = full_text(err)
    assert HASH not in shown
    assert HASH[7:] not in shown


def test_duplicate_key_is_rejected(tmp_path: Path) -> None:
    text = f"basic_auth_users:\n  alice: {HASH}\n  alice: {HASH}\n"
    err = load_error(write(tmp_path / "web.yml", text))
    assert "duplicate key" in err.reason
    assert "line 3" in err.reason
    assert HASH not in full_text(err)


def test_unreadable_file(tmp_path: Path) -> None:
    err = load_error(tmp_path / "missing.yml")
    assert err.file == str(tmp_path / "missing.yml")
    assert "cannot read" in err.reason


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    err = load_error(write(tmp_path / "web.yml", "- a\n- b\n"))
    assert "mapping" in err.reason


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("http_server_config:\n  headers:\n    X-Powered-By: me\n",
         "http_server_config.headers", "can not be configured"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
         "http_server_config.headers", "invalid value"),
        ("http_server_config:\n  http2: 'yes'\n", "http_server_config.http2", "boolean"),
        ("tls_server_config:\n  client_auth_type: Sometimes\n",
         "tls_server_config.client_auth_type", "RequireAndVerifyClientCert"),
        ("tls_server_config:\n  min_version: TLS14\n", "tls_server_config.min_version", "TLS13"),
    ],
)  # fmt: skip
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str, reason: str) -> None:
    err = load_error(write(tmp_path / "web.yml", text))
    assert err.key == key
    assert reason in err.reason


@pytest.mark.parametrize(
    ("extra", "key", "reason"),
    [
        ("  min_version: TLS13\n  max_version: TLS12\n", "tls_server_config.max_version", "below"),
        ("  client_auth_type: RequireAndVerifyClientCert\n",
         "tls_server_config.client_ca_file", "required"),
        ("  client_ca_file: server.crt\n", "tls_server_config.client_ca_file", "client_auth_type"),
        ("  client_auth_type: RequireAnyClientCert\n",
         "tls_server_config.client_auth_type", "RequireAndVerifyClientCert"),
    ],
)  # fmt: skip
def test_inconsistent_tls_settings(tmp_path: Path, extra: str, key: str, reason: str) -> None:
    make_cert(tmp_path)
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra
    err = load_error(write(tmp_path / "web.yml", text))
    assert err.key == key
    assert reason in err.reason


def test_verify_if_given_maps_to_optional_client_cert(tmp_path: Path) -> None:
    make_cert(tmp_path)
    text = (
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: server.crt\n"
    )
    ctx = load_web_config(write(tmp_path / "web.yml", text)).ssl_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_OPTIONAL


def test_cert_removed_after_load_fails_ssl_context_with_config_error(tmp_path: Path) -> None:
    cert, _ = make_cert(tmp_path)
    path = write(
        tmp_path / "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    cfg = load_web_config(path)
    cert.unlink()
    with pytest.raises(ConfigError) as info:
        cfg.ssl_context()
    assert info.value.key == "tls_server_config.cert_file"
    assert info.value.file == str(path)
