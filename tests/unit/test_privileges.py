"""Capability decisions as pure functions: /proc/PID/status parsing, what a tracing BPF
program needs per kernel, who runs smartctl, the helper's request grammar and answers."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporters.hostfs import caps
from exporters.smart.runner import RunnerChoice, choose_runner, decode_answer
from tests.support.env import ROOT

# A real status of `setpriv --reuid=65534 --inh-caps=+bpf,+perfmon --ambient-caps=+bpf,+perfmon
# --bounding-set=-all,+bpf,+perfmon` on this machine's 6.18 kernel (its Cap* lines).
STATUS = """Name:\tpython
Umask:\t0022
State:\tR (running)
Uid:\t65534\t65534\t65534\t65534
CapInh:\t000000c000000000
CapPrm:\t000000c000000000
CapEff:\t000000c000000000
CapBnd:\t000000c000000000
CapAmb:\t000000c000000000
NoNewPrivs:\t0
"""


def test_parse_status() -> None:
    sets = caps.parse_status(STATUS)
    assert caps.names(sets.effective) == ["CAP_PERFMON", "CAP_BPF"]
    assert sets.has(caps.CAP_BPF) and not sets.has(caps.CAP_SYS_ADMIN)
    assert sets.ambient == sets.bounding == sets.permitted == 0xC000000000
    assert caps.parse_status("") == caps.CapSets()
    # a hostile line is not a set
    assert caps.parse_status("CapEff:\tzz\nCapEff: 1 2\n").effective == 0
    assert caps.names(1 << 63) == ["cap_63"]


@pytest.mark.parametrize(
    ("held", "last_cap", "missing"),
    [
        (["CAP_BPF", "CAP_PERFMON"], 39, []),  # 5.8
        (["CAP_BPF", "CAP_PERFMON"], 40, []),  # 5.9 and later (this VM's 6.18)
        (["CAP_BPF"], 40, ["CAP_PERFMON"]),
        (["CAP_PERFMON"], 40, ["CAP_BPF"]),
        ([], 40, ["CAP_BPF", "CAP_PERFMON"]),
        (["CAP_SYS_ADMIN"], 40, []),
        (["CAP_SYS_ADMIN"], 37, []),
        (["CAP_PERFMON"], 38, ["CAP_SYS_ADMIN"]),  # knows CAP_PERFMON, not CAP_BPF
        ([], 37, ["CAP_SYS_ADMIN"]),  # 5.4, 4.19: before CAP_PERFMON and CAP_BPF
    ],
)
def test_bpf_tracing_missing(held: list[str], last_cap: int, missing: list[str]) -> None:
    eff = caps.mask(caps.CAP_NUMBERS[n] for n in held)
    assert caps.bpf_tracing_missing(eff, last_cap) == missing


def test_cap_last_cap(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "cap_last_cap").write_text("40\n")
    assert caps.cap_last_cap(tmp_path) == 40
    empty = tmp_path / "none"
    assert caps.cap_last_cap(empty, "6.1.0-26-amd64") == 40
    assert caps.cap_last_cap(empty, "5.8.0") == 39
    assert caps.cap_last_cap(empty, "4.18.0-553.el8_10.x86_64") == 37
    assert caps.cap_last_cap() == int(Path("/proc/sys/kernel/cap_last_cap").read_text())


def test_choose_runner() -> None:
    assert choose_runner("auto", True, True) == RunnerChoice("smartctl", "has CAP_SYS_RAWIO")
    assert choose_runner("auto", True, False) == RunnerChoice("helper", "missing CAP_SYS_RAWIO")
    assert choose_runner("auto", False, False) == RunnerChoice(
        "smartctl", "missing CAP_SYS_RAWIO, no helper"
    )
    assert choose_runner("helper", False, True) == RunnerChoice("helper", "configured")
    assert choose_runner("direct", True, False) == RunnerChoice("smartctl", "configured")


def test_decode_answer() -> None:
    out = decode_answer(json.dumps({"exit_code": 4, "output": '{"a":1}\udcff'}).encode(), 1.5)
    assert (out.result, out.exit_code, out.output, out.duration) == ("done", 4, b'{"a":1}\xff', 1.5)
    refused = decode_answer(b'{"error": "not a device name"}\n')
    assert refused.result == "error" and refused.detail == "smartctl helper: not a device name"
    late = decode_answer(b'{"error": "smartctl did not finish in time"}\n')
    assert late.result == "timeout"
    deep = b"[" * 100_000
    for bad in (b"", b"[]", b"{", b'{"exit_code": true, "output": ""}', b'{"exit_code": 0}', deep):
        assert decode_answer(bad).result == "error", bad


def _helper() -> ModuleType:
    path = ROOT / "packaging" / "libexec" / "smartctl-helper"
    loader = importlib.machinery.SourceFileLoader("smartctl_helper", str(path))
    spec = importlib.util.spec_from_loader("smartctl_helper", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


H = _helper()


@pytest.mark.parametrize(
    "dtype",
    ["auto", "ata", "scsi", "sat", "nvme", "megaraid,0", "megaraid,31", "cciss,3", "3ware,12",
     "aacraid,0,0,1", "areca,1", "areca,1/2", "hpt,1/1", "hpt,1/2/3",
     # the probes' ranges (exporters/smart/probe.py) at their ends
     "cciss,0", "cciss,127", "3ware,0", "3ware,127", "aacraid,5,0,127", "areca,32/8",
     "areca,128", "hpt,8/32", "hpt,1/128/15",
     # --scan-open names a SATA disk behind a controller sat+TYPE (scrutiny's megaraid captures)
     "sat+megaraid,0", "sat+cciss,2", "sat+3ware,1", "sat+areca,3", "sat+aacraid,0,0,4",
     "sssraid,0,3", "sat+sssraid,1,12"],
)  # fmt: skip
def test_helper_types_allowed(dtype: str) -> None:
    assert H.valid_type(dtype)


@pytest.mark.parametrize(
    "dtype",
    ["", "AUTO", "megaraid", "megaraid,", "megaraid,01", "megaraid,-1", "megaraid,1,2",
     "megaraid,99999", "cciss,x", "aacraid,0,0", "areca,1/", "hpt,1", "hpt,1/2/3/4", "test",
     "sat,12", "nvme,0x1", "usbjmicron", "auto ", "-d", "--all", "sat+auto", "sat+sat",
     "sat+megaraid", "sat+megaraid,01", "sat+sat+megaraid,0", "scsi+megaraid,0", "sssraid,1",
     "sssraid,1,2,3",
     # past smartctl's own bounds (lib/os_linux.cpp get_custom_device): it would refuse them
     "cciss,128", "3ware,128", "areca,0", "areca,129", "areca,1/0", "areca,1/9", "hpt,0/1",
     "hpt,9/1", "hpt,1/0", "hpt,1/129", "hpt,1/1/0", "hpt,1/1/16", "sat+cciss,128"],
)  # fmt: skip
def test_helper_types_refused(dtype: str) -> None:
    assert not H.valid_type(dtype)


def test_helper_request_grammar() -> None:
    assert H.parse_request(b"scan\n") == ("scan",)
    assert H.parse_request(b"read /dev/sda auto\n") == ("read", "/dev/sda", "auto")
    assert H.parse_request(b"read /dev/cciss/c0d0 cciss,0\n") == (
        "read",
        "/dev/cciss/c0d0",
        "cciss,0",
    )
    assert H.parse_request(b"read /dev/bus/0 megaraid,8\n")[1] == "/dev/bus/0"
    bad = [b"scan", b"read /dev/sda auto", b"read /dev/a/b/c/d auto\n", b"read /dev/ auto\n"]
    bad += [b"read /dev/sda\x00 auto\n", b"read /dev/a..b auto\n", b"read dev/sda auto\n"]
    for request in bad:
        with pytest.raises(H.Refused):
            H.parse_request(request)


def test_helper_scan_pairs() -> None:
    # The shape smartctl 7.3 prints for --scan-open --json (smartctl's own JSON schema).
    sda = {"name": "/dev/sda", "info_name": "/dev/sda [SAT]", "type": "sat", "protocol": "ATA"}
    bus = {"name": "/dev/bus/0", "info_name": "/dev/bus/0 [megaraid_disk_08]", "type": "megaraid,8"}
    out = json.dumps({"devices": [sda, bus, {"name": 3, "type": "x"}, "junk"]}).encode()
    assert H.scan_pairs(out) == {("/dev/sda", "sat"), ("/dev/bus/0", "megaraid,8")}
    assert H.scan_pairs(b"not json") == set()
    assert H.scan_pairs(b"[]") == set()


def test_helper_whole_block_device_needs_the_node_numbers(tmp_path: Path) -> None:
    sys_root, dev_root = tmp_path / "sys", tmp_path / "dev"
    (sys_root / "block" / "sdz").mkdir(parents=True)
    (sys_root / "block" / "sdz" / "dev").write_text("8:0\n")
    dev_root.mkdir()
    (dev_root / "sdz").write_text("")  # a regular file, not a block device node
    assert not H.whole_block_device("/dev/sdz", sys_root, dev_root)
    assert not H.whole_block_device("/dev/sdy", sys_root, dev_root)


# --- property tests: any input, the documented outcome ----------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, derandomize=True)
_WORDS = st.sampled_from(
    ["scan", "read", "/dev/sda", "/dev/../x", "-d", "--", "auto", "megaraid,0", "sat", " ", "\n"]
)


@_FUZZ
@given(
    st.one_of(
        st.binary(max_size=300), st.lists(_WORDS, max_size=6).map(lambda w: " ".join(w).encode())
    )
)
def test_helper_parse_request_accepts_only_the_grammar(line: bytes) -> None:
    """Any bytes: Refused, or a request whose device and type pass the checks smartctl's
    argv is built from (never an option, never a traversal)."""
    for candidate in (line, line + b"\n"):
        try:
            req = H.parse_request(candidate)
        except H.Refused:
            continue
        assert req == ("scan",) or (
            req[0] == "read"
            and H.DEVICE_RE.match(req[1])
            and ".." not in req[1]
            and not req[1].startswith("-")
            and H.valid_type(req[2])
        )


@_FUZZ
@given(st.text(max_size=400))
def test_parse_status_never_raises(text: str) -> None:
    sets = caps.parse_status(text)
    for v in (sets.effective, sets.permitted, sets.inheritable, sets.bounding, sets.ambient):
        assert 0 <= v < 1 << 64


@_FUZZ
@given(st.binary(max_size=2000))
def test_decode_answer_never_raises(raw: bytes) -> None:
    out = decode_answer(raw)
    assert out.result in ("done", "error", "timeout")
    assert out.result != "done" or (out.exit_code is not None and isinstance(out.output, bytes))


# --- keeping CAP_BPF effective where this kernel refuses map reads without it --------------

REASON = (
    "this kernel refuses bpf() map reads without it "
    "(kernel.unprivileged_bpf_disabled=2; Linux < 6.5)"
)


def _proc(tmp_path: Path, eff: list[int], last_cap: int = 40) -> Path:
    """A proc tree with this thread's capability sets, cap_last_cap and the sysctl at 2."""
    (tmp_path / "thread-self").mkdir(parents=True, exist_ok=True)
    m = caps.mask(eff)
    (tmp_path / "thread-self" / "status").write_text(f"CapPrm:\t{m:016x}\nCapEff:\t{m:016x}\n")
    (tmp_path / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    (tmp_path / "sys" / "kernel" / "cap_last_cap").write_text(f"{last_cap}\n")
    (tmp_path / "sys" / "kernel" / "unprivileged_bpf_disabled").write_text("2\n")
    return tmp_path


@pytest.mark.parametrize(
    ("held", "last_cap", "refused", "kept"),
    [
        ([caps.CAP_BPF, caps.CAP_PERFMON], 40, True, {caps.CAP_BPF}),  # Debian 12's 6.1
        ([caps.CAP_BPF, caps.CAP_PERFMON], 40, False, set()),  # 6.5+ (this VM)
        ([caps.CAP_SYS_ADMIN], 37, True, {caps.CAP_SYS_ADMIN}),  # no CAP_BPF in the kernel
        ([caps.CAP_SYS_ADMIN, caps.CAP_BPF], 40, True, {caps.CAP_BPF}),  # root
        ([caps.CAP_SYS_ADMIN], 40, True, {caps.CAP_SYS_ADMIN}),  # holds no CAP_BPF
        ([], 40, True, set()),  # nothing to lower, nothing to keep
    ],
)
def test_bpf_read_keep(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    held: list[int],
    last_cap: int,
    refused: bool,
    kept: set[int],
) -> None:
    tried: list[frozenset[int]] = []

    def needs(lower: object, action: object) -> bool:
        tried.append(frozenset(lower))  # type: ignore[arg-type]
        return refused

    monkeypatch.setattr(caps, "needs", needs)
    proc = _proc(tmp_path, held, last_cap)
    assert caps.bpf_read_keep(lambda: None, proc) == kept
    # bpf_capable() is CAP_BPF or CAP_SYS_ADMIN: both are lowered for the try
    assert tried == ([frozenset({caps.CAP_BPF, caps.CAP_SYS_ADMIN})] if held else [])
    assert caps.bpf_read_reason(proc) == REASON


class _Fake:
    """An exporter keeping what it is told."""

    def __init__(self, name: str, kept: set[int], own: dict[int, str]) -> None:
        self.name = name
        self._kept, self._own = kept, own

    def kept_capabilities(self) -> frozenset[int]:
        return frozenset(self._kept)

    def kept_effective(self) -> dict[int, str]:
        return dict(self._own)


@pytest.mark.parametrize("refused", [True, False])
def test_drop_keeps_the_map_reads_capability_effective(
    monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """The decision: a BPF exporter whose probe found its reads refused keeps CAP_BPF
    effective (and says why); one whose reads need nothing lets it go with the rest. smartctl's
    capabilities stay permitted only, as before."""
    from collector.agent import privileges

    tracer = caps.mask([caps.CAP_BPF, caps.CAP_PERFMON, caps.CAP_SYS_RAWIO])
    before = caps.CapSets(permitted=tracer, effective=tracer)
    calls = []

    def drop_to(keep: object, effective: object = ()) -> caps.DropResult:
        k, e = caps.mask(keep) & tracer, caps.mask(effective) & tracer  # type: ignore[arg-type]
        calls.append((k, e))
        return caps.DropResult(caps.CapSets(permitted=k | e, effective=e, inheritable=k), [])

    monkeypatch.setattr(caps, "current", lambda *a, **k: before)
    monkeypatch.setattr(caps, "drop_to", drop_to)
    bpf = {caps.CAP_BPF} if refused else set()
    exporters = [
        _Fake("blockio", bpf, {c: REASON for c in bpf}),
        _Fake("smart", {caps.CAP_SYS_RAWIO}, {}),
    ]
    line = privileges.drop_after_start(exporters)  # type: ignore[arg-type]
    rawio = caps.mask([caps.CAP_SYS_RAWIO])
    if refused:
        assert calls == [(caps.mask([caps.CAP_BPF]) | rawio, caps.mask([caps.CAP_BPF]))]
        assert line == (
            "capabilities: dropped CAP_PERFMON; kept CAP_SYS_RAWIO (smart), "
            f"CAP_BPF effective (blockio): {REASON}"
        )
    else:
        assert calls == [(rawio, 0)]
        assert line == "capabilities: dropped CAP_PERFMON,CAP_BPF; kept CAP_SYS_RAWIO (smart)"


def test_blockio_probes_its_backend_once(tmp_path: Path) -> None:
    """BlockioExporter asks its backend's probe once (at kept_capabilities, before the drop),
    keeps what it found effective and says so in its startup note; diskstats keeps nothing."""
    from exporters.blockio.exporter import BlockioExporter

    e = BlockioExporter(backend="diskstats", sys_root=tmp_path, proc_root=tmp_path)
    assert e.kept_capabilities() == frozenset() and e.kept_effective() == {}
    probes = []

    class Backend:
        name = "core"

        def bpf_read_keep(self) -> frozenset[int]:
            probes.append(1)
            return frozenset({caps.CAP_BPF})

    e = BlockioExporter(backend="diskstats", sys_root=tmp_path, proc_root=tmp_path)
    e.backend = Backend()  # type: ignore[assignment]
    e.reason = ""
    assert e.kept_capabilities() == {caps.CAP_BPF}
    assert set(e.kept_effective()) == {caps.CAP_BPF}
    assert probes == [1]
    assert e.startup_note().startswith("backend: core; keeps CAP_BPF effective: this kernel")


def test_bpf_read_keep_keeps_when_it_cannot_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """capset refused (a seccomp filter): the read cannot be tried without CAP_BPF, so it is
    kept rather than risk every map read after the drop."""

    def needs(lower: object, action: object) -> bool:
        raise PermissionError(1, "capset: Operation not permitted")

    monkeypatch.setattr(caps, "needs", needs)
    proc = _proc(tmp_path, [caps.CAP_BPF, caps.CAP_PERFMON])
    assert caps.bpf_read_keep(lambda: None, proc) == {caps.CAP_BPF}
