"""wattbit_disk_info: what the host's /sys says about each block device blockio exports
(the topology itself is read by exporters/hostfs/blockdevs.py)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily

from exporters.hostfs.blockdevs import DiskInfo

INFO_METRIC = "wattbit_disk_info"
INFO_LABELS = ("device", "model", "serial", "controller", "numa_node", "rotational", "parent")


def disk_info_metric(infos: Iterable[DiskInfo]) -> GaugeMetricFamily:
    """The wattbit_disk_info family (value 1), one series per device, sorted by device name."""
    # A gauge named *_info rather than InfoMetricFamily("wattbit_disk"): the family name is the
    # series name, and both text formats render the same "wattbit_disk_info{...} 1.0".
    family = GaugeMetricFamily(
        INFO_METRIC,
        "Block device topology: model, serial, host controller PCI address and its NUMA node.",
        labels=list(INFO_LABELS),
    )
    for info in sorted(infos, key=lambda i: i.device):
        family.add_metric(
            [
                info.device,
                info.model,
                info.serial,
                info.controller,
                info.numa_node,
                info.rotational,
                info.parent,
            ],
            1.0,
        )
    return family
