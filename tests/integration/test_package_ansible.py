"""The Ansible role (packaging/ansible/roles/wattbit) against a throwaway Debian 12 root,
through Debian's ansible with `connection: community.general.chroot` — never this machine's
own /etc: the role leaves the same files as the package installed by hand, plus the
configurations, secrets and Prometheus targets it was given (owners and modes as documented),
and a second run changes nothing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.debroot import DebRoot, built, installed_root
from tests.support.env import ROOT, require
from tests.support.realparts import have, is_root

pytestmark = [pytest.mark.root, pytest.mark.unshared, pytest.mark.timeout(1500)]

TOKEN = "ansible-tier-token-0123456789abcdef"
COMMUNITY = "ansible-tier-community"
# what two apt runs, a python3 running Ansible's modules and the role's copy of the package
# leave besides the package's own files; compared apart below
BOOKKEEPING = ("var/log/", "var/cache/apt/", "var/lib/apt/", "var/lib/dpkg/", "root/", "tmp/")


def _playbook(tmp: Path, root: DebRoot, deb: Path) -> tuple[Path, Path]:
    inventory = tmp / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "mover01": {
                            "ansible_connection": "community.general.chroot",
                            "ansible_host": str(root.path),
                            "ansible_python_interpreter": "/usr/bin/python3",
                        }
                    }
                }
            }
        )
    )
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "roles": ["wattbit"],
            "vars": {
                "wattbit_deb": str(deb),
                "wattbit_collector_enabled": True,
                "wattbit_collector_config": {
                    "listen": ":9732",
                    "state_dir": "/var/lib/wattbit",
                    "auths": {
                        "site": {
                            "version": "2c",
                            "community_file": "/etc/wattbit/secrets/snmp-community",
                        }
                    },
                    "pdus": [],
                    "runs": {"token_file": "/etc/wattbit/secrets/run-token"},
                },
                "wattbit_secrets": {"run-token": TOKEN, "snmp-community": COMMUNITY},
                "wattbit_prometheus_host": "mover01",  # the same root plays Prometheus' host
                "wattbit_scrape_address": "mover01.example.org",
                "wattbit_manage_service_state": False,  # no systemd runs in a chroot
            },
        }
    ]
    playbook = tmp / "site.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    return inventory, playbook


def _ansible(inventory: Path, playbook: Path) -> dict:
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(ROOT / "packaging/ansible/roles"),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="0",
        ANSIBLE_LOCAL_TEMP=str(playbook.parent / "ansible-tmp"),
    )
    r = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(playbook)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    return dict(json.loads(r.stdout)["stats"]["mover01"])


def _keep(files: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
    return {
        path: meta
        for path, meta in files.items()
        if not path.startswith(BOOKKEEPING) and "__pycache__" not in path
    }


def test_role_installs_configures_and_is_idempotent(tmp_path_factory: pytest.TempPathFactory):
    require(is_root(), "needs root (chroot)")
    require(have("ansible-playbook"), "ansible is missing (Debian's ansible, for its chroot)")
    packages = built()
    tmp = tmp_path_factory.mktemp("ansible")
    by_hand = installed_root(tmp_path_factory.getbasetemp())[1]  # files just after apt install
    target = DebRoot.fresh(tmp / "role")
    inventory, playbook = _playbook(tmp, target, packages["deb"])

    first = _ansible(inventory, playbook)
    assert first["failures"] == 0 and first["changed"] > 0
    second = _ansible(inventory, playbook)
    assert second["changed"] == 0 and second["failures"] == 0, second

    p = target.path
    uid = int(target.run("id", "-u", "wattbit").stdout)
    gid = int(target.run("id", "-g", "wattbit").stdout)
    expected_extra = {
        "etc/wattbit/secrets/run-token": (0o600, uid, gid),
        "etc/wattbit/secrets/snmp-community": (0o600, uid, gid),
        "etc/prometheus": None,
        "etc/prometheus/file_sd": None,
        "etc/prometheus/file_sd/wattbit-agent_mover01.yml": (0o644, 0, 0),
        "etc/prometheus/file_sd/wattbit-collector_mover01.yml": (0o644, 0, 0),
        "etc/systemd/system/multi-user.target.wants/wattbit-collector.service": None,
        "var/cache/wattbit": (0o755, 0, 0),
        f"var/cache/wattbit/{packages['deb'].name}": (0o644, 0, 0),
    }
    hand, role = _keep(by_hand), _keep(target.files())
    assert sorted(set(hand) - set(role)) == []
    assert sorted(set(role) - set(hand)) == sorted(expected_extra)
    for path, want in expected_extra.items():
        if want is not None:
            mode, u, g = role[path]
            assert (stat.S_IMODE(mode), u, g) == want, path
    # the package's own files: the same owners and modes either way, but for the two
    # configurations the role rewrote (readable by the wattbit group only)
    changed = {k for k in hand if hand[k] != role[k]}
    assert changed == {"etc/wattbit/agent.yml", "etc/wattbit/collector.yml"}, changed
    for conf in changed:
        assert (stat.S_IMODE(role[conf][0]), role[conf][1], role[conf][2]) == (0o640, 0, gid)

    assert (p / "etc/wattbit/secrets/run-token").read_text() == TOKEN + "\n"
    targets = yaml.safe_load((p / "etc/prometheus/file_sd/wattbit-agent_mover01.yml").read_text())
    assert targets == [{"targets": ["mover01.example.org:9731"], "labels": {"host": "mover01"}}]
    # the collector reads what the role wrote, as the wattbit user would
    cfg = target.run(
        "setpriv", "--reuid=wattbit", "--regid=wattbit", "--init-groups", "--",
        "wattbit", "collector", "--config", "/etc/wattbit/collector.yml", "--print-config",
    ).stdout  # fmt: skip
    assert TOKEN not in cfg and COMMUNITY not in cfg and "<redacted>" in cfg
