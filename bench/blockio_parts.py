"""What each part of the core blockio program costs per I/O (issue 35: "say what each
remaining nanosecond buys").

Run (root): PYTHONPATH=. .venv/bin/python bench/blockio_parts.py [--rounds 5] [--runtime 4]
The program `complete` of exporters/blockio/core/blockio.bpf.c, compiled here into a temporary
directory with scripts/build-bpf.sh's flags, whole and cut short by a ``return 0`` before
each of its steps (the code after a return is dropped by clang; everything before it runs as
in the agent), each loaded and attached by the agent's own CoreBackend (its .rodata: bounds,
stamps, queue slots). Per variant, alternated round by round (A B C ..., then reversed): fio
4k random reads, QD32, libaio, direct, ``--runtime`` s on a loop device over tmpfs of its own
(/dev/shm/wattbit-bench-h2h-parts-*), with kernel.bpf_stats_enabled=1 (the previous value
restored after): the kernel's run_time_ns / run_cnt of the program = ns per completion. The
differences between consecutive cuts are what each step costs; `empty` (a return first) is
the floor of a program on that attach point. bpf_stats itself adds its own accounting to
every variant alike.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    alternate,
    bench_lock,
    bpf_stats,
    load_average,
    median,
    print_command,
    table,
)
from collector.demo.loopdisks import loop_disks

CORE = ROOT / "exporters" / "blockio" / "core"
# (variant, the source line before which it returns: the step it leaves out first, what it
# returns: something computed by the steps before, which clang would otherwise drop as unused;
# a tp_btf program's return value is ignored, kernel/bpf/verifier.c check_return_code())
CUTS = (
    ("empty", "\tu32 op = req_op(rq->cmd_flags);\n", "0"),
    ("op+disk", "\t/* The kernel's internal MKDEV", "op + (int)(long)disk"),
    ("+key+slot lookup", "\ts->ios += 1;\n", "(int)(long)s"),
    ("+counts", "\tu64 ts = device_stamp(rq);\n", "0"),
    ("+stamp", "\tu64 now = bpf_ktime_get_ns();\n", "(int)ts + clock"),
    ("+clock", "\tu32 slot = wb_bound_slot(", "(int)lat"),
    ("full", "", ""),
)
BOUNDS = [b * 10.0**e for e in (-5, -4, -3, -2) for b in (1, 2.5, 5)] + [0.1, 0.25, 0.5, 1.0]


def build(workdir: Path) -> dict[str, Path]:
    """Each variant's object, compiled as scripts/build-bpf.sh compiles blockio.bpf.o."""
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    source = (CORE / "blockio.bpf.c").read_text()
    body = source.index("int BPF_PROG(complete,")
    out = {}
    for i, (name, marker, value) in enumerate(CUTS):
        text = source
        if marker:
            at = source.index(marker, body)
            text = f"{source[:at]}\treturn {value};\t/* bench/blockio_parts.py */\n{source[at:]}"
        src = workdir / f"variant{i}.bpf.c"
        src.write_text(text)
        obj = src.with_suffix(".o")
        cmd = ["clang", "-O2", "-g", "-target", "bpf", f"-D__TARGET_ARCH_{arch}"]
        cmd += [f"-I{CORE}", f"-I{CORE.parent}", "-Wall", "-Werror", "-c", str(src)]
        subprocess.run([*cmd, "-o", str(obj)], check=True)
        out[name] = obj
    return out


def fio(dev: str, runtime: int) -> int:
    """fio 4k random reads, QD32, on dev; its IOPS."""
    cmd = ["fio", "--name=parts", f"--filename={dev}", "--ioengine=libaio", "--iodepth=32"]
    cmd += ["--direct=1", "--rw=randread", "--bs=4k", "--time_based", f"--runtime={runtime}"]
    cmd += ["--output-format=terse", "--terse-version=3"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1].split(";")[7])  # terse v3: read IOPS


def one_run(obj: Path, dev: str, runtime: int) -> tuple[float, int, int]:
    """ns per program run, fio's IOPS and the program's runs, with that variant attached."""
    from exporters.blockio.core.backend import CoreBackend

    backend = CoreBackend(BOUNDS, obj_path=obj)
    try:
        before = (backend.prog_stats() or {})["complete"]
        iops = fio(dev, runtime)
        after = (backend.prog_stats() or {})["complete"]
    finally:
        backend.close()
    d_ns, d_cnt = after[0] - before[0], after[1] - before[1]
    return (d_ns / d_cnt if d_cnt else float("nan")), iops, d_cnt


def main() -> None:
    """Alternate the variants; print each one's median ns per run and the steps' costs."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runtime", type=int, default=4, help="seconds of fio per run")
    args = ap.parse_args()
    ns: dict[str, list[float]] = {name: [] for name, _, _ in CUTS}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wattbit-h2h-")))
        objs = build(work)
        disk = stack.enter_context(
            loop_disks(1, 512, fill=True, prefix="wattbit-bench-h2h-parts-")
        )[0]
        stack.enter_context(bench_lock())
        stack.enter_context(bpf_stats())
        print(f"load average before: {load_average()}")
        for r, name in alternate(list(objs), args.rounds):
            per_run, iops, runs = one_run(objs[name], disk.device, args.runtime)
            ns[name].append(per_run)
            print(f"round {r} {name}: {per_run:.1f} ns per run, fio {iops} IOPS, {runs} runs")
        print(f"load average after: {load_average()}")
        shutil.rmtree(work, ignore_errors=True)
    med = {n: median(v) or 0.0 for n, v in ns.items()}
    names = list(med)
    rows = [
        [n, f"{med[n]:.1f}", "" if i == 0 else f"{med[n] - med[names[i - 1]]:+.1f}"]
        for i, n in enumerate(names)
    ]
    table(["variant", "ns per run (median)", "step"], rows)
    print(f"full / empty: {med['full'] / med['empty']:.2f}")
    print_command()


if __name__ == "__main__":
    main()
