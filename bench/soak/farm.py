"""The soak's PDU farm (a child process): simulated PDUs on UDP ports, hostile on cue."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from bench.soak.common import DELAYS, DEVICE_ENERGY, TICKS_PER_S
from collector.pdu.responder import Responder
from collector.pdu.snmprec import read_snmprec
from exporters.snmp.types import Value

# --- the PDU farm (child process) ----------------------------------------------------------------


@dataclass(eq=False)
class FarmPdu:
    """One simulated PDU of the farm."""

    name: str
    kind: str
    responder: Responder
    transport: asyncio.DatagramTransport | None = None
    requests: int = 0
    answers: int = 0


class Farm:
    """Every simulated PDU, healthy until turn_hostile()."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.epoch: float = spec["epoch"]
        self.hostile = False
        self.rnd = random.Random(7)
        walks = {r: read_snmprec(Path(r)) for r in {p["recording"] for p in spec["pdus"]}}
        self.pdus = [
            FarmPdu(p["name"], p["kind"], Responder(walks[p["recording"]], p["community"]))
            for p in spec["pdus"]
        ]

    def turn_hostile(self) -> None:
        """From now on each PDU behaves as its kind says; the refused ones close their ports."""
        self.hostile = True
        for p in self.pdus:
            if p.kind == "refused" and p.transport is not None:
                p.transport.close()

    async def heal(self) -> None:
        """Every PDU healthy again; the refused ones bind their old ports again."""
        self.hostile = False
        loop = asyncio.get_running_loop()
        for p in self.pdus:
            if p.kind == "refused" and p.transport is not None and p.transport.is_closing():
                port = p.transport.get_extra_info("sockname")[1]
                with contextlib.suppress(OSError):  # taken meanwhile: it stays refused
                    await loop.create_datagram_endpoint(
                        lambda p=p: FarmPort(self, p),  # type: ignore[misc]
                        local_addr=("127.0.0.1", port),
                    )

    def stats(self) -> dict[str, Any]:
        """Requests and answers per kind."""
        req: Counter[str] = Counter()
        ans: Counter[str] = Counter()
        for p in self.pdus:
            req[p.kind] += p.requests
            ans[p.kind] += p.answers
        return {"requests_by_kind": dict(req), "answers_by_kind": dict(ans)}


class FarmPort(asyncio.DatagramProtocol):
    """One PDU's UDP port."""

    def __init__(self, farm: Farm, pdu: FarmPdu) -> None:
        self.farm = farm
        self.pdu = pdu

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """asyncio: bound."""
        self.pdu.transport = cast("asyncio.DatagramTransport", transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        """Answer one request as this PDU's kind says."""
        pdu = self.pdu
        pdu.requests += 1
        kind = pdu.kind if self.farm.hostile else "good"
        if kind in ("blackhole", "refused"):
            return
        stamp = round((time.time() - self.farm.epoch) * TICKS_PER_S)
        pdu.responder.set({DEVICE_ENERGY: Value("Integer32", stamp)})
        reply = pdu.responder.answer(data)
        if reply is None:
            return
        if kind == "garbage_cut":
            reply = reply[: len(reply) // 2]
        elif kind == "garbage_noise":
            reply = self.farm.rnd.randbytes(len(reply))
        delay = DELAYS.get(kind)
        if delay is None:
            self._send(reply, addr)
        else:
            asyncio.get_running_loop().call_later(delay, self._send, reply, addr)

    def _send(self, reply: bytes, addr: Any) -> None:
        if self.pdu.transport is not None and not self.pdu.transport.is_closing():
            self.pdu.transport.sendto(reply, addr)
            self.pdu.answers += 1


async def _farm(spec_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    farm = Farm(spec)
    loop = asyncio.get_running_loop()
    for p in farm.pdus:
        await loop.create_datagram_endpoint(
            lambda p=p: FarmPort(farm, p),  # type: ignore[misc]
            local_addr=("127.0.0.1", 0),
        )
    ports = {
        p.name: int(p.transport.get_extra_info("sockname")[1])
        for p in farm.pdus
        if p.transport is not None
    }
    ready = Path(spec["ready"])
    ready.with_suffix(".tmp").write_text(json.dumps({"ports": ports}))
    ready.with_suffix(".tmp").rename(ready)  # whole, or not there
    stop = asyncio.Event()
    healing: set[asyncio.Task[None]] = set()  # a reference, so that it is not collected
    loop.add_signal_handler(signal.SIGUSR1, farm.turn_hostile)
    loop.add_signal_handler(signal.SIGUSR2, lambda: healing.add(loop.create_task(farm.heal())))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for p in farm.pdus:
        if p.transport is not None:
            p.transport.close()
    Path(spec["stats"]).write_text(json.dumps(farm.stats()))


if __name__ == "__main__":  # started by the soak: python -m bench.soak.farm SPEC.json
    asyncio.run(_farm(Path(sys.argv[1])))
