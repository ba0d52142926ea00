"""What the pcie exporter costs a scrape on a large host (a SYNTHETIC /sys and /proc tree).

Run: .venv/bin/python bench/pcie_read.py [--disks 48] [--hbas 3] [--nics 8]
     [--cpus 64] [--repeat 200]

The tree has the kernel's layout: HBAs (mpt3sas-like, one MSI-X vector per CPU) each in its own
Gen3 x16 root port, the disks spread over them behind one expander each (a SAS phy per disk),
NIC functions two per Gen4 card, each card in its own root port, and a /proc/interrupts with
every vector on `--cpus` CPUs. Alternating in one run: (a) a scrape as the exporter does it
when nothing changed (chains cached: current link state, link rates, /proc/interrupts,
affinities) and (b) the same scrape forced to re-read the chains (topology refresh, what a
device coming or going costs). Medians of wall time and of this process's CPU time, and the
series counted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, print_command, ratio  # noqa: E402
from exporters.pcie.exporter import PcieExporter  # noqa: E402
from tests.support.tree import sys_link, write_file  # noqa: E402


def _pci(d: Path, speed: str, width: int, driver: str, root: Path) -> None:
    for name, value in (
        ("current_link_speed", speed),
        ("max_link_speed", speed),
        ("current_link_width", str(width)),
        ("max_link_width", str(width)),
        ("class", "0x010700"),
    ):
        write_file(d / name, value + "\n")
    (root / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
    sys_link(d / "driver", root / "bus/pci/drivers" / driver)
    sys_link(root / "bus/pci/devices" / d.name, d)


def build(root: Path, disks: int, hbas: int, nics: int, cpus: int) -> Path:
    """Write the tree; return the /proc root."""
    sys_root = root / "sys"
    lines = ["".join(f"CPU{c}".rjust(11) for c in range(cpus))]
    irq = 100
    for h in range(hbas):
        port = sys_root / f"devices/pci0000:00/0000:00:{h + 1:02x}.0"
        _pci(port, "8.0 GT/s PCIe", 16, "pcieport", sys_root)
        hba = port / f"0000:{h + 1:02x}:00.0"
        _pci(hba, "8.0 GT/s PCIe", 8, "mpt3sas", sys_root)
        for c in range(cpus):
            write_file(hba / "msi_irqs" / str(irq), "msix\n")
            counts = "".join(str(1000 if k == c else 0).rjust(11) for k in range(cpus))
            lines.append(f"{irq:>4}:{counts}  IR-PCI-MSIX-{hba.name} {c}-edge  mpt3sas{h}-msix{c}")
            write_file(root / "proc/irq" / str(irq) / "smp_affinity_list", f"{c}\n")
            write_file(root / "proc/irq" / str(irq) / "effective_affinity_list", f"{c}\n")
            irq += 1
        expander = hba / f"host{h}/port-{h}:0/expander-{h}:0"
        for i in range(h, disks, hbas):
            port_dir = expander / f"port-{h}:0:{i}"
            phy = expander / f"phy-{h}:0:{i}"
            write_file(phy / f"sas_phy/phy-{h}:0:{i}/negotiated_linkrate", "12.0 Gbit\n")
            sys_link(port_dir / phy.name, phy)
            scsi = port_dir / f"end_device-{h}:0:{i}/target{h}:0:{i}/{h}:0:{i}:0"
            write_file(scsi / "model", "HUS726060ALE610\n")
            block = scsi / "block" / f"sd{i}"
            write_file(block / "dev", f"8:{16 * i}\n")
            write_file(block / "size", "11721045168\n")
            write_file(block / "queue/rotational", "1\n")
            sys_link(sys_root / "class/block" / f"sd{i}", block)
    for n in range(nics):
        card = n // 2
        port = sys_root / f"devices/pci0000:80/0000:80:{card + 1:02x}.0"
        if not port.exists():
            _pci(port, "16.0 GT/s PCIe", 16, "pcieport", sys_root)
        fn = port / f"0000:{0x81 + card:02x}:00.{n % 2}"
        _pci(fn, "16.0 GT/s PCIe", 16, "mlx5_core", sys_root)
        net = fn / "net" / f"ens{n}"
        write_file(net / "flags", "0x1003\n")
        sys_link(net / "device", fn)
        sys_link(sys_root / "class/net" / f"ens{n}", net)
    write_file(root / "proc/interrupts", "\n".join(lines) + "\n")
    return root / "proc"


def main() -> None:
    """Build the tree, alternate cached and refreshing scrapes, print medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--hbas", type=int, default=3)
    ap.add_argument("--nics", type=int, default=8)
    ap.add_argument("--cpus", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wattbit-pcie-bench-"))
    try:
        proc = build(root, args.disks, args.hbas, args.nics, args.cpus)
        cached = PcieExporter(sys_root=root / "sys", proc_root=proc, refresh=1e9)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(cached)
        body = generate_latest(registry).decode()
        series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        families: dict[str, int] = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name = line.split("{", 1)[0]
                families[name] = families.get(name, 0) + 1
        fresh = PcieExporter(sys_root=root / "sys", proc_root=proc, refresh=1e9)
        exporters = {"cached": cached, "refresh": fresh}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in exporters}
        for _, name in alternate(list(exporters), args.repeat):  # AB BA AB ...
            exporter = exporters[name]
            if name == "refresh":
                exporter._topology = None  # what a device coming or going triggers
            w0, c0 = time.perf_counter(), time.process_time()
            list(exporter.collect())
            times[name].append((time.perf_counter() - w0, time.process_time() - c0))
        print(
            f"pcie: disks={args.disks} hbas={args.hbas} nics={args.nics} cpus={args.cpus} "
            f"series={series}"
        )
        for name, count in sorted(families.items()):
            print(f"  {name}: {count}")
        for name, ts in times.items():
            wall = statistics.median(t[0] for t in ts) * 1e3
            cpu = statistics.median(t[1] for t in ts) * 1e3
            print(f"{name:8s} scrape median wall={wall:7.2f} ms cpu={cpu:7.2f} ms")
        cpu_of = {n: statistics.median(t[1] for t in ts) for n, ts in times.items()}
        slower = ratio(cpu_of["refresh"], cpu_of["cached"])
        print(f"refresh / cached CPU: {slower or float('nan'):.2f}")
        print_command()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
