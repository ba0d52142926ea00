"""Pure parsers of sock_diag's per-socket attributes: struct tcp_info and sk_meminfo.

`struct tcp_info` (include/uapi/linux/tcp.h) grows at its end as kernels add fields; the
kernel copies min(its size, the reader's) bytes and sock_diag sends the kernel's whole struct.
So every field is read only when the attribute's length covers it: an older kernel's answer
leaves the newer fields absent (never 0), and a newer kernel's longer answer is read up to the
last field known here.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

# (name, struct format) in the kernel's order; the comments say the kernel that added them.
_LAYOUT: tuple[tuple[str, str], ...] = (
    ("state", "B"),
    ("ca_state", "B"),
    ("retransmits", "B"),
    ("probes", "B"),
    ("backoff", "B"),
    ("options", "B"),
    ("wscale", "B"),  # snd_wscale : 4 (low nibble), rcv_wscale : 4
    ("app_limited_bits", "B"),  # delivery_rate_app_limited : 1 (bit 0), fastopen_client_fail : 2
    ("rto", "I"),
    ("ato", "I"),
    ("snd_mss", "I"),
    ("rcv_mss", "I"),
    ("unacked", "I"),
    ("sacked", "I"),
    ("lost", "I"),
    ("retrans", "I"),
    ("fackets", "I"),
    ("last_data_sent", "I"),
    ("last_ack_sent", "I"),
    ("last_data_recv", "I"),
    ("last_ack_recv", "I"),
    ("pmtu", "I"),
    ("rcv_ssthresh", "I"),
    ("rtt", "I"),  # srtt, µs
    ("rttvar", "I"),
    ("snd_ssthresh", "I"),
    ("snd_cwnd", "I"),
    ("advmss", "I"),
    ("reordering", "I"),
    ("rcv_rtt", "I"),
    ("rcv_space", "I"),
    ("total_retrans", "I"),
    ("pacing_rate", "Q"),  # 3.15
    ("max_pacing_rate", "Q"),
    ("bytes_acked", "Q"),  # 4.1 (RFC 4898 tcpEStatsAppHCThruOctetsAcked)
    ("bytes_received", "Q"),  # 4.1
    ("segs_out", "I"),  # 4.2
    ("segs_in", "I"),
    ("notsent_bytes", "I"),  # 4.6
    ("min_rtt", "I"),
    ("data_segs_in", "I"),
    ("data_segs_out", "I"),
    ("delivery_rate", "Q"),  # 4.9, bytes/s
    ("busy_time", "Q"),  # 4.10, µs
    ("rwnd_limited", "Q"),
    ("sndbuf_limited", "Q"),
    ("delivered", "I"),  # 4.18
    ("delivered_ce", "I"),
    ("bytes_sent", "Q"),  # 4.19
    ("bytes_retrans", "Q"),
    ("dsack_dups", "I"),
    ("reord_seen", "I"),
    ("rcv_ooopack", "I"),  # 5.4
    ("snd_wnd", "I"),  # 5.4: the peer's advertised window after scaling, bytes
    ("rcv_wnd", "I"),  # 6.2: the window this host advertises
    ("rehash", "I"),
    ("total_rto", "H"),  # 6.7
    ("total_rto_recoveries", "H"),
    ("total_rto_time", "I"),
    # 6.18 sends 280 bytes: the AccECN counters follow (tcpi_received_ce ...), not read here.
)


def _offsets() -> dict[str, tuple[int, struct.Struct]]:
    """Each field's offset, aligned as the C compiler aligns it (natural alignment)."""
    out: dict[str, tuple[int, struct.Struct]] = {}
    offset = 0
    for name, fmt in _LAYOUT:
        s = struct.Struct("=" + fmt)
        offset = -(-offset // s.size) * s.size
        out[name] = (offset, s)
        offset += s.size
    return out


FIELDS: Mapping[str, tuple[int, struct.Struct]] = _offsets()
KNOWN_SIZE = max(o + s.size for o, s in FIELDS.values())  # 248 with the fields above


def _whole() -> struct.Struct:
    """One Struct for the whole known layout (with the alignment padding as pad bytes)."""
    fmt, at = "=", 0
    for _name, (offset, s) in FIELDS.items():
        fmt += "x" * (offset - at) + s.format.lstrip("=")
        at = offset + s.size
    return struct.Struct(fmt)


_WHOLE = _whole()  # the common case (a kernel at least as new as this layout): one unpack
_NAMES = tuple(FIELDS)
# 32-bit counters of tcp_info: they wrap, so deltas are taken modulo 2**32.
U32_COUNTERS = frozenset({"total_retrans", "data_segs_out", "segs_out", "delivered"})


def parse_tcp_info(data: bytes) -> dict[str, int]:
    """{field: value} for every field the attribute's length covers (host byte order)."""
    n = len(data)
    if n >= KNOWN_SIZE:
        out = dict(zip(_NAMES, _WHOLE.unpack_from(data), strict=True))
    else:
        out = {}
        for name, (offset, s) in FIELDS.items():
            if offset + s.size <= n:
                out[name] = s.unpack_from(data, offset)[0]
    if "wscale" in out:
        w = out.pop("wscale")
        out["snd_wscale"], out["rcv_wscale"] = w & 0xF, w >> 4
    if "app_limited_bits" in out:
        out["delivery_rate_app_limited"] = out.pop("app_limited_bits") & 1
    return out


# enum sk_meminfo (include/uapi/linux/sock_diag.h): u32 each, in this order.
SK_MEMINFO = (
    "rmem_alloc",
    "rcvbuf",
    "wmem_alloc",
    "sndbuf",
    "fwd_alloc",
    "wmem_queued",
    "optmem",
    "backlog",  # 3.19
    "drops",  # 4.15
)


def parse_skmeminfo(data: bytes) -> dict[str, int]:
    """{name: value} for the u32s the attribute holds (older kernels send fewer)."""
    count = min(len(data) // 4, len(SK_MEMINFO))
    values = struct.unpack_from(f"={count}I", data)
    return dict(zip(SK_MEMINFO, values, strict=False))
