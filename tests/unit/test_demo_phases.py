"""The demo's phases (their schedule, the --duration option) and the simulated PDU's watts
through a day of phases, read from /proc and /sys files written here."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from collector.demo import main as demo
from collector.demo.pdusim import RECORDING, LoadSampler, Model, SimulatedPdu


def test_phases_keep_their_shares_of_the_duration() -> None:
    plan = demo.schedule(60.0, 4)
    # idle 15 %, a ramp of 35 % adding a stream every third of it, all four 30 %, idle 20 %
    assert [(round(s.at, 9), s.run, s.phase, s.streams) for s in plan] == [
        (0.0, "demo-idle-1", "idle", 0),
        (9.0, "demo-ramp", "ramp", 1),
        (16.0, "demo-ramp", "ramp", 2),
        (23.0, "demo-ramp", "ramp", 3),
        (30.0, "demo-full", "full", 4),
        (48.0, "demo-idle-2", "idle", 0),
    ]
    assert demo.streaming_until(60.0) == pytest.approx(48.0)
    # --duration scales every phase alike
    long = demo.schedule(120.0, 4)
    assert [s.at for s in long] == pytest.approx([2 * s.at for s in plan])
    assert [demo.streams(plan, s) for s in plan] == ["0", "1-3", "1-3", "1-3", "4", "0"]
    # one disk: the ramp is that one stream, and so is full
    one = demo.schedule(60.0, 1)
    assert [(s.run, s.streams) for s in one] == [
        ("demo-idle-1", 0), ("demo-ramp", 1), ("demo-full", 1), ("demo-idle-2", 0)
    ]  # fmt: skip


def test_duration_option() -> None:
    p = demo.parser()
    assert p.parse_args([]).duration == 60.0
    assert p.parse_args(["--duration", "2m"]).duration == 120.0
    assert p.parse_args(["--duration", "45"]).duration == 45.0
    for bad in ("20", "abc", "nan", "-60"):
        with pytest.raises(argparse.ArgumentTypeError):
            demo._duration(bad)
    args = p.parse_args(["--keep-running", "--prometheus-data", "/tmp/x"])
    assert args.wait is True and args.prometheus_data == "/tmp/x"
    assert p.parse_args(["--no-wait"]).wait is False


class FakeMachine:
    """/proc/stat, /proc/diskstats and /sys/class/net of a machine the test drives."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.user = self.busy = self.idle = 0  # CPU jiffies, all CPUs: user, system, idle
        self.ticks = 0  # io_ticks (ms) of loop0, the demo's disk
        self.bytes = 0  # tx + rx of wbdemo0, the demo's veth
        self.now = 1000.0
        (root / "proc").mkdir()
        for name in ("wbdemo0", "eth9", "lo"):
            (root / "sys/class/net" / name / "statistics").mkdir(parents=True)
        self.write()

    def write(self) -> None:
        """The files as the kernel would show them now."""
        (self.root / "proc/stat").write_text(
            f"cpu  {self.user} 0 {self.busy} {self.idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n"
        )
        (self.root / "proc/diskstats").write_text(
            f"   7       0 loop0 10 0 80 5 0 0 0 0 0 {self.ticks} 5 0 0 0 0 0 0\n"
            "   8       0 sda 10 0 80 5 0 0 0 0 0 999999 5 0 0 0 0 0 0\n"
        )
        net = self.root / "sys/class/net"
        (net / "wbdemo0/statistics/tx_bytes").write_text(f"{self.bytes}\n")
        (net / "wbdemo0/statistics/rx_bytes").write_text("0\n")
        for other in ("eth9", "lo"):  # traffic the model must not count
            for c in ("tx_bytes", "rx_bytes"):
                (net / other / "statistics" / c).write_text(f"{int(self.now) * 10**9}\n")

    def second(self, cpu_busy: float, disk_busy: float, gbps: float, user: float = 0.0) -> None:
        """One second of this load: the streams' CPU as system time, the rest's as user."""
        self.busy += round(200 * cpu_busy)  # 2 CPUs x 100 jiffies
        self.user += round(200 * user)
        self.idle += 200 - round(200 * cpu_busy) - round(200 * user)
        self.ticks += round(1000 * disk_busy)
        self.bytes += round(gbps * 1e9 / 8)
        self.now += 1.0
        self.write()


def test_simulated_watts_follow_the_phases(tmp_path: Path) -> None:
    m = FakeMachine(tmp_path)
    sampler = LoadSampler(
        r"^loop\d+$", r"^wbdemo0$", root=tmp_path, clock=lambda: m.now, cpu_modes=demo.STREAM_CPU
    )
    model = Model()
    pdu = SimulatedPdu(RECORDING, "public", model, sampler)  # bound only when entered
    # a day of phases, in one-second samples: idle, a ramp of 1, 2, 3 streams, all 4, idle
    phases = [("idle", 0.05, 0.0, 0.0)] * 5
    phases += [("ramp", 0.5 + 0.1 * n, 0.9 * n, 2.0 * n) for n in (1, 2, 3) for _ in range(3)]
    phases += [("full", 0.95, 3.6, 7.0)] * 5 + [("idle", 0.05, 0.0, 0.0)] * 5
    seen: list[tuple[str, float, float]] = []
    for i, (name, cpu, disk, gbps) in enumerate(phases):
        # the monitoring stack's user time comes and goes: the demo's model leaves it out
        m.second(cpu, disk, gbps, user=(0.0, 0.02, 0.3, 0.04)[i % 4] * (1 - cpu))
        pdu.update(1.0)
        seen.append((name, pdu.load[2], pdu.watts[1] + pdu.watts[2]))
    host = [w for _, _, w in seen]
    # Gbit/s is the veth's alone (not eth9's, not lo's), and the host's watts are the model's
    assert [round(g, 9) for _, g, _ in seen[5:8]] == [2.0] * 3
    for (_name, g, w), (_, cpu, disk, _gb) in zip(seen, phases, strict=True):
        assert w == pytest.approx(model.host_watts(cpu, disk, g))
    # flat in the idle phases: the same watts every second, before the load and after it
    idle = {round(w, 9) for (name, _, w) in seen if name == "idle"}
    assert len(idle) == 1
    # rising with each stream of the ramp, highest in full, back down after
    ramp = [w for (name, _, w) in seen if name == "ramp"]
    assert ramp[0] > host[0] and ramp[2] < ramp[3] < ramp[6] and ramp == sorted(ramp)
    assert max(host) == host[-6] > ramp[-1]
    assert host[-1] == host[0]
    # the switch (outlet 3) follows Gbit/s too; the other 21 outlets draw nothing
    assert pdu.watts[3] == model.switch_watts(0.0) and sum(pdu.watts.values()) == pytest.approx(
        host[-1] + model.switch_watts(0.0)
    )


def test_cpu_modes(tmp_path: Path) -> None:
    m = FakeMachine(tmp_path)
    every = LoadSampler(r"^loop\d+$", r"^wbdemo0$", root=tmp_path, clock=lambda: m.now)
    streams = LoadSampler(
        r"^loop\d+$", r"^wbdemo0$", root=tmp_path, clock=lambda: m.now, cpu_modes=demo.STREAM_CPU
    )
    every.sample(), streams.sample()
    m.second(0.25, 0.0, 0.0, user=0.5)
    # by default every mode but idle and iowait is busy; the demo's count system time alone
    assert every.sample()[0] == 0.75 and streams.sample()[0] == 0.25
    with pytest.raises(ValueError, match="CPU modes"):
        LoadSampler(".", ".", cpu_modes=("idle",))
