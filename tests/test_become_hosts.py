"""Logins other than root, end to end on real systemd test hosts.

Every test host has two logins besides root (tests/hosts/rootfs.py): `deploy`, which may run
anything as root through sudo without a password, and `nosudo`, which may not. As `deploy`,
apply, status and rollback work through `sudo -n` (the inventory's `user` is all it takes). As
`nosudo`, apply and rollback are refused before anything changes (exit 2, naming the user, the
host and what is missing) while the running server is polled and never misses a health check;
status still reports the healthy server. Also here, because they need a live host and nothing
else: the unit's `deploy.user` reading config.json with its own rights, a port held by another
process named with its pid and command, `/ready` answering 404, and `status` while the unit
restarts printing no SSH library noise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.faults import HealthPoller, inventory_via
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port
from tests.variants import write_variants

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
HOST, NEW = "ct129", "a6000-new"  # SGLang 0.5.11, and 0.5.23 built without /ready
PORT, NEW_PORT = free_port(), free_port()
STATE = "/var/lib/sgdeploy/sglang"
UNIT_FILE = "/etc/systemd/system/sglang.service"


@dataclass
class Site:
    hs: HostSet
    profiles: dict[str, Path]
    inventories: dict[str, Path]  # login -> an inventory that connects as it


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("become")
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    with booted_or_skipped([HostSpec.like(HOST, sim=fast), HostSpec.like(
            NEW, sim=SimSettings(startup_s=1.0, release_delay_s=0.5, ready_endpoint=False))]) as hs:
        profiles = write_variants(folder, PORT, broken_timeout_s=5)
        small = (f'[deploy]\nhost = "{NEW}"\nunit = "sglang"\npython = "/root/ml-env/bin/python3"\n\n'
                 f'[server]\nmodel_path = "/root/models/Qwen3-8B"\ntp_size = 2\nport = {NEW_PORT}\n')
        (folder / "no-ready.toml").write_text(small)
        profiles["no-ready"] = folder / "no-ready.toml"
        inventories = {user: inventory_via(hs.inventory_path, folder / f"{user}.toml", HOST, user=user)
                       for user in ("deploy", "nosudo")}
        inventories["root"] = hs.inventory_path
        yield Site(hs, profiles, inventories)


def sgdeploy(site: Site, login: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    extra = ["--settle", "1"] if args[0] in ("apply", "rollback") else []
    code = cli.main([*args, "--inventory", str(site.inventories[login]), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def main_pid(site: Site) -> str:
    return site.hs.ssh(HOST, "systemctl show -p MainPID --value sglang.service").stdout.strip()


def installed(site: Site) -> str:
    return (site.hs[HOST].root / UNIT_FILE.lstrip("/")).read_text()


def test_sudo_user_applies_reports_and_rolls_back(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    code, first = sgdeploy(site, "deploy", capsys, "apply", str(site.profiles["good"]))
    assert code == 0, first["message"]
    code, status = sgdeploy(site, "deploy", capsys, "status", str(site.profiles["good"]))
    assert code == 0 and status["healthy"], status
    code, other = sgdeploy(site, "deploy", capsys, "apply", str(site.profiles["other"]))
    assert code == 0, other["message"]
    code, back = sgdeploy(site, "deploy", capsys, "rollback", str(site.profiles["good"]),
                          "--to", first["deployment_id"])
    assert code == 0, back["message"]
    assert installed(site) == (site.hs[HOST].root / STATE.lstrip("/") / first["deployment_id"]
                               / "unit.service").read_text()
    # every change went through sudo, as root: the unit file and the records are root's
    assert "by (uid=1001)" in site.hs.ssh(HOST, "journalctl _COMM=sudo --no-pager").stdout
    assert site.hs.ssh(HOST, f"stat -c %U {UNIT_FILE} {STATE}/last_good").stdout.split() == ["root", "root"]


def test_user_without_sudo_changes_nothing(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = sgdeploy(site, "root", capsys, "apply", str(site.profiles["good"]))
    assert code == 0, doc["message"]
    before = (main_pid(site), installed(site), sorted(p.name for p in (site.hs[HOST].root / STATE.lstrip("/"))
                                                      .iterdir()))
    with HealthPoller(PORT) as poll:
        results = {what: sgdeploy(site, "nosudo", capsys, *args) for what, args in {
            "apply": ("apply", str(site.profiles["other"])),
            "rollback": ("rollback", str(site.profiles["good"])),
            "status": ("status", str(site.profiles["good"]))}.items()}
    refusal = ("user nosudo on ct129 cannot write /etc/systemd/system and has no passwordless sudo "
               "(sudo: a password is required)")
    for what in ("apply", "rollback"):
        code, doc = results[what]
        assert code == 2 and doc["status"] == "refused", (what, doc["message"])
        assert doc["message"].startswith(refusal) and "nothing was changed" in doc["message"], doc["message"]
    code, status = results["status"]
    assert code == 0 and status["healthy"], status  # it can read; it never says nothing runs
    assert poll.checks > 5 and poll.failed == 0, poll.failures
    assert (main_pid(site), installed(site), sorted(p.name for p in (site.hs[HOST].root / STATE.lstrip("/"))
                                                    .iterdir())) == before


def test_config_json_is_read_with_the_units_rights(site: Site, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """deploy.user = nosudo cannot read the model (root's, mode 0700): refused before anything
    changes (SGD704), though root, who reads the facts, could read it."""
    site.hs.make_model(HOST, "/root/models/private", "Qwen3ForCausalLM", max_position_embeddings=40960)
    site.hs.ssh(HOST, "chmod 700 /root/models/private")
    profile = tmp_path / "as-nosudo.toml"
    profile.write_text(site.profiles["good"].read_text()
                       .replace('unit = "sglang"\n', 'unit = "sglang"\nuser = "nosudo"\n')
                       .replace('"/root/models/Qwen3.6-27B"', '"/root/models/private"'))
    code, doc = sgdeploy(site, "deploy", capsys, "apply", str(profile))
    assert code == 2, doc["message"]
    found = [d for d in doc["diagnostics"] if d["rule"] == "SGD704"]
    assert found and "cannot be read by user nosudo" in found[0]["message"], doc["diagnostics"]
    assert "PermissionError" in found[0]["message"]


def test_status_while_the_unit_restarts_shows_no_ssh_library_noise(site: Site) -> None:
    """`systemctl restart`, then status at once: the refused tunnel is a sentence, not Paramiko's line."""
    cli_args = [sys.executable, "-m", "sgdeploy", "apply", str(site.profiles["good"]), "--inventory",
                str(site.inventories["deploy"]), "--settle", "1"]
    assert subprocess.run(cli_args, capture_output=True, text=True, cwd=REPO).returncode == 0
    site.hs.ssh(HOST, "systemctl restart --no-block sglang.service")
    status = subprocess.run([sys.executable, "-m", "sgdeploy", "status", str(site.profiles["good"]),
                             "--inventory", str(site.inventories["deploy"])], capture_output=True, text=True,
                            cwd=REPO)
    assert "Secsh" not in status.stderr + status.stdout and "FAILED" not in status.stderr, status.stderr
    assert status.returncode in (0, 1), status.stderr
    if status.returncode == 1:  # caught while starting: said in a sentence
        assert "nothing listens" in status.stdout or "still starting" in status.stdout, status.stdout


def test_port_held_by_another_process_names_it(site: Site, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    profile = tmp_path / "held.toml"
    profile.write_text(site.profiles["good"].read_text().replace(f"port = {PORT}", f"port = {port}")
                       .replace('unit = "sglang"', 'unit = "sglang-held"'))
    site.hs.ssh(HOST, f"systemd-run --quiet --unit=port-holder python3 -m http.server {port} --bind 127.0.0.1")
    try:
        site.hs.ssh(HOST, f"for i in $(seq 100); do ss -Hltn 'sport = :{port}' | grep -q . && exit 0; "
                          "sleep 0.05; done; exit 1")
        pid = site.hs.ssh(HOST, "systemctl show -p MainPID --value port-holder").stdout.strip()
        code, doc = sgdeploy(site, "deploy", capsys, "apply", str(profile))
    finally:
        site.hs.ssh(HOST, "systemctl stop port-holder", check=False)
    assert code == 2, doc["message"]
    found = [d["message"] for d in doc["diagnostics"] if d["rule"] == "SGD705"]
    assert found and f"by pid {pid} (" in found[0] and f"-m http.server {port} --bind 127.0.0.1, user root)" \
        in found[0], found


def test_ready_404_falls_back_to_health(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """An SGLang 0.5.23 build whose /ready answers 404: ready on /health, not at the deadline."""
    code, doc = sgdeploy(site, "root", capsys, "apply", str(site.profiles["no-ready"]))
    assert code == 0, doc["message"]
    warnings = [e["text"] for e in doc["events"] if e["event"] == "warning"]
    assert any("/ready" in w and "404" in w for w in warnings), warnings
    assert doc["timings"]["startup_s"] < 30
    code, status = sgdeploy(site, "root", capsys, "status", str(site.profiles["no-ready"]), "--host", NEW)
    assert code == 0 and status["health"]["path"] == "/health", status
