"""One description of the BPF counters (exporters/blockio/layout.py): the C side and the Python
side agree, for both programs' sizes, in the committed header, in what a C compiler makes of
it, and in the built core object's BTF."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from exporters.blockio import layout
from exporters.blockio.core import backend as core
from exporters.blockio.layout import FIELDS, Layout
from exporters.blockio.model import MAX_LAT_BOUNDS, SIZE_SLOTS
from tests.support.env import require
from tests.support.realparts import have


def test_the_committed_header_is_what_the_description_generates() -> None:
    assert layout.main(["--check"]) == 0, "run: python -m exporters.blockio.layout"


@pytest.mark.parametrize(
    "sizes",
    [
        Layout(clocks=2, lat_slots=MAX_LAT_BOUNDS + 1, size_slots=SIZE_SLOTS),  # core
        Layout(clocks=1, lat_slots=17, size_slots=SIZE_SLOTS),  # bcc, default buckets
        Layout(clocks=1, lat_slots=MAX_LAT_BOUNDS + 1, size_slots=SIZE_SLOTS),  # bcc, most
    ],
    ids=["core", "bcc-default", "bcc-32-bounds"],
)
def test_a_c_compiler_places_every_field_where_python_reads_it(
    tmp_path: Path, sizes: Layout
) -> None:
    require(have("gcc"), "gcc is not installed")
    prints = "".join(
        f'\tprintf("{f.name} %zu %zu\\n", offsetof(struct stat_val, {f.name}) / 8,'
        f" sizeof(((struct stat_val *)0)->{f.name}) / 8);\n"
        for f in FIELDS
    )
    src = tmp_path / "layout.c"
    src.write_text(
        "#include <stdio.h>\n#include <stddef.h>\ntypedef unsigned long long u64;\n"
        f"#define CLOCKS {sizes.clocks}\n#define LAT_SLOTS {sizes.lat_slots}\n"
        f"#define SIZE_SLOTS {sizes.size_slots}\n"
        f'#include "{layout.HEADER}"\n'
        "int main(void) {\n" + prints + '\tprintf("words %zu 0\\n", sizeof(struct stat_val) / 8);\n'
        "\treturn 0;\n}\n"
    )
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    got = {name: (int(a), int(b)) for name, a, b in (line.split() for line in out.splitlines())}
    assert got.pop("words") == (sizes.words, 0)
    assert got == sizes.offsets()


def test_the_built_core_object_has_the_described_struct() -> None:
    """The object's BTF (what the kernel loads) against core/backend.py's offsets."""
    require(have("bpftool"), "bpftool is not installed")
    require(core.OBJECT.exists(), f"{core.OBJECT} is not built (scripts/build-bpf.sh)")
    out = subprocess.run(
        ["bpftool", "-j", "btf", "dump", "file", str(core.OBJECT)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    types = json.loads(out)["types"]
    (stat_val,) = [t for t in types if t.get("kind") == "STRUCT" and t["name"] == "stat_val"]
    got = {m["name"]: m["bits_offset"] // 64 for m in stat_val["members"]}
    assert got == {name: start for name, (start, _) in core.LAYOUT.offsets().items()}
    assert stat_val["size"] == core.WORDS * 8
