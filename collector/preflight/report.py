"""A preflight's findings, and their two renderings: a table for a person, JSON for tools.

Exit status as promtool check and bpftool feature probe: 0 when everything configured can
run (a warning does not stop it), 1 when something configured cannot; a bad configuration
exits 2 before any check (collector/cli.py).
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

Status = Literal["ok", "warn", "fail", "off"]
EXIT_OK, EXIT_FAILED = 0, 1


@dataclass(frozen=True)
class Finding:
    """One check of one exporter (or target): its status, what was found, how to fix it."""

    exporter: str  # "blockio", "smart", "pdu", "bmc", ...
    check: str  # what was checked ("program loads and attaches", a PDU's name)
    status: Status
    detail: str  # what was found
    fix: str = ""  # what to do when status is warn or fail


@dataclass
class Report:
    """Every finding of one preflight, in the order checked."""

    process: str  # "agent" or "collector"
    findings: list[Finding] = field(default_factory=list)

    def add(self, exporter: str, check: str, status: Status, detail: str, fix: str = "") -> None:
        """Record one finding."""
        self.findings.append(Finding(exporter, check, status, detail, fix))

    @property
    def ok(self) -> bool:
        """Whether everything configured can run (no finding failed)."""
        return all(f.status != "fail" for f in self.findings)

    def exit_code(self) -> int:
        """0 when ok, else 1."""
        return EXIT_OK if self.ok else EXIT_FAILED

    def to_json(self) -> str:
        """The report for tools: {"process", "ok", "findings": [...]} (pure)."""
        doc = {
            "process": self.process,
            "ok": self.ok,
            "findings": [asdict(f) for f in self.findings],
        }
        return json.dumps(doc, indent=2)

    def to_table(self, width: int = 120, color: bool = False) -> str:
        """The report for a person: one row per finding, then the verdict (pure)."""
        from rich.console import Console
        from rich.table import Table

        style = {"ok": "green", "warn": "yellow", "fail": "bold red", "off": "dim"}
        table = Table(title=f"wattbit {self.process} --check", show_lines=False)
        for col in ("exporter", "check", "status", "found", "to fix"):
            table.add_column(col, overflow="fold")
        for f in self.findings:
            table.add_row(f.exporter, f.check, f"[{style[f.status]}]{f.status}[/]", f.detail, f.fix)
        out = io.StringIO()
        console = Console(
            file=out, width=width, color_system="standard" if color else None, highlight=False
        )
        console.print(table)
        failed = sum(f.status == "fail" for f in self.findings)
        warned = sum(f.status == "warn" for f in self.findings)
        verdict = (
            f"everything configured can run ({warned} warning(s))"
            if self.ok
            else f"{failed} check(s) failed: not everything configured can run here"
        )
        console.print(verdict)
        return out.getvalue()
