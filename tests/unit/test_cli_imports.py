"""The command line starts light (issue #35): `import collector.cli`, `wattbit --help` and the
`wattbit run` client import no pydantic, bcrypt, YAML, rich, pysnmp or matplotlib; the daemons
still import what they need, and the HTTP server loads bcrypt only for basic auth.

Each check runs in a fresh interpreter: this test process has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from collector import cli

HEAVY = ("pydantic", "bcrypt", "yaml", "rich", "pysnmp", "matplotlib", "aiohttp")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter has loaded after running `code`."""
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import sys
        print("loaded:" + ",".join(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    last = out.strip().splitlines()[-1]
    assert last.startswith("loaded:"), out
    return [m for m in last.removeprefix("loaded:").split(",") if m]


def test_import_cli_is_light() -> None:
    assert _loaded_after("import collector.cli") == []


def test_help_and_run_client_are_light() -> None:
    loaded = _loaded_after(
        """
        import contextlib, io
        from collector import cli
        for argv in (["--help"], ["run", "--help"], ["run", "exec", "--help"]):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                cli.main(argv)
        args = cli.parser("run").parse_args(["run", "start", "r1", "--label", "a=b"])
        assert args.func is not None
        """
    )
    assert loaded == []


def test_run_client_starts_a_run_without_pydantic() -> None:
    """`wattbit run start` end to end, against a stand-in of the collector's run API."""
    loaded = _loaded_after(
        """
        import contextlib, io, json, os, threading
        from http.server import BaseHTTPRequestHandler, HTTPServer
        seen = []
        class Api(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append((self.path, self.headers["Authorization"], body))
                answer = json.dumps({"name": body["name"], "start_time": 1.0e9}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            def log_message(self, *args):
                pass
        server = HTTPServer(("127.0.0.1", 0), Api)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        os.environ["WATTBIT_TOKEN"] = "t0ken-for-this-test"
        from collector import cli
        url = f"http://127.0.0.1:{server.server_port}"
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert cli.main(["run", "start", "r1", "--label", "a=b", "--collector", url]) == 0
        server.shutdown()
        assert "run r1 started" in out.getvalue(), out.getvalue()
        assert seen == [("/api/v1/runs", "Bearer t0ken-for-this-test",
                         {"name": "r1", "labels": {"a": "b"}})], seen
        """
    )
    assert loaded == []


def test_agent_subcommand_still_loads_its_config(tmp_path: Path) -> None:
    """A bad agent config still exits 2 (ConfigError caught by the CLI), pydantic loaded."""
    bad = tmp_path / "agent.yml"
    bad.write_text("no_such_key: 1\n")
    loaded = _loaded_after(
        f"""
        import contextlib, io
        from collector import cli
        with contextlib.redirect_stderr(io.StringIO()) as err:
            assert cli.main(["agent", "--config", {str(bad)!r}]) == 2
        assert "configuration error" in err.getvalue() and "no_such_key" in err.getvalue()
        """
    )
    assert "pydantic" in loaded and "yaml" in loaded


def test_bcrypt_only_with_basic_auth() -> None:
    """The HTTP server imports bcrypt only when basic auth is configured, and it still works."""
    assert "bcrypt" not in _loaded_after("import collector.web.server, collector.agent.main")
    loaded = _loaded_after(
        """
        import concurrent.futures, bcrypt as b
        hashed = b.hashpw(b"secret", b.gensalt(rounds=4))
        del b
        import sys
        del sys.modules["bcrypt"]  # prove the server imports it itself
        from collector.web.server import _BasicAuth
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            auth = _BasicAuth({"u": hashed}, pool)
            assert "bcrypt" in sys.modules
            assert auth._bcrypt(b"secret", hashed) and not auth._bcrypt(b"wrong", hashed)
        """
    )
    assert "bcrypt" in loaded


def test_listed_subcommands_match_their_own_help() -> None:
    """The help `wattbit --help` shows for an unimported subcommand is that subcommand's own."""

    def helps(p: object) -> dict[str, str]:
        sub = next(a for a in p._actions if a.dest == "command")  # type: ignore[attr-defined]
        return {c.dest: c.help for c in sub._choices_actions}

    assert helps(cli.parser("")) == helps(cli.parser(None))
    assert set(cli.OTHERS) <= set(helps(cli.parser("")))


def test_the_web_config_models_load_only_with_a_web_config(tmp_path: Path) -> None:
    """`wattbit agent` without --web-config never imports collector.web.config (pydantic models
    built at import, issue 35); with one it loads and validates it as before."""
    agent = tmp_path / "agent.yml"
    agent.write_text("cpu:\n  enabled: true\n")
    web = tmp_path / "web.yml"
    web.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    bad = tmp_path / "bad-web.yml"
    bad.write_text("no_such_key: 1\n")
    script = textwrap.dedent(
        f"""
        import sys
        from collector import cli
        from collector.agent import main
        from collector.agent.config import AgentConfig
        import collector.daemon.serve
        args = cli.parser("agent").parse_args(["agent", "--config", {str(agent)!r}])
        cfg, web = cli._load(AgentConfig, args)
        assert web is None and cfg.cpu.enabled
        print("without:", "collector.web.config" in sys.modules)
        args = cli.parser("agent").parse_args(
            ["agent", "--config", {str(agent)!r}, "--web-config", {str(web)!r}])
        cfg, web = cli._load(AgentConfig, args)
        print("with:", "collector.web.config" in sys.modules,
              dict(web.http_server_config.headers))
        print("bad:", cli.main(["agent", "--config", {str(agent)!r}, "--web-config", {str(bad)!r}]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "without: False", out
    assert lines[1] == "with: True {'X-Frame-Options': 'deny'}", out
    assert lines[2] == "bad: 2", out  # a bad web config still exits 2 before anything starts
    assert "no_such_key" in out.stderr


def test_the_config_models_load_no_pydantic_plugins() -> None:
    """pydantic's plugin loader (importlib.metadata, a scan of every installed distribution's
    entry points: ~18 ms of importing the config models) is never imported for wattbit's
    models (exporters.strict); a config still validates and still refuses an unknown key."""
    script = textwrap.dedent(
        """
        import sys
        from collector.agent.config import AgentConfig
        cfg = AgentConfig.model_validate({"blockio": {"backend": "core"}})
        assert cfg.blockio.backend == "core"
        try:
            AgentConfig.model_validate({"blokio": {}})
        except Exception as exc:
            assert "blokio" in str(exc), exc
        else:
            raise AssertionError("an unknown key passed")
        loader = sys.modules["pydantic.plugin._loader"]
        assert list(loader.get_plugins()) == []
        print("metadata:", "importlib.metadata" in sys.modules, loader.__doc__)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == (
        "metadata: False wattbit: no pydantic plugins (exporters.strict)"
    ), out
