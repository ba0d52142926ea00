"""A SIMULATED rack PDU: a real SNMPv2c agent speaking APC's PowerNet-MIB (rPDU2), whose
outlet watts follow this machine's actual load.

    python -m collector.demo.pdusim --listen 127.0.0.1:16100 --community-file FILE

It serves a real APC AP8641 walk (deploy/demo/apc_ap8641.snmprec, from lextudio/snmpsim-data)
over UDP — GET, GETNEXT and GETBULK, BER-encoded by pysnmp, readable by net-snmp's snmpwalk and
by the wattbit collector's APC profile — and once a second rewrites the metered-outlet rows
(rPDU2OutletMeteredStatus power, current, energy) and the unit totals from a model:

    host watts   = idle + cpu_w x CPU busy (0..1, all CPUs, /proc/stat)
                        + disk_w x sum of disk busy fractions (/proc/diskstats io_ticks)
                        + gbit_w x Gbit/s (tx + rx, /sys/class/net/*/statistics)
    switch watts = switch_idle + switch_gbit_w x Gbit/s

Outlets 1 and 2 are the host's two power supplies (52 % / 48 % of its watts), outlet 3 the
switch, the other 21 draw nothing. It says so plainly: sysDescr, sysName and the model number
all carry "SIMULATED", and it prints its model on start. It is not a measurement.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import re
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class LoadSampler:
    """CPU busy, disk busy and Gbit/s of this machine between two calls of sample()."""

    def __init__(self, disks: str, interfaces: str, root: Path = Path("/")) -> None:
        self.disks = re.compile(disks)
        self.interfaces = re.compile(interfaces)
        self.root = root
        self._last: tuple[float, tuple[int, int], int, int] | None = None

    def _cpu(self) -> tuple[int, int]:
        f = (self.root / "proc/stat").read_text().splitlines()[0].split()[1:]
        v = [int(x) for x in f]
        idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
        return sum(v[:8]) - idle, sum(v[:8])

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
        now, cpu, ticks, net = time.monotonic(), self._cpu(), self._io_ticks_ms(), self._net_bytes()
        last, self._last = self._last, (now, cpu, ticks, net)
        if last is None:
            return 0.0, 0.0, 0.0
        dt = max(now - last[0], 1e-3)
        dtotal = cpu[1] - last[1][1]
        busy = (cpu[0] - last[1][0]) / dtotal if dtotal > 0 else 0.0
        disk = max(ticks - last[2], 0) / 1000.0 / dt
        gbps = max(net - last[3], 0) * 8 / dt / 1e9
        return min(max(busy, 0.0), 1.0), disk, gbps


def _types() -> dict[str, Any]:
    from pysnmp.proto import api

    p = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    return {
        "2": p.Integer32,
        "4": p.OctetString,
        "5": p.Null,
        "6": p.ObjectIdentifier,
        "64": p.IpAddress,
        "65": p.Counter32,
        "66": p.Gauge32,
        "67": p.TimeTicks,
        "68": p.Opaque,
        "70": p.Counter64,
        # snmpsim's tags for the RFC 3416 exceptions (fault-test recordings use them)
        "128": p.NoSuchObject,
        "129": p.NoSuchInstance,
        "130": p.EndOfMibView,
    }


def load_snmprec(path: Path) -> dict[tuple[int, ...], Any]:
    """A .snmprec file as {oid: pysnmp value}; variation rows take their stated value."""
    types = _types()
    rows: dict[tuple[int, ...], Any] = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        oid, tag, text = line.split("|", 2)
        tag, _, module = tag.partition(":")
        if module:
            opts = dict(kv.split("=", 1) for kv in text.split(",") if "=" in kv)
            text = opts.get("value", opts.get("initial", opts.get("min", "")))
        cls = types.get(tag.rstrip("x"))
        if cls is None:
            continue
        if tag.endswith("x"):
            value = cls(bytes.fromhex(text))
        elif tag in ("5", "128", "129", "130"):
            value = cls("")
        elif tag in ("4", "68"):
            value = cls(text.encode("latin-1"))
        elif tag in ("6", "64"):
            value = cls(text)
        else:
            value = cls(int(text))
        rows[tuple(int(x) for x in oid.split("."))] = value
    return rows


def _oid(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


class SimulatedPdu:
    """The MIB view (recording + live overrides) and the SNMPv2c responder on a UDP socket."""

    def __init__(
        self,
        recording: Path,
        community: str,
        model: Model,
        sampler: LoadSampler,
        outlet_names: tuple[str, str, str] = ("demo-host-psu1", "demo-host-psu2", "demo-switch"),
    ) -> None:
        from pysnmp.proto import api

        self.p = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
        self.rows = load_snmprec(recording)
        self.keys = sorted(self.rows)
        self.community = community
        self.model = model
        self.sampler = sampler
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.outlets = sorted(
            k[-1] for k in self.keys if k[:-1] == _oid(f"{OUTLET}.{COL_POWER}") and len(k) > 0
        )
        # energy registers in Wh (float), starting from the recorded kWh readings
        self.energy_wh = {
            i: int(self.rows.get(_oid(f"{OUTLET}.{COL_ENERGY}.{i}"), 0)) * 100.0
            for i in self.outlets
        }
        self.device_energy_wh = int(self.rows.get(_oid(DEVICE_ENERGY), 0)) * 100.0
        self.peak = dict.fromkeys(self.outlets, 0)
        self.watts: dict[int, float] = dict.fromkeys(self.outlets, 0.0)
        self.load = (0.0, 0.0, 0.0)
        s = self.p.OctetString
        self._set(SYS_DESCR, s(DESCR.encode()))
        self._set(SYS_NAME, s(b"wattbit-demo-pdu-SIMULATED"))
        self._set(MODEL, s(b"AP8641 (SIMULATED)"))
        for i, name in enumerate(outlet_names, start=1):
            self._set(f"{OUTLET}.{COL_NAME}.{i}", s(name.encode()))
        self.update(0.0)

    def _set(self, oid: str, value: Any) -> None:
        key = _oid(oid)
        if key not in self.rows:
            bisect.insort(self.keys, key)
        self.rows[key] = value

    def update(self, dt: float) -> None:
        """Sample the load, recompute every outlet and the unit totals."""
        cpu, disk, gbps = self.sampler.sample()
        host = self.model.host_watts(cpu, disk, gbps)
        watts = dict.fromkeys(self.outlets, 0.0)
        watts[1], watts[2] = host * 0.52, host * 0.48
        if 3 in watts:
            watts[3] = self.model.switch_watts(gbps)
        i32 = self.p.Integer32
        with self.lock:
            self.load, self.watts = (cpu, disk, gbps), watts
            for i, w in watts.items():
                self.energy_wh[i] += w * dt / 3600.0
                self.peak[i] = max(self.peak[i], round(w))
                self._set(f"{OUTLET}.{COL_POWER}.{i}", i32(round(w)))
                self._set(f"{OUTLET}.{COL_PEAK}.{i}", i32(self.peak[i]))
                self._set(f"{OUTLET}.{COL_CURRENT}.{i}", i32(round(w / VOLTS * 10)))
                self._set(f"{OUTLET}.{COL_ENERGY}.{i}", i32(int(self.energy_wh[i] // 100)))
            total = sum(watts.values())
            self.device_energy_wh += total * dt / 3600.0
            self._set(DEVICE_POWER, i32(round(total / 10)))
            self._set(DEVICE_ENERGY, i32(int(self.device_energy_wh // 100)))
            self._set(PHASE_CURRENT, i32(round(total / VOLTS * 10)))
            self._set(PHASE_VOLTAGE, i32(round(VOLTS)))
            ticks = int((time.monotonic() - self.started) * 100)
            self._set(SYS_UPTIME, self.p.TimeTicks(ticks))

    def _next(self, oid: tuple[int, ...]) -> tuple[tuple[int, ...], Any] | None:
        i = bisect.bisect_right(self.keys, oid)
        return (self.keys[i], self.rows[self.keys[i]]) if i < len(self.keys) else None

    def answer(self, data: bytes) -> bytes | None:
        """The response to one request datagram; None for garbage or a wrong community."""
        from pyasn1.codec.ber import decoder, encoder

        p = self.p
        try:
            req, _ = decoder.decode(data, asn1Spec=p.Message())
        except Exception:
            return None
        if str(p.apiMessage.get_community(req)) != self.community:
            return None  # like a real agent: a wrong community gets no answer
        pdu = p.apiMessage.get_pdu(req)
        rsp = p.apiMessage.get_response(req)
        rsp_pdu = p.apiMessage.get_pdu(rsp)
        names = [tuple(vb[0]) for vb in p.apiPDU.get_varbinds(pdu)]
        out: list[tuple[Any, Any]] = []

        def nxt(n: tuple[int, ...]) -> tuple[Any, Any]:
            r = self._next(n)
            return r if r else (n, p.EndOfMibView(""))

        with self.lock:
            if pdu.isSameTypeWith(p.GetRequestPDU()):
                out = [(n, self.rows.get(n, p.NoSuchInstance(""))) for n in names]
            elif pdu.isSameTypeWith(p.GetNextRequestPDU()):
                out = [nxt(n) for n in names]
            elif pdu.isSameTypeWith(p.GetBulkRequestPDU()):
                reps = min(int(p.apiBulkPDU.get_max_repetitions(pdu)), 64)
                non_rep = int(p.apiBulkPDU.get_non_repeaters(pdu))
                out = [nxt(n) for n in names[:non_rep]]
                cursors = names[non_rep:]
                for _ in range(max(reps, 0)):
                    if not cursors:
                        break
                    step = [nxt(n) for n in cursors]
                    out.extend(step)
                    cursors = [s[0] for s in step]
                    if all(isinstance(s[1], p.EndOfMibView) for s in step):
                        break
            else:
                return None
        p.apiPDU.set_varbinds(rsp_pdu, out)
        return bytes(encoder.encode(rsp))

    def serve(self, sock: socket.socket, stop: threading.Event, interval: float = 1.0) -> None:
        """Answer requests until stop is set; refresh the model every `interval` seconds."""
        last = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now - last >= interval:
                self.update(now - last)
                last = now
            ready = select.select([sock], [], [], max(0.0, min(0.2, interval - (now - last))))
            if not ready[0]:
                continue
            try:
                data, peer = sock.recvfrom(65535)
            except OSError:
                continue
            reply = self.answer(data)
            if reply is not None:
                sock.sendto(reply, peer)


def main(argv: list[str] | None = None) -> int:
    """Run the simulated PDU until SIGINT/SIGTERM."""
    ap = argparse.ArgumentParser(
        prog="python -m collector.demo.pdusim", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--listen", default="127.0.0.1:16100", help="HOST:PORT (UDP)")
    ap.add_argument("--community-file", help="file holding the v2c community (default: public)")
    ap.add_argument("--recording", default=str(RECORDING), help="the rPDU2 .snmprec to serve")
    ap.add_argument("--disks", default=r"^(sd[a-z]+|vd[a-z]+|nvme\d+n\d+|loop\d+)$")
    ap.add_argument("--interfaces", default=r".", help="regex of interfaces whose bytes count")
    ap.add_argument("--interval", type=float, default=1.0, help="model refresh, seconds")
    ap.add_argument("--quiet", action="store_true")
    for f in Model.__dataclass_fields__:
        ap.add_argument(f"--{f.replace('_', '-')}", type=float, default=getattr(Model(), f))
    a = ap.parse_args(argv)
    community = "public"
    if a.community_file:
        community = Path(a.community_file).read_text().strip()
    model = Model(**{f: getattr(a, f) for f in Model.__dataclass_fields__})
    host, _, port = a.listen.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, int(port)))
    pdu = SimulatedPdu(Path(a.recording), community, model, LoadSampler(a.disks, a.interfaces))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if not a.quiet:
        print(
            f"pdusim: SIMULATED APC AP8641 on udp://{a.listen} (pid {os.getpid()}); "
            f"host W = {model.idle_w:g} + {model.cpu_w:g}*CPU + {model.disk_w:g}*disk busy "
            f"+ {model.gbit_w:g}*Gbit/s; switch W = {model.switch_idle_w:g} + "
            f"{model.switch_gbit_w:g}*Gbit/s",
            flush=True,
        )
    try:
        pdu.serve(sock, stop, a.interval)
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
