"""One of the tcp exporter's CO-RE BPF objects (core/*.bpf.o) from file to attached program
through libbpf (exporters/hostfs/libbpf.py), or why not: the steps the sockets' flow labels
(flowlabels.py, an iter/tcp program) and the packets' (egresslabels.py, a tp_btf program)
share. Both are tracing programs, so both want the same capabilities and the kernel's BTF.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from exporters.hostfs import caps, libbpf
from exporters.tcp import hostread

log = logging.getLogger(__name__)

CORE = Path(__file__).resolve().parent / "core"


def unavailable(obj: Path, sys_root: Path = Path("/sys")) -> str:
    """Why this process cannot load a tracing program of obj ('' when it may try): the
    capabilities it lacks (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN before 5.8), no kernel BTF
    to relocate against, or the object not built."""
    missing = caps.bpf_tracing_missing(caps.current().effective)
    if missing:
        return f"missing {'+'.join(missing)}"
    if not hostread.exists(sys_root, "kernel/btf/vmlinux"):
        return "no kernel BTF"
    if not obj.exists():
        return "not built (scripts/build-bpf.sh)"
    return ""


def load(
    obj: Path,
    program: str,
    what: str,
    setup: Callable[[libbpf.Object], None] | None = None,
    iterator: bool = False,
) -> libbpf.Object | str:
    """obj opened, set up (maps sized, read-only globals written: before load), loaded and its
    program attached (an iterator's link for iterator, else at its own section); on failure
    the reason (logged with libbpf's last messages, `what` naming the feature), nothing held."""
    o: libbpf.Object | None = None
    try:
        o = libbpf.Object(obj)
        if setup is not None:
            setup(o)
        o.load()
        prog = o.program(program)
        if iterator:
            prog.attach_iter()
        else:
            prog.attach()
    except OSError as exc:  # LibbpfError, or no libbpf at all
        log.warning("tcp: %s unavailable: %s\n%s", what, exc, libbpf.last_messages())
        if o is not None:
            o.close()
        return f"load failed: {exc.strerror or exc}"[:120]
    return o
