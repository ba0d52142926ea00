"""bench/ on its harness (issue 33): every file under 800 lines, every bench (a file, or a
package split by phase) imports bench/harness.py and prints the command that reproduces it
(harness.print_command, or harness.command_line in its JSON), and no bench defines again at
module level a helper the harness has (free_port, median, alternate, table, ...: once there).

Read from the source (ast), never imported: a bench is a measurement, not a library
(tests/unit/test_layout.py keeps tests from importing one and benches from importing each other).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.env import ROOT

BENCH = ROOT / "bench"
HARNESS = BENCH / "harness.py"
MAX_LINES = 800


def bench_files() -> list[Path]:
    """Every Python file in bench/ (the packages' modules too)."""
    return sorted(BENCH.rglob("*.py"))


def benches() -> dict[str, list[Path]]:
    """Each bench and its files: bench/NAME.py, or every module of the package bench/NAME/."""
    out: dict[str, list[Path]] = defaultdict(list)
    for f in bench_files():
        rel = f.relative_to(BENCH)
        if f == HARNESS or rel == Path("__init__.py"):
            continue
        out[rel.parts[0].removesuffix(".py")].append(f)
    return dict(out)


def imports_harness(tree: ast.AST) -> bool:
    """Whether the module imports bench.harness (or names from it)."""
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "bench.harness":
            return True
        if (
            isinstance(n, ast.ImportFrom)
            and n.module == "bench"
            and any(a.name == "harness" for a in n.names)
        ):
            return True
        if isinstance(n, ast.Import) and any(a.name == "bench.harness" for a in n.names):
            return True
    return False


def names_used(tree: ast.AST) -> set[str]:
    """Every name the module loads or imports (enough to see a call of a harness helper)."""
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module == "bench.harness":
            out |= {a.asname or a.name for a in n.names}
    return out


def harness_helpers() -> set[str]:
    """The public functions bench/harness.py defines."""
    tree = ast.parse(HARNESS.read_text(), str(HARNESS))
    return {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and not n.name.startswith("_")
    }


def redefined(tree: ast.Module, helpers: set[str]) -> list[tuple[str, int]]:
    """(name, line) of module-level functions named as a harness helper (leading _ ignored)."""
    return [
        (n.name, n.lineno)
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.lstrip("_") in helpers
    ]


def test_every_bench_file_is_under_800_lines() -> None:
    files = bench_files()
    assert len(files) > 20, files  # the walk found bench/ and its packages
    long = [
        f"{f.relative_to(ROOT)}: {n} lines"
        for f in files
        if (n := len(f.read_text().splitlines())) >= MAX_LINES
    ]
    assert not long, "split these by phase into a package (bench/NAME/...):\n" + "\n".join(long)


def test_every_bench_imports_the_harness() -> None:
    found = benches()
    # the split ones are packages now, the rest single files
    assert {"blockio_overhead", "soak", "fleet", "pdu_poll"} <= found.keys()
    assert all(len(found[b]) > 2 for b in ("blockio_overhead", "soak", "fleet", "pdu_poll"))
    without = [
        name
        for name, files in sorted(found.items())
        if not any(imports_harness(ast.parse(f.read_text(), str(f))) for f in files)
    ]
    assert not without, "benches not on bench/harness.py: " + ", ".join(without)


def test_every_bench_prints_its_reproducing_command() -> None:
    # docs/benchmarks.md quotes the command under each table: the bench says it itself
    silent = [
        name
        for name, files in sorted(benches().items())
        if not any(
            {"print_command", "command_line"} & names_used(ast.parse(f.read_text(), str(f)))
            for f in files
        )
    ]
    assert not silent, "benches that do not print harness.print_command(): " + ", ".join(silent)


def test_no_bench_redefines_a_harness_helper() -> None:
    helpers = harness_helpers()
    assert {"free_port", "free_ports", "median", "alternate", "table", "print_command"} <= helpers
    again = [
        f"{f.relative_to(ROOT)}:{line}: {name}"
        for files in benches().values()
        for f in files
        for name, line in redefined(ast.parse(f.read_text(), str(f)), helpers)
    ]
    assert not again, "use bench/harness.py's instead:\n" + "\n".join(again)


def test_the_checks_see_what_they_look_for() -> None:
    # the readers themselves, on planted sources
    assert imports_harness(ast.parse("from bench.harness import median\n"))
    assert imports_harness(ast.parse("def f():\n    from bench import harness\n"))
    assert imports_harness(ast.parse("import bench.harness as h\n"))
    assert not imports_harness(ast.parse("from collector.demo.procs import free_port\n"))
    planted = ast.parse("def free_port():\n    pass\nclass C:\n    def table(self): ...\n")
    assert redefined(planted, {"free_port", "table"}) == [("free_port", 1)]
    assert "print_command" in names_used(ast.parse("def f():\n    print_command()\n"))
    assert "command_line" in names_used(ast.parse("import bench.harness as h\nh.command_line()"))
    assert "print_command" not in names_used(ast.parse("print('reproduce: ...')\n"))
