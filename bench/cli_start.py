"""How fast the `wattbit` command starts, and in how much memory: this checkout against
another revision (issue 35: the CLI imported pydantic and every subcommand's modules first).

    .venv/bin/python bench/cli_start.py [--against main] [--rounds 20]

Each command runs in a fresh interpreter, alternately in both trees (this checkout, and
``--against`` extracted with git archive into a temporary directory), each tree's bytecode
compiled first as an installed package's is (PYTHONDONTWRITEBYTECODE set, so nothing is
written meanwhile): wall seconds from spawn to exit and the child's peak RSS (VmHWM at
its exit). Commands: `wattbit --help`, `wattbit run --help`, and the agent's imports up to
its config (`collector.cli`, `collector.agent.main`, `collector.agent.config`). Medians and
ratios this / against.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    alternate,
    bench_lock,
    commit,
    git_tree,
    load_average,
    median,
    print_command,
    ratio,
    table,
)


def _as_cli(*argv: str) -> str:
    """Python code that runs `wattbit ARGV` as `python -m collector.cli ARGV` would."""
    return f"import runpy, sys; sys.argv = {['wattbit', *argv]!r}; " + (
        "runpy.run_module('collector.cli', run_name='__main__', alter_sys=True)"
    )


COMMANDS = {
    "wattbit --help": _as_cli("--help"),
    "wattbit run --help": _as_cli("run", "--help"),
    "agent imports": "import collector.cli, collector.agent.main, collector.agent.config",
}
# Each command's own peak RSS: VmHWM of its address space, read at exit. Not wait4's ru_maxrss,
# which keeps the high-water mark of the address space before execve (this bench's own, as
# the child was forked from it) and so read ~45 MB for every command.
PROBE = """import atexit, os
def _hwm():
    with open("/proc/self/status") as f:
        kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(os.environ["WATTBIT_BENCH_HWM"], "w") as out:
        out.write(kb)
atexit.register(_hwm)
"""


def _tree(rev: str, into: Path) -> Path:
    """`rev` of this repository extracted into `into`, its bytecode compiled."""
    _compile(git_tree(rev, into))
    return into


def _compile(tree: Path) -> None:
    for pkg in ("collector", "exporters"):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / pkg)], check=True)


def _once(tree: Path, code: str, hwm: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of `python -c CODE` with `tree` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    env["WATTBIT_BENCH_HWM"] = str(hwm)
    hwm.unlink(missing_ok=True)
    t0 = time.perf_counter()
    rc = subprocess.run(
        [sys.executable, "-c", PROBE + code], cwd=tree, env=env, check=False,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ).returncode  # fmt: skip
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"cli_start: {code!r} exited {rc} in {tree}")
    return wall, int(hwm.read_text()) / 1024


def main() -> int:
    """Alternate both trees' commands; print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", default="main")
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wattbit-bench-cli-") as tmp:
        _compile(ROOT)
        (Path(tmp) / "tree").mkdir()
        trees = {"this": ROOT, a.against: _tree(a.against, Path(tmp) / "tree")}
        runs = [(t, c) for c in COMMANDS for t in trees]
        wall: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
        rss: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
        with bench_lock():
            print(f"commit {commit()} against {a.against}; load before: {load_average()}")
            for _, (t, c) in alternate(runs, a.rounds):
                seconds, mb = _once(trees[t], COMMANDS[c], Path(tmp) / "hwm")
                wall[(t, c)].append(seconds)
                rss[(t, c)].append(mb)
            print(f"load after: {load_average()}")
    rows = []
    for c in COMMANDS:
        w = [median(wall[(t, c)]) or 0.0 for t in trees]
        m = [median(rss[(t, c)]) or 0.0 for t in trees]
        rows.append(
            [c, f"{w[0] * 1e3:.0f} ms", f"{w[1] * 1e3:.0f} ms", f"{ratio(w[0], w[1]) or 0:.2f}",
             f"{m[0]:.1f} MB", f"{m[1]:.1f} MB", f"{ratio(m[0], m[1]) or 0:.2f}"]
        )  # fmt: skip
    head = ["command", "wall this", f"wall {a.against}", "ratio", "RSS this", f"RSS {a.against}"]
    table([*head, "ratio"], rows)
    print(f"{a.rounds} rounds, medians")
    print_command()
    return 0


if __name__ == "__main__":
    sys.exit(main())
