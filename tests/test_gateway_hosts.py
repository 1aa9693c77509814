"""Rollouts behind SGLang's real gateway (`smg` on this machine) in front of three private-network
test hosts: drained under client load, a failing host, the gateway away before and during the
rollout, and a rollout cut off and run again. The hosts and the gateway start once per module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, skip_reason, start_hosts
from tests.hosts.gateway import ClientLoad, Gateway, smg_missing, start_gateway

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
MODEL = "/root/models/Qwen3-8B"
NAMES = ("w1", "w2", "w3")
KEY_ENV = "SGDEPLOY_TEST_GATEWAY_KEY"


def profile(max_running: int) -> str:
    return f"""[deploy]
host = "all"
unit = "sglang"
python = "/root/ml-env/bin/python3"
ready_timeout_s = 60

[server]
model_path = "{MODEL}"
host = "0.0.0.0"
port = 30000
max_running_requests = {max_running}
"""


class Fleet:
    def __init__(self, hs: HostSet, gateway: Gateway, folder: Path) -> None:
        self.hs, self.gateway, self.folder = hs, gateway, folder
        self.inventory = folder / "inventory.toml"
        self.write_inventory(gateway.url)

    def write_inventory(self, url: str, path: Path | None = None) -> Path:
        text = Path(self.hs.inventory_path).read_text()
        text += f'\n[gateways.front]\nurl = "{url}"\napi_key_env = "{KEY_ENV}"\nhosts = ["all"]\n'
        (path or self.inventory).write_text(text)
        return path or self.inventory

    def url(self, host: str) -> str:
        return f"http://{self.hs[host].address}:30000"

    def profile(self, max_running: int) -> Path:
        path = self.folder / f"p{max_running}.toml"
        path.write_text(profile(max_running))
        return path

    def states(self) -> dict[str, str]:
        known = self.gateway.workers()
        return {h: known.get(self.url(h), {}).get("status", "absent") for h in NAMES}

    def cmdline(self, host: str) -> str:
        pid = self.hs.ssh(host, "systemctl show -p MainPID --value sglang.service").stdout.strip()
        return self.hs.ssh(host, f"tr '\\0' ' ' < /proc/{pid}/cmdline", check=False).stdout

    def restart_gateway(self) -> None:
        self.gateway.stop()
        port = int(self.gateway.url.rsplit(":", 1)[1])
        self.gateway = start_gateway(self.folder, self.gateway.api_key, port)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    reason = skip_reason() or smg_missing()
    if reason:
        pytest.skip(f"test hosts or gateway unavailable: {reason}")
    fast = SimSettings(startup_s=1.0, release_delay_s=0.3, tokens_per_s=400.0)
    hs = start_hosts([HostSpec.like("ct129", name=n, private_network=True, sim=fast) for n in NAMES], owner="pytest")
    folder = tmp_path_factory.mktemp("gateway")
    os.environ[KEY_ENV] = "gateway-admin-key"
    gateway = None
    try:
        for name in NAMES:
            hs.make_model(name, MODEL, "Qwen3ForCausalLM")
        gateway = start_gateway(folder, os.environ[KEY_ENV])
        f = Fleet(hs, gateway, folder)
        yield f
        gateway = f.gateway
    finally:
        if gateway is not None:
            gateway.stop()
        hs.close()
        os.environ.pop(KEY_ENV, None)


def apply(fleet: Fleet, capsys: pytest.CaptureFixture[str], path: Path, *extra: str,
          inventory: Path | None = None) -> tuple[int, dict[str, Any]]:
    code = cli.main(["apply", str(path), "--inventory", str(inventory or fleet.inventory), "--json",
                     "--settle", "0.5", "--no-sglang-check", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def no_failures(fleet: Fleet) -> None:
    for name in NAMES:
        fleet.hs.configure_sim(name, failure="", fail_when_arg=[])


def deployed(fleet: Fleet, capsys: pytest.CaptureFixture[str], max_running: int) -> None:
    """Every host runs `max_running` and is in rotation."""
    no_failures(fleet)
    code, result = apply(fleet, capsys, fleet.profile(max_running))
    assert code == 0, result
    assert fleet.states() == dict.fromkeys(NAMES, "ready")


def test_drained_rollout_under_client_load_fails_no_request(fleet: Fleet, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    deployed(fleet, capsys, 16)  # the first rollout adds the workers to the empty gateway
    code = cli.main(["plan", str(fleet.profile(12)), "--inventory", str(fleet.inventory), "--json",
                     "--no-sglang-check"])
    planned = json.loads(capsys.readouterr().out)
    assert code == 0, planned
    first = planned["rollout"]["hosts"][0]
    assert first["before"]["state"] == "ready"
    assert [s["step"] for s in first["steps"]][:2] == ["gateway_remove", "wait_drained"]
    assert fleet.states() == dict.fromkeys(NAMES, "ready")  # plan changed nothing
    load = ClientLoad(fleet.gateway.url, rate=20.0, api_key=fleet.gateway.api_key).start()
    time.sleep(1.0)
    code, result = apply(fleet, capsys, fleet.profile(12))
    time.sleep(1.0)
    summary = load.stop()
    assert code == 0, result
    assert summary.sent > 100 and summary.failed == 0, summary.failures[:5]
    rows = {r["host"]: r for r in result["hosts"]}
    for name in NAMES:
        assert rows[name]["status"] == "ready"
        assert rows[name]["gateway"]["taken_out"] and rows[name]["gateway"]["after"] == "ready"
        assert "max-running-requests 12" in fleet.cmdline(name)
    assert fleet.states() == dict.fromkeys(NAMES, "ready")


def test_failing_profile_on_the_second_host_is_rolled_back_and_put_back(fleet: Fleet,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    deployed(fleet, capsys, 12)
    second = fleet.hs.hosts[1].name
    fleet.hs.configure_sim(second, failure="graph_capture", fail_when_arg=["--max-running-requests=8"])
    code, result = apply(fleet, capsys, fleet.profile(8))
    assert code == 1, result
    rows = {r["host"]: r for r in result["hosts"]}
    first, third = result["hosts"][0]["host"], result["hosts"][2]["host"]
    assert result["stopped_at"] == second
    assert rows[first]["status"] == "ready" and rows[second]["status"] == "rolled_back"
    assert rows[third]["status"] == "not started"
    assert rows[second]["gateway"]["taken_out"] and rows[second]["gateway"]["after"] == "ready"
    assert "max-running-requests 12" in fleet.cmdline(second)
    assert fleet.states() == dict.fromkeys(NAMES, "ready")


def test_gateway_unreachable_before_the_rollout_refuses(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    deployed(fleet, capsys, 12)
    dead = fleet.write_inventory("http://127.0.0.1:9", fleet.folder / "dead.toml")
    before = {h: fleet.cmdline(h) for h in NAMES}
    code, _ = apply(fleet, capsys, fleet.profile(16), inventory=dead)
    assert code == 2
    assert {h: fleet.cmdline(h) for h in NAMES} == before
    code = cli.main(["status", str(fleet.profile(12)), "--inventory", str(dead), "--json"])
    status = json.loads(capsys.readouterr().out)
    assert code == 1
    assert all("does not answer" in (h["gateway"]["problem"] or "") for h in status["hosts"])


def test_gateway_lost_during_the_rollout_stops_safely(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    deployed(fleet, capsys, 12)
    second = fleet.url(fleet.hs.hosts[1].name)
    killer = threading.Thread(target=kill_when_draining, args=(fleet.gateway, second), daemon=True)
    killer.start()
    code, result = apply(fleet, capsys, fleet.profile(16))
    killer.join(60)
    assert code == 1, result
    rows = {r["host"]: r for r in result["hosts"]}
    first, name2, third = (r["host"] for r in result["hosts"])
    assert result["stopped_at"] == name2
    assert rows[first]["status"] == "ready" and rows[third]["status"] == "not started"
    # Lost while draining: nothing stopped; or after: deployed, not added back. Healthy either way.
    assert rows[name2]["status"] in ("refused", "ready"), rows[name2]
    assert fleet.hs.ssh(name2, "curl -sf http://127.0.0.1:30000/health", check=False).returncode == 0
    assert "max-running-requests 12" in fleet.cmdline(third)
    for row in rows.values():
        assert row["gateway"]["after"] == "unknown" and "does not answer" in row["gateway"]["problem"]
    fleet.restart_gateway()  # a fresh gateway knows no worker: the next apply adds them all back


def kill_when_draining(gateway: Gateway, url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if gateway.workers().get(url, {}).get("status") == "draining":
            gateway.stop()
            return
        time.sleep(0.05)


def test_interrupted_rollout_shows_in_status_and_a_rerun_converges(fleet: Fleet,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    deployed(fleet, capsys, 16)
    path = fleet.profile(12)
    argv = [sys.executable, "-m", "sgdeploy", "apply", str(path), "--inventory", str(fleet.inventory), "--json"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = fleet.url(NAMES[0])
    deadline = time.monotonic() + 60
    while fleet.gateway.workers().get(first, {}).get("status") == "ready" and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)  # cut off while its first worker is out of rotation
    proc.wait()
    code = cli.main(["status", str(path), "--inventory", str(fleet.inventory), "--json"])
    status = {h["host"]: h for h in json.loads(capsys.readouterr().out)["hosts"]}
    assert code == 1
    assert status[NAMES[0]]["gateway"]["state"] in ("absent", "draining")
    assert any("rotation" in p for p in status[NAMES[0]]["problems"])
    no_failures(fleet)
    code, result = apply(fleet, capsys, path)
    assert code == 0, result
    assert result["hosts"][0]["host"] == NAMES[0]  # out of rotation: first
    assert fleet.states() == dict.fromkeys(NAMES, "ready")
    assert all("max-running-requests 12" in fleet.cmdline(h) for h in NAMES)
