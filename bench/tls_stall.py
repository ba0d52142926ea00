"""TLS clients that never finish a handshake, against a real `wattbit collector` or `agent`.

Each round opens --clients TCP connections to the server's HTTPS port, sends each the first
6 bytes of a TLS ClientHello (a record header and the handshake type), and holds them for
--hold seconds before closing them all; a real HTTPS scrape follows every round. The server's
VmRSS is sampled after every round and once more after --rest seconds without clients.

    .venv/bin/python bench/tls_stall.py --rounds 8 --clients 1000 --hold 3
    .venv/bin/python bench/tls_stall.py --server agent ...   (root: the agent's nic exporter)

Prints one JSON object: RSS per round (MB = 10^6 bytes), after the rest, fds, whether every
scrape succeeded, and the command that reproduces it. tests/integration/test_tls_stall.py runs
the same with fewer rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import command_line  # noqa: E402
from tests.support.tlsstall import run  # noqa: E402


def main() -> None:
    """Parse the options, measure, print JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=["collector", "agent"], default="collector")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--hold", type=float, default=3.0, help="seconds each round's clients stall")
    ap.add_argument("--rest", type=float, default=5.0, help="seconds after the last round")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="for the server")
    ap.add_argument("--whole-hello", action="store_true", help="send a whole ClientHello, stall")
    args = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in args.env)
    res = run(args.server, args.rounds, args.clients, args.hold, args.rest, env, args.whole_hello)
    print(json.dumps(res | {"command": command_line()}))


if __name__ == "__main__":
    main()
