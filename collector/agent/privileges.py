"""Dropping the agent's capabilities once its exporters have started.

The agent needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN before Linux 5.8) to load and
attach its BPF programs. On Linux 6.5+ reading their maps later goes through the map file
descriptors it already holds (the kernel checks the fd's mode, no capability: kernel/bpf/
syscall.c map_lookup_elem), and attaching an already loaded tracing program (the issue-side
timing the core backend adds on demand) needs none either (checked by tests/integration/
test_privileges_real.py). Linux 5.8 to 6.4 refuse every bpf() command without CAP_BPF while
kernel.unprivileged_bpf_disabled is set (commit 1d28635abcf1 moved that check in 6.5): each
BPF exporter tries one real read without it before the drop and keeps CAP_BPF effective if
the read fails (Exporter.kept_effective; caps.bpf_read_keep). So once every exporter is
built, every capability no exporter still asks for (Exporter.kept_capabilities: smartctl run
directly wants CAP_SYS_RAWIO and CAP_SYS_ADMIN, permitted only, for its child) is dropped.
The kernel keeps capabilities per thread: this runs before any thread starts (the smart
exporter's loop is started after it), and a thread started later inherits the dropped sets.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from exporters.base import Exporter
from exporters.hostfs import caps


def drop_after_start(exporters: Sequence[Exporter]) -> str:
    """Drop every capability no exporter keeps; the one log line saying what stays."""
    before = caps.current()
    keep: set[int] = set()
    why: dict[int, list[str]] = {}
    own: dict[int, str] = {}  # kept effective: the process itself uses them, and why
    for e in exporters:
        for cap in e.kept_capabilities():
            keep.add(cap)
            why.setdefault(cap, []).append(e.name)
        for cap, reason in e.kept_effective().items():
            own.setdefault(cap, reason)
    if before.permitted == 0 and before.ambient == 0:
        return "capabilities: none held"
    if threading.active_count() > 1:
        # The kernel keeps the sets per thread: a drop in one of several would claim what it
        # does not do (agent.run embedded in another program's thread, as some tests run it).
        n = threading.active_count()
        return f"capabilities: not dropped: {n} threads already run (the sets are per thread)"
    try:
        result = caps.drop_to(keep, effective=own)
    except OSError as exc:
        return f"capabilities: could not drop ({exc.strerror}); still held: " + ",".join(
            caps.names(before.effective)
        )
    dropped = caps.names(before.permitted & ~result.after.permitted)
    kept = [_kept(n, why, own, result.after) for n in caps.names(result.after.permitted)]
    shown = ",".join(dropped) if len(dropped) <= 4 else f"{len(dropped)} (all but the kept)"
    line = "capabilities: dropped " + (shown or "nothing")
    line += "; kept " + (", ".join(kept) or "none")
    if result.bounding_kept and not kept:
        # Without CAP_SETPCAP (the packaged unit grants none) the bounding set stays as the
        # unit set it: harmless with empty inheritable and ambient sets (nothing executed
        # gains from it) and NoNewPrivileges.
        line += "; bounding set left as started (no CAP_SETPCAP)"
    return line


def _kept(name: str, why: dict[int, list[str]], own: dict[int, str], after: caps.CapSets) -> str:
    """One kept capability in the log line: who keeps it, and why effective if it is."""
    cap = caps.CAP_NUMBERS[name]
    who = "/".join(why.get(cap, []))
    if cap in own and after.has(cap):
        return f"{name} effective ({who}): {own[cap]}"
    return f"{name} ({who})"
