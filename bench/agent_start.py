"""Where the agent's start goes, from spawn to its first good answer (issue 35's ready goal).

Run (root): PYTHONPATH=. .venv/bin/python bench/agent_start.py [--disks 48] [--starts 5]
The real `wattbit agent` (every exporter on: bench/agent_process.py's configuration) over
``--disks`` loop disks (``wattbit-bench-start-*`` in /dev/shm), started ``--starts`` times; in
each, the agent's process stamps the wall clock after each group of imports (in the order the
agent loads them, so each group counts what the ones before did not), the config's load, each
exporter's construction (blockio's is the BPF object's open, load — the kernel's verifier — and
attach), the capability drop, the server's start, each exporter's first collect and the first
render ends; the bench stamps the answer that shows the BPF program attached (the `ready` of
bench/agent_process.py). Medians over the starts, in milliseconds since the spawn. The stamps
are wrappers around the agent's functions: a start measured here is a few ms slower than one of
bench/agent_process.py.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONFIG = "blockio:\n  backend: core\ncpu:\n  enabled: true\n"  # as bench/agent_process.py
MARK = b'wattbit_blockio_backend_info{backend="core"'
# The agent's imports: each stamped when its module has loaded (in the order the agent loads
# them; each group counts what the ones before left).
IMPORTS = {
    "yaml": "yaml",
    "pydantic.main": "pydantic + BaseModel",
    "collector.cli": "collector.cli",
    "collector.config": "collector.config (exporters.strict)",
    "collector.agent.config": "collector.agent.config (its models)",
    "prometheus_client": "prometheus_client",
    "collector.web.server": "collector.web.server (aiohttp's server)",
    "collector.agent.main": "collector.daemon.serve, agent.main",
}
EXPORTER_MODULES = ("blockio", "nic", "smart", "power", "pcie", "cpu", "tcp")


class _Stamped(importlib.abc.MetaPathFinder):
    """Stamps a module's import when it has run, then calls its hook (the wrappers below are
    put in place as their modules load: nothing is imported ahead of the agent)."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = hooks

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        """The other finders' spec, its loader's exec_module wrapped, for the hooked modules."""
        hook = self.hooks.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader: Any = spec.loader
        if loader is None:
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            hook(module)

        loader.exec_module = exec_module  # this module's own loader
        return spec


def _child(out: str, t0: float, argv: list[str]) -> int:
    """The agent, stamping each phase (in the agent's process)."""
    lock = threading.Lock()
    marks: list[tuple[str, float]] = [("interpreter up", time.time() - t0)]

    def mark(name: str) -> None:
        with lock:
            marks.append((name, time.time() - t0))

    def timed(owner: Any, attr: str, label: str, once: bool = False) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            try:
                return fn(*a, **k)
            finally:
                if not once or not any(n == label for n, _ in marks):
                    mark(label)
                    if once:
                        _dump(out, marks)

        setattr(owner, attr, wrapper)

    def imported(label: str, then: Callable[[ModuleType], None] | None = None) -> Any:
        def hook(module: ModuleType) -> None:
            mark(f"import {label}")
            if then is not None:
                then(module)

        return hook

    def exporter_class(name: str) -> Callable[[ModuleType], None]:
        def wrap(mod: ModuleType) -> None:
            from exporters.base import Exporter

            cls = next(
                v
                for v in vars(mod).values()
                if isinstance(v, type)
                and issubclass(v, Exporter)
                and getattr(v, "name", "") == name
            )
            timed(cls, "__init__", f"{name} built")

        return wrap

    def base_hook(base: ModuleType) -> None:
        first_collect = base.ExportersCollector.collect

        def collect(self: Any) -> Any:
            base.ExportersCollector.collect = first_collect
            for e in self.exporters:  # each exporter's first collect stamped, then as it was
                e.collect = functools.partial(_collected, e, e.collect, mark)
            return first_collect(self)

        base.ExportersCollector.collect = collect

    hooks: dict[str, Callable[[ModuleType], None]] = {m: imported(t) for m, t in IMPORTS.items()}
    hooks["collector.config"] = imported(
        IMPORTS["collector.config"],
        lambda m: timed(m, "load_model", "config read and validated"),
    )
    hooks["collector.agent.main"] = imported(
        IMPORTS["collector.agent.main"],
        lambda m: timed(m, "drop_after_start", "capabilities dropped"),
    )

    def early_hook(m: ModuleType) -> None:
        timed(m.CoreLoad, "__init__", "blockio's core begun (its load goes on in a thread)")
        timed(m.CoreLoad, "take", "blockio's core finished (load waited for, attached)")

    hooks["collector.agent.early"] = early_hook
    hooks["collector.daemon.serve"] = lambda m: timed(m, "start_server", "server listening")
    hooks["collector.web.exposition"] = lambda m: timed(
        m.TextRenderer, "render", "first render done", once=True
    )
    hooks["exporters.base"] = base_hook
    for name in EXPORTER_MODULES:
        hooks[f"exporters.{name}.exporter"] = exporter_class(name)
    sys.meta_path.insert(0, _Stamped(hooks))
    from collector import cli

    return cli.main(argv)


def _collected(e: Any, collect: Callable[[], Any], mark: Callable[[str], None]) -> Any:
    """An exporter's collect, stamped at its first call only."""
    out = list(collect())
    e.collect = collect
    mark(f"{e.name} first collect")
    return out


def _dump(out: str, marks: list[tuple[str, float]]) -> None:
    with open(out, "w") as f:
        json.dump(sorted(marks, key=lambda m: m[1]), f)


def one_start(workdir: Path, i: int) -> tuple[float, list[tuple[str, float]]]:
    """One start: seconds to ready, and the agent's stamps (seconds since the spawn)."""
    import subprocess
    import urllib.request

    from bench.harness import free_port, spawn, stop

    cfg = workdir / "agent.yaml"
    cfg.write_text(CONFIG)
    out = workdir / f"marks-{i}.json"
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    argv = ["agent", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"]
    argv += ["--log-level", "warning"]
    t0 = time.time()
    with (workdir / "agent.log").open("ab") as log:
        cmd = [sys.executable, __file__, "--child", str(out), repr(t0), *argv]
        proc = spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the agent exited {proc.returncode}: {workdir}/agent.log")
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=10) as r:
                if MARK in r.read():
                    ready = time.time() - t0
                    break
            if time.time() - t0 > 60:
                raise RuntimeError("the agent was not ready in 60 s")
            time.sleep(0.005)
        deadline = time.time() + 10
        while not out.exists() and time.time() < deadline:
            time.sleep(0.01)
        return ready, [(n, t) for n, t in json.loads(out.read_text())]
    finally:
        stop(proc)


def main() -> None:
    """Start the agent --starts times; print the medians of each stamp."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sys.exit(_child(sys.argv[2], float(sys.argv[3]), sys.argv[4:]))
    # here, not at the top: the agent's process runs this file too, and imports nothing more
    import argparse
    import subprocess
    import tempfile

    from bench.harness import bench_lock, load_average, median, print_command, table
    from collector.demo.loopdisks import loop_disks

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--disks", type=int, default=48)
    ap.add_argument("--starts", type=int, default=5)
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "collector", "exporters"], check=True)
    with (
        loop_disks(args.disks, 4, prefix="wattbit-bench-start-") as _,
        tempfile.TemporaryDirectory(prefix="wattbit-bench-start-") as d,
        bench_lock(),
    ):
        print(f"load average before: {load_average()}")
        runs = [one_start(Path(d), i) for i in range(args.starts)]
        print(f"load average after: {load_average()}")
    names = [n for n, _ in runs[0][1]]
    rows = []
    prev = 0.0
    for name in [*names, "ready (the answer)"]:
        at = median([r[0] if name.startswith("ready") else dict(r[1]).get(name, 0.0) for r in runs])
        at = (at or 0.0) * 1e3
        rows.append([name, f"{at:.1f}", f"{at - prev:+.1f}"])
        prev = at
    table(["stamp (median of the starts)", "ms since spawn", "ms since the one above"], rows)
    print_command()


if __name__ == "__main__":
    main()
