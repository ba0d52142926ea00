"""docker-compose.yml, validated without a container engine.

`docker-compose config -q` (Debian's docker-compose v1), then on the configuration it resolves:
every bind-mounted path and secret file exists, `promtool check config` on the Prometheus
configuration the stack mounts (its container paths mapped back onto the repository, so the
rule files it loads are the real alerts/*.yml), `amtool check-config` on Alertmanager's,
Grafana's provisioning points at the dashboards that exist and at the Prometheus service, and
every image is pinned. The `longterm` profile: VictoriaMetrics, and the Prometheus configuration
that remote-writes to it (PROMETHEUS_CONFIG=prometheus-longterm.yml), checked the same way and
kept equal to prometheus.yml in everything but the external label and the remote_write.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.env import require

ROOT = Path(__file__).resolve().parents[2]
LONGTERM = "prometheus-longterm.yml"


def _compose(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    require(shutil.which("docker-compose") is not None, "docker-compose is not installed")
    secrets = tmp_path / "secrets"
    if not secrets.exists():
        r = subprocess.run(
            [str(ROOT / "deploy/compose/init-secrets.sh"), str(secrets)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr
    environ = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    environ.update(env or {}, WATTBIT_SECRETS_DIR=str(secrets))
    return subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environ,
        timeout=120,
    )


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("compose")
    r = _compose(tmp, "--profile", "demo", "--profile", "longterm", "config")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    doc["_tmp"] = tmp
    return dict(doc)


def test_config_is_valid(tmp_path: Path) -> None:
    r = _compose(tmp_path, "config", "-q")
    assert r.returncode == 0, r.stderr
    r = _compose(tmp_path, "--profile", "demo", "config", "-q")
    assert r.returncode == 0, r.stderr
    r = _compose(tmp_path, "--profile", "longterm", "config", "-q",
                 env={"PROMETHEUS_CONFIG": LONGTERM, "WATTBIT_SITE": "lab-a"})  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_services(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(services) >= {
        "prometheus",
        "alertmanager",
        "grafana",
        "node-exporter",
        "agent",
        "collector",
        "pdusim",
        "victoriametrics",
    }
    assert services["pdusim"].get("profiles") == ["demo"]
    assert services["victoriametrics"].get("profiles") == ["longterm"]
    agent = services["agent"]
    assert agent["network_mode"] == "host"
    assert {"BPF", "PERFMON"} <= set(agent["cap_add"])
    assert not agent.get("privileged"), "capabilities, not privileged: docs/deploy.md"


def _binds(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            if v.get("type") == "bind":
                out.append((v["source"], v["target"]))
        else:
            src, dst = v.split(":")[:2]
            if src.startswith(("/", ".")):
                out.append((src, dst))
    return out


def test_every_mounted_path_exists(resolved: dict[str, Any]) -> None:
    host_paths = ("/lib/modules", "/usr/src", "/sys/kernel", "/")  # the host's, not ours
    for name, svc in resolved["services"].items():
        for src, _ in _binds(svc):
            if any(src == p or src.startswith(p + "/") for p in host_paths[:3]) or src == "/":
                continue
            assert Path(src).exists(), f"{name}: {src} does not exist"
            assert Path(src).resolve().is_relative_to(ROOT), f"{name}: {src} outside the repo"
    for name, sec in resolved.get("secrets", {}).items():
        assert Path(sec["file"]).is_file(), f"secret {name}: {sec['file']} missing"
        assert Path(sec["file"]).stat().st_mode & 0o077 == 0, f"secret {name} not 0600"


def test_secrets_are_files_not_inline(resolved: dict[str, Any]) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert not re.search(r"(?i)(password|token|community|secret)\s*[:=]\s*['\"]?\w{6,}", text)
    grafana = resolved["services"]["grafana"]["environment"]
    assert grafana["GRAFANA_ADMIN_PASSWORD_FILE"].startswith("/run/secrets/")
    assert not any(k.endswith("__FILE") for k in grafana)  # the image's run.sh would read it
    cfg = yaml.safe_load((ROOT / "deploy/compose/collector.yml").read_text())
    for auth in cfg["auths"].values():
        assert "community" not in auth and "auth_key" not in auth
    assert cfg["runs"]["token_file"].startswith("/run/secrets/")


def test_images_are_pinned(resolved: dict[str, Any]) -> None:
    for name, svc in resolved["services"].items():
        image = svc["image"]
        tag = image.rsplit(":", 1)[-1] if ":" in image else ""
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {image} is not pinned"
    base = re.search(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert base and re.search(r":\d+\.\d+", base.group(1)), "Dockerfile base image not pinned"


def _mapped(service: dict[str, Any], container_path: str) -> Path:
    """The repository path that a container path of a service comes from."""
    best = ("", "")
    for src, dst in _binds(service):
        if (container_path == dst or container_path.startswith(dst.rstrip("/") + "/")) and len(
            dst
        ) > len(best[1]):
            best = (src, dst)
    assert best[0], f"{container_path} is not mounted"
    return Path(best[0] + container_path[len(best[1]) :])


@pytest.mark.parametrize("config", ["prometheus.yml", LONGTERM])
def test_promtool_checks_the_mounted_prometheus_config(
    resolved: dict[str, Any], tmp_path: Path, config: str
) -> None:
    require(shutil.which("promtool") is not None, "promtool is not installed")
    prom = resolved["services"]["prometheus"]
    cfg_path = _mapped(prom, f"/etc/prometheus/{config}")
    cfg = yaml.safe_load(cfg_path.read_text())
    # map every container path the configuration names back onto the repository
    rules = [str(_mapped(prom, f)) for f in cfg["rule_files"]]
    assert any(list(Path(r).parent.glob(Path(r).name)) for r in rules), "no rule file matched"
    cfg["rule_files"] = rules
    for job in cfg["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(_mapped(prom, f)) for f in sd["files"]]
            for f in sd["files"]:
                assert Path(f).is_file(), f
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(["promtool", "check", "config", str(local)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr
    jobs = {j["job_name"] for j in cfg["scrape_configs"]}
    assert jobs == {"wattbit-agent", "wattbit-collector", "node"}
    collector = next(j for j in cfg["scrape_configs"] if j["job_name"] == "wattbit-collector")
    assert collector["honor_labels"] is True
    assert collector["static_configs"][0]["targets"] == ["collector:9732"]
    am = cfg["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"]


def test_the_longterm_profile_writes_to_victoriametrics(tmp_path: Path) -> None:
    """PROMETHEUS_CONFIG picks the file; it names its site and writes to the profile's store."""
    r = _compose(tmp_path, "--profile", "longterm", "config",
                 env={"PROMETHEUS_CONFIG": LONGTERM, "WATTBIT_SITE": "lab-a"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    services = yaml.safe_load(r.stdout)["services"]
    prom, vm = services["prometheus"], services["victoriametrics"]
    assert f"--config.file=/etc/prometheus/{LONGTERM}" in prom["command"]
    assert "--enable-feature=expand-external-labels" in prom["command"]
    assert prom["environment"]["WATTBIT_SITE"] == "lab-a"
    cfg = yaml.safe_load(_mapped(prom, f"/etc/prometheus/{LONGTERM}").read_text())
    assert cfg["global"]["external_labels"] == {"site": "${WATTBIT_SITE}"}
    (rw,) = cfg["remote_write"]
    m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)/api/v1/write", rw["url"])
    assert m and m.group(1) == "victoriametrics", rw["url"]
    assert f"-httpListenAddr=:{m.group(2)}" in vm["command"]
    targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in vm["volumes"]]
    assert "/storage" in targets, vm["volumes"]
    assert "-storageDataPath=/storage" in vm["command"]
    # everything else as in prometheus.yml
    base = yaml.safe_load(_mapped(prom, "/etc/prometheus/prometheus.yml").read_text())
    for c in (cfg, base):
        c["global"].pop("external_labels", None)
        c.pop("remote_write", None)
    assert cfg == base
    # without the profile's variable the stack keeps the plain configuration
    r = _compose(tmp_path, "config")
    plain = yaml.safe_load(r.stdout)["services"]["prometheus"]["command"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in plain


def test_amtool_checks_the_mounted_alertmanager_config(resolved: dict[str, Any]) -> None:
    require(shutil.which("amtool") is not None, "amtool is not installed")
    am = resolved["services"]["alertmanager"]
    path = _mapped(am, "/etc/alertmanager/alertmanager.yml")
    r = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_collector_config_validates(resolved: dict[str, Any], tmp_path: Path) -> None:
    from collector.config import load_model
    from collector.site.config import CollectorConfig

    svc = resolved["services"]["collector"]
    text = _mapped(svc, "/etc/wattbit/collector.yml").read_text()
    secrets = resolved["_tmp"] / "secrets"
    local = tmp_path / "collector.yml"
    local.write_text(text.replace("/run/secrets/", f"{secrets}/"))
    cfg = load_model(CollectorConfig, local)
    assert cfg.pdus and all(p.outlets for p in cfg.pdus)
    from collector.agent.config import AgentConfig

    load_model(AgentConfig, _mapped(resolved["services"]["agent"], "/etc/wattbit/agent.yml"))


def test_grafana_provisioning_points_at_existing_dashboards(resolved: dict[str, Any]) -> None:
    grafana = resolved["services"]["grafana"]
    prov = _mapped(grafana, "/etc/grafana/provisioning")
    providers = yaml.safe_load((prov / "dashboards" / "wattbit.yml").read_text())["providers"]
    for p in providers:
        folder = _mapped(grafana, p["options"]["path"])
        dashboards = sorted(folder.glob("*.json"))
        assert dashboards, f"no dashboards in {folder}"
        for d in dashboards:
            doc = json.loads(d.read_text())
            assert doc.get("uid") and doc.get("panels"), d
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert _mapped(grafana, home).is_file()
    sources = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())
    url = sources["datasources"][0]["url"]
    m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", url)
    assert m and m.group(1) in resolved["services"], url
    assert m.group(2) == "9090"


# --- issue 26, 8: the stack as it starts: each service's user and its secrets -----------------

# The user each image runs as when the service sets no `user:` (their Dockerfiles' USER):
# Grafana 472 (https://grafana.com/docs/grafana/latest/setup-grafana/installation/docker/),
# prom/* nobody, VictoriaMetrics and wattbit's own image (no USER in ./Dockerfile) root.
IMAGE_USERS = {"grafana/grafana": 472, "prom/": 65534, "victoriametrics/": 0, "wattbit:": 0}


def _uid(service: dict[str, Any]) -> int:
    if "user" in service:
        return int(str(service["user"]).split(":")[0])
    image = service["image"]
    found = [uid for prefix, uid in IMAGE_USERS.items() if image.startswith(prefix)]
    assert len(found) == 1, f"{image}: which user does it run as? (IMAGE_USERS)"
    return found[0]


def _can_read_as(uid: int, path: Path) -> bool:
    """Can `uid` (no supplementary groups) open the file, as the process in the container?"""
    r = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "cat", str(path)],
        capture_output=True,
    )
    return r.returncode == 0


def _secrets_dir() -> Path:
    """init-secrets.sh's files in a directory every uid may traverse (a bind mount skips the
    host's directories: only the file's own owner and mode count in the container)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="wattbit-secrets-", dir="/tmp"))
    d.chmod(0o711)
    secrets = d / "secrets"
    r = subprocess.run(
        [str(ROOT / "deploy/compose/init-secrets.sh"), str(secrets)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    secrets.chmod(0o711)
    return secrets


def test_every_service_reads_exactly_its_own_secrets(resolved: dict[str, Any]) -> None:
    """Each service of every profile, as its user: its own secrets readable, no other one.

    A service reads a secret when it is mounted into it and its uid can open the file. Before
    init-secrets.sh gave Grafana's file to uid 472 every file was 0600 root: Grafana could not
    read its password (and started with the default one, see below).
    """
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None, "needs root and setpriv")
    secrets = _secrets_dir()
    try:
        names = sorted(resolved["secrets"])
        for name, svc in sorted(resolved["services"].items()):
            uid = _uid(svc)
            own = {s if isinstance(s, str) else s["source"] for s in svc.get("secrets", [])}
            for secret in names:
                readable = secret in own and _can_read_as(uid, secrets / secret)
                assert readable == (secret in own), (name, uid, secret)
        # and what nobody's mount hides: Grafana's user cannot open the others' files at all
        for secret in names:
            assert _can_read_as(472, secrets / secret) == (secret == "grafana_admin_password")
    finally:
        shutil.rmtree(secrets.parent)


def _grafana_start(password_file: Path) -> subprocess.CompletedProcess[str]:
    """deploy/compose/grafana-start.sh as Grafana's uid, with a stand-in for the image's
    /run.sh that says which admin password Grafana would have been given."""
    stub = password_file.parent.parent / "run.sh"  # a directory uid 472 can reach
    say = 'echo "grafana server with password <$GF_SECURITY_ADMIN_PASSWORD>"'
    stub.write_text(f"#!/bin/sh\n{say}\n")
    stub.chmod(0o755)
    return subprocess.run(
        ["setpriv", "--reuid=472", "--regid=472", "--clear-groups",
         "/bin/sh", str(ROOT / "deploy/compose/grafana-start.sh")],
        capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "GRAFANA_ADMIN_PASSWORD_FILE": str(password_file),
             "GRAFANA_RUN": str(stub)},
    )  # fmt: skip


def test_grafana_does_not_start_with_the_default_password() -> None:
    """Its password file unreadable or empty: the start fails instead of running as admin/admin."""
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None, "needs root and setpriv")
    secrets = _secrets_dir()
    try:
        password = (secrets / "grafana_admin_password").read_text().strip()
        ok = _grafana_start(secrets / "grafana_admin_password")
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == f"grafana server with password <{password}>"
        os.chown(secrets / "grafana_admin_password", 0, 0)  # as init-secrets.sh used to leave it
        refused = _grafana_start(secrets / "grafana_admin_password")
        assert refused.returncode != 0 and "grafana server" not in refused.stdout
        assert "cannot read an admin password" in refused.stderr and password not in refused.stderr
        (secrets / "grafana_admin_password").write_text("")
        os.chown(secrets / "grafana_admin_password", 472, 472)
        empty = _grafana_start(secrets / "grafana_admin_password")
        assert empty.returncode != 0 and "grafana server" not in empty.stdout
    finally:
        shutil.rmtree(secrets.parent)
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["grafana"]
    assert compose["entrypoint"][-1] == "/etc/wattbit/grafana-start.sh"


def test_every_locally_built_image_is_built(resolved: dict[str, Any]) -> None:
    """Compose v2 pulls an image a service names without `build:`: wattbit's is nowhere."""
    services = resolved["services"]
    local = {svc["image"] for svc in services.values() if "build" in svc}
    assert local, "no service builds the wattbit image"
    for name, svc in services.items():
        if svc["image"] in local or svc["image"].startswith("wattbit:"):
            assert "build" in svc, f"{name} uses the locally built {svc['image']} without build:"
