"""blockio's core backend built in a thread before the agent's heavy imports (issue 35's ready
goal; collector/agent/early.py): handed over, failing, never taken; and where the command
starts it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from collector.agent import early
from collector.agent.config import AgentConfig
from collector.agent.main import StartupError, build_exporters
from exporters.blockio.diskstats import DiskstatsBackend
from exporters.blockio.exporter import open_backend
from exporters.blockio.model import BackendUnavailable


class _Begun:
    """A stand-in for a backend begun (early.Pending): counts its finishes and closes."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.finished = 0
        self.closed = 0

    def finish(self) -> None:
        self.finished += 1
        if self.fail:
            raise BackendUnavailable("bpf load failed", "the verifier said no")

    def close(self) -> None:
        self.closed += 1


def _unavailable() -> _Begun:
    raise BackendUnavailable("bpf load failed", "the verifier said no")


def test_take_finishes_what_was_begun_and_hands_it_over() -> None:
    begun = _Begun()
    load = early.CoreLoad(lambda: begun)
    assert begun.finished == 0  # the load goes on meanwhile
    assert load.take() is begun
    assert begun.finished == 1
    load.close()  # taken: the caller owns it now
    assert begun.closed == 0
    with pytest.raises(RuntimeError, match="taken already"):
        load.take()


@pytest.mark.parametrize("where", ["begin", "finish"])
def test_take_raises_what_beginning_or_finishing_raised(where: str) -> None:
    begun = _Begun(fail=where == "finish")
    load = early.CoreLoad(_unavailable if where == "begin" else lambda: begun)
    with pytest.raises(BackendUnavailable) as info:
        load.take()
    assert (info.value.reason, info.value.detail) == ("bpf load failed", "the verifier said no")
    load.close()
    assert begun.closed == (1 if where == "finish" else 0)  # a failed finish frees it


def test_one_never_taken_is_closed_once() -> None:
    begun = _Begun()
    load = early.CoreLoad(lambda: begun)
    load.close()
    load.close()
    assert (begun.finished, begun.closed) == (0, 1)


@pytest.mark.parametrize("choice", ["auto", "core"])
def test_open_backend_takes_the_built_core(choice: str, tmp_path: Path) -> None:
    core = _Begun()
    backend, reason = open_backend(choice, 64, tmp_path, tmp_path, core=lambda: core)
    assert backend is core and reason == ""


def test_a_failed_early_core_falls_back_as_a_failed_build_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto: on to bcc (made unavailable here: the unit tier compiles nothing), then
    /proc/diskstats, with the core's reason; core: refused."""
    from exporters.blockio import bcc_backend

    def no_bcc(*args: object) -> None:
        raise BackendUnavailable("no bcc")

    monkeypatch.setattr(bcc_backend, "BccBackend", no_bcc)
    backend, reason = open_backend("auto", 64, tmp_path, tmp_path, core=_unavailable)
    assert isinstance(backend, DiskstatsBackend) and reason == "bpf load failed"
    with pytest.raises(BackendUnavailable):
        open_backend("core", 64, tmp_path, tmp_path, core=_unavailable)


def test_the_agent_refuses_a_requested_core_that_failed_early(tmp_path: Path) -> None:
    cfg = AgentConfig.model_validate(
        {
            "blockio": {"backend": "core"},
            **{n: {"enabled": False} for n in ("nic", "smart", "power", "pcie", "tcp")},
        }
    )
    load = early.CoreLoad(_unavailable)
    with pytest.raises(StartupError, match="'core' was requested but the verifier said no"):
        build_exporters(cfg, tmp_path, tmp_path, start=False, blockio_core=load)


@pytest.mark.parametrize(
    "blockio",
    [{"backend": "diskstats"}, {"backend": "bcc"}, {"enabled": False}],
    ids=["diskstats", "bcc", "off"],
)
def test_nothing_is_loaded_early_unless_the_core_may_be_tried(
    blockio: dict[str, object], tmp_path: Path
) -> None:
    cfg = AgentConfig.model_validate({"blockio": blockio})
    assert early.start(cfg, tmp_path, tmp_path) is None


def test_the_command_starts_the_load_before_the_heavy_imports() -> None:
    """`wattbit agent`: early.start runs before aiohttp, prometheus_client and the agent's
    main module are imported, so the verifier works while they load (a fresh interpreter:
    this process has imported them all)."""
    script = textwrap.dedent(
        """
        import sys
        from collector import cli
        from collector.agent import early
        def start(cfg, sys_root, proc_root):
            # prometheus_client itself is a stand-in by now (early.lean_imports)
            heavy = ("aiohttp", "prometheus_client.metrics_core", "collector.agent.main")
            print("loaded:" + ",".join(m for m in heavy if m in sys.modules), flush=True)
            raise SystemExit(0)
        early.start = start
        cli.main(["agent", "--listen", "127.0.0.1:19731"])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "loaded:", out
