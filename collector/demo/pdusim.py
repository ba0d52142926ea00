"""A SIMULATED rack PDU: a real SNMPv2c agent speaking APC's PowerNet-MIB (rPDU2), whose
outlet watts follow this machine's actual load.

    python -m collector.demo.pdusim --listen 127.0.0.1:16100 --community-file FILE

It serves a real APC AP8641 walk (deploy/demo/apc_ap8641.snmprec, from lextudio/snmpsim-data)
over UDP — GET, GETNEXT and GETBULK, answered by collector/pdu/responder.py (the tests' agent
too), readable by net-snmp's snmpwalk and by the wattbit collector's APC profile — and once a
second rewrites the metered-outlet rows (rPDU2OutletMeteredStatus power, current, energy) and
the unit totals from a model:

    host watts   = idle + cpu_w x CPU busy (0..1, all CPUs, /proc/stat)
                        + disk_w x sum of disk busy fractions (/proc/diskstats io_ticks)
                        + gbit_w x Gbit/s (tx + rx, /sys/class/net/*/statistics)
    switch watts = switch_idle + switch_gbit_w x Gbit/s

CPU busy counts every mode but idle and iowait, or only those of --cpu-modes: `make demo`
counts nice, system, irq and softirq, the time of its (niced) streams and of the kernel
moving their bytes, and leaves out the user time of the monitoring stack around them (agent,
collector, Prometheus, the demo itself), which would otherwise make the idle watts wander.

Outlets 1 and 2 are the host's two power supplies (52 % / 48 % of its watts), outlet 3 the
switch, the other 21 draw nothing. It says so plainly: sysDescr, sysName and the model number
all carry "SIMULATED", and it prints its model on start. It is not a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collector.pdu.responder import Responder
from collector.pdu.snmprec import read_recording
from collector.secretfile import read_secret_file
from exporters.snmp.types import Value, Walk

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "deploy" / "demo" / "apc_ap8641.snmprec"

APC = "1.3.6.1.4.1.318.1.1.26"
OUTLET = f"{APC}.9.4.3.1"  # rPDU2OutletMeteredStatusEntry
COL_NAME, COL_CURRENT, COL_POWER, COL_PEAK, COL_ENERGY = 3, 6, 7, 8, 11
DEVICE_POWER = f"{APC}.4.3.1.5.1"  # rPDU2DeviceStatusPower, hundredths of kW
DEVICE_PEAK = f"{APC}.4.3.1.6.1"
DEVICE_ENERGY = f"{APC}.4.3.1.9.1"  # tenths of kWh
PHASE_CURRENT = f"{APC}.6.3.1.5.1"  # tenths of A
PHASE_VOLTAGE = f"{APC}.6.3.1.6.1"
MODEL = f"{APC}.2.1.8.1"
SYS_DESCR, SYS_NAME = "1.3.6.1.2.1.1.1.0", "1.3.6.1.2.1.1.5.0"
SYS_UPTIME = "1.3.6.1.2.1.1.3.0"
DESCR = (
    "SIMULATED PDU (wattbit pdusim): APC AP8641 rPDU2 MIB served from a real recording; "
    "outlet watts are MODELLED from this machine's CPU, disk and network load, not measured"
)
VOLTS = 230.0


@dataclass
class Model:
    """Watts as a function of load. Defaults: a small 2-socket data mover."""

    idle_w: float = 85.0
    cpu_w: float = 95.0
    disk_w: float = 6.0
    gbit_w: float = 9.0
    switch_idle_w: float = 38.0
    switch_gbit_w: float = 0.8

    def host_watts(self, cpu: float, disk_busy: float, gbps: float) -> float:
        """Watts of the host for CPU busy (0..1), summed disk busy fractions, Gbit/s."""
        return self.idle_w + self.cpu_w * cpu + self.disk_w * disk_busy + self.gbit_w * gbps

    def switch_watts(self, gbps: float) -> float:
        """Watts of the switch port side."""
        return self.switch_idle_w + self.switch_gbit_w * gbps


# /proc/stat's first eight CPU columns (guest time is already in user and nice)
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
BUSY_MODES = ("user", "nice", "system", "irq", "softirq", "steal")


class LoadSampler:
    """CPU busy, disk busy and Gbit/s of this machine between two calls of sample()."""

    def __init__(
        self,
        disks: str,
        interfaces: str,
        root: Path = Path("/"),
        clock: Callable[[], float] = time.monotonic,
        cpu_modes: tuple[str, ...] = BUSY_MODES,
    ) -> None:
        self.disks = re.compile(disks)
        self.interfaces = re.compile(interfaces)
        self.root = root
        self.clock = clock
        unknown = set(cpu_modes) - set(BUSY_MODES)
        if unknown:
            raise ValueError(f"CPU modes are some of {', '.join(BUSY_MODES)}, not {unknown}")
        self.cpu_columns = [CPU_MODES.index(m) for m in cpu_modes]
        self._last: tuple[float, tuple[int, int], int, int] | None = None

    def _cpu(self) -> tuple[int, int]:
        f = (self.root / "proc/stat").read_text().splitlines()[0].split()[1:]
        v = [int(x) for x in f[:8]] + [0] * (8 - len(f[:8]))
        return sum(v[i] for i in self.cpu_columns), sum(v)

    def _io_ticks_ms(self) -> int:
        total = 0
        for line in (self.root / "proc/diskstats").read_text().splitlines():
            p = line.split()
            if len(p) > 12 and self.disks.search(p[2]):
                total += int(p[12])
        return total

    def _net_bytes(self) -> int:
        total = 0
        base = self.root / "sys/class/net"
        for d in base.iterdir() if base.is_dir() else []:
            if d.name == "lo" or not self.interfaces.search(d.name):
                continue
            for c in ("rx_bytes", "tx_bytes"):
                with contextlib.suppress(OSError, ValueError):
                    total += int((d / "statistics" / c).read_text())
        return total

    def sample(self) -> tuple[float, float, float]:
        """(CPU busy 0..1, sum of disk busy fractions, Gbit/s) since the previous call."""
        now, cpu, ticks, net = self.clock(), self._cpu(), self._io_ticks_ms(), self._net_bytes()
        last, self._last = self._last, (now, cpu, ticks, net)
        if last is None:
            return 0.0, 0.0, 0.0
        dt = max(now - last[0], 1e-3)
        dtotal = cpu[1] - last[1][1]
        busy = (cpu[0] - last[1][0]) / dtotal if dtotal > 0 else 0.0
        disk = max(ticks - last[2], 0) / 1000.0 / dt
        gbps = max(net - last[3], 0) * 8 / dt / 1e9
        return min(max(busy, 0.0), 1.0), disk, gbps


def _int(walk: Walk, oid: str) -> int:
    """The recorded integer at oid, 0 when there is none."""
    v = walk.get(oid)
    return v.value if v is not None and isinstance(v.value, int) else 0


class SimulatedPdu:
    """The recording with its outlet rows rewritten from the model, served by a Responder."""

    def __init__(
        self,
        recording: Path,
        community: str,
        model: Model,
        sampler: LoadSampler,
        outlet_names: tuple[str, str, str] = ("demo-host-psu1", "demo-host-psu2", "demo-switch"),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        walk = read_recording(recording)
        self.model = model
        self.sampler = sampler
        self.started = time.monotonic()
        power = f"{OUTLET}.{COL_POWER}"
        self.outlets = sorted(
            int(oid.rpartition(".")[2]) for oid in walk if oid.rpartition(".")[0] == power
        )
        # energy registers in Wh (float), starting from the recorded kWh readings
        self.energy_wh = {i: _int(walk, f"{OUTLET}.{COL_ENERGY}.{i}") * 100.0 for i in self.outlets}
        self.device_energy_wh = _int(walk, DEVICE_ENERGY) * 100.0
        self.peak = dict.fromkeys(self.outlets, 0)
        self.watts: dict[int, float] = dict.fromkeys(self.outlets, 0.0)
        self.load = (0.0, 0.0, 0.0)
        walk[SYS_DESCR] = Value("OctetString", DESCR.encode())
        walk[SYS_NAME] = Value("OctetString", b"wattbit-demo-pdu-SIMULATED")
        walk[MODEL] = Value("OctetString", b"AP8641 (SIMULATED)")
        for i, name in enumerate(outlet_names, start=1):
            walk[f"{OUTLET}.{COL_NAME}.{i}"] = Value("OctetString", name.encode())
        self.responder = Responder(walk, community, max_repetitions=64, host=host, port=port)
        self.update(0.0)

    def update(self, dt: float) -> None:
        """Sample the load, recompute every outlet and the unit totals."""
        cpu, disk, gbps = self.sampler.sample()
        host = self.model.host_watts(cpu, disk, gbps)
        watts = dict.fromkeys(self.outlets, 0.0)
        watts[1], watts[2] = host * 0.52, host * 0.48
        if 3 in watts:
            watts[3] = self.model.switch_watts(gbps)
        self.load, self.watts = (cpu, disk, gbps), watts
        rows: dict[str, Value] = {}

        def i32(n: float) -> Value:
            return Value("Integer32", int(n))

        for i, w in watts.items():
            self.energy_wh[i] += w * dt / 3600.0
            self.peak[i] = max(self.peak[i], round(w))
            rows[f"{OUTLET}.{COL_POWER}.{i}"] = i32(round(w))
            rows[f"{OUTLET}.{COL_PEAK}.{i}"] = i32(self.peak[i])
            rows[f"{OUTLET}.{COL_CURRENT}.{i}"] = i32(round(w / VOLTS * 10))
            rows[f"{OUTLET}.{COL_ENERGY}.{i}"] = i32(self.energy_wh[i] // 100)
        total = sum(watts.values())
        self.device_energy_wh += total * dt / 3600.0
        rows[DEVICE_POWER] = i32(round(total / 10))
        rows[DEVICE_ENERGY] = i32(self.device_energy_wh // 100)
        rows[PHASE_CURRENT] = i32(round(total / VOLTS * 10))
        rows[PHASE_VOLTAGE] = i32(round(VOLTS))
        rows[SYS_UPTIME] = Value("TimeTicks", int((time.monotonic() - self.started) * 100))
        self.responder.set(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the simulated PDU until SIGINT/SIGTERM."""
    ap = argparse.ArgumentParser(
        prog="python -m collector.demo.pdusim", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--listen", default="127.0.0.1:16100", help="HOST:PORT (UDP)")
    ap.add_argument("--community-file", help="file holding the v2c community (default: public)")
    ap.add_argument(
        "--recording",
        default=str(RECORDING),
        help="the recording to serve (.snmprec, or snmpwalk -On text as .snmpwalk)",
    )
    ap.add_argument("--disks", default=r"^(sd[a-z]+|vd[a-z]+|nvme\d+n\d+|loop\d+)$")
    ap.add_argument("--interfaces", default=r".", help="regex of interfaces whose bytes count")
    ap.add_argument(
        "--cpu-modes",
        default=",".join(BUSY_MODES),
        help="the /proc/stat modes that count as CPU busy (default: all but idle and iowait)",
    )
    ap.add_argument("--interval", type=float, default=1.0, help="model refresh, seconds")
    ap.add_argument("--quiet", action="store_true")
    for f in Model.__dataclass_fields__:
        ap.add_argument(f"--{f.replace('_', '-')}", type=float, default=getattr(Model(), f))
    a = ap.parse_args(argv)
    community = "public"
    if a.community_file:
        # The collector's rules for its community_file: the two read the same file alike.
        try:
            community = read_secret_file(Path(a.community_file))
        except ValueError as exc:  # names the file and what is wrong, never what it holds
            ap.error(f"--community-file: {exc}")
    model = Model(**{f: getattr(a, f) for f in Model.__dataclass_fields__})
    host, _, port = a.listen.rpartition(":")
    try:
        sampler = LoadSampler(a.disks, a.interfaces, cpu_modes=tuple(a.cpu_modes.split(",")))
    except ValueError as exc:
        ap.error(f"--cpu-modes: {exc}")
    pdu = SimulatedPdu(Path(a.recording), community, model, sampler, host=host, port=int(port))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with pdu.responder:  # bound (or failed) before it says where it is
        if not a.quiet:
            print(
                f"pdusim: SIMULATED APC AP8641 on udp://{a.listen} (pid {os.getpid()}); "
                f"host W = {model.idle_w:g} + {model.cpu_w:g}*CPU ({a.cpu_modes}) + "
                f"{model.disk_w:g}*disk busy "
                f"+ {model.gbit_w:g}*Gbit/s; switch W = {model.switch_idle_w:g} + "
                f"{model.switch_gbit_w:g}*Gbit/s",
                flush=True,
            )
        last = time.monotonic()
        while not stop.wait(a.interval):
            now = time.monotonic()
            pdu.update(now - last)
            last = now
    return 0


if __name__ == "__main__":
    sys.exit(main())
