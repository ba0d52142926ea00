"""The core backend's decisions without a kernel: why it cannot load, and the per-device
clock (fixed once chosen, the other clock counted as untimed, never mixed in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.blockio.core import backend as core
from exporters.blockio.core.backend import CoreBackend
from exporters.blockio.model import DEFAULT_LAT_BOUNDS_SECONDS, BackendUnavailable
from exporters.blockio.unseen import Unseen
from exporters.hostfs import caps

N = len(DEFAULT_LAT_BOUNDS_SECONDS) + 1


def _unavailable(tmp_path: Path, **kw: object) -> BackendUnavailable:
    args: dict[str, object] = {
        "obj_path": tmp_path / "blockio.bpf.o",
        "btf_path": tmp_path / "vmlinux",
    }
    args.update(kw)
    with pytest.raises(BackendUnavailable) as err:
        CoreBackend(DEFAULT_LAT_BOUNDS_SECONDS, **args)  # type: ignore[arg-type]
    return err.value


def _caps(monkeypatch: pytest.MonkeyPatch, *held: int) -> None:
    monkeypatch.setattr(core.caps, "current", lambda: caps.CapSets(effective=caps.mask(held)))


def test_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _caps(monkeypatch, caps.CAP_BPF, caps.CAP_PERFMON)
    assert _unavailable(tmp_path).reason == "no kernel BTF"
    (tmp_path / "vmlinux").write_bytes(b"")
    err = _unavailable(tmp_path)
    assert err.reason == "not built" and "scripts/build-bpf.sh" in err.detail
    _caps(monkeypatch, caps.CAP_BPF)  # decided from the capabilities, not from the uid
    err = _unavailable(tmp_path)
    assert err.reason == "missing CAP_PERFMON" and "CAP_PERFMON" in err.detail
    _caps(monkeypatch)
    assert _unavailable(tmp_path).reason == "missing CAP_BPF+CAP_PERFMON"
    _caps(monkeypatch, caps.CAP_SYS_ADMIN)  # implies both
    assert _unavailable(tmp_path).reason == "not built"


@pytest.mark.parametrize("bounds", [[], [0.1, 0.01], [0.001, 0.001], [1e-3] * 40])
def test_bad_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounds: list[float]) -> None:
    _caps(monkeypatch, caps.CAP_SYS_ADMIN)
    (tmp_path / "vmlinux").write_bytes(b"")
    (tmp_path / "blockio.bpf.o").write_bytes(b"")
    with pytest.raises(ValueError, match="latency bounds"):
        CoreBackend(bounds, obj_path=tmp_path / "blockio.bpf.o", btf_path=tmp_path / "vmlinux")


def _value(dev_slots: list[int], q_slots: list[int], untimed: int = 0) -> list[int]:
    ios = sum(dev_slots) + sum(q_slots) + untimed
    head = [ios, ios * 4096, 0, untimed, sum(dev_slots) * 1000, sum(q_slots) * 2000, 0]
    return head + dev_slots + q_slots


class _Fake(CoreBackend):
    """read()'s bookkeeping over given map contents (no object, no kernel)."""

    def __init__(self) -> None:  # no super().__init__: nothing to load
        self.nbounds = N - 1
        self.size_histogram = False
        self.clocks = {}
        self.rows: dict[tuple[int, int, int], list[int]] = {}
        self.attached: list[str] = []
        self.unseen = Unseen()

        class _Disks:
            def live(self, seen: dict[tuple[int, int], int]) -> dict[tuple[int, int], str]:
                return {ident: f"d{ident[0]}" for ident in seen}

        self.disks = _Disks()  # type: ignore[assignment]

        class _Issue:
            attached = False

            def attach(inner) -> None:
                inner.attached = True
                self.attached.append("issue")

        class _Diskstats:
            def read(self) -> dict:  # type: ignore[type-arg]
                return {}

        self._issue = _Issue()  # type: ignore[assignment]
        self.diskstats = _Diskstats()  # type: ignore[assignment]

    def _raw(self) -> dict[tuple[int, int, int], list[int]]:
        return self.rows


def _slots(**at: int) -> list[int]:
    out = [0] * N
    for k, v in at.items():
        out[int(k[1:])] = v
    return out


def test_clock_is_chosen_once_and_never_mixed() -> None:
    b = _Fake()
    b.rows = {(1, 0, 9): _value(_slots(s3=5), _slots())}
    d = b.read()["d1"]
    assert d.clock == "device" and d.ops["read"].lat_slots == _slots(s3=5)
    # Later the queue loses its statistics: queue-clock requests appear. The device stays on
    # the device clock; the others are counted untimed, not added to the histogram.
    b.rows = {(1, 0, 9): _value(_slots(s3=5), _slots(s4=7))}
    d = b.read()["d1"]
    assert d.clock == "device"
    assert d.ops["read"].lat_slots == _slots(s3=5)
    assert d.ops["read"].untimed == 7
    assert d.ops["read"].lat_sum_seconds == pytest.approx(5e-6)


def test_queue_clock_device_and_untimed_attach_the_issue_program() -> None:
    b = _Fake()
    b.rows = {(2, 1, 9): _value(_slots(), _slots(s0=3)), (3, 0, 9): _value(_slots(), _slots(), 4)}
    out = b.read()
    assert out["d2"].clock == "queue" and out["d2"].ops["write"].lat_slots == _slots(s0=3)
    assert out["d3"].clock is None and out["d3"].ops["read"].lat_slots is None
    assert out["d3"].ops["read"].untimed == 4
    assert b.attached == ["issue"]
    b.read()
    assert b.attached == ["issue"]  # once


def test_ops_beyond_the_four_are_ignored() -> None:
    b = _Fake()
    b.rows = {(1, 7, 9): _value(_slots(s0=1), _slots())}
    assert b.read() == {}


def test_slot_copies_are_summed_per_claiming_key() -> None:
    """A queue id reused by another disk: some CPUs' copies of the slot hold the former disk's
    counts, others the new one's; each key gets only its own copies."""
    words = core.WORDS
    pick = list(range(core.IOS, core.IOS + 7))  # ios .. size_sum

    def copy(key: int, ios: int, seq: int = 1) -> list[int]:
        v = [0] * words
        v[core.KEY], v[core.SEQ], v[core.IOS] = key, seq, ios
        return v

    import struct

    def pack(*copies: list[int]) -> bytes:
        return b"".join(struct.pack(f"={words}Q", *c) for c in copies)

    same = core._by_key(pack(copy(5, 3), copy(5, 4), copy(0, 0, 0)), pick)
    assert same == [((5, 1), [7, 0, 0, 0, 0, 0, 0])]
    split = dict(core._by_key(pack(copy(5, 3), copy(9, 4), copy(5, 1)), pick))
    assert split == {(5, 1): [4, 0, 0, 0, 0, 0, 0], (9, 1): [4, 0, 0, 0, 0, 0, 0]}
    # The same dev_t, re-created (a new diskseq): two disks, never summed.
    again = dict(core._by_key(pack(copy(5, 3, seq=1), copy(5, 4, seq=2)), pick))
    assert again == {(5, 1): [3, 0, 0, 0, 0, 0, 0], (5, 2): [4, 0, 0, 0, 0, 0, 0]}
    assert core._by_key(pack(copy(0, 0, 0)), pick) == []


def test_gone_disks_are_deleted_from_the_hash_map_and_not_reported() -> None:
    """read() reports only the identities LiveDisks calls live, deletes the others' hash
    entries, and forgets their clocks."""
    b = _Fake()
    deleted: list[bytes] = []

    class _Stats:
        def delete(self, key: bytes) -> bool:
            deleted.append(key)
            return True

    class _Disks:
        def live(self, seen: dict[tuple[int, int], int]) -> dict[tuple[int, int], str]:
            return {(1, 10): "d1"}  # (1, 9): d1's predecessor; (2, 5): gone

    b._stats = _Stats()  # type: ignore[assignment]
    b.disks = _Disks()  # type: ignore[assignment]
    b.clocks = {(1, 9): "device", (2, 5): "queue"}
    b.rows = {
        (1, 0, 9): _value(_slots(s3=6), _slots()),
        (1, 0, 10): _value(_slots(s3=1), _slots()),
        (2, 1, 5): _value(_slots(s1=2), _slots()),
    }
    out = b.read()
    assert list(out) == ["d1"] and out["d1"].ops["read"].ios == 1
    assert sorted(deleted) == sorted([core._KEY.pack(1, 0, 9), core._KEY.pack(2, 1, 5)])
    assert b.clocks == {(1, 10): "device"}


def test_claimed_slots_are_read_in_runs() -> None:
    """One batch lookup per run of claimed slots, runs joined across small gaps."""
    assert core._runs([], 6) == []
    assert core._runs([0, 1, 4, 5], 6) == [(0, 5)]
    assert core._runs([0, 1, 20, 21, 29], 6) == [(0, 1), (20, 21), (29, 29)]
    assert core._runs([3, 10], 6) == [(3, 10)] and core._runs([3, 11], 6) == [(3, 3), (11, 11)]
    # at most `most` indices a run (a 128-CPU host's slots: 1 MiB a batch at most)
    assert core._runs(list(range(10)), 6, 4) == [(0, 3), (4, 7), (8, 9)]
    assert core._runs([0, 2, 4, 6], 6, 3) == [(0, 2), (4, 6)]
    assert core._runs([0, 1, 2], 6, 1) == [(0, 0), (1, 1), (2, 2)]


def _record(key: int, seq: int, ios: int) -> bytes:
    import struct

    v = [0] * core.WORDS
    v[core.KEY], v[core.SEQ], v[core.IOS], v[core.BYTES] = key, seq, ios, ios * 512
    return struct.pack(f"={core.WORDS}Q", *v)


def test_the_kernels_records_are_parsed_per_disk_and_op() -> None:
    """`sum`'s records: key dev << 8 | (op + 1) and seq say whose; key 0 names a slot whose
    copies claim two disks (its index in seq); a partial record and a key naming no op are
    dropped, never guessed at."""
    pick = [core.IOS, core.BYTES]
    data = _record(7 << 8 | 1, 42, 3) + _record(0, 17, 0) + _record(9 << 8 | 2, 43, 5)
    data += _record(9 << 8 | 0, 44, 1) + _record(9 << 8 | 5, 45, 1)  # op bytes 0 and 5: none
    summed, mixed = core.parse_sums(data + _record(8 << 8 | 1, 46, 9)[:100], pick)
    assert summed == [((7, 0, 42), [3, 1536]), ((9, 1, 43), [5, 2560])]
    assert mixed == [17]
    assert core.parse_sums(b"", pick) == ([], [])
    assert core.parse_sums(b"\xff" * 7, pick) == ([], [])
