"""A package's submodules without its __init__ (collector.imports), and the agent's lean imports."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.imports import bare_package, stand_in

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package whose __init__ counts its runs and imports a submodule that fails."""
    root = tmp_path / "wattbit_bare_test"
    root.mkdir()
    (root / "__init__.py").write_text(
        "import sys\nsys.__dict__.setdefault('bare_runs', []).append(1)\n"
        "from . import heavy\nEXPORTED = heavy.VALUE\n"
    )
    (root / "heavy.py").write_text("import os\nVALUE = int(os.environ['WATTBIT_BARE_VALUE'])\n")
    (root / "light.py").write_text("from . import helper\nVALUE = helper.VALUE + 1\n")
    (root / "helper.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.__dict__, "bare_runs", raising=False)
    yield "wattbit_bare_test"
    for name in [m for m in sys.modules if m.split(".")[0] == "wattbit_bare_test"]:
        del sys.modules[name]
    sys.__dict__.pop("bare_runs", None)


def test_submodules_import_without_the_init(pkg: str) -> None:
    """`from . import helper` asks the package for the name first: it is imported, not the
    package's __init__ run."""
    assert stand_in(pkg)
    from wattbit_bare_test import light  # type: ignore[import-not-found]

    assert light.VALUE == 42
    assert "bare_runs" not in sys.__dict__
    assert f"{pkg}.heavy" not in sys.modules
    assert not stand_in(pkg)  # there already


def test_the_first_other_name_runs_the_init_once_and_a_failure_again(
    pkg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert stand_in(pkg)
    import wattbit_bare_test  # type: ignore[import-not-found]

    monkeypatch.delenv("WATTBIT_BARE_VALUE", raising=False)
    with pytest.raises(KeyError):  # its __init__ failed: said, not swallowed
        _ = wattbit_bare_test.EXPORTED
    monkeypatch.setenv("WATTBIT_BARE_VALUE", "7")
    assert wattbit_bare_test.EXPORTED == 7  # tried again
    assert sys.__dict__["bare_runs"] == [1, 1]
    assert not hasattr(wattbit_bare_test, "MISSING")  # complete: no third run
    assert sys.__dict__["bare_runs"] == [1, 1]


def test_no_stand_in_for_what_is_no_package(tmp_path: Path) -> None:
    assert bare_package("json.decoder") is None  # a module
    assert bare_package("wattbit_no_such_package") is None
    assert not stand_in("wattbit_no_such_package")
    assert "wattbit_no_such_package" not in sys.modules


def _fresh(code: str) -> str:
    """code's stdout in a fresh interpreter (sys.modules as a starting agent's)."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_aiohttp_server_modules_load_without_its_client() -> None:
    out = _fresh(
        """
        import sys
        from collector.web import aiohttp_server
        aiohttp_server.load()
        print("aiohttp.client" in sys.modules, "aiohttp" in sys.modules)
        import aiohttp
        server = sys.modules["aiohttp.http"].SERVER_SOFTWARE
        print(aiohttp.ClientSession.__module__, server.endswith(f"aiohttp/{aiohttp.__version__}"))
        """
    )
    assert out.split() == ["False", "False", "aiohttp.client", "True"]


def test_lean_imports_keep_openssl_out_and_the_agent_s_modules_work() -> None:
    """What the agent imports, after lean_imports and without_tls: no libcrypto or libssl in
    the process, sha256 and hmac from Python's own hashes, asyncio without ssl, the
    exporters' prometheus_client modules without the package's __init__."""
    out = _fresh(
        """
        import sys
        from collector.agent import early
        kept = early.lean_imports() + early.without_tls()
        import collector.agent.config, collector.agent.main, collector.daemon.serve
        import asyncio, hashlib, hmac, secrets
        import prometheus_client
        maps = open("/proc/self/maps").read()
        print(",".join(kept))
        print("libcrypto" in maps, "libssl" in maps, asyncio.sslproto.ssl is None)
        print(hmac.new(b"k", b"v", hashlib.sha256).hexdigest()[:16], hashlib.sha256.__module__)
        print("prometheus_client.exposition" in sys.modules, prometheus_client.core.Metric)
        try:
            prometheus_client.generate_latest
        except ImportError as exc:
            print("ImportError", "ssl" in str(exc))
        """
    )
    lines = out.splitlines()
    assert lines[0] == "prometheus_client/__init__,_hashlib,ssl"
    assert lines[1] == "False False True"
    # HMAC-SHA256("k", "v") as OpenSSL computes it (RFC 2104); the builtin module's function
    assert lines[2] == "c5d4be1992d50d3b _sha256"
    assert lines[3] == "False <class 'prometheus_client.metrics_core.Metric'>"
    assert lines[4] == "ImportError True"  # said plainly, where something asks for it


def test_lean_imports_leave_what_is_loaded_already() -> None:
    out = _fresh(
        """
        import hashlib, ssl, prometheus_client
        from collector.agent import early
        print(early.lean_imports(), early.without_tls(), ssl.SSLContext.__module__)
        """
    )
    assert out.split() == ["[]", "[]", "ssl"]
