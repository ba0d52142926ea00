"""A delay line for real TCP through network namespaces on a kernel without netem: two tun
devices, and every packet read from one is written to the other `delay` seconds later.

`python -m tests.support.delayline NAME_A NAME_B DELAY` creates both tun devices (in the
namespace it runs in), prints `ready`, and forwards until killed. The caller moves NAME_B
into another namespace (the open file keeps working) and gives both ends addresses: packets
routed into NAME_A come out of NAME_B's namespace's stack a fixed delay later, and back.

This kernel has no netem (CONFIG_NET_SCH_NETEM is not set) and no fq, so a path of
milliseconds, where a small send buffer is below bandwidth × RTT, cannot be made with tc.
A delay is the only thing this adds: it drops nothing (beyond MAX_QUEUED packets in flight,
far above what the tests put through it) and reorders nothing (one FIFO per direction).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA  # _IOW('T', 202, int), include/uapi/linux/if_tun.h
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_QUEUED = 100_000  # packets held per direction: beyond, drop (bounded memory)
READS_PER_ROUND = 64


def open_tun(name: str) -> int:
    """A tun device named `name` (IFF_TUN, no packet information header), non-blocking."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def forward(a: int, b: int, delay: float) -> None:
    """Forever: what `a` gives goes out of `b` `delay` seconds later, and back."""
    other = {a: b, b: a}
    queues: dict[int, collections.deque[tuple[float, bytes]]] = {
        a: collections.deque(),
        b: collections.deque(),
    }
    while True:
        due = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        ready, _, _ = select.select([a, b], [], [], timeout)
        now = time.monotonic()
        for fd in ready:
            q = queues[other[fd]]
            for _ in range(READS_PER_ROUND):
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if len(q) < MAX_QUEUED:
                    q.append((now + delay, pkt))
        now = time.monotonic()
        for fd, q in queues.items():
            while q and q[0][0] <= now:
                # the device went down or its queue is full: a loss
                with contextlib.suppress(OSError):
                    os.write(fd, q.popleft()[1])


def main(argv: list[str]) -> None:
    """Open both devices, say `ready`, forward."""
    a, b = open_tun(argv[0]), open_tun(argv[1])
    print("ready", flush=True)
    forward(a, b, float(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
