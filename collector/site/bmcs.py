"""The BMC poller's view of the configured BMCs (docs/exporters/bmc.md)."""

from __future__ import annotations

from collector.site.config import BmcConfig, CollectorConfig, read_ca_file
from exporters.bmc.ipmi import IpmiTarget
from exporters.bmc.poller import BmcPoller, BmcTarget
from exporters.bmc.redfish import RedfishTarget

__all__ = ["bmc_target", "build_bmc_poller"]


def bmc_target(b: BmcConfig, interval: float) -> BmcTarget:
    """The poller's view of one configured BMC (the password resolved, never logged)."""
    password = b.password.get_secret_value() if b.password is not None else ""
    deadline = min(b.deadline or interval, interval)
    if b.protocol == "redfish":
        origin = b.address.rstrip("/")
        return BmcTarget(
            name=b.name,
            protocol="redfish",
            redfish=RedfishTarget(
                base_url=origin,
                username=b.username,
                password=password,
                auth=b.auth,
                verify_tls=b.verify_tls,
                ca_file=str(b.ca_file) if b.ca_file else None,
                # read here, once (checked by the config): the poller never opens a file
                ca_data=read_ca_file(b.ca_file) if b.ca_file else None,
                timeout=b.timeout,
                max_body=b.max_body,
                max_chassis=b.max_chassis,
            ),
            mapper=b.labels_for if b.chassis else None,
            labels=(b.host, b.component),
            deadline=deadline,
        )
    host, port = b.endpoint()
    return BmcTarget(
        name=b.name,
        protocol="ipmi",
        ipmi=IpmiTarget(
            host=host,
            port=port,
            username=b.username,
            password=password,
            privilege=b.privilege,
            timeout=b.timeout,
            workarounds=tuple(b.workarounds),
        ),
        labels=(b.host, b.component),
        deadline=deadline,
    )


def build_bmc_poller(cfg: CollectorConfig) -> BmcPoller:
    """The poller for the configured BMCs of this collector's shard (all of them unsharded)."""
    targets = [bmc_target(b, cfg.interval) for b in cfg.polled_bmcs()]
    return BmcPoller(targets, cfg.interval, cfg.concurrency)
