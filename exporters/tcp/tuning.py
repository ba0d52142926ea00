"""The host's TCP tuning from /proc/sys: buffer limits, options, congestion control, qdisc."""

from __future__ import annotations

from pathlib import Path

from exporters.tcp import hostread

# sysctl -> the bounds its values are, in order
BUFFERS = {
    "net.core.rmem_max": ("max",),
    "net.core.wmem_max": ("max",),
    "net.ipv4.tcp_rmem": ("min", "default", "max"),
    "net.ipv4.tcp_wmem": ("min", "default", "max"),
}
SETTINGS = (
    "net.ipv4.tcp_mtu_probing",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
)
NAMES = ("net.ipv4.tcp_congestion_control", "net.core.default_qdisc")


def _rel(sysctl: str) -> str:
    return "sys/" + sysctl.replace(".", "/")


def parse_ints(text: str | None, count: int) -> list[int] | None:
    """Exactly `count` non-negative integers separated by whitespace, else None."""
    if text is None:
        return None
    parts = text.split()
    if len(parts) != count or not all(p.isascii() and p.isdigit() and len(p) <= 20 for p in parts):
        return None
    return [int(p) for p in parts]


def parse_name(text: str | None) -> str:
    """A one-word sysctl value (an algorithm or qdisc name), else ""."""
    if text is None:
        return ""
    word = text.strip()
    ok = 0 < len(word) <= 32 and word.isascii() and all(c.isalnum() or c in "_-" for c in word)
    return word if ok else ""


def read_tuning(
    proc_root: Path,
) -> tuple[dict[tuple[str, str], int], dict[str, int], dict[str, str]]:
    """(buffer limits {(sysctl, bound): bytes}, settings {sysctl: value}, names {sysctl: word})."""
    buffers: dict[tuple[str, str], int] = {}
    for sysctl, bounds in BUFFERS.items():
        values = parse_ints(hostread.read_small(proc_root, _rel(sysctl)), len(bounds))
        if values is not None:
            buffers.update({(sysctl, b): v for b, v in zip(bounds, values, strict=True)})
    settings: dict[str, int] = {}
    for sysctl in SETTINGS:
        one = parse_ints(hostread.read_small(proc_root, _rel(sysctl)), 1)
        if one is not None:
            settings[sysctl] = one[0]
    names = {s: parse_name(hostread.read_small(proc_root, _rel(s))) for s in NAMES}
    return buffers, settings, names
