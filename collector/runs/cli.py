"""`wattbit run ...`: mark streaming runs in the site collector's run registry.

    wattbit run start NAME [--label k=v]...
    wattbit run stop NAME
    wattbit run list [--json]
    wattbit run exec NAME [--label k=v]... -- COMMAND [ARG]...

The collector is `--collector URL` (default $WATTBIT_COLLECTOR, else http://127.0.0.1:9732);
writes send the token from `--token-file` or $WATTBIT_TOKEN (never a command-line argument,
which every user on the machine could read from the process list). A URL may carry
`user:password@` for a collector behind basic auth; the token then goes in X-Wattbit-Token.

Exit status: 0 on success, 1 when the collector refuses or cannot be reached, 2 for usage
errors. `run exec` passes the command's status through (128+N when a signal N ended it, 130
on SIGINT, 143 on SIGTERM), 125 when the run could not be started (the command is then not
run), 126/127 when the command cannot be executed / is not found.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from collector.daemon.ports import COLLECTOR_PORT
from collector.runs import API_PREFIX, TOKEN_HEADER
from collector.runs.registry import parse_label, validate_name

DEFAULT_COLLECTOR = f"http://127.0.0.1:{COLLECTOR_PORT}"
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_EXEC_FAILED = 125  # like env(1), timeout(1): our own failure, the command never ran
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
STOP_ATTEMPTS = 3  # a collector restarting while a long command ran should not leave runs open


class CliError(Exception):
    """A failure to report on stderr, with the exit status to end with."""

    def __init__(self, message: str, status: int = EXIT_FAILED, http: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.http = http  # the collector's HTTP status, when it answered


# -- talking to the collector -------------------------------------------------------------


class Client:
    """A tiny JSON client for the collector's run API."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        ca_file: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """`url`: the collector's base URL, optionally with user:password@ for basic auth."""
        if "://" not in url:
            url = "http://" + url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(f"--collector: expected http(s)://HOST:PORT, got {url!r}", EXIT_USAGE)
        netloc = parts.netloc.rpartition("@")[2]
        self.base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._basic: str | None = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self._basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._token = token
        self._timeout = timeout
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def request(self, method: str, path: str, body: object = None, write: bool = False) -> Any:
        """One API call; the decoded JSON answer, or CliError saying what went wrong."""
        if write and not self._token:
            raise CliError(
                "no token: put the collector's token in a file and pass --token-file FILE, "
                "or set WATTBIT_TOKEN",
                EXIT_USAGE,
            )
        headers = {"Accept": "application/json"}
        if self._basic:
            headers["Authorization"] = f"Basic {self._basic}"
        if write and self._token:
            if self._basic:
                headers[TOKEN_HEADER] = self._token
            else:
                headers["Authorization"] = f"Bearer {self._token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif method == "POST":
            data = b""
        url = self.base + path
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout, context=self._context) as r:
                return json.loads(r.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise CliError(self._explain(exc), http=exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError(f"cannot reach the collector at {self.base}: {reason}") from None
        except ValueError as exc:
            raise CliError(f"unexpected answer from {url}: {exc}") from None

    def _explain(self, exc: urllib.error.HTTPError) -> str:
        try:
            message = str(json.loads(exc.read().decode("utf-8"))["error"])
        except (ValueError, KeyError, TypeError, OSError):
            message = exc.reason if isinstance(exc.reason, str) else ""
        challenge = exc.headers.get("WWW-Authenticate", "") if exc.headers else ""
        if exc.code == 401 and challenge.lower().startswith("basic"):
            return "the collector wants basic auth: put user:password@ in the --collector URL"
        if exc.code == 401:
            hint = "check --token-file / WATTBIT_TOKEN against the collector's runs.token"
            return f"HTTP 401: {message}; {hint}"
        return f"HTTP {exc.code}: {message or 'refused'}"

    def start(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        """Start a run; its JSON."""
        return dict(self.request("POST", API_PREFIX, {"name": name, "labels": labels}, True))

    def stop(self, name: str) -> dict[str, Any]:
        """Stop a run; its JSON."""
        path = f"{API_PREFIX}/{urllib.parse.quote(name, safe='')}/stop"
        return dict(self.request("POST", path, None, True))

    def list(self) -> list[dict[str, Any]]:
        """Every active and recent run."""
        return list(self.request("GET", API_PREFIX))


def _client(args: argparse.Namespace) -> Client:
    token = None
    if args.token_file:
        # The collector's rules for its own runs.token_file: one line, a regular file, not
        # readable by every user (a token others can read is everyone's token).
        from collector.secretfile import read_secret_file

        try:
            token = read_secret_file(Path(args.token_file))
        except ValueError as exc:  # names the file and what is wrong, never what it holds
            raise CliError(f"--token-file: {exc}", EXIT_USAGE) from None
    else:
        token = os.environ.get("WATTBIT_TOKEN", "").strip() or None
    return Client(args.collector, token, args.ca_file, args.timeout)


def _labels(items: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        try:
            key, value = parse_label(item)
        except ValueError as exc:
            raise CliError(f"--label: {exc}", EXIT_USAGE) from None
        if key in labels:
            raise CliError(f"--label: {key} given twice", EXIT_USAGE)
        labels[key] = value
    return labels


def _name(name: str) -> str:
    try:
        return validate_name(name)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def _duration(seconds: float) -> str:
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


# -- subcommands --------------------------------------------------------------------------


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except CliError as exc:
            print(f"wattbit run {args.run_command}: {exc}", file=sys.stderr)
            return exc.status

    return run


def _start(args: argparse.Namespace) -> int:
    name, labels = _name(args.name), _labels(args.label)
    run = _client(args).start(name, labels)
    print(f"run {run['name']} started at {_when(run['start_time'])}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    name = _name(args.name)
    run = _client(args).stop(name)
    took = _duration(float(run["end_time"]) - float(run["start_time"]))
    print(f"run {run['name']} stopped at {_when(run['end_time'])} after {took}")
    return 0


def _list(args: argparse.Namespace) -> int:
    runs = _client(args).list()
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    if not runs:
        print("no runs")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("RUN", "STATE", "START", "END", "DURATION", "LABELS"):
        table.add_column(column, no_wrap=column != "LABELS")
    now = time.time()
    for r in runs:
        end = r.get("end_time")
        took = (end if end is not None else now) - r["start_time"]
        labels = ",".join(f"{k}={v}" for k, v in sorted((r.get("labels") or {}).items()))
        table.add_row(
            r["name"],
            "[green]active[/green]" if r.get("active") else "ended",
            _when(r["start_time"]),
            _when(end),
            _duration(took),
            labels or "-",
        )
    console = Console() if sys.stdout.isatty() else Console(width=200, no_color=True)
    console.print(table)
    return 0


def _split_exec(args: argparse.Namespace, options: argparse.ArgumentParser) -> list[str]:
    """The command of `run exec`, with options between NAME and `--` parsed into args."""
    command = list(args.command)
    if command and command[0] == "--":
        return command[1:]
    if command and command[0].startswith("-"):
        if "--" not in command:
            raise CliError(
                "put the command after `--`: run exec NAME [--label k=v]... -- CMD", EXIT_USAGE
            )
        i = command.index("--")
        options.parse_args(command[:i], namespace=args)
        return command[i + 1 :]
    return command


class _Signals:
    """Forward SIGINT/SIGTERM/SIGHUP to the child while it runs; remember the first one."""

    FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self._previous: dict[int, Any] = {}
        self._interrupts = 0

    def __enter__(self) -> _Signals:
        for sig in self.FORWARDED:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:
                continue  # e.g. SIGHUP under nohup: stay immune, as the caller asked
            self._previous[sig] = previous
            signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self._interrupts += 1
        if self.received is None:
            self.received = signum
        child = self.child
        if child is None or child.poll() is not None:
            return
        if signum == signal.SIGINT and self._interrupts == 1 and _terminal_sent_it_to_child():
            return  # Ctrl-C reached the child from the terminal already: never twice
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)


def _terminal_sent_it_to_child() -> bool:
    """True if we (and so the child) are the terminal's foreground process group.

    Ctrl-C then goes to every process of the group: the child got its SIGINT from the
    terminal and forwarding it again would interrupt, say, fio's or iperf3's orderly exit.
    A second SIGINT is always forwarded.
    """
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            return os.tcgetpgrp(fd) == os.getpgrp()
    return False


def _exec(args: argparse.Namespace, options: argparse.ArgumentParser) -> int:
    command = _split_exec(args, options)
    if not command:
        raise CliError("no command: run exec NAME [--label k=v]... -- COMMAND [ARG]...", EXIT_USAGE)
    name, labels = _name(args.name), _labels(args.label)
    client = _client(args)
    with _Signals() as signals:
        try:
            client.start(name, labels)
        except CliError as exc:
            raise CliError(f"{exc}; not running the command", EXIT_EXEC_FAILED) from None
        code: int
        try:
            if signals.received is not None:
                code = 128 + signals.received  # interrupted before the command started
            else:
                code = _run_child(command, signals)
        finally:
            _stop_after(client, name)
    if signals.received is not None and code == 0:
        code = 128 + signals.received  # interrupted, even if the command exited cleanly
    return code


def _run_child(command: list[str], signals: _Signals) -> int:
    try:
        child = subprocess.Popen(command)  # inherits stdin, stdout and stderr
    except FileNotFoundError:
        print(f"wattbit run exec: {command[0]}: command not found", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as exc:
        print(f"wattbit run exec: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT_EXECUTE
    signals.child = child
    if signals.received is not None:  # a signal came while the child was being spawned
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signals.received)
    returncode = child.wait()
    return 128 - returncode if returncode < 0 else returncode


def _stop_after(client: Client, name: str) -> None:
    """Stop the run after the command; retry a little, and say so loudly if it fails."""
    error: CliError | None = None
    for attempt in range(STOP_ATTEMPTS):
        try:
            client.stop(name)
            return
        except CliError as exc:
            error = exc
            if exc.http in (404, 409):
                break  # someone else stopped it: nothing to retry
            if attempt + 1 < STOP_ATTEMPTS:
                time.sleep(1.0 * (attempt + 1))
    print(
        f"wattbit run exec: could not stop run {name}: {error}; "
        f"stop it with `wattbit run stop {name}`",
        file=sys.stderr,
    )


# -- argument parsing ---------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--collector",
        default=os.environ.get("WATTBIT_COLLECTOR") or DEFAULT_COLLECTOR,
        metavar="URL",
        help="the site collector (default: $WATTBIT_COLLECTOR, else %(default)s)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the collector's run token (default: $WATTBIT_TOKEN)",
    )
    p.add_argument("--ca-file", metavar="FILE", help="CA certificate(s) for an https collector")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")


def _label_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="K=V",
        help="a label of the run (repeatable), e.g. --label setup=raid50",
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `run` subcommand."""
    p = sub.add_parser(
        "run",
        help="start, stop, list runs, or mark one around a command",
        description="Mark runs (named time windows) in the site collector's run registry.",
    )
    runs = p.add_subparsers(dest="run_command", required=True, metavar="COMMAND")

    s = runs.add_parser("start", help="start a run")
    s.add_argument("name", metavar="NAME")
    _label_option(s)
    _common(s)
    s.set_defaults(func=_guarded(_start))

    t = runs.add_parser("stop", help="stop an active run")
    t.add_argument("name", metavar="NAME")
    _common(t)
    t.set_defaults(func=_guarded(_stop))

    ls = runs.add_parser("list", help="list active and recent runs")
    ls.add_argument("--json", action="store_true", help="print the API's JSON instead")
    _common(ls)
    ls.set_defaults(func=_guarded(_list))

    e = runs.add_parser(
        "exec",
        help="start a run, run a command, stop the run (also on failure or Ctrl-C)",
        usage="wattbit run exec NAME [--label K=V]... [options] -- COMMAND [ARG]...",
        description=(
            "Start run NAME, run COMMAND with the terminal's stdin/stdout/stderr, stop the run "
            "when it ends for any reason, and exit with its status (128+N if signal N ended "
            "it; 125 if the run could not be started, and then COMMAND is not run)."
        ),
    )
    e.add_argument("name", metavar="NAME")
    _label_option(e)
    _common(e)
    e.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    # Options between NAME and `--` land in `command` (argparse.REMAINDER); parse them here.
    options = argparse.ArgumentParser(prog="wattbit run exec NAME", add_help=False)
    _label_option(options)
    _common(options)
    e.set_defaults(func=_guarded(lambda args: _exec(args, options)))
