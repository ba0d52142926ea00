"""`wattbit run ...`: mark streaming runs in the site collector's run registry."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `run` subcommand."""
    p = sub.add_parser("run", help="start, stop, list runs, or mark one around a command")
    p.set_defaults(func=lambda args: 2)
