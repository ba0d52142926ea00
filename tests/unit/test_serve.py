"""collector/daemon/serve.py, the one way both daemons are served: /metrics and the routes while
it runs, the work alongside, and on the stop the work cancelled, the server stopped and every
exporter closed once through the contract's close(); an address in use is a ListenError before
anything is served, and the exporters are closed then too."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import urllib.request
from collections.abc import Iterable

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from collector.agent.config import AgentConfig
from collector.daemon.serve import ListenError, sd_notify, serve
from collector.demo.procs import free_port
from exporters.base import Exporter

BOUND = 30.0  # seconds: a generous bound on every wait, never a timing assertion


class _Probe(Exporter):
    """An exporter that says what happened to it."""

    name = "probe"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily("wattbit_probe", "A probe.", value=1.0)

    def close(self) -> None:
        self.events.append("closed")


def test_serves_until_stopped_then_closes_each_exporter_once() -> None:
    port = free_port()
    cfg = AgentConfig.model_validate({"listen": f"127.0.0.1:{port}"})
    events: list[str] = []
    urls: list[str] = []
    stop = threading.Event()
    working = threading.Event()

    async def work(done: asyncio.Event) -> None:
        working.set()
        try:
            await done.wait()
        finally:
            events.append("work ended")

    result: list[int] = []
    t = threading.Thread(
        target=lambda: result.append(
            serve("test", cfg, None, [_Probe(events)], work=work, serving=urls.append, stop=stop)
        )
    )
    t.start()
    try:
        assert working.wait(BOUND)
        assert urls == [f"http://127.0.0.1:{port}"]
        with urllib.request.urlopen(f"{urls[0]}/metrics", timeout=BOUND) as r:
            body = r.read().decode()
        assert "wattbit_probe 1.0" in body
        assert 'wattbit_exporter_up{exporter="probe"} 1.0' in body
        with urllib.request.urlopen(f"{urls[0]}/", timeout=BOUND) as r:
            assert '<a href="/metrics">' in r.read().decode()
        assert events == []
    finally:
        stop.set()
        t.join(BOUND)
    assert not t.is_alive() and result == [0]
    assert events == ["work ended", "closed"]
    with pytest.raises(OSError):  # the server is gone
        socket.create_connection(("127.0.0.1", port), timeout=BOUND).close()


def test_an_address_in_use_is_a_listen_error_and_the_exporters_are_closed() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        cfg = AgentConfig.model_validate({"listen": f"127.0.0.1:{taken.getsockname()[1]}"})
        events: list[str] = []
        with pytest.raises(ListenError) as err:
            serve("test", cfg, None, [_Probe(events)], stop=threading.Event())
    assert err.value.strerror and "in use" in err.value.strerror
    assert events == ["closed"]


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_tells_systemd_ready_once_serving_and_stopping_at_the_stop(
    tmp_path, monkeypatch, abstract: bool
) -> None:
    """Type=notify units (packaging/systemd/): READY=1 once /metrics answers, STOPPING=1."""
    name = f"@wattbit-test-notify-{os.getpid()}" if abstract else str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name[1:] if abstract else name)
        sock.settimeout(BOUND)
        monkeypatch.setenv("NOTIFY_SOCKET", name)
        port = free_port()
        cfg = AgentConfig.model_validate({"listen": f"127.0.0.1:{port}"})
        stop = threading.Event()
        t = threading.Thread(target=serve, args=("test", cfg, None, []), kwargs={"stop": stop})
        t.start()
        try:
            ready = sock.recv(4096).decode().split("\n")
            assert ready[0] == "READY=1"
            assert ready[1] == f"STATUS=serving test on http://127.0.0.1:{port}"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=BOUND) as r:
                assert r.status == 200  # ready meant serving
        finally:
            stop.set()
            t.join(BOUND)
        assert sock.recv(4096) == b"STOPPING=1"
    assert not t.is_alive()


def test_no_notify_socket_means_no_notification(monkeypatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", "vsock:2:1234")  # not a unix socket: not ours
    assert sd_notify("READY=1") is False
