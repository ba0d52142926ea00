"""The `wattbit` command line."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from collector.daemon.ports import AGENT_PORT, COLLECTOR_PORT
from collector.values import ConfigError

# pydantic (the configs) and each subcommand's own modules are imported by the subcommand
# that runs, not here: `wattbit --help` and `wattbit run` start without them (issue #35).
if TYPE_CHECKING:
    from collector.daemon.config import ProcessConfig
    from collector.preflight.report import Report
    from collector.web.config import WebConfig

P = TypeVar("P", bound="ProcessConfig")


def _load(model: type[P], args: argparse.Namespace) -> tuple[P, WebConfig | None]:
    """The validated config file with --listen and --web-config applied, and its web config.

    Every problem is a ConfigError (exit 2) raised before anything starts.
    """
    from collector.config import load_model
    from collector.daemon.config import Listen

    cfg = load_model(model, args.config)
    updates: dict[str, object] = {}
    if args.listen:
        updates["listen"] = Listen.option(args.listen, model.default_port)
    if args.web_config:
        updates["web_config"] = args.web_config
    cfg = cfg.model_copy(update=updates)
    if not cfg.web_config:
        return cfg, None
    from collector.web.config import load_web_config  # its models only where TLS/auth is set

    return cfg, load_web_config(cfg.web_config)


def _agent(args: argparse.Namespace) -> int:
    from collector.agent import early

    # before the imports that would load them (pydantic's of hashlib, the exporters' of
    # prometheus_client, asyncio's of ssl): what the agent never uses
    kept = early.lean_imports()
    from collector.agent.config import AgentConfig

    cfg, web = _load(AgentConfig, args)
    if args.check:
        from collector.preflight.agent import check_agent

        # The checks' own findings say what the agent's log would: keep the log quiet.
        _logging(args.log_level or "error")
        return _report(check_agent(cfg), args.json)
    _logging(args.log_level or cfg.log_level)
    if web is None or not web.tls_enabled:
        kept += early.without_tls()
    logging.getLogger("collector.agent").debug("not loaded: %s", ", ".join(kept) or "-")
    from exporters.hostfs.read import PROC_ROOT, SYS_ROOT

    # blockio's BPF program loads in a thread while the rest of the agent is imported below
    # (aiohttp, prometheus_client, the exporters: ~90 ms; issue 35's ready goal).
    core = early.start(cfg, SYS_ROOT, PROC_ROOT)
    from collector.agent import main as agent

    try:
        return agent.run(cfg, web, own_process=True, blockio_core=core)
    except agent.StartupError as exc:
        print(f"wattbit agent: {exc}", file=sys.stderr)
        return 1


def _collector(args: argparse.Namespace) -> int:
    import json

    from collector.site import main as site
    from collector.site.config import CollectorConfig, redacted

    cfg, web = _load(CollectorConfig, args)
    site.profiles_for(cfg, args.config)  # a configured profile that does not exist: exit 2 now
    if args.print_config:
        print(json.dumps(redacted(cfg), indent=2, default=str))
        return 0
    if args.check:
        from collector.preflight.site import check_collector

        _logging(args.log_level or "critical")
        return _report(check_collector(cfg, site.profiles_for(cfg, args.config)), args.json)
    _logging(args.log_level or cfg.log_level)
    try:
        return site.run(cfg, web, args.config)
    except OSError as exc:
        print(f"wattbit collector: cannot start: {exc.strerror or exc}", file=sys.stderr)
        return 1


def _report(report: Report, as_json: bool) -> int:
    """Print a preflight report (a table, or JSON for tools); its exit status."""
    if as_json:
        print(report.to_json())
    else:
        print(
            report.to_table(
                width=max(100, shutil.get_terminal_size().columns), color=sys.stdout.isatty()
            ),
            end="",
        )
    return report.exit_code()


def _check_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check",
        action="store_true",
        help="preflight: say per exporter what will work on this host and what to fix, then "
        "exit (0: everything configured can run, 1: something cannot, 2: bad config)",
    )
    p.add_argument("--json", action="store_true", help="with --check: the findings as JSON")


def _demo(args: argparse.Namespace) -> int:
    from collector.demo import main as demo

    _logging(args.log_level or "warning")
    return demo.run(args)


def _logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


# The long-running processes: their parser is built alone, so that `wattbit agent` does not
# import pysnmp, matplotlib and the demo only to register their subcommands (the agent's RSS
# went from 82 to ~45 MB: docs/benchmarks.md, blockio overhead).
DAEMONS = ("agent", "collector")


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every subcommand (only: that subcommand's options alone).

    With `only` given, the daemons' subcommands and that one are complete and the others
    are listed by name and help only ("": none of the others complete).
    """
    p = argparse.ArgumentParser(
        prog="wattbit", description="Watts per gigabit: disk, NIC and PDU telemetry."
    )
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser(
        "agent", help="host agent: serve block I/O, NIC and drive health metrics on /metrics"
    )
    a.add_argument("--config", help="agent YAML configuration (default: built-in defaults)")
    a.add_argument("--listen", help=f"HOST:PORT to serve on (default :{AGENT_PORT})")
    a.add_argument(
        "--web-config",
        help="TLS and basic-auth file, in node_exporter's web-config format",
    )
    a.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    _check_options(a)
    a.set_defaults(func=_agent)

    c = sub.add_parser("collector", help="site collector: poll PDUs over SNMP, serve /metrics")
    c.add_argument("--config", required=True, help="collector YAML configuration")
    c.add_argument("--listen", help=f"HOST:PORT to serve on (default :{COLLECTOR_PORT})")
    c.add_argument("--web-config", help="TLS and basic-auth file (node_exporter format)")
    c.add_argument(
        "--print-config",
        action="store_true",
        help="print the validated configuration (secrets redacted) and exit",
    )
    c.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    _check_options(c)
    c.set_defaults(func=_collector)
    if only in DAEMONS:
        return p
    for name, text in OTHERS.items():
        if only is None or only == name:
            _register(sub, name)
        else:  # listed in `wattbit --help` without importing its module
            sub.add_parser(name, help=text)
    return p


# The other subcommands, in --help's order, with their help (test_cli checks it against their
# own): `wattbit --help` and `wattbit run` import neither pysnmp, matplotlib, rich nor the
# demo, and no pydantic (issue #35).
OTHERS = {
    "run": "start, stop, list runs, or mark one around a command",
    "report": "write the energy-per-gigabit report of a run",
    "pdu": "what wattbit makes of a PDU: detect one, check a recording, list profiles",
    "demo": "one-machine demo: loop disks, a veth stream, a simulated PDU, the stack, a report",
}


def _register(sub: argparse._SubParsersAction, name: str) -> None:  # type: ignore[type-arg]
    """Add subcommand `name` with all its options (importing its module)."""
    if name == "run":
        from collector.runs import cli as runs_cli

        runs_cli.register(sub)
    elif name == "report":
        from collector.report import cli as report_cli

        report_cli.register(sub)
    elif name == "pdu":
        from collector.pdu import cli as pdu_cli

        pdu_cli.register(sub)
    else:
        from collector.demo import main as demo

        d = sub.add_parser("demo", help=OTHERS["demo"])
        demo.add_options(d)
        d.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
        d.set_defaults(func=_demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `wattbit` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    args = parser(first or "").parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"wattbit: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
