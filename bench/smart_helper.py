"""What reading drive health through the root helper costs beside running smartctl directly.

Run: sudo .venv/bin/python bench/smart_helper.py [--repeat 100]

For every disk the smart exporter would read here (blockio's whole disks that are not
virtual), alternately (ABAB...): (a) the agent's direct runner (exporters/smart/runner.py
SmartctlRunner: one smartctl) and (b) its helper runner (HelperRunner) through a unix socket
on which each connection starts packaging/libexec/smartctl-helper under /usr/bin/python3 -I
with the connection as stdin and stdout, as systemd's Accept=yes socket does
(tests/support/sockact.py). Medians of the wall time of one read, and their ratio; both get the
same smartctl output (checked). What the helper adds is a python3 start-up, the request's
validation (a /sys/block lookup) and the socket.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import alternate, bench_lock, machine, median, print_command, table  # noqa: E402
from exporters.hostfs.blockdevs import BLOCK_EXCLUDE  # noqa: E402
from exporters.smart.exporter import device_path, list_disks  # noqa: E402
from exporters.smart.runner import HelperRunner, Runner, RunOutcome, SmartctlRunner  # noqa: E402
from tests.support.sockact import Activator  # noqa: E402

HELPER = ROOT / "packaging" / "libexec" / "smartctl-helper"


def _same(a: RunOutcome, b: RunOutcome) -> bool:
    """The same smartctl answer (local_time aside, the one field that moves)."""

    def strip(o: RunOutcome) -> object:
        doc = json.loads(o.output)
        doc.pop("local_time", None)
        return (o.exit_code, doc)

    return a.result == b.result == "done" and strip(a) == strip(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--repeat", type=int, default=100, help="reads of each variant per disk")
    args = ap.parse_args()
    disks = [d for d in list_disks(Path("/sys"), BLOCK_EXCLUDE) if not d.virtual]
    if not disks:
        print("no disk to read here")
        return 1
    print(machine())
    with tempfile.TemporaryDirectory(prefix="wattbit-bench-helper-") as tmp:
        sock = Path(tmp) / "smartctl.sock"
        act = Activator(sock, ["/usr/bin/python3", "-IS", str(HELPER)], Path(tmp) / "helper.log")
        direct, helper = SmartctlRunner(), HelperRunner(str(sock))
        runners: dict[str, Runner] = {"direct": direct, "helper": helper}
        rows = []
        try:
            with bench_lock():
                for d in disks:
                    dev = device_path(d.name)
                    if not _same(direct(dev, 60), helper(dev, 60)):
                        print(f"{dev}: the helper's answer differs from smartctl's")
                        return 1
                    times: dict[str, list[float]] = {k: [] for k in runners}
                    for _, name in alternate(list(runners), args.repeat):
                        out = runners[name](dev, 60)
                        times[name].append(out.duration)
                    a, b = median(times["direct"]), median(times["helper"])
                    assert a is not None and b is not None
                    rows.append([dev, f"{a * 1e3:.1f} ms", f"{b * 1e3:.1f} ms", f"{b / a:.2f}"])
        finally:
            act.close()
    print(f"{args.repeat} alternating reads per variant and disk, medians:")
    table(["disk", "direct smartctl", "through the helper", "ratio"], rows)
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
