"""Real BMCs for tests on 127.0.0.1: sushy-static serving real Redfish mockups, pyghmi's BMC
server with DCMI (tests/support/ipmisim.py), OpenIPMI's ipmi_sim (no DCMI), and a hostile
Redfish service (tests/support/hostilebmc.py); TLS certificates made with `cryptography`."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.env import FIXTURES, ROOT
from tests.support.realparts import free_port, stop_process, wait_for

MOCKUPS = FIXTURES / "bmc"


def mockups() -> list[str]:
    """The names of the real mockups in tests/fixtures/bmc (one directory each)."""
    return sorted(p.name for p in MOCKUPS.iterdir() if (p / "index.json").is_file())


def sushy_static_path() -> str | None:
    """The sushy-static program of this interpreter's environment, or on PATH."""
    beside = Path(sys.executable).parent / "sushy-static"
    return str(beside) if beside.exists() else shutil.which("sushy-static")


def have_ipmitool() -> bool:
    """True when Debian's ipmitool is installed."""
    return shutil.which("ipmitool") is not None


def have_ipmi_sim() -> bool:
    """True when OpenIPMI's ipmi_sim is installed."""
    return shutil.which("ipmi_sim") is not None


def _tcp_open(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


class Proc:
    """A child process with a log file, stopped by stop() (SIGTERM, then SIGKILL)."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})),
        )

    def _started(self, ready: Callable[[], object], timeout: float, what: str, **kw: Any) -> None:
        """wait_for(ready) while the process lives; stop it when it never gets there."""
        try:
            wait_for(ready, timeout, what, alive=self.alive, **kw)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> None:
        """Raise with the log when the process has exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.proc.args!r} exited: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Stop the process and close its log."""
        stop_process(self.proc, 10)
        self._log.close()

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SushyStatic(Proc):
    """sushy-static serving one mockup directory (HTTP, or HTTPS with cert and key)."""

    def __init__(self, mockup: Path, tmp: Path, tls: tuple[Path, Path] | None = None) -> None:
        exe = sushy_static_path()
        assert exe, "sushy-static is not installed"
        self.port = free_port()
        cmd = [exe, "-i", "127.0.0.1", "-p", str(self.port), "-m", str(mockup)]
        if tls:
            cmd += ["-c", str(tls[0]), "-k", str(tls[1])]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        super().__init__(cmd, tmp / f"sushy-{mockup.name}-{self.port}.log")
        self._started(lambda: _tcp_open(self.port), 30, f"sushy-static {mockup.name}")


class HostileBmc(Proc):
    """tests/support/hostilebmc.py: a Redfish service misbehaving in one way (`mode`)."""

    def __init__(
        self, mode: str, tmp: Path, other_port: int = 0, extra: list[str] | None = None
    ) -> None:
        self.port = free_port()
        cmd = [sys.executable, "-m", "tests.support.hostilebmc", "--port", str(self.port)]
        cmd += ["--mode", mode, "--other-port", str(other_port), *(extra or [])]
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(cmd, tmp / f"hostile-{mode}-{self.port}.log")
        self._started(lambda: _tcp_open(self.port), 30, f"hostile BMC {mode}")


class IpmiSim(Proc):
    """pyghmi's BMC server with a DCMI power reading (tests/support/ipmisim.py) on UDP."""

    user = "wattbit"

    def __init__(
        self, tmp: Path, password: str, watts: int, active: bool = True, supported: bool = True
    ) -> None:
        self.port = free_port(socket.SOCK_DGRAM)
        self.password = password
        self.state = tmp / f"ipmisim-{self.port}.json"
        self.set(watts, active, supported)
        pw = tmp / f"ipmisim-{self.port}.pw"
        pw.write_text(password + "\n")
        pw.chmod(0o600)
        cmd = [sys.executable, "-m", "tests.support.ipmisim", "--port", str(self.port)]
        cmd += ["--user", self.user, "--password-file", str(pw), "--state", str(self.state)]
        super().__init__(cmd, tmp / f"ipmisim-{self.port}.log")
        self._started(lambda: "ready" in self.log.read_text(), 30, "ipmisim")

    def set(self, watts: int, active: bool = True, supported: bool = True) -> None:
        """The reading the BMC answers from now on."""
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"watts": watts, "active": active, "supported": supported}))
        tmp.replace(self.state)


class OpenIpmiSim(Proc):
    """OpenIPMI's ipmi_sim on UDP: a real BMC simulator that has no DCMI."""

    user = "wattbit"

    def __init__(self, tmp: Path, password: str) -> None:
        self.port = free_port(socket.SOCK_DGRAM)
        self.password = password
        state = tmp / f"ipmi_sim-{self.port}"
        state.mkdir()
        # OpenIPMI's lanserv/lan.conf and ipmisim1.emu, cut to one BMC with one LAN channel
        (state / "lan.conf").write_text(
            'name "wattbit"\n'
            "set_working_mc 0x20\n"
            "  startlan 1\n"
            f"    addr 127.0.0.1 {self.port}\n"
            "    priv_limit admin\n"
            "    allowed_auths_callback none md2 md5 straight\n"
            "    allowed_auths_user none md2 md5 straight\n"
            "    allowed_auths_operator none md2 md5 straight\n"
            "    allowed_auths_admin none md2 md5 straight\n"
            "    guid a123456789abcdefa123456789abcdef\n"
            "  endlan\n"
            f'  user 2 true "{self.user}" "{password}" admin 10 none md2 md5 straight\n'
        )
        (state / "lan.conf").chmod(0o600)
        (state / "bmc.emu").write_text(
            "mc_setbmc 0x20\n"
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
            "mc_enable 0x20\n"
        )
        exe = shutil.which("ipmi_sim")
        assert exe
        cmd = [exe, "-c", str(state / "lan.conf"), "-f", str(state / "bmc.emu")]
        cmd += ["-s", str(state), "-n"]
        super().__init__(cmd, tmp / f"ipmi_sim-{self.port}.log")

        def answers() -> bool:
            r = ipmitool(self.port, self.user, password, ["mc", "info"], timeout=8)
            return r.returncode == 0

        # ipmitool's first try may precede the bind (then it waits out its retries): a try
        # that times out is a "not yet".
        self._started(answers, 60, "ipmi_sim", interval=0.5, errors=(subprocess.TimeoutExpired,))


def ipmitool(
    port: int, user: str, password: str, args: list[str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """ipmitool over lanplus to 127.0.0.1:port (the password in its environment, -E).

    Cipher suite 3 (RAKP-HMAC-SHA1, AES): both simulators have only that one, and ipmitool's
    default (17) first asks for the channel's cipher suites, which ipmi_sim never answers
    (ipmitool then waits 10 s before falling back).
    """
    cmd = ["ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", str(port)]
    cmd += ["-U", user, "-E"]
    return subprocess.run(
        cmd + args,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, IPMI_PASSWORD=password),
    )


def ipmitool_power(port: int, user: str, password: str) -> tuple[int, str]:
    """(instantaneous watts, reading state) as `ipmitool dcmi power reading` prints them."""
    r = ipmitool(port, user, password, ["dcmi", "power", "reading"])
    assert r.returncode == 0, r.stdout + r.stderr
    watts = state = None
    for line in r.stdout.splitlines():
        if "Instantaneous power reading" in line:
            watts = int(line.split(":")[1].split()[0])
        if "Power reading state is" in line:
            state = line.split(":")[1].strip()
    assert watts is not None and state is not None, r.stdout
    return watts, state


class Certs:
    """A CA, a server certificate it signed for 127.0.0.1, an expired one, a self-signed one."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "certs"
        self.dir.mkdir()
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wattbit test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        self.ca = self._write("ca.pem", ca)
        self.good = self._leaf("good", ca, ca_key, now - datetime.timedelta(days=1), 30)
        self.expired = self._leaf("expired", ca, ca_key, now - datetime.timedelta(days=60), 30)
        self.self_signed = self._leaf("self", None, None, now - datetime.timedelta(days=1), 30)

    def _write(self, name: str, cert: x509.Certificate) -> Path:
        path = self.dir / name
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def _leaf(
        self,
        name: str,
        ca: x509.Certificate | None,
        ca_key: ec.EllipticCurvePrivateKey | None,
        start: datetime.datetime,
        days: int,
    ) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca.subject if ca else subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .sign(ca_key or key, hashes.SHA256())
        )
        key_path = self.dir / f"{name}.key"
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return self._write(f"{name}.pem", cert), key_path
