"""Pins the bucket conventions, in C (the BPF programs' header and bcc's LAT_SLOT) and in
Python: the log2 slots (sizes; bcc's former latency slots) and the configured latency bounds."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from exporters.blockio.bcc_backend import lat_slot_macro
from exporters.blockio.model import (
    DEFAULT_LAT_BOUNDS_SECONDS,
    LAT_BOUNDS_SECONDS,
    LAT_SLOTS,
    LAT_UNIT_NS,
    SIZE_BOUNDS_BYTES,
    SIZE_SLOTS,
    SIZE_UNIT,
    bound_slot,
    slot,
)
from tests.support.env import ROOT, require

HEADER = ROOT / "exporters" / "blockio" / "wattbit_buckets.h"
US = 1000  # ns


def _cases() -> list[tuple[int, int]]:
    """(latency in ns, expected slot): 0, 1, 2, 3, 2^k-1, 2^k, 2^k+1 microseconds, and ns edges."""
    cases = [(0, 0), (1, 0), (US, 0), (US + 1, 1), (2 * US, 1), (3 * US, 2), (4 * US, 2)]
    for k in range(2, 24):
        cases += [((2**k - 1) * US, k), (2**k * US, k), ((2**k + 1) * US, k + 1)]
        cases += [(2**k * US + 1, k + 1)]  # one nanosecond past a bound moves up
    cases += [(2**24 * US, 24), (2**24 * US + 1, 25), (10**12, 25), (2**63, 25)]
    return cases


@pytest.mark.parametrize(("ns", "expected"), _cases())
def test_python_latency_slot(ns: int, expected: int) -> None:
    assert slot(ns, LAT_UNIT_NS, LAT_SLOTS) == expected


def test_slot_bounds_are_prometheus_le() -> None:
    # Slot k's upper bound is the k-th "le": a value equal to a bound lands in that bucket.
    for k, bound in enumerate(LAT_BOUNDS_SECONDS):
        ns = round(bound * 1e9)
        assert slot(ns, LAT_UNIT_NS, LAT_SLOTS) == k
        assert slot(ns + 1, LAT_UNIT_NS, LAT_SLOTS) == k + 1
    assert LAT_BOUNDS_SECONDS[0] == pytest.approx(1e-6)
    assert len(LAT_BOUNDS_SECONDS) == LAT_SLOTS - 1
    assert SIZE_BOUNDS_BYTES[0] == 512 and SIZE_BOUNDS_BYTES[-1] == 16 * 2**20
    assert slot(0, SIZE_UNIT, SIZE_SLOTS) == 0  # flushes carry no data
    assert slot(4096, SIZE_UNIT, SIZE_SLOTS) == 3
    assert slot(4097, SIZE_UNIT, SIZE_SLOTS) == 4
    assert slot(1 << 30, SIZE_UNIT, SIZE_SLOTS) == SIZE_SLOTS - 1


@pytest.fixture(scope="module")
def c_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    require(shutil.which("gcc") is not None, "gcc is needed to compile wattbit_buckets.h")
    d = tmp_path_factory.mktemp("buckets")
    src = d / "slot.c"
    src.write_text(
        "#define __always_inline inline __attribute__((always_inline))\n"
        f'#include "{HEADER}"\n'
        "unsigned int slot(unsigned long long v, unsigned long long u, unsigned int n)"
        " { return wb_slot(v, u, n); }\n"
        "unsigned int bslot(const unsigned long long *b, unsigned long long v)"
        " { return wb_bound_slot(b, v); }\n"
    )
    lib = d / "libslot.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module")
def c_slot(c_lib: ctypes.CDLL) -> ctypes._CFuncPtr:
    fn = c_lib.slot
    fn.argtypes = [ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_uint]
    fn.restype = ctypes.c_uint
    return fn


@pytest.mark.parametrize(("ns", "expected"), _cases())
def test_c_latency_slot(c_slot: ctypes._CFuncPtr, ns: int, expected: int) -> None:
    assert c_slot(ns, LAT_UNIT_NS, LAT_SLOTS) == expected


def test_c_and_python_agree_on_sizes(c_slot: ctypes._CFuncPtr) -> None:
    for size in [0, 1, 511, 512, 513, 1024, 4095, 4096, 4097, 65536, 1 << 20, 1 << 24, 1 << 40]:
        assert c_slot(size, SIZE_UNIT, SIZE_SLOTS) == slot(size, SIZE_UNIT, SIZE_SLOTS), size


def _bound_cases(bounds_ns: list[int]) -> list[int]:
    values = [0, 1, 2**63, 2**64 - 1]
    for b in bounds_ns:
        values += [b - 1, b, b + 1]
    return values


BOUND_SETS = [
    [round(b * 1e9) for b in DEFAULT_LAT_BOUNDS_SECONDS],
    [1000 * 2**k for k in range(32)],  # the most bounds the core program takes
    [5],
    [7, 3_000_000_000],
]


@pytest.mark.parametrize("bounds_ns", BOUND_SETS, ids=["default", "32", "one", "two"])
def test_core_bound_slot_is_prometheus_le(c_lib: ctypes.CDLL, bounds_ns: list[int]) -> None:
    # The core program's binary search over .rodata (unused bounds ~0): a value equal to a
    # bound lands in that bound's bucket, one more in the next; past the last is +Inf.
    arr = (ctypes.c_ulonglong * 32)(*(bounds_ns + [2**64 - 1] * (32 - len(bounds_ns))))
    fn = c_lib.bslot
    fn.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_ulonglong]
    fn.restype = ctypes.c_uint
    for v in _bound_cases(bounds_ns):
        assert fn(arr, v) == bound_slot(v, bounds_ns), v
    assert fn(arr, bounds_ns[-1] + 1) == len(bounds_ns)


@pytest.mark.parametrize("bounds_ns", BOUND_SETS, ids=["default", "32", "one", "two"])
def test_bcc_lat_slot_macro_is_prometheus_le(tmp_path: Path, bounds_ns: list[int]) -> None:
    # bcc compiles the configured bounds into LAT_SLOT (a sum of comparisons): the same
    # slots as the core program's search.
    require(shutil.which("gcc") is not None, "gcc is not installed")
    flag = lat_slot_macro([b / 1e9 for b in bounds_ns])
    src = tmp_path / "m.c"
    src.write_text("unsigned int s(unsigned long long v) { return LAT_SLOT(v); }\n")
    lib = tmp_path / "m.so"
    subprocess.run(["gcc", flag, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    fn = ctypes.CDLL(str(lib)).s
    fn.argtypes = [ctypes.c_ulonglong]
    fn.restype = ctypes.c_uint
    for v in _bound_cases(bounds_ns):
        assert fn(v) == bound_slot(v, bounds_ns), v


def test_header_is_what_the_programs_include() -> None:
    src = (ROOT / "exporters" / "blockio" / "blockio.c").read_text()
    assert '#include "wattbit_buckets.h"' in src
    assert "LAT_SLOT(lat)" in src
    core = (ROOT / "exporters" / "blockio" / "core" / "blockio.bpf.c").read_text()
    assert '#include "wattbit_buckets.h"' in core
    assert "wb_bound_slot(cfg.lat_bounds_ns, lat)" in core
    assert Path(HEADER).is_file()
