"""The SNMP layer's view of the configured PDUs: the site collector polls them, and `wattbit pdu
detect` polls one the same way."""

from __future__ import annotations

from collector.site.config import AuthConfig, PduConfig
from exporters.pdu.poller import PduTarget
from exporters.snmp.client import Auth, Target

__all__ = ["pdu_target", "snmp_auth"]


def snmp_auth(a: AuthConfig) -> Auth:
    """The SNMP layer's credentials from a validated auth section."""

    def secret(s: object) -> str | None:
        return s.get_secret_value() if s is not None else None  # type: ignore[attr-defined]

    if a.version == "2c":
        return Auth(version="2c", community=secret(a.community) or "")
    return Auth(
        version="3",
        user=a.user or "",
        auth_protocol=a.auth_protocol,
        auth_key=secret(a.auth_key),
        priv_protocol=a.priv_protocol,
        priv_key=secret(a.priv_key),
        context_name=a.context_name,
    )


def pdu_target(p: PduConfig, auth: AuthConfig) -> PduTarget:
    """The poller's view of one configured PDU."""
    host, port = p.endpoint()
    return PduTarget(
        name=p.name,
        target=Target(
            host=host,
            port=port,
            auth=snmp_auth(auth),
            timeout=p.timeout,
            retries=p.retries,
            max_repetitions=p.max_repetitions,
            max_var_binds=p.max_var_binds,
        ),
        profile=p.profile,
        labels=p.labels_for,
        max_outlets=p.max_outlets,
        feeds=tuple(p.feed_labels()),
    )
