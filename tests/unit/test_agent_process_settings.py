"""What `wattbit agent` sets for its own process (issue 35): the GC's young threshold, glibc's
malloc arenas; and that only the command asks for them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from collector import cli
from collector.agent import early
from collector.agent import main as agent


@pytest.fixture
def gc_threshold() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)


@pytest.mark.usefixtures("gc_threshold")
def test_young_threshold_raised_older_ones_kept() -> None:
    gc.set_threshold(700, 11, 12)
    agent.raise_gc_threshold()
    assert gc.get_threshold() == (agent.GC_THRESHOLD, 11, 12)


def test_an_operators_malloc_arena_max_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert early.limit_malloc_arenas() is False


def test_only_the_command_sets_up_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def run(
        cfg: object,
        web: object,
        stop: object = None,
        *,
        own_process: bool = False,
        blockio_core: early.CoreLoad | None = None,
    ) -> int:
        seen.append(own_process)
        if blockio_core is not None:
            blockio_core.close()
        return 0

    monkeypatch.setattr(agent, "run", run)
    # the unit tier loads no BPF program (the real start: tests/integration)
    monkeypatch.setattr(early, "start", lambda *args: None)
    assert cli.main(["agent", "--listen", "127.0.0.1:19731"]) == 0
    assert seen == [True]
