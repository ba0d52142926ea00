"""A real RMCP+ (lanplus) BMC on 127.0.0.1: pyghmi's BMC server with a DCMI Get Power Reading
handler, answering ipmitool and wattbit's poller alike.

Run as `python -m tests.support.ipmisim --port P --user U --password-file F --state S`; the
state file (JSON: {"watts": int, "active": bool, "supported": bool}) is read on every request,
so a test changes the reading by rewriting it. pyghmi's server is synchronous and keeps global
state: one process per simulated BMC.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

from pyghmi.ipmi import bmc
from pyghmi.ipmi.private import serversession

_open_response = serversession.ServerSession.create_open_session_response


def _suite3_only(self: object, request: bytearray) -> bytearray:
    """Refuse an RMCP+ open request for anything but cipher suite 3 (RAKP-HMAC-SHA1), as a
    real BMC that only has suite 3 does (status 0x11, IPMI 2.0 table 13-15).

    pyghmi's server answers every proposal with suite 3's algorithms, so a client proposing
    SHA-256 first (pyghmi's own client, ipmitool -C 17) computed its RAKP hashes with the
    wrong algorithm and failed; with this refusal pyghmi's client falls back to SHA-1.
    """
    if len(request) >= 13 and request[12] != 1:
        return bytearray([request[0], 0x11, 0, 0]) + bytearray(request[4:8])
    return bytearray(_open_response(self, request))


serversession.ServerSession.create_open_session_response = _suite3_only  # type: ignore[method-assign]

NETFN_DCMI = 0x2C
CMD_GET_POWER_READING = 0x02


class DcmiBmc(bmc.Bmc):  # type: ignore[misc]
    """pyghmi's Bmc plus DCMI Get Power Reading (DCMI 1.5 section 6.6.1)."""

    def __init__(self, state: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.mfgid = 343  # the device id's manufacturer: Intel's IANA number
        self.prodid = 0x00A2
        self.firmwaremajor = 2
        self.firmwareminor = 0x48

    def power_reading(self) -> tuple[bool, bytes]:
        """(supported, answer data) from the state file."""
        st = json.loads(self.state.read_text())
        watts = int(st["watts"])
        state = 0x40 if st.get("active", True) else 0x00
        data = struct.pack(
            "<BHHHHIIB",
            0xDC,
            watts,
            int(st.get("min", watts)),
            int(st.get("max", watts)),
            int(st.get("avg", watts)),
            int(st.get("timestamp", 1_700_000_000)),
            int(st.get("period_ms", 1000)),
            state,
        )
        return bool(st.get("supported", True)), data

    def handle_raw_request(self, request: dict, session: object) -> None:  # type: ignore[type-arg]
        """DCMI power reading here; everything else as pyghmi's Bmc answers it."""
        if request["netfn"] == NETFN_DCMI and request["command"] == CMD_GET_POWER_READING:
            supported, data = self.power_reading()
            if not supported:
                session.send_ipmi_response(code=0xC1)  # type: ignore[attr-defined]
            else:
                session.send_ipmi_response(data=list(data))  # type: ignore[attr-defined]
            return
        super().handle_raw_request(request, session)


def main() -> int:
    """Serve until killed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", type=Path, required=True)
    ap.add_argument("--state", type=Path, required=True)
    args = ap.parse_args()
    password = args.password_file.read_text().strip()
    sim = DcmiBmc(args.state, authdata={args.user: password}, port=args.port, address="127.0.0.1")
    print("ready", flush=True)
    sim.listen()
    return 0


if __name__ == "__main__":
    sys.exit(main())
