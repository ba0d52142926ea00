"""A thin typed binding over the system's libbpf (Debian's libbpf1) through ctypes.

Why ctypes and not a Python package: no maintained binding serves. bcc loads only what it
compiles itself (LLVM at run time, kernel headers: the cost this replaces); PyPI's `libbpf`
names are unmaintained or unrelated, and pybpfmaps reads maps only. libbpf's C API is small and
stable (libbpf 1.x keeps its ABI: https://github.com/libbpf/libbpf#bpfbtf-uapi-sync), so the
dozen calls the agent needs are declared here, each with its argument and result types.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_c_p = ctypes.c_void_p
# libbpf_print_fn_t: int (*)(enum libbpf_print_level level, const char *fmt, va_list args)
_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_NO_PRINT = _PRINT_FN()  # NULL: libbpf prints nothing (libbpf_set_print(NULL))


class LibbpfError(OSError):
    """A libbpf call failed; errno is the kernel's or libbpf's error number."""


class _BatchOpts(ctypes.Structure):
    # struct bpf_map_batch_opts (bpf/bpf.h): sz, elem_flags, flags.
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("elem_flags", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


def _load() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    lib = ctypes.CDLL(name, use_errno=True)
    sig: dict[str, tuple[object, list[object]]] = {
        "libbpf_set_print": (_c_p, [_PRINT_FN]),
        "libbpf_num_possible_cpus": (ctypes.c_int, []),
        "bpf_object__open_file": (_c_p, [ctypes.c_char_p, _c_p]),
        "bpf_object__load": (ctypes.c_int, [_c_p]),
        "bpf_object__close": (None, [_c_p]),
        "bpf_object__next_map": (_c_p, [_c_p, _c_p]),
        "bpf_object__find_program_by_name": (_c_p, [_c_p, ctypes.c_char_p]),
        "bpf_map__name": (ctypes.c_char_p, [_c_p]),
        "bpf_map__fd": (ctypes.c_int, [_c_p]),
        "bpf_map__value_size": (ctypes.c_uint32, [_c_p]),
        "bpf_map__initial_value": (_c_p, [_c_p, ctypes.POINTER(ctypes.c_size_t)]),
        "bpf_map__set_max_entries": (ctypes.c_int, [_c_p, ctypes.c_uint32]),
        "bpf_map__set_map_flags": (ctypes.c_int, [_c_p, ctypes.c_uint32]),
        "bpf_program__set_autoload": (ctypes.c_int, [_c_p, ctypes.c_bool]),
        "bpf_program__attach": (_c_p, [_c_p]),
        "bpf_program__attach_iter": (_c_p, [_c_p, _c_p]),
        "bpf_link__fd": (ctypes.c_int, [_c_p]),
        "bpf_iter_create": (ctypes.c_int, [ctypes.c_int]),
        "bpf_program__fd": (ctypes.c_int, [_c_p]),
        "bpf_prog_test_run_opts": (ctypes.c_int, [ctypes.c_int, _c_p]),
        "bpf_link__destroy": (ctypes.c_int, [_c_p]),
        "bpf_map_lookup_batch": (
            ctypes.c_int,
            [ctypes.c_int, _c_p, _c_p, _c_p, _c_p, ctypes.POINTER(ctypes.c_uint32), _c_p],
        ),
        "bpf_map_get_next_key": (ctypes.c_int, [ctypes.c_int, _c_p, _c_p]),
        "bpf_map_lookup_elem": (ctypes.c_int, [ctypes.c_int, _c_p, _c_p]),
        "bpf_map_delete_elem": (ctypes.c_int, [ctypes.c_int, _c_p]),
        "bpf_map_update_elem": (ctypes.c_int, [ctypes.c_int, _c_p, _c_p, ctypes.c_uint64]),
    }
    for fn, (restype, argtypes) in sig.items():
        f = getattr(lib, fn)
        f.restype = restype
        f.argtypes = argtypes
    return lib


_lib: ctypes.CDLL | None = None
_log_lines: list[str] = []


def _vsnprintf() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    fn = libc.vsnprintf
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
    return fn


@_PRINT_FN
def _print(level: int, fmt: bytes, args: int) -> int:
    # libbpf's messages (the verifier log on a failed load among them) go to our log, not to
    # the agent's stderr; the last ones are kept for the error that follows.
    buf = ctypes.create_string_buffer(4096)
    _VSNPRINTF(buf, len(buf), fmt, args)
    line = buf.value.decode(errors="replace").rstrip("\n")
    _log_lines.append(line)
    del _log_lines[:-40]
    if level == 0:  # LIBBPF_WARN
        log.debug("libbpf: %s", line)
    return 0


_VSNPRINTF = _vsnprintf()


def lib() -> ctypes.CDLL:
    """The loaded libbpf, its messages routed to the log; raises OSError where there is none."""
    global _lib
    if _lib is None:
        _lib = _load()
        _lib.libbpf_set_print(_print)
    return _lib


def last_messages(n: int = 12) -> str:
    """libbpf's last messages (the end of a verifier log after a failed load)."""
    return "\n".join(_log_lines[-n:])


def _check(rc: int, what: str) -> int:
    if rc < 0:
        code = -rc if rc < 0 else ctypes.get_errno()
        raise LibbpfError(code, f"{what}: {os.strerror(code)}")
    return rc


def _check_ptr(ptr: int | None, what: str) -> int:
    if not ptr:
        code = ctypes.get_errno() or errno.EINVAL
        raise LibbpfError(code, f"{what}: {os.strerror(code)}")
    return ptr


# lookup_batch's buffers: the first call's at most this many bytes, then at most _BATCH_MAX
# entries a call; a hash bucket never holds more entries than _BUCKET_MAX (a map's whole
# max_entries in one bucket: the agent's maps are far smaller).
_BATCH_BYTES = 64 * 1024
_BATCH_MAX = 256
_BUCKET_MAX = 1 << 20


class Map:
    """One map of a loaded object."""

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr
        self.name = (lib().bpf_map__name(ptr) or b"").decode()

    @property
    def fd(self) -> int:
        """The map's file descriptor (after load)."""
        return int(lib().bpf_map__fd(self._ptr))

    def value_size(self) -> int:
        """The size of one value, as the object declares it."""
        return int(lib().bpf_map__value_size(self._ptr))

    def initial_value(self) -> ctypes.Array[ctypes.c_char]:
        """The writable initial contents of a global-data map (.rodata, .bss) before load."""
        size = ctypes.c_size_t()
        ptr = _check_ptr(lib().bpf_map__initial_value(self._ptr, ctypes.byref(size)), self.name)
        return (ctypes.c_char * size.value).from_address(ptr)

    def set_max_entries(self, n: int) -> None:
        """Size the map (before load)."""
        _check(lib().bpf_map__set_max_entries(self._ptr, n), f"{self.name}: max_entries")

    def set_flags(self, flags: int) -> None:
        """Set the map's creation flags (before load)."""
        _check(lib().bpf_map__set_map_flags(self._ptr, flags), f"{self.name}: map_flags")

    def lookup(self, key: bytes, value_size: int) -> bytes | None:
        """One entry's value (value_size bytes: times the possible CPUs for a per-CPU map)."""
        value = ctypes.create_string_buffer(value_size)
        k = ctypes.create_string_buffer(key, len(key))
        rc = lib().bpf_map_lookup_elem(self.fd, k, value)
        if rc == -errno.ENOENT:
            return None
        _check(rc, f"{self.name}: lookup")
        return value.raw

    def update(self, key: bytes, value: bytes) -> None:
        """Write one entry (BPF_ANY; a per-CPU map's value: every possible CPU's copy)."""
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value, len(value))
        _check(lib().bpf_map_update_elem(self.fd, k, v, 0), f"{self.name}: update")

    def delete(self, key: bytes) -> bool:
        """Delete one entry; False if there was none."""
        k = ctypes.create_string_buffer(key, len(key))
        rc = lib().bpf_map_delete_elem(self.fd, k)
        if rc == -errno.ENOENT:
            return False
        _check(rc, f"{self.name}: delete")
        return True

    def lookup_batch(
        self, key_size: int, value_size: int, chunk: int | None = None
    ) -> Iterator[tuple[bytes, memoryview]]:
        """Every (key, value) in a few syscalls (BPF_MAP_LOOKUP_BATCH, kernel 5.6+).

        value_size is the size of the value as the syscall returns it (times the possible CPUs
        for a per-CPU map). chunk: the entries asked for by the first call (default: what
        fits in 64 KiB, 1 to 256); each full batch doubles it for the next, up to 256, and a
        first hash bucket larger than it (ENOSPC, kernel/bpf/hashtab.c) doubles it at once.
        Why small first: a per-CPU value is 94 KB on a 128-CPU host, so 256 of them would be
        24 MB allocated and zeroed at every read of a map that is mostly empty (issue 35).
        Falls back to get_next_key + lookup per entry where the kernel or the map type has
        no batch operation (EINVAL/ENOTSUPP).
        """
        fd = self.fd
        n = chunk or max(1, min(_BATCH_MAX, _BATCH_BYTES // (key_size + value_size)))
        size = 0
        keys = values = ctypes.create_string_buffer(0)
        in_b = ctypes.create_string_buffer(key_size)
        out_b = ctypes.create_string_buffer(key_size)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        first = True
        while True:
            if n != size:
                keys = ctypes.create_string_buffer(key_size * n)
                values = ctypes.create_string_buffer(value_size * n)
                size = n
            count = ctypes.c_uint32(n)
            rc = lib().bpf_map_lookup_batch(
                fd,
                None if first else in_b,
                out_b,
                keys,
                values,
                ctypes.byref(count),
                ctypes.byref(opts),
            )
            err = -rc if rc < 0 else 0
            if err in (errno.EINVAL, 524, errno.EOPNOTSUPP) and first and count.value == 0:
                yield from self._lookup_each(key_size, value_size)  # 524: ENOTSUPP
                return
            if err == errno.ENOSPC and count.value == 0 and n < _BUCKET_MAX:
                n = min(2 * n, _BUCKET_MAX)  # the next bucket alone holds more: ask again
                continue
            if err not in (0, errno.ENOENT):
                raise LibbpfError(err, f"{self.name}: lookup_batch: {os.strerror(err)}")
            kv, vv = memoryview(keys), memoryview(values)
            for i in range(count.value):
                yield (
                    bytes(kv[i * key_size : (i + 1) * key_size]),
                    vv[i * value_size : (i + 1) * value_size],
                )
            if err == errno.ENOENT:  # the last batch
                return
            ctypes.memmove(in_b, out_b, key_size)
            first = False
            if count.value == n and n < _BATCH_MAX:
                n = min(2 * n, _BATCH_MAX)

    def lookup_array_run(self, first: int, count: int, value_size: int) -> memoryview | None:
        """Values of array indices first..first+count-1 in one BPF_MAP_LOOKUP_BATCH (5.6+),
        count * value_size bytes; None where the kernel has no batch operation for the map.

        The batch starts after its in_batch key (the kernel's generic batch walks the map with
        get_next_key), so index first is asked for as "after first - 1" (from the start for 0).
        """
        keys = ctypes.create_string_buffer(4 * count)
        values = ctypes.create_string_buffer(value_size * count)
        in_b = ctypes.create_string_buffer(struct.pack("=I", first - 1), 4) if first else None
        out_b = ctypes.create_string_buffer(4)
        opts = _BatchOpts(ctypes.sizeof(_BatchOpts), 0, 0)
        n = ctypes.c_uint32(count)
        rc = lib().bpf_map_lookup_batch(
            self.fd, in_b, out_b, keys, values, ctypes.byref(n), ctypes.byref(opts)
        )
        err = -rc if rc < 0 else 0
        if err in (errno.EINVAL, 524, errno.EOPNOTSUPP) and n.value == 0:
            return None  # 524: ENOTSUPP
        if err not in (0, errno.ENOENT):
            raise LibbpfError(err, f"{self.name}: lookup_batch: {os.strerror(err)}")
        if n.value != count or struct.unpack_from("=I", keys, 0)[0] != first:
            raise LibbpfError(errno.EIO, f"{self.name}: lookup_batch returned another range")
        return memoryview(values)

    def _lookup_each(self, key_size: int, value_size: int) -> Iterator[tuple[bytes, memoryview]]:
        fd = self.fd
        key = ctypes.create_string_buffer(key_size)
        nxt = ctypes.create_string_buffer(key_size)
        value = ctypes.create_string_buffer(value_size)
        prev = None
        while lib().bpf_map_get_next_key(fd, prev, nxt) == 0:
            ctypes.memmove(key, nxt, key_size)
            prev = key
            if lib().bpf_map_lookup_elem(fd, key, value) == 0:
                yield bytes(key.raw), memoryview(bytes(value.raw))


class _TestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts (libbpf's bpf.h, as of libbpf 1.0; sz says which)."""

    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", _c_p),
        ("data_out", _c_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", _c_p),
        ("ctx_out", _c_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class Program:
    """One program of a loaded object."""

    def __init__(self, ptr: int, name: str) -> None:
        self._ptr = ptr
        self.name = name
        self._link: int | None = None

    @property
    def fd(self) -> int:
        """The program's file descriptor (after load)."""
        return int(lib().bpf_program__fd(self._ptr))

    @property
    def attached(self) -> bool:
        """Whether attach() holds a link."""
        return self._link is not None

    def set_autoload(self, on: bool) -> None:
        """Whether load() loads this program (before load)."""
        _check(lib().bpf_program__set_autoload(self._ptr, on), f"{self.name}: autoload")

    def attach(self) -> None:
        """Attach at the program's own section (tp_btf/...)."""
        if self._link is None:
            self._link = _check_ptr(lib().bpf_program__attach(self._ptr), f"attach {self.name}")

    def attach_iter(self) -> None:
        """Attach an iterator program (iter/...) with no options: over every object of its
        kind that the reader's namespace sees."""
        if self._link is None:
            ptr = lib().bpf_program__attach_iter(self._ptr, None)
            self._link = _check_ptr(ptr, f"attach {self.name}")

    def run(self) -> int:
        """Run a syscall program (SEC("syscall")) once, with no context: its return value
        (BPF_PROG_TEST_RUN; like a map read, it needs no capability on Linux 6.5+)."""
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts))
        _check(lib().bpf_prog_test_run_opts(self.fd, ctypes.byref(opts)), f"{self.name}: run")
        return int(opts.retval)

    def iterate(self, max_bytes: int) -> bytes:
        """One walk of an attached iterator (bpf_iter_create, then read to its end): what it
        wrote, at most max_bytes (the rest is not read). The link was made while the process
        held CAP_BPF; a new iterator of it needs none (kernel/bpf/bpf_iter.c)."""
        if self._link is None:
            raise LibbpfError(errno.EBADF, f"{self.name}: not attached")
        fd = _check(lib().bpf_iter_create(lib().bpf_link__fd(self._link)), f"{self.name}: iter")
        out = bytearray()
        try:
            while len(out) < max_bytes:
                chunk = os.read(fd, min(1 << 16, max_bytes - len(out)))
                if not chunk:
                    break
                out += chunk
        finally:
            os.close(fd)
        return bytes(out)

    def detach(self) -> None:
        """Destroy the link (the program stays loaded)."""
        if self._link is not None:
            lib().bpf_link__destroy(self._link)
            self._link = None


class Object:
    """A BPF object file: open, adjust maps and globals, load, attach; close() frees it all."""

    def __init__(self, path: Path) -> None:
        self._ptr = _check_ptr(lib().bpf_object__open_file(str(path).encode(), None), str(path))
        self.programs: dict[str, Program] = {}

    def maps(self) -> Iterator[Map]:
        """The object's maps, global-data maps (.rodata, .bss) included."""
        m = lib().bpf_object__next_map(self._ptr, None)
        while m:
            yield Map(m)
            m = lib().bpf_object__next_map(self._ptr, m)

    def map(self, name: str) -> Map:
        """The map called name, or the global-data map whose name ends with it (".rodata")."""
        for m in self.maps():
            if m.name == name or (name.startswith(".") and m.name.endswith(name)):
                return m
        raise KeyError(name)

    def program(self, name: str) -> Program:
        """The program called name."""
        if name not in self.programs:
            ptr = _check_ptr(lib().bpf_object__find_program_by_name(self._ptr, name.encode()), name)
            self.programs[name] = Program(ptr, name)
        return self.programs[name]

    def load(self, messages: bool = True) -> None:
        """Relocate against the kernel's BTF, verify and load every autoloaded program.

        messages=False: libbpf says nothing meanwhile. A load calls its print function ~170
        times (debug lines) and each call takes the GIL back: in a thread that loads while
        another imports, every one waited for it (issue 35). A caller whose quiet load
        failed loads again with messages for the verifier's log (last_messages).
        """
        if messages:
            _check(lib().bpf_object__load(self._ptr), "load")
            return
        lib().libbpf_set_print(_NO_PRINT)
        try:
            _check(lib().bpf_object__load(self._ptr), "load")
        finally:
            lib().libbpf_set_print(_print)

    def start_load(self) -> Loading:
        """The load (quiet, as load(messages=False)) started in a thread of its own."""
        return Loading(self._ptr)

    def close(self) -> None:
        """Detach every program and free the object (its maps and programs)."""
        for p in self.programs.values():
            p.detach()
        if self._ptr:
            lib().bpf_object__close(self._ptr)
            self._ptr = 0


class Loading:
    """An object's load run in a thread: one C call (bpf_object__load: libbpf's CO-RE
    relocations, then the kernel's verifier), the GIL released all along, so it costs the
    caller's thread nothing while it goes on (issue 35: the agent imports meanwhile).

    libbpf prints nothing until wait() (a print call would need the GIL); the object must not
    be touched, nor closed, before wait() returns.
    """

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr
        self._rc: int | None = None
        lib().libbpf_set_print(_NO_PRINT)
        self._thread = threading.Thread(target=self._run, name="bpf-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._rc = lib().bpf_object__load(self._ptr)

    def wait(self) -> None:
        """Until the load is over; raises LibbpfError as load() would."""
        self._thread.join()
        lib().libbpf_set_print(_print)
        _check(-errno.EIO if self._rc is None else self._rc, "load")


def possible_cpus() -> int:
    """The number of possible CPUs: per-CPU map values come in this many copies."""
    return _check(lib().libbpf_num_possible_cpus(), "possible cpus")
