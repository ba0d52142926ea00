"""The thresholds the report shares with the Prometheus rules, from one source each.

The recording rules (alerts/wattbit-recording.yml) and the alerts (alerts/wattbit-alerts.yml)
write their thresholds in PromQL; the report (collector/report/verdict/, power.py) holds them
as constants. Nothing made the two agree but care (issue 33). These tests parse each rule's
expression with a PromQL parser (promql-parser, the bindings of the Rust implementation) and
find every threshold where it is used — the comparison, the metric it compares, the labels
that select it — so that a threshold changed on one side only, a comparison turned around
(> for >=), or a source order changed in a rule fails here, naming both.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import promql_parser as P
import pytest
import yaml

from collector.report import power
from collector.report.verdict import choice, controller, cpu, pcie, resources, tcp
from tests.support.env import ROOT

RULE_FILES = (ROOT / "alerts" / "wattbit-recording.yml", ROOT / "alerts" / "wattbit-alerts.yml")
COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
UTILISATION = "host_resource:wattbit_utilisation:ratio1m"


@cache
def _rules() -> dict[str, dict[str, Any]]:
    """Every rule by its record or alert name (each name once: a second one would be ambiguous)."""
    out: dict[str, dict[str, Any]] = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                name = rule.get("record") or rule["alert"]
                assert name not in out, f"{name} is defined twice in alerts/"
                out[name] = rule
    return out


def _expr(name: str) -> Any:
    return P.parse(_rules()[name]["expr"])


def _children(node: Any) -> list[Any]:
    if isinstance(node, P.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, P.Call):
        return list(node.args)
    if isinstance(node, P.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, P.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, P.ParenExpr | P.UnaryExpr | P.SubqueryExpr):
        return [node.expr]
    return []


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _walk(child)


def _selectors(node: Any) -> list[Any]:
    return [n for n in _walk(node) if isinstance(n, P.VectorSelector)]


def _metrics(node: Any) -> set[str]:
    return {s.name for s in _selectors(node)}


def _matchers(node: Any) -> dict[str, tuple[str, str]]:
    """Every label matcher under ``node``: {label: (op, value)} (one per label expected)."""
    out: dict[str, tuple[str, str]] = {}
    for s in _selectors(node):
        for m in s.matchers.matchers:
            op = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~"}.get(
                str(m.op), str(m.op)
            )
            out[m.name] = (op, m.value)
    return out


def _number(node: Any) -> float | None:
    while isinstance(node, P.ParenExpr):
        node = node.expr
    return node.val if isinstance(node, P.NumberLiteral) else None


def _thresholds(expr: Any, metric: str) -> list[tuple[str, float, Any]]:
    """Every comparison of an expression over ``metric`` with a number: (op, number, the
    compared side), the number on the right as written (``x >= 0.7``)."""
    out = []
    for n in _walk(expr):
        if isinstance(n, P.BinaryExpr) and str(n.op) in COMPARISONS:
            v = _number(n.rhs)
            if v is not None and metric in _metrics(n.lhs):
                out.append((str(n.op), v, n.lhs))
    return out


def _ops_values(expr: Any, metric: str) -> set[tuple[str, float]]:
    return {(op, v) for op, v, _side in _thresholds(expr, metric)}


def _or_chain(node: Any) -> list[Any]:
    """The operands of ``a or b or c`` in order (PromQL's `or` is left-associative)."""
    while isinstance(node, P.ParenExpr):
        node = node.expr
    if isinstance(node, P.BinaryExpr) and str(node.op) == "or":
        return _or_chain(node.lhs) + _or_chain(node.rhs)
    return [node]


# --- the verdict's thresholds --------------------------------------------------------------


def test_the_utilisation_line() -> None:
    """The limiter: the highest utilisation at least choice.LIMIT (0.7), else none below it."""
    limiter = _expr("host:wattbit_limiter:ratio1m")
    on_max = {
        (op, v)
        for op, v, side in _thresholds(limiter, UTILISATION)
        if isinstance(side, P.AggregateExpr) and str(side.op) == "max"
    }
    assert on_max == {(">=", choice.LIMIT), ("<", choice.LIMIT)}, on_max
    assert choice.LIMIT == 0.7


def test_controller_and_pcie_precedence() -> None:
    """A controller or PCIe link at choice.SATURATED (0.9) or more is ranked ahead by
    choice.RANK_BONUS (a link 0.2, a controller 0.1), as the limiter rule adds them."""
    limiter = _expr("host:wattbit_limiter:ratio1m")
    ranked: dict[str, tuple[str, float, float]] = {}
    for n in _walk(limiter):
        if isinstance(n, P.BinaryExpr) and str(n.op) == "+" and (bonus := _number(n.rhs)):
            [(op, at, side)] = _thresholds(n.lhs, UTILISATION)
            resource = _matchers(side)["resource"]
            assert resource[0] == "=", resource
            ranked[resource[1]] = (op, at, bonus)
    assert ranked == {r: (">=", choice.SATURATED, b) for r, b in choice.RANK_BONUS.items()}


def test_what_counts_as_moving_data() -> None:
    """A host moves data at resources.MOVING_NIC (10 Mbit/s) or resources.MOVING_DISK (1 MB/s)."""
    limiter = _expr("host:wattbit_limiter:ratio1m")
    gbits = _ops_values(limiter, "host:wattbit_nic_gigabits_per_second:rate1m")
    disk = _ops_values(limiter, "host_device:wattbit_disk_bytes_per_second:rate1m")
    [(op, v)] = gbits  # Gbit/s in the rule, bytes/s in the report
    assert op == ">=" and v == pytest.approx(resources.MOVING_NIC * 8 / 1e9)
    assert disk == {(">=", resources.MOVING_DISK)}


def test_held_back_disks() -> None:
    """Every comparison of a yield is against controller.HELD_BACK (0.85), both ways; a bridge
    is the common factor of pcie.SHARED_BY (two) or more controllers held back."""
    seen: set[tuple[str, float]] = set()
    counted: set[tuple[str, float]] = set()
    for name in _rules():
        e = _expr(name)
        for metric in ("host_controller:wattbit_disk_yield:ratio1m",
                       "host_pci:wattbit_disk_yield:ratio1m"):  # fmt: skip
            for op, v, side in _thresholds(e, metric):
                is_count = isinstance(side, P.AggregateExpr) and str(side.op) == "count"
                (counted if is_count else seen).add((op, v))
    assert seen == {("<", controller.HELD_BACK), (">=", controller.HELD_BACK)}
    assert counted == {(">=", pcie.SHARED_BY)}


def test_a_shared_link() -> None:
    """A bridge's or root port's link is shared from pcie.SHARED_BY devices below it."""
    e = _expr("host_pci_direction:wattbit_pcie_shared_bytes_per_second:rate1m")
    counts = {
        (op, v)
        for op, v, side in _thresholds(e, "wattbit_pcie_link_info")
        if isinstance(side, P.AggregateExpr) and str(side.op) == "count"
    }
    assert counts == {(">=", pcie.SHARED_BY)}


def test_a_disk_seen_alone_and_a_busy_disk() -> None:
    """Alone: at least controller.ALONE_BUSY busy while exactly one disk of the controller is
    controller.OTHERS_IDLE busy; busy disks (compared with alone): controller.BUSY_DISK."""
    busy_ctl = "host_device:wattbit_disk_busy_by_controller:ratio1m"
    for name in ("host_device:wattbit_disk_alone_bytes_per_second:last",
                 "host_device:wattbit_disk_alone_ios_per_second:last"):  # fmt: skip
        e = _expr(name)
        values = _ops_values(e, busy_ctl)
        # count by (...) (busy >= OTHERS_IDLE) == 1: the disk itself is the only one
        assert values == {(">=", controller.ALONE_BUSY), (">=", controller.OTHERS_IDLE),
                          ("==", 1.0)}, (name, values)  # fmt: skip
    busy = set()
    for name in ("host_controller_share:wattbit_disk_now_per_second:sum1m",
                 "host_controller_share:wattbit_disk_alone_per_second:sum1m",
                 "host_controller:wattbit_controller_utilisation:ratio1m",
                 "host_pci:wattbit_pcie_utilisation:ratio1m"):  # fmt: skip
        e = _expr(name)
        busy |= _ops_values(e, "host_device:wattbit_disk_busy:ratio1m")
        busy |= {(op, v) for op, v, side in _thresholds(e, busy_ctl) if _number(side) is None}
    assert busy == {(">=", controller.BUSY_DISK)}


def test_a_cpu_moving_data_and_tcp() -> None:
    """A CPU moves data at cpu.INTERRUPT_SHARE in interrupt work; TCP's utilisation is the
    retransmitted share over tcp.TCP_SATURATED, capped at 1."""
    io_busy = _expr("host_cpu:wattbit_cpu_io_busy:ratio1m")
    assert _ops_values(io_busy, "host_cpu:wattbit_cpu_interrupt:ratio1m") == {
        (">=", cpu.INTERRUPT_SHARE)
    }
    tcp_rule = _expr("host:wattbit_tcp_utilisation:ratio1m")
    assert isinstance(tcp_rule, P.Call) and tcp_rule.func.name == "clamp_max"
    ratio, cap = tcp_rule.args
    assert _number(cap) == 1.0
    assert str(ratio.op) == "/" and _number(ratio.rhs) == tcp.TCP_SATURATED
    assert _metrics(ratio.lhs) == {"host:wattbit_tcp_retransmitted:ratio1m"}


# --- power: the order of the sources and the reconciliation -------------------------------


def _sources(chain: list[Any]) -> list[str]:
    out = []
    for operand in chain:
        op, value = _matchers(operand)["source"]
        assert op == "=", operand
        out.append(value)
    return out


def test_the_power_source_order() -> None:
    """outlets → pdu feed → redfish → ipmi: the rule's `or on (host)` chain is power.ORDER, and
    the reconciliation compares the first of power.PDU_KINDS with the first of BMC_KINDS."""
    assert _sources(_or_chain(_expr("host:wattbit_power_watts:sum"))) == list(power.ORDER)
    kinds = {"bmc_source": list(power.BMC_KINDS), "pdu_source": list(power.PDU_KINDS)}
    for name in ("host:wattbit_power_watts:bmc_minus_pdu", "host:wattbit_power_bmc_over_pdu:ratio"):
        compared = {
            n.args[1].val: _sources(_or_chain(n.args[0]))
            for n in _walk(_expr(name))
            if isinstance(n, P.Call) and n.func.name == "label_replace"
            and n.args[1].val in kinds
        }  # fmt: skip
        assert compared == kinds, name
    # where each source comes from: the BMC's protocols and RAPL's zones
    per_source = _expr("host_source:wattbit_power_watts:sum")
    labels = _matchers(per_source)
    assert labels["protocol"] == ("=~", "|".join(power.BMC_KINDS))
    assert labels["zone"] == ("=~", "|".join(power.RAPL_ZONES))
    named = [
        n.args[2].val
        for n in _walk(per_source)
        if isinstance(n, P.Call) and n.func.name == "label_replace" and n.args[1].val == "source"
    ]
    assert named == ["outlets", "pdu", "$1", "rapl"]  # $1: the BMC's protocol, as above


def test_the_reconciliation_thresholds() -> None:
    """WattbitPowerSourcesDisagree: more than power.DISAGREE_WATTS (20 W) and more than
    power.DISAGREE_RATIO (10 %) of the PDU's watts, both strictly, for 15m; the report's
    reconciliation flags the same pair of thresholds over its window."""
    rule = _rules()["WattbitPowerSourcesDisagree"]
    e = P.parse(rule["expr"])
    diff = "host:wattbit_power_watts:bmc_minus_pdu"
    watts = {(op, v) for op, v, side in _thresholds(e, diff)}
    assert watts == {(">", power.DISAGREE_WATTS)}
    ratio = [
        n
        for n in _walk(e)
        if isinstance(n, P.BinaryExpr) and str(n.op) == ">" and _number(n.rhs) is None
    ]
    assert len(ratio) == 1 and diff in _metrics(ratio[0].lhs)
    scaled = ratio[0].rhs
    assert str(scaled.op) == "*" and _number(scaled.lhs) == power.DISAGREE_RATIO
    assert _matchers(scaled.rhs)["source"] == ("=~", "|".join(power.PDU_KINDS))
    assert rule["for"] == "15m"
    # the report says "beyond 20 W and 10 %", and docs/alerts.md the same with the 15 minutes
    alerts_md = (ROOT / "docs" / "alerts.md").read_text()
    section = alerts_md.split("## `WattbitPowerSourcesDisagree`")[1].split("\n## ")[0]
    assert (
        f"more than {power.DISAGREE_WATTS:.0f} W and more than {100 * power.DISAGREE_RATIO:.0f} %"
        in section.replace("**", "").replace("\n", " ")
    )
    assert "for 15 minutes" in section
    assert power._reconcile(
        {"outlets": power.SourceEnergy(["o"], None, 200.0),
         "ipmi": power.SourceEnergy(["b"], None, 220.0)}
    ).disagree is False  # fmt: skip
