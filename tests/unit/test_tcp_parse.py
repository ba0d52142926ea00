"""The tcp exporter's parsers on sock_diag answers captured on this kernel (tests/fixtures/tcp),
checked against `ss -tinmHe`'s reading of the same idle sockets, and on hostile bytes."""

from __future__ import annotations

import os
import random
import re
import struct
from pathlib import Path

import pytest

from exporters.tcp import netlink, scitags
from exporters.tcp.owners import Processes, cgroup_name, parse_stat_cpu
from exporters.tcp.tcpinfo import FIELDS, KNOWN_SIZE, parse_skmeminfo, parse_tcp_info
from exporters.tcp.tuning import parse_ints, parse_name
from tests.support.tcpdiag import captured, message

CAPTURES = [
    (scenario, side)
    for scenario in ("rwnd-limited", "sndbuf-limited", "bulk")
    for side in ("sender", "receiver")
]


def ss_fields(line: str) -> dict[str, str]:
    """`key:value` words of an ss line, and the few `key value` ones."""
    out = dict(re.findall(r"(?:^| )([a-z_]+):(\S+)", line))
    out.update(re.findall(r"(?:^| )(delivery_rate|pacing_rate|send) (\d+)bps", line))
    return out


@pytest.mark.parametrize(("scenario", "side"), CAPTURES)
def test_tcp_info_equals_ss_on_the_same_idle_socket(scenario: str, side: str) -> None:
    doc = captured(scenario, side)
    d = netlink.parse_diag_msg(message(scenario, side))
    info = parse_tcp_info(d.attrs[netlink.INET_DIAG_INFO])
    mem = parse_skmeminfo(d.attrs[netlink.INET_DIAG_SKMEMINFO])
    ss = ss_fields(str(doc["ss"]))
    # identity: ss prints the inode and the cookie (hex) of the same socket
    assert d.inode == int(ss["ino"]) and d.cookie == int(ss["sk"], 16) == doc["cookie"]
    assert (d.src, d.sport) == ("127.0.0.1", int(str(doc["ss"]).split()[2].rsplit(":", 1)[1]))
    # counters: ss prints them as the kernel gives them (absent when 0)
    for ours, theirs in (
        ("bytes_acked", "bytes_acked"),
        ("bytes_received", "bytes_received"),
        ("data_segs_out", "data_segs_out"),
        ("rcv_space", "rcv_space"),
        ("snd_wnd", "snd_wnd"),
        ("snd_cwnd", "cwnd"),
        ("snd_mss", "mss"),
    ):
        assert info[ours] == int(ss.get(theirs, "0")), ours
    # µs -> ms as ss prints them (misc/ss.c: busy / 1000 with %llu)
    for ours, theirs in (
        ("busy_time", "busy"),
        ("rwnd_limited", "rwnd_limited"),
        ("sndbuf_limited", "sndbuf_limited"),
    ):
        want = int(re.match(r"\d+", ss.get(theirs, "0ms")).group())  # type: ignore[union-attr]
        assert info[ours] // 1000 == want, ours
    # retrans:<now>/<total>
    assert info["total_retrans"] == int(ss.get("retrans", "0/0").split("/")[1])
    # rtt:<srtt ms>/<rttvar ms>, minrtt ms, with three decimals
    assert f"{info['rtt'] / 1000:.3f}".rstrip("0").rstrip(".") == ss["rtt"].split("/")[0].rstrip(
        "0"
    ).rstrip(".")
    # skmem:(r..,rb<rcvbuf>,t..,tb<sndbuf>,...)
    skmem = dict(re.findall(r"([a-z]+)(\d+)", ss["skmem"]))
    assert mem["rcvbuf"] == int(skmem["rb"]) and mem["sndbuf"] == int(skmem["tb"])
    # delivery_rate: ss prints bits/s
    if "delivery_rate" in ss:
        assert info["delivery_rate"] * 8 == int(ss["delivery_rate"])
    assert netlink.parse_cong(d.attrs[netlink.INET_DIAG_CONG]) == doc["cong"]


def test_the_limits_show_in_their_scenarios() -> None:
    rwnd = parse_tcp_info(bytes.fromhex(str(captured("rwnd-limited", "sender")["info_hex"])))
    snd = parse_tcp_info(bytes.fromhex(str(captured("sndbuf-limited", "sender")["info_hex"])))
    assert rwnd["rwnd_limited"] > 0 and rwnd["rwnd_limited"] <= rwnd["busy_time"]
    assert snd["sndbuf_limited"] > 0 and snd["sndbuf_limited"] <= snd["busy_time"]


def test_length_aware_every_boundary() -> None:
    """A field is there exactly when the attribute covers it; never a made-up 0."""
    full = bytes.fromhex(str(captured("bulk", "sender")["info_hex"]))
    assert len(full) == 280 > KNOWN_SIZE  # 6.18: AccECN counters beyond what is read
    whole = parse_tcp_info(full)
    for n in range(len(full) + 1):
        got = parse_tcp_info(full[:n])
        for name, (offset, s) in FIELDS.items():
            present = offset + s.size <= n
            key = {"wscale": "snd_wscale", "app_limited_bits": "delivery_rate_app_limited"}.get(
                name, name
            )
            assert (key in got) == present, (n, name)
            if present:
                assert got[key] == whole[key]
    # Linux 6.1's struct (232 bytes) ends with snd_wnd: no rcv_wnd
    six_one = parse_tcp_info(full[:232])
    assert "snd_wnd" in six_one and "rcv_wnd" not in six_one
    # 4.9 (before the chrono stats): no busy time at all
    assert "busy_time" not in parse_tcp_info(full[: FIELDS["busy_time"][0]])


def test_skmeminfo_lengths() -> None:
    raw = bytes.fromhex(str(captured("bulk", "receiver")["skmeminfo_hex"]))
    assert len(raw) == 36
    assert set(parse_skmeminfo(raw[:28])) == {
        "rmem_alloc", "rcvbuf", "wmem_alloc", "sndbuf", "fwd_alloc", "wmem_queued", "optmem"
    }  # fmt: skip
    assert parse_skmeminfo(b"") == {} and parse_skmeminfo(b"\1\2\3") == {}
    assert len(parse_skmeminfo(raw + bytes(40))) == 9


def _attr(atype: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), atype) + payload + bytes(-len(payload) % 4)


def test_hostile_messages_raise_malformed_only() -> None:
    real = message("bulk", "sender")
    rnd = random.Random(31)
    cases = [b"", real[:71], real[:72] + b"\xff\xff", real[:72] + struct.pack("=HH", 3, 2)]
    cases.append(real[:72] + struct.pack("=HH", 200, 2) + bytes(8))  # longer than what is left
    cases.append(bytes([99]) + real[1:])  # not an inet family
    for _ in range(3000):
        b = bytearray(real)
        for _ in range(rnd.randint(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        cases.append(bytes(b[: rnd.randint(0, len(b) + 8)]))
    for case in cases:
        try:
            d = netlink.parse_diag_msg(case)
        except netlink.Malformed:
            continue
        for atype, payload in d.attrs.items():  # whatever parsed, its attributes are bounded
            assert 0 <= atype < 1 << 14 and len(payload) <= len(case)
            parse_tcp_info(payload)
            parse_skmeminfo(payload)
            netlink.parse_cong(payload)
            netlink.parse_cgroup_id(payload)


def test_attributes_bounded_and_first_wins() -> None:
    many = b"".join(_attr(2, b"x" * 4) for _ in range(netlink.MAX_ATTRS + 50))
    assert netlink.parse_attrs(many) == {2: b"xxxx"}
    assert netlink.parse_attrs(_attr(4, b"cubic\0") + _attr(4, b"bbr\0")) == {4: b"cubic\0"}
    with pytest.raises(netlink.Malformed):
        netlink.parse_attrs(struct.pack("=HH", 2, 1))


def test_split_messages() -> None:
    one = struct.pack("=IHHII", 20, 3, 0, 1, 0) + b"abcd"
    assert list(netlink.split_messages(one + one)) == [(3, b"abcd"), (3, b"abcd")]
    with pytest.raises(netlink.Malformed):
        list(netlink.split_messages(struct.pack("=IHHII", 400, 20, 0, 1, 0)))
    with pytest.raises(netlink.Malformed):
        list(netlink.split_messages(struct.pack("=IHHII", 8, 20, 0, 1, 0)))


def test_request_layout() -> None:
    """struct inet_diag_req_v2 is 56 bytes after the 16-byte header; cookie 'no cookie'."""
    req = netlink.dump_request(2, seq=7)
    assert len(req) == 16 + 56
    length, mtype, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, mtype, flags, seq) == (72, 20, 0x301, 7)
    family, proto, ext, states = struct.unpack_from("=BBBxI", req, 16)
    assert (family, proto) == (2, 6)
    assert ext & (1 << 1) and ext & (1 << 6)  # INET_DIAG_INFO, SKMEMINFO
    assert not states & (1 << 6) and not states & (1 << 12) and states & (1 << 10)


def test_v4_mapped_peer_is_the_v4_address() -> None:
    raw = bytearray(message("bulk", "sender"))
    raw[0] = 10  # AF_INET6
    raw[8:24] = bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3])
    raw[24:40] = bytes(15) + b"\x01"
    d = netlink.parse_diag_msg(bytes(raw))
    assert (d.src, d.dst) == ("10.1.2.3", "::1")


def test_cong_names() -> None:
    assert netlink.parse_cong(b"cubic\0") == "cubic"
    assert netlink.parse_cong(b"bbr") == "bbr"
    for bad in (b"", b"\0", b"a b\0", b"x" * 17, b"\xff\xfe", b'evil"}\0'):
        assert netlink.parse_cong(bad) == ""


def test_scitags_bits() -> None:
    """Experiment bits reversed below 2 entropy bits; activity below 1 (flowd bitpattern)."""
    assert scitags.encode(1, 0) == 1 << 17  # experiment's LSB goes first, at the top
    assert scitags.encode(256, 0) == 1 << 9
    assert scitags.encode(1, 1) == (1 << 17) | (1 << 2)
    for e in range(1, 512, 7):
        for a in range(64):
            for ent in (0, 31, 10):
                assert scitags.decode(scitags.encode(e, a, ent)) == (e, a)
    assert scitags.decode(0) is None and scitags.decode(1 << 20) is None
    assert scitags.decode(-1) is None


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("", "/"),
        ("system.slice/nginx.service", "nginx.service"),
        ("user.slice/user-0.slice/session-3.scope", "session-3.scope"),
        ("system.slice/docker-" + "ab" * 32 + ".scope", "container:" + "ab" * 6),
        ("kubepods/burstable/pod1/" + "cd" * 32, "container:" + "cd" * 6),
        ("process_api/worker", "/process_api/worker"),
        ("a/" * 200, ("/" + "a/" * 200)[:128]),
        ("evil\nname\x1b[2J", "/evil\ufffdname\ufffd[2J"),
    ],
)
def test_cgroup_names(path: str, label: str) -> None:
    assert cgroup_name(path) == label


def test_stat_cpu_field_39() -> None:
    fields = [str(i) for i in range(3, 53)]  # fields 3.. as numbers; field 39 reads "39"
    assert parse_stat_cpu("123 (a) b) c) " + " ".join(fields)) == 39
    assert parse_stat_cpu("123 (short) 1 2 3") is None
    assert parse_stat_cpu("no parenthesis") is None
    fields[36] = "x"
    assert parse_stat_cpu("1 (p) " + " ".join(fields)) is None


def test_tuning_values() -> None:
    assert parse_ints("4096\t131072\t33554432\n", 3) == [4096, 131072, 33554432]
    for bad in (None, "", "1 2", "-1 2 3", "1 2 3 4", "x y z", "1" * 21 + " 1 1"):
        assert parse_ints(bad, 3) is None
    assert parse_name("bbr\n") == "bbr" and parse_name("fq_codel") == "fq_codel"
    assert parse_name("a b") == "" and parse_name(None) == "" and parse_name("x" * 40) == ""


def test_process_scan_over_a_proc_tree(tmp_path: Path) -> None:
    """socket inode -> (pid, comm) from /proc/PID/fd links; comm made fit for a label."""
    for pid, comm, links in (
        ("123", "evil\x1bname\n", {"3": "socket:[999]", "4": "pipe:[5]", "5": "socket:[x]"}),
        ("77", "iperf3\n", {"0": "/dev/null", "9": "socket:[1000]"}),
        ("self", "no\n", {"1": "socket:[1]"}),  # not a pid: skipped
    ):
        (tmp_path / pid / "fd").mkdir(parents=True)
        (tmp_path / pid / "comm").write_text(comm)
        for fd, target in links.items():
            os.symlink(target, tmp_path / pid / "fd" / fd)
    p = Processes(tmp_path, refresh=30.0, clock=lambda: 0.0)
    assert p.due()
    p.scan()
    assert p.by_inode == {999: (123, "evil\ufffdname"), 1000: (77, "iperf3")}
    assert not p.due()


def test_flow_label_records() -> None:
    """The iterator's records (flowlabel.bpf.c struct record): cookie, label, pad; a partial
    record at the end (a read cut at max_bytes) is dropped, a label wider than 20 bits masked."""
    import struct

    from exporters.tcp.flowlabels import parse_records

    data = struct.pack("=QII", 7, 0x12345, 0) + struct.pack("=QII", 9, 0xFFF00001, 0)
    assert parse_records(data + b"\x01\x02\x03") == {7: 0x12345, 9: 0x00001}
    assert parse_records(b"") == {} and parse_records(b"\xff" * 15) == {}
