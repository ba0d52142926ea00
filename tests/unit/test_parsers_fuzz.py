"""Property tests: every /proc and /sys parser, on arbitrary text, returns or skips, never
raises, and never yields a counter outside 0 .. 2^64-1 (an absurd number is a malformed field,
not a value). The config loaders: any YAML mapping gives a model or a ConfigError."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.agent.config import AgentConfig
from collector.config import ConfigError, load_model
from collector.site.config import CollectorConfig
from exporters.blockio.diskstats import device_stats, line_stats, parse_diskstats
from exporters.hostfs.blockdevs import devt_names, read_topology
from exporters.hostfs.interrupts import irq_affinity, parse_interrupts
from exporters.nic.links import read_link
from exporters.nic.procfs import (
    irq_queue,
    parse_snmp,
    parse_softirqs,
    parse_softnet_stat,
)
from exporters.nic.sysfs import nic_info

U64 = 1 << 64
BOUNDED = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# Numbers around the edges: 2^64 and beyond, negative, far past int()'s 4300-digit limit,
# Unicode digits ("²" is isdigit() but not int()), hex.
_NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=U64 - 1).map(str),
    st.integers(min_value=U64, max_value=1 << 80).map(str),
    st.integers(min_value=-(1 << 70), max_value=-1).map(str),
    st.integers(min_value=0, max_value=1 << 70).map(lambda n: f"{n:08x}"),
    st.sampled_from(["1" * 5000, "f" * 5000, "\u00b2", "\u0663", "-", "0x10", "1e3", "nan"]),
)
_WORDS = st.one_of(
    st.sampled_from(
        [
            "CPU0",
            "CPU1",
            "CPU3",
            "NMI:",
            "LOC:",
            "ERR:",
            "45:",
            "0:",
            "Tcp:",
            "Ip:",
            "TcpExt:",
            "RetransSegs",
            "MaxConn",
            "NET_RX:",
            "IR-PCI-MSI",
            "eth0-TxRx-0",
            "sda",
            "nvme0n1",
            "8",
            "0",
            ":",
            "\t",
        ]
    ),
    st.text(max_size=6),
)
_LINE = st.lists(st.one_of(_NUMBERS, _WORDS), max_size=24).map(" ".join)
TEXT = st.one_of(st.text(), st.lists(_LINE, max_size=12).map("\n".join))
# A /proc table with a proper header, so the rows' numbers are really parsed.
HEADED = st.builds(
    lambda head, lines: head + "\n" + "\n".join(lines),
    st.sampled_from(["CPU0", "CPU0 CPU1", "CPU0 CPU1 CPU3"]),
    st.lists(_LINE, max_size=10),
)


def _u64(n: object) -> bool:
    return isinstance(n, int) and 0 <= n < U64


@BOUNDED
@given(
    st.one_of(
        TEXT,
        st.lists(st.lists(_NUMBERS, min_size=14, max_size=20), max_size=5).map(
            lambda rows: "\n".join("8 0 sda " + " ".join(r) for r in rows)
        ),
    )
)
def test_diskstats(text: str) -> None:
    for row in parse_diskstats(text).values():
        assert _u64(row.major) and _u64(row.minor)
        assert all(_u64(f) for f in row.fields)
        device_stats(row)
    for line in text.splitlines():  # the backend's one-line parse: the same, or skipped alike
        want = [(n, device_stats(r)) for n, r in parse_diskstats(line).items()]
        got = line_stats(line)
        assert [got] == want if want else got is None


@BOUNDED
@given(st.one_of(TEXT, HEADED))
def test_interrupts(text: str) -> None:
    parsed = parse_interrupts(text)
    for row in parsed.rows.values():
        assert all(_u64(c) for c in row.counts)


@BOUNDED
@given(st.one_of(TEXT, HEADED))
def test_softirqs(text: str) -> None:
    for values in parse_softirqs(text).values():
        assert all(_u64(c) for c in values.values())


@BOUNDED
@given(TEXT)
def test_softnet_stat(text: str) -> None:
    for row in parse_softnet_stat(text, cpus=[0, 2]):
        for v in (row.processed, row.dropped, row.time_squeeze, row.received_rps,
                  row.flow_limit_count, row.backlog_len, row.cpu):  # fmt: skip
            assert _u64(v)


@BOUNDED
@given(
    st.one_of(
        TEXT,
        st.lists(st.sampled_from(["Tcp: A B C", "Ip: X"]) | _LINE, max_size=8).map(
            lambda lines: "\n".join(
                ("Tcp: " + line) if i % 2 else line for i, line in enumerate(lines)
            )
        ),
    )
)
def test_snmp_and_netstat(text: str) -> None:
    for group in parse_snmp(text).values():
        # values are signed (Tcp MaxConn -1): within a 64-bit integer either way
        assert all(isinstance(v, int) and -(1 << 63) <= v < U64 for v in group.values())


_SYSFS_VALUE = st.one_of(_NUMBERS, st.text(max_size=20), st.just(""))


@BOUNDED
@given(st.dictionaries(st.sampled_from(
    ["rx_bytes", "tx_bytes", "rx_packets", "rx_missed_errors", "ifindex", "mtu", "flags",
     "speed", "operstate", "dev", "size", "numa_node"]
), _SYSFS_VALUE, max_size=12))  # fmt: skip
def test_sysfs_reads(files: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        net = root / "class" / "net" / "eth0"
        (net / "statistics").mkdir(parents=True)
        blk = root / "class" / "block" / "sda"
        blk.mkdir(parents=True)
        (root / "irq" / "5").mkdir(parents=True)
        for name, value in files.items():
            if name.startswith(("rx_", "tx_")):
                (net / "statistics" / name).write_text(value)
            elif name in ("dev", "size"):
                (blk / name).write_text(value)
            else:
                (net / name).write_text(value)
        link = read_link(root, "eth0")
        if link is not None:
            assert all(_u64(v) for v in link.stats.values())
        info = nic_info(root, "eth0")
        assert info.speed_bytes is None or info.speed_bytes > 0
        irq_affinity(root, "5")
        for disk in read_topology(root).values():
            assert _u64(disk.major) and _u64(disk.minor) and _u64(disk.size_bytes // 512)
        devt_names(root)


def test_an_unparsable_counter_is_left_out_not_zero(tmp_path: Path) -> None:
    stats = tmp_path / "class" / "net" / "eth0" / "statistics"
    stats.mkdir(parents=True)
    (stats / "rx_bytes").write_text("12345\n")
    (stats / "tx_bytes").write_text("garbage\n")
    (stats / "rx_packets").write_text(str(U64) + "\n")  # absurd: malformed, not a value
    link = read_link(tmp_path, "eth0")
    assert link is not None
    assert link.stats == {"rx_bytes": 12345}


@BOUNDED
@given(st.one_of(st.text(), st.builds("{}{}{}".format, st.sampled_from(
    ["eth0-TxRx-", "mlx5_comp", "virtio0-input.", "eth0-rx-", "eth0-", "ens1f0-fp-"]
), _NUMBERS, st.sampled_from(["", "@pci:0000:3b:00.0"]))))  # fmt: skip
def test_irq_queue(name: str) -> None:
    found = irq_queue(name)
    if found is not None:
        assert found[0] in ("rx", "tx", "combined") and _u64(found[1])


def test_a_huge_cpu_or_queue_number_is_malformed() -> None:
    assert parse_interrupts("CPU" + "9" * 5000 + "\n 1: 2 IO-APIC x\n").rows == {}
    assert parse_softirqs("CPU0 CPU" + "9" * 5000 + "\nNET_RX: 1 2\n") == {}
    assert irq_queue("eth0-TxRx-" + "9" * 5000) is None
    assert irq_queue("mlx5_comp" + "9" * 5000 + "@pci:0000:3b:00.0") is None
    assert irq_queue("eth0-TxRx-3") == ("combined", 3)


def test_a_huge_number_skips_the_row_not_the_scrape() -> None:
    text = "           CPU0       CPU1\n  1: " + "9" * 5000 + " 2 IO-APIC 1-edge i8042\n"
    text += "  2: 3 4 IO-APIC 2-edge x\n"
    assert list(parse_interrupts(text).rows) == ["2"]
    text = "Tcp: A B\nTcp: 1 " + "9" * 5000 + "\nIp: C\nIp: 7\n"
    assert parse_snmp(text) == {"Ip": {"C": 7}}
    line = "8 0 sda " + " ".join(["1"] * 10 + [str(U64)] + ["1"] * 3)
    assert parse_diskstats(line + "\n8 16 sdb " + " ".join(["2"] * 14)).keys() == {"sdb"}


# --- the config loaders ---------------------------------------------------------------------

_KEYS = st.sampled_from(
    sorted(
        set(AgentConfig.model_fields)
        | set(CollectorConfig.model_fields)
        | {"backend", "exclude", "topology_refresh", "version", "community", "token", "name",
           "address", "auth", "timeout", "retention", "keep", "outlets", "index", "host"}
    )
)  # fmt: skip
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from(["10s", "0", ".nan", "1:2", ":0", "[::1]:9", "2c", "3", "(", "/", "."]),
)  # fmt: skip
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_KEYS | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.dictionaries(_KEYS, _VALUES, max_size=6), st.sampled_from([AgentConfig, CollectorConfig]))
def test_config_loaders_give_a_model_or_a_config_error(
    data: dict[str, object], model: type[AgentConfig | CollectorConfig]
) -> None:
    logging.getLogger("collector").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "c.yml"
        f.write_text(yaml.safe_dump(data))
        try:
            load_model(model, f)
        except ConfigError as exc:
            assert exc.file == str(f)


_RAW_SCALARS = st.sampled_from(
    ["2024-13-45", "2024-02-30 10:00:00", ".nan", "-.inf", "1" + "0" * 400, "0x", "0o9",
     "!!binary x", "!!python/object:os.system x", "&a [*a]", "*nope", "{a: [b, {c: d}]}",
     "[", "'", "|", "? x", "!!int x", "!!float y", "~", "yes", "0", ":0", "10s"]
)  # fmt: skip


@BOUNDED
@given(
    st.one_of(
        st.text(),
        st.lists(st.tuples(_KEYS, _RAW_SCALARS | st.text(max_size=8)), max_size=6).map(
            lambda pairs: "\n".join(f"{k}: {v}" for k, v in pairs)
        ),
    ),
    st.sampled_from([AgentConfig, CollectorConfig]),
)
def test_config_loaders_on_raw_yaml_text(
    text: str, model: type[AgentConfig | CollectorConfig]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "c.yml"
        f.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            load_model(model, f)
        except ConfigError as exc:
            assert exc.file == str(f)
