"""Many simulated PDUs in one thread: a UDP port each, all answered by one SNMPv2c responder.

The demo's responder (collector/pdu/responder.py) answers every port from the same recording
(by default the demo's APC AP8641), so a hundred PDUs cost one thread and one copy of the rows.
The farm remembers which source addresses asked each port: with one SNMPv2c socket per
collector process, that says which collector polled which PDU, independently of /metrics.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections import defaultdict
from pathlib import Path

from collector.pdu.responder import Responder
from collector.pdu.snmprec import read_recording

DEMO_RECORDING = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "apc_ap8641.snmprec"


class PduFarm:
    """`count` SIMULATED PDUs on 127.0.0.1, a UDP port each (context manager)."""

    def __init__(
        self, count: int, community: str = "public", recording: Path = DEMO_RECORDING
    ) -> None:
        self.responder = Responder(read_recording(recording), community, max_repetitions=64)
        self.count = count
        self.ports: list[int] = []
        self.peers: dict[int, set[tuple[str, int]]] = defaultdict(set)  # port -> who asked
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PduFarm:
        try:
            for _ in range(self.count):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._socks.append(s)
                s.bind(("127.0.0.1", 0))
                s.setblocking(False)
                self.ports.append(int(s.getsockname()[1]))
            self._thread = threading.Thread(target=self._serve, name="pdu-farm", daemon=True)
            self._thread.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def asked_by(self) -> dict[int, set[tuple[str, int]]]:
        """A copy of port -> the source addresses that sent it requests."""
        with self._lock:
            return {p: set(s) for p, s in self.peers.items()}

    def _serve(self) -> None:
        with selectors.DefaultSelector() as sel:
            for s in self._socks:
                sel.register(s, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in sel.select(0.1):
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data, peer = sock.recvfrom(65535)
                    except OSError:
                        continue
                    with self._lock:
                        self.peers[int(sock.getsockname()[1])].add(peer)
                    reply = self.responder.answer(data)
                    if reply is not None:
                        with contextlib.suppress(OSError):
                            sock.sendto(reply, peer)

    def stop(self) -> None:
        """Stop answering and close every port."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for s in self._socks:
            s.close()
        self._socks = []
