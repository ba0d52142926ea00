"""sock_diag answers captured on this kernel (tests/fixtures/tcp/, capture.py), replayed as a
tcp exporter's SocketReader."""

from __future__ import annotations

import json
from collections.abc import Sequence

from exporters.tcp import netlink
from tests.support.env import FIXTURES

TCP = FIXTURES / "tcp"
KERNEL = "6.18.44"


def captured(scenario: str, side: str) -> dict[str, object]:
    """One capture file's content."""
    return json.loads((TCP / f"tcp_info-{KERNEL}-{scenario}-{side}.json").read_text())  # type: ignore[no-any-return]


def message(scenario: str, side: str) -> bytes:
    """The captured inet_diag_msg payload (with its attributes)."""
    return bytes.fromhex(str(captured(scenario, side)["msg_hex"]))


class RecordedDiag:
    """Replays dumps and destroy messages, one step per sample (the last step repeats)."""

    def __init__(
        self,
        dumps: Sequence[Sequence[tuple[str, str]]],
        destroyed: Sequence[Sequence[tuple[str, str]]] = (),
        tracking: bool = True,
    ) -> None:
        self.dumps = [[message(*m) for m in step] for step in dumps]
        self.destroyed = [[message(*m) for m in step] for step in destroyed]
        self.tracking = tracking
        self.reason = "recorded" if tracking else "recorded, without destroy messages"
        self.step = 0
        self.malformed = 0
        self.closed = False

    def dump(self) -> list[netlink.DiagSocket]:
        step = self.dumps[min(self.step, len(self.dumps) - 1)]
        return [netlink.parse_diag_msg(p) for p in step]

    def drain(self) -> tuple[list[netlink.DiagSocket], bool]:
        i = self.step
        self.step += 1
        if i >= len(self.destroyed):
            return [], False
        return [netlink.parse_diag_msg(p) for p in self.destroyed[i]], False

    def close(self) -> None:
        self.closed = True
