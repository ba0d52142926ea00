"""The package layout, read from the imports (README.md#layout): no cycle between the
sub-packages of collector/ and exporters/, exporters never import collector, no test imports
a bench and no bench imports another (bench/harness.py is what they share).

A node is a sub-package (``collector.site``, ``exporters.pdu``) or a top-level module
(``collector.config``); an edge is any import of one from another, at module level or inside a
function (a lazy import is still a dependency). A cycle means a helper lives in the wrong room:
move it to the room of its users (e.g. ``read_secret_file`` to ``collector/secretfile.py``).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import defaultdict
from pathlib import Path

from tests.support.env import ROOT

TOPS = ("collector", "exporters")
Edges = dict[str, dict[str, list[str]]]  # node -> node it imports -> ["file:line", ...]


def _node(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in TOPS and len(parts) > 1 else None


def _imported(tree: ast.AST, package: str) -> list[tuple[str, int]]:
    """Every module named by an import in ``tree`` (relative ones resolved), with its line."""
    out: list[tuple[str, int]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(a.name, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = package.split(".")[: len(package.split(".")) - (n.level - 1)]
                module = ".".join([*base, *([n.module] if n.module else [])])
            else:
                module = n.module or ""
            # `from collector import site` names the sub-package in the alias
            out += [(module, n.lineno)] + [(f"{module}.{a.name}", n.lineno) for a in n.names]
    return out


def import_graph() -> Edges:
    """The sub-package import graph of collector/ and exporters/."""
    edges: Edges = defaultdict(lambda: defaultdict(list))
    for top in TOPS:
        for f in sorted((ROOT / top).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            package = module if f.name == "__init__.py" else module.rpartition(".")[0]
            src = _node(module)
            if src is None:
                continue
            for target, line in _imported(ast.parse(f.read_text(), str(f)), package):
                dst = _node(target)
                if dst is not None and dst != src and _exists(dst):
                    where = f"{f.relative_to(ROOT)}:{line}"
                    if where not in edges[src][dst]:
                        edges[src][dst].append(where)
    return edges


def _exists(node: str) -> bool:
    path = ROOT / Path(*node.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def cycles(edges: Edges) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(_a_cycle(edges, set(comp)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _a_cycle(edges: Edges, comp: set[str]) -> list[str]:
    """A closed path inside one strongly connected component, from its first node."""
    start = min(comp)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in edges[path[-1]] if w in comp)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return [*path, start]
        fresh = [w for w in nxt if w not in seen]
        w = fresh[0] if fresh else nxt[0]
        if w in seen:
            return [*path[path.index(w) :], w]
        path.append(w)
        seen.add(w)


def _describe(edges: Edges, cycle: list[str]) -> str:
    steps = [f"  {a} -> {b} ({', '.join(edges[a][b])})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


def test_no_package_cycle() -> None:
    edges = import_graph()
    found = cycles(edges)
    assert not found, "package cycles (move the helper to the room of its users):\n" + "\n".join(
        _describe(edges, c) for c in found
    )


def test_exporters_never_import_collector() -> None:
    edges = import_graph()
    bad = [
        f"{src} -> {dst} ({', '.join(where)})"
        for src, dsts in edges.items()
        if src.startswith("exporters.")
        for dst, where in dsts.items()
        if dst.startswith("collector.")
    ]
    assert not bad, "exporters import collector:\n" + "\n".join(bad)


def test_the_graph_sees_imports_and_cycles() -> None:
    # the reader itself: lazy and relative imports count, and a planted cycle is found
    edges = import_graph()
    assert "collector/pdu/cli.py" in " ".join(edges["collector.pdu"]["collector.site"])
    assert "exporters.base" in edges["exporters.pdu"]
    planted: Edges = {"a.x": {"a.y": ["f:1"]}, "a.y": {"a.z": ["g:2"]}, "a.z": {"a.x": ["h:3"]}}
    assert cycles(planted) == [["a.x", "a.y", "a.z", "a.x"]]
    assert cycles({"a.x": {"a.y": ["f:1"]}, "a.y": {}}) == []


def test_no_test_imports_a_bench() -> None:
    # a benchmark is a measurement, not a library: what tests and benches share lives in
    # tests/support (e.g. tests/support/synthetic.py) or in the product
    bad = [
        f"{f.relative_to(ROOT)}:{line}"
        for f in sorted((ROOT / "tests").rglob("*.py"))
        for module, line in _imported(ast.parse(f.read_text(), str(f)), "tests")
        if module == "bench" or module.startswith("bench.")
    ]
    assert not bad, "tests import a bench:\n" + "\n".join(bad)


def bench_of(module: str) -> str | None:
    """The bench a module of bench/ belongs to: ``bench.soak.farm`` and ``bench.soak`` to
    ``soak``, ``bench.http_scrape`` to ``http_scrape``; None for the harness and the rest."""
    parts = module.split(".")
    if parts[0] != "bench" or len(parts) < 2 or parts[1] in ("harness", "__init__"):
        return None
    return parts[1]


def bench_imports_of_others(f: Path, tree: ast.AST) -> list[tuple[str, int]]:
    """(module, line) of every import in a bench file of another bench than its own."""
    parts = f.relative_to(ROOT).with_suffix("").parts
    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    package = module if f.name == "__init__.py" else module.rpartition(".")[0]
    own = bench_of(module)
    return [
        (m, line)
        for m, line in _imported(tree, package)
        if (other := bench_of(m)) is not None and other != own
    ]


def test_no_bench_imports_another_bench() -> None:
    # one bench, one measurement: what several benches share lives in bench/harness.py (or in
    # tests/support when tests use it too); a bench split by phase imports its own modules
    bad = [
        f"{f.relative_to(ROOT)}:{line}: {module}"
        for f in sorted((ROOT / "bench").rglob("*.py"))
        for module, line in bench_imports_of_others(f, ast.parse(f.read_text(), str(f)))
    ]
    assert not bad, "a bench imports another bench:\n" + "\n".join(bad)


def test_the_bench_check_sees_another_bench() -> None:
    # the reader itself: its own package's modules pass, another bench's do not, lazy too
    planted = ast.parse(
        "from bench.soak.common import x\nfrom bench.harness import median\n"
        "def f():\n    import bench.fleet.sim\n    from bench import pdu_poll\n"
    )
    found = bench_imports_of_others(ROOT / "bench" / "soak" / "farm.py", planted)
    assert [m for m, _ in found] == ["bench.fleet.sim", "bench.pdu_poll"]
    assert bench_imports_of_others(ROOT / "bench" / "fleet" / "sim.py", planted) == [
        ("bench.soak.common", 1),
        ("bench.soak.common.x", 1),
        ("bench.pdu_poll", 5),
    ]


def _module_imports(package: str) -> list[tuple[str, str]]:
    """(file:line, module) of every import in a package of collector/ (lazy ones too)."""
    out = []
    for f in sorted((ROOT / Path(*package.split("."))).rglob("*.py")):
        here = ".".join(f.relative_to(ROOT).with_suffix("").parts)
        for module, line in _imported(ast.parse(f.read_text(), str(f)), here.rpartition(".")[0]):
            out.append((f"{f.relative_to(ROOT)}:{line}", module))
    return out


def test_product_commands_import_no_demo_and_no_daemon_main() -> None:
    # `wattbit pdu check` serves a recording with the product's responder (collector/pdu), and
    # `wattbit pdu detect` builds its target as the collector does (collector/site/targets.py)
    bad = [
        f"{where}: {module}"
        for package in ("collector.pdu", "collector.runs", "collector.report")
        for where, module in _module_imports(package)
        if module.startswith(("collector.demo", "collector.site.main", "collector.agent.main"))
    ]
    assert not bad, "a product command imports the demo or a daemon's main:\n" + "\n".join(bad)


def _ports_in(tree: ast.AST) -> list[int]:
    """Lines of int 9731/9732 constants and of strings holding `:9731`/`:9732` (a URL, a
    listen text), docstrings aside (prose may name the port)."""
    docs = {
        id(body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and (body := n.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and id(n) not in docs
        and (
            n.value in (9731, 9732)
            or (isinstance(n.value, str) and re.search(r":973[12]\b", n.value))
        )
    ]


def test_each_daemon_port_is_written_once() -> None:
    # collector/daemon/ports.py's AGENT_PORT and COLLECTOR_PORT; everything else takes them
    found = [
        f"{f.relative_to(ROOT)}:{line}"
        for f in sorted((ROOT / "collector").rglob("*.py"))
        for line in _ports_in(ast.parse(f.read_text(), str(f)))
    ]
    assert found == ["collector/daemon/ports.py:4", "collector/daemon/ports.py:5"], found
    planted = ast.parse('"""on :9731"""\nPORT = 9731\nURL = f"http://h:9732/x"\n')
    assert _ports_in(planted) == [2, 3]


# Modules of exporters/ that are shared rooms, not metric sources: any exporter may import them.
# hostfs is the one room for reading the host (bounded reads, the /sys tree, PCI addresses,
# /proc/interrupts, the block devices and interfaces exported and their filters); snmp is the
# SNMP client the pdu exporter polls with; textfamily the families whose lines an exporter
# writes itself (the renderer's side of that contract).
SHARED_ROOMS = frozenset(
    {
        "exporters.base",
        "exporters.textfamily",
        "exporters.polling",
        "exporters.strict",
        "exporters.hostfs",
        "exporters.snmp",
    }
)


def cross_exporter_imports(edges: Edges) -> list[str]:
    """Edges from one exporter to another exporter's modules (not to a shared room)."""
    return [
        f"{src} -> {dst} ({', '.join(where)})"
        for src, dsts in sorted(edges.items())
        if src.startswith("exporters.") and src not in SHARED_ROOMS
        for dst, where in sorted(dsts.items())
        if dst.startswith("exporters.") and dst not in SHARED_ROOMS
    ]


def test_no_exporter_imports_another_exporter() -> None:
    # what two exporters share (device filters, the interrupts parser, bounded reads, the PCI
    # address pattern) lives in exporters/hostfs, not in one of them (issue 33)
    bad = cross_exporter_imports(import_graph())
    assert not bad, "an exporter imports another exporter's module (use exporters/hostfs):\n" + (
        "\n".join(bad)
    )
    planted: Edges = {"exporters.pcie": {"exporters.nic": ["exporters/pcie/x.py:3"]}}
    assert cross_exporter_imports(planted) == [
        "exporters.pcie -> exporters.nic (exporters/pcie/x.py:3)"
    ]
    assert cross_exporter_imports({"exporters.pcie": {"exporters.hostfs": ["f:1"]}}) == []


def test_hostfs_imports_no_exporter() -> None:
    # the shared room depends on no metric source, or it would be the cycle it removed
    bad = [
        f"{dst} ({', '.join(where)})"
        for dst, where in import_graph().get("exporters.hostfs", {}).items()
        if dst.startswith("exporters.")
    ]
    assert not bad, "exporters/hostfs imports an exporter:\n" + "\n".join(bad)


# Reads of files by exporters outside hostfs, each with why it is not hostfs' (path -> reason).
# Everything an exporter reads of /sys and /proc goes through exporters/hostfs/read.py, bounded.
OWN_READS = {
    # the BPF backends' shared code, left for the merge of helper `privilege` (which edits the
    # backends at the same time); bounded or of the agent's own fds, to move to hostfs after
    "exporters/blockio/bpfshared.py": "fdinfo of its own BPF fds, the bpf_stats sysctl, diskseq",
    "exporters/blockio/layout.py": "the BPF counter header in the source tree (make check)",
    "exporters/snmp/udp.py": "a UDP transport's open(), not a file",
}


def _file_reads(tree: ast.AST) -> list[int]:
    """Lines calling open(), os.open(), or .read_text()/.read_bytes()/.open() on something."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Name) and n.func.id == "open")
            or (
                isinstance(n.func, ast.Attribute)
                and n.func.attr in ("open", "read_text", "read_bytes")
            )
        )
    ]


def test_exporters_read_files_through_hostfs() -> None:
    found = {
        f.relative_to(ROOT).as_posix(): lines
        for f in sorted((ROOT / "exporters").rglob("*.py"))
        if "hostfs" not in f.relative_to(ROOT).parts
        and (lines := _file_reads(ast.parse(f.read_text(), str(f))))
    }
    bad = [f"{path}:{lines[0]}" for path, lines in found.items() if path not in OWN_READS]
    assert not bad, "an exporter reads a file itself (use exporters.hostfs.read):\n" + "\n".join(
        bad
    )
    assert sorted(set(OWN_READS) - set(found)) == [], "reads no file any more: drop from OWN_READS"
    assert _file_reads(ast.parse("Path('/proc/x').read_text()\nwith open(p): pass\n")) == [1, 2]


def test_the_pci_address_pattern_is_written_once() -> None:
    # exporters/hostfs/pci.py's PCI_ADDR (with the wide-domain reason); everything else takes it
    needle = r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
    found = [
        f"{f.relative_to(ROOT)}:{n.lineno}"
        for top in TOPS
        for f in sorted((ROOT / top).rglob("*.py"))
        for n in ast.walk(ast.parse(f.read_text(), str(f)))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and needle in n.value
    ]
    assert [w.rpartition(":")[0] for w in found] == ["exporters/hostfs/pci.py"], found
