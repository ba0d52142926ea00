"""The kernel's numbers as /proc and /sys print them: unsigned counters, parsed strictly.

A number beyond what the kernel can print (2^64 or more, or digits past int()'s 4300-digit
limit) is malformed, never a made-up 0; each kind of skipped line is logged once (debug).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

U64 = 1 << 64  # every kernel counter read here is at most a u64
_MAX_DIGITS = 20  # len(str(2**64 - 1)); a longer hex number is >= 2^64 anyway
_DEC_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_noted: set[str] = set()


def parse_u64(token: str, base: int = 10) -> int | None:
    """An unsigned kernel counter (ASCII digits, < 2^64), or None for anything else."""
    token = token.strip()
    if base == 10 and len(token) < _MAX_DIGITS and token.isascii() and token.isdigit():
        return int(token)  # the common case: at most 19 digits is always below 2^64
    digits = _DEC_DIGITS if base == 10 else _HEX_DIGITS
    significant = token.lstrip("0")
    if not token or len(significant) > _MAX_DIGITS or not set(token) <= digits:
        return None  # also keeps int() from its 4300-digit ValueError
    value = int(significant or "0", base)
    return value if value < U64 else None


def parse_u32(digits: str) -> int | None:
    """A CPU, IRQ or queue number: a u64 below 2^32 (the kernel's own types), else None."""
    value = parse_u64(digits)
    return value if value is not None and value < 1 << 32 else None


def is_uint(token: str) -> bool:
    """True for a plain ASCII decimal (str.isdigit alone accepts "²", which int() rejects)."""
    return token.isascii() and token.isdigit()


def note_malformed(what: str) -> None:
    """Log (once per process and kind) that a malformed line or field was skipped."""
    # the kinds are a fixed set of literals in the parsers: the set stays small
    if what not in _noted:
        _noted.add(what)
        log.debug("skipped a malformed %s (logged once)", what)
