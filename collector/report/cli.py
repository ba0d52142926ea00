"""The `wattbit report` subcommand."""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from pathlib import Path

from collector.config import duration_arg
from collector.report.prom import MAX_ANSWER_BYTES, MAX_SERIES

EPILOG = """\
examples:
  wattbit report stream-42 --prometheus http://prom:9090
  wattbit report --start 2024-05-01T10:00:00Z --end 2024-05-01T11:00:00Z \\
      --prometheus http://prom:9090 --name lab-hour --out reports/
  wattbit report after-irq --compare before-irq --prometheus http://prom:9090
See docs/report.md for every figure and how it is computed."""


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds, RFC 3339 (``2024-05-01T10:00:00Z``), ``now`` or ``now-2h``."""
    now = time.time() if now is None else now
    s = text.strip()
    m = re.fullmatch(r"now(?:\s*-\s*(\d+(?:\.\d+)?)\s*([smhd]))?", s)
    if m:
        if not m.group(1):
            return now
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return now - float(m.group(1)) * mult
    try:
        return float(s)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time (unix seconds, RFC 3339 or now-1h)"
        ) from exc
    if dt.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (add Z or +02:00)")
    return dt.timestamp()


# The charts' library is an extra (pyproject.toml): hosts that only run the agent or the
# collector do not carry matplotlib and numpy (docs/install.md).
MISSING_REPORT_EXTRA = (
    "wattbit report: the report's charts need matplotlib, which is not installed: "
    "pip install 'wattbit[report]' (in wattbit's own environment; the Debian package's is "
    "/opt/wattbit: /opt/wattbit/bin/pip install matplotlib)"
)


def report_extra_missing() -> bool:
    """True when matplotlib, the `report` extra, cannot be imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is None
    except (ImportError, ValueError):  # sys.modules["matplotlib"] = None, a broken install
        return True


def _import_matplotlib() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `report` subcommand."""
    p = sub.add_parser(
        "report",
        help="write the energy-per-gigabit report of a run",
        description="Read a run's window from Prometheus and write RUN.json, RUN.md and "
        "RUN.html (charts embedded), then print a short summary.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", nargs="?", help="run name (from the run registry's series)")
    p.add_argument(
        "--prometheus", required=True, metavar="URL",
        help="Prometheus base URL (no credentials in it: use the options below)",
    )  # fmt: skip
    p.add_argument("--prometheus-user", metavar="USER", help="basic-auth user name")
    p.add_argument(
        "--prometheus-password-file", metavar="FILE",
        help="basic-auth password: the first line of FILE (mode 0600)",
    )  # fmt: skip
    p.add_argument(
        "--prometheus-token-file", metavar="FILE",
        help="bearer token: the first line of FILE (mode 0600)",
    )  # fmt: skip
    p.add_argument("--out", default=".", metavar="DIR", help="output directory (default .)")
    p.add_argument("--start", metavar="TIME", help="window start instead of a run's")
    p.add_argument("--end", metavar="TIME", help="window end (default now with --start)")
    p.add_argument("--name", help="report name with --start/--end (default window-START)")
    p.add_argument("--compare", metavar="OTHER_RUN", help="put another run side by side")
    p.add_argument(
        "--step", type=duration_arg, help="analysis step (default: the scrape interval, coarser "
        "for windows longer than 10 000 steps)"
    )  # fmt: skip
    p.add_argument(
        "--max-lag", type=duration_arg, default=120.0, metavar="DURATION",
        help="lag search range either way (default 120s)",
    )  # fmt: skip
    p.add_argument("--interfaces", metavar="REGEX", help="count only these interfaces' bytes")
    p.add_argument(
        "--match", action="append", default=[], metavar="LABEL=VALUE",
        help="read only series with this label (repeatable), e.g. site=lab-a: one site's "
        "series in a store shared by several (docs/longterm-store.md)",
    )  # fmt: skip
    p.add_argument(
        "--timeout", type=duration_arg, default=120.0, metavar="DURATION",
        help="the most one Prometheus request may take, start to end (default 120s)",
    )  # fmt: skip
    p.add_argument(
        "--max-answer-bytes", type=size_arg, default=MAX_ANSWER_BYTES, metavar="SIZE",
        help="refuse a Prometheus answer larger than this (default 64MiB; bytes, KiB, MiB, GiB)",
    )  # fmt: skip
    p.add_argument(
        "--max-series", type=count_arg, default=MAX_SERIES, metavar="N",
        help=f"refuse a Prometheus answer with more series (default {MAX_SERIES})",
    )  # fmt: skip
    p.set_defaults(func=run)


_UNITS = {"": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def size_arg(text: str) -> int:
    """A size in bytes: ``1048576``, ``512KiB``, ``64MiB``, ``1GiB`` (at least 1 KiB)."""
    m = re.fullmatch(r"\s*(\d{1,12})\s*([kKmMgG]i[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError("give bytes, or a number with KiB, MiB or GiB")
    value = int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if value < 1024:
        raise argparse.ArgumentTypeError("at least 1KiB")
    return value


def count_arg(text: str) -> int:
    """A whole number of at least 1."""
    if not re.fullmatch(r"\s*\d{1,12}\s*", text) or int(text) < 1:
        raise argparse.ArgumentTypeError("give a whole number of at least 1")
    return int(text)


LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def parse_match(items: list[str]) -> dict[str, str]:
    """``--match LABEL=VALUE`` options as {label: value}; ValueError naming what is wrong."""
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not LABEL_NAME.fullmatch(name) or name == "__name__":
            raise ValueError(f"--match {item!r}: give LABEL=VALUE (a label name, then =)")
        if out.get(name, value) != value:
            raise ValueError(f"--match: {name} given twice with different values")
        out[name] = value
    return out


def _credentials(args: argparse.Namespace) -> dict[str, str]:
    """Prometheus credentials from the files given; ValueError (naming the option) if unusable."""
    from collector.secretfile import read_secret_file

    user = getattr(args, "prometheus_user", None)
    password_file = getattr(args, "prometheus_password_file", None)
    token_file = getattr(args, "prometheus_token_file", None)
    if token_file and (user or password_file):
        raise ValueError("give either --prometheus-token-file or --prometheus-user, not both")
    if password_file and not user:
        raise ValueError("--prometheus-password-file needs --prometheus-user")
    out: dict[str, str] = {}
    for option, path, key in (
        ("--prometheus-password-file", password_file, "password"),
        ("--prometheus-token-file", token_file, "token"),
    ):
        if path:
            try:
                out[key] = read_secret_file(Path(path))
            except ValueError as exc:  # says what is wrong, never what the file holds
                raise ValueError(f"{option}: {exc}") from None
    if user:
        out["user"] = user
    return out


def run(args: argparse.Namespace) -> int:
    """Make the report; 0 on success, 1 when it cannot be made, 2 on bad arguments."""
    import threading
    from dataclasses import replace

    from .analyse import analyse, compare
    from .gather import find_run, gather
    from .prom import PromError, Prometheus
    from .series import Options, ReportError, Window

    if report_extra_missing():
        print(MISSING_REPORT_EXTRA, file=sys.stderr)
        return 1
    # matplotlib takes a good part of a second to import: do it while Prometheus works
    threading.Thread(target=_import_matplotlib, daemon=True).start()

    if args.run is None and args.start is None:
        print("wattbit report: give a run name or --start/--end", file=sys.stderr)
        return 2
    if args.end is not None and args.start is None:
        print("wattbit report: --end needs --start", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print("wattbit report: --out must be a directory", file=sys.stderr)
        return 2
    if args.interfaces:
        try:
            re.compile(args.interfaces)
        except re.error as exc:
            print(f"wattbit report: --interfaces: {exc}", file=sys.stderr)
            return 2
    try:
        match = parse_match(getattr(args, "match", None) or [])
    except ValueError as exc:
        print(f"wattbit report: {exc}", file=sys.stderr)
        return 2
    try:
        prom = Prometheus(
            args.prometheus,
            timeout=args.timeout,
            max_answer_bytes=getattr(args, "max_answer_bytes", MAX_ANSWER_BYTES),
            max_series=getattr(args, "max_series", MAX_SERIES),
            **_credentials(args),
        )
    except (ValueError, PromError) as exc:
        print(f"wattbit report: {exc}", file=sys.stderr)
        return 2
    opts = Options(step=args.step, max_lag=args.max_lag, interfaces=args.interfaces, match=match)
    try:
        now = time.time()
        if args.start is not None:
            try:
                start = parse_time(args.start, now)
                end = parse_time(args.end, now) if args.end else now
            except argparse.ArgumentTypeError as exc:
                print(f"wattbit report: {exc}", file=sys.stderr)
                return 2
            name = (
                args.run
                or args.name
                or "window-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))
            )
            window = Window(name, round(start, 3), round(end, 3), "explicit")
        else:
            window = find_run(prom, args.run, now, match)
            window = Window(
                window.name, round(window.start, 3), round(window.end, 3), window.source,
                window.in_progress,
            )  # fmt: skip
        result = analyse(gather(prom, window, opts))
        other = None
        if args.compare:
            ow = find_run(prom, args.compare, now, match)
            ow = Window(ow.name, round(ow.start, 3), round(ow.end, 3), ow.source, ow.in_progress)
            other = analyse(gather(prom, ow, opts))
            result = replace(
                result, doc=replace(result.doc, compare=compare(result.doc, other.doc))
            )
    except (PromError, ReportError) as exc:
        print(f"wattbit report: {exc}", file=sys.stderr)
        return 1
    from . import render

    try:
        paths = render.write(result, Path(args.out), other)
    except OSError as exc:
        print(f"wattbit report: cannot write to --out: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for line in render.summary_lines(result.doc):
        print(line)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
