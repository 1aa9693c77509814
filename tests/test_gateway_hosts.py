"""Rollouts behind SGLang's real gateway (`smg` on this machine) in front of three private-network
test hosts: drained under client load, a failing host, the gateway away before and during the
rollout, a rollout cut off and run again, a port change that keeps each worker's registration and
sends the servers' own API key, a rollback, requests outlasting the drain timeout, and a host
without a gateway. The hosts and the gateway start once per module."""

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


SECRETS = "/etc/sglang/gateway-worker.yaml"


def profile(max_running: int, port: int = 30000, keyed: bool = False) -> str:
    secrets = f'\n[secrets]\nfile = "{SECRETS}"\nkeys = ["api_key"]\n' if keyed else ""
    return f"""[deploy]
host = "all"
unit = "sglang"
python = "/root/ml-env/bin/python3"
ready_timeout_s = 60

[server]
model_path = "{MODEL}"
host = "0.0.0.0"
port = {port}
max_running_requests = {max_running}
{secrets}"""


class Fleet:
    def __init__(self, hs: HostSet, gateway: Gateway, folder: Path) -> None:
        self.hs, self.gateway, self.folder = hs, gateway, folder
        self.inventory = folder / "inventory.toml"
        self.write_inventory(gateway.url)

    def write_inventory(self, url: str, path: Path | None = None, fronts: str = '"all"') -> Path:
        text = Path(self.hs.inventory_path).read_text()
        text += f'\n[gateways.front]\nurl = "{url}"\napi_key_env = "{KEY_ENV}"\nhosts = [{fronts}]\n'
        (path or self.inventory).write_text(text)
        return path or self.inventory

    def url(self, host: str, port: int = 30000) -> str:
        return f"http://{self.hs[host].address}:{port}"

    def profile(self, max_running: int, port: int = 30000, keyed: bool = False) -> Path:
        path = self.folder / (f"p{max_running}" + (f"-{port}" if port != 30000 else "") + ("-keyed" if keyed else "")
                              + ".toml")
        path.write_text(profile(max_running, port, keyed))
        return path

    def main_pid(self, host: str) -> str:
        return self.hs.ssh(host, "systemctl show -p MainPID --value sglang.service").stdout.strip()

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
    assert code == 0, [(r["host"], r["status"], r["message"], r.get("gateway")) for r in result["hosts"]]
    assert result["hosts"][0]["host"] == NAMES[0]  # out of rotation: first
    assert fleet.states() == dict.fromkeys(NAMES, "ready")
    assert all("max-running-requests 12" in fleet.cmdline(h) for h in NAMES)


OPERATOR = {"priority": 70, "cost": 2.0, "health": {"drain_settle_secs": 1}}  # what an operator set, per worker


def set_by_the_operator(fleet: Fleet) -> None:
    """Registration settings the gateway keeps per worker, given as an operator registers a worker
    (smg 1.13's PATCH changes a health override without showing it in GET /workers)."""
    for worker in fleet.gateway.workers().values():
        fleet.gateway.request("DELETE", f"/workers/{worker['id']}")
    assert gone(fleet, [fleet.url(n) for n in NAMES])
    for name in NAMES:
        status, said = fleet.gateway.request("POST", "/workers", {"url": fleet.url(name), **OPERATOR,
                                                                  "labels": {"zone": f"z-{name}"}})
        assert status == 202, said
    fleet.gateway.wait_ready([fleet.url(n) for n in NAMES])


def as_the_operator_set_it(worker: dict[str, Any], name: str) -> bool:
    return (worker["status"] == "ready" and worker["priority"] == 70 and worker["cost"] == 2.0
            and worker["labels"].get("zone") == f"z-{name}" and worker.get("health", {}).get("drain_settle_secs") == 1)


def gone(fleet: Fleet, urls: list[str], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(u in fleet.gateway.workers() for u in urls):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_port_change_moves_each_worker_with_its_registration_and_the_servers_key(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """The new profile listens on 30001 with SGLang's own API key: each worker is taken out at the
    port its server runs on and registered at the new one with what the operator had set, and
    the key read on the host (the gateway's key, so that clients' requests pass on to it)."""
    deployed(fleet, capsys, 12)
    set_by_the_operator(fleet)
    key = os.environ[KEY_ENV]
    for name in NAMES:
        fleet.hs.ssh(name, f"mkdir -p /etc/sglang && umask 077 && printf 'api-key: %s\\n' {key} > {SECRETS}")
    load = ClientLoad(fleet.gateway.url, rate=20.0, api_key=fleet.gateway.api_key).start()
    time.sleep(0.5)
    code = cli.main(["apply", str(fleet.profile(12, 30001, keyed=True)), "--inventory", str(fleet.inventory),
                     "--json", "--settle", "0.5", "--no-sglang-check"])
    captured = capsys.readouterr()
    summary = load.stop()
    result = json.loads(captured.out)
    assert code == 0, result
    assert summary.failed == 0, summary.failures[:5]
    assert key not in captured.out + captured.err
    assert gone(fleet, [fleet.url(n) for n in NAMES])
    known = fleet.gateway.workers()
    for row in result["hosts"]:
        name, rotation = row["host"], row["gateway"]
        assert rotation["removed_url"] == fleet.url(name) and rotation["worker_url"] == fleet.url(name, 30001)
        assert rotation["worker_api_key"] and rotation["restored"]["priority"] == 70
        assert as_the_operator_set_it(known[fleet.url(name, 30001)], name), known[fleet.url(name, 30001)]
        unkeyed = fleet.hs.ssh(name, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30001/v1/models",
                               check=False).stdout
        assert unkeyed == "401"  # the server does take a key: the gateway reached it with the one sent


def test_a_rollback_behind_the_gateway_drains_and_registers_the_restored_server(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """`rollback --to` the port-30000 deployment without a key, on the second host, under load."""
    second = NAMES[1]
    cli.main(["history", "--host", second, "--unit", "sglang", "--inventory", str(fleet.inventory), "--json"])
    history = json.loads(capsys.readouterr().out)
    target = next(d["id"] for d in history["deployments"] if d["profile"] == "p12" and d["outcome"] == "ready")
    load = ClientLoad(fleet.gateway.url, rate=20.0, api_key=fleet.gateway.api_key).start()
    time.sleep(0.5)
    code = cli.main(["rollback", "--host", second, "--unit", "sglang", "--to", target, "--inventory",
                     str(fleet.inventory), "--json", "--settle", "0.5"])
    result = json.loads(capsys.readouterr().out)
    summary = load.stop()
    assert code == 0, result
    assert summary.failed == 0, summary.failures[:5]
    rotation = result["gateway"]
    assert rotation["taken_out"] and rotation["removed_url"] == fleet.url(second, 30001)
    assert rotation["worker_url"] == fleet.url(second) and not rotation["worker_api_key"]
    assert gone(fleet, [fleet.url(second, 30001)])
    assert as_the_operator_set_it(fleet.gateway.workers()[fleet.url(second)], second)


def test_requests_running_at_the_drain_timeout_keep_their_server(fleet: Fleet,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A long generation on the canary's server outlasts --drain-timeout: the host is refused, its
    worker registered again as it was, its server (and the request) untouched."""
    deployed(fleet, capsys, 12)
    first = NAMES[0]
    pid = fleet.main_pid(first)
    long = ClientLoad(fleet.url(first), rate=1.0, tokens=3200, api_key=None)
    stream = threading.Thread(target=long._one, args=(True,))
    stream.start()
    time.sleep(0.5)
    code, result = apply(fleet, capsys, fleet.profile(16), "--drain-timeout", "1")
    stream.join(30)
    assert code == 2, result
    row = result["hosts"][0]
    assert row["host"] == first and row["status"] == "refused"
    assert "running after the drain timeout (1 s)" in row["message"] and "nothing was stopped" in row["message"]
    assert row["gateway"]["taken_out"] and row["gateway"]["back"] and row["gateway"]["after"] == "ready"
    assert [r["status"] for r in result["hosts"][1:]] == ["not started", "not started"]
    assert fleet.main_pid(first) == pid
    assert long.summary.sent == 1 and long.summary.failed == 0, long.summary.failures  # its stream ran to the end
    assert as_the_operator_set_it(fleet.gateway.workers()[fleet.url(first)], first)


def test_hosts_without_a_gateway_are_restarted_plainly_unless_the_gateway_routes_to_them(
        fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    deployed(fleet, capsys, 12)
    partial = fleet.write_inventory(fleet.gateway.url, fleet.folder / "partial.toml", '"w1", "w2"')
    before = {h: fleet.cmdline(h) for h in NAMES}
    code, _ = apply(fleet, capsys, fleet.profile(16), inventory=partial)
    assert code == 2  # the gateway routes to w3, which the inventory does not put behind it
    assert {h: fleet.cmdline(h) for h in NAMES} == before
    third = fleet.gateway.workers()[fleet.url("w3")]
    fleet.gateway.request("DELETE", f"/workers/{third['id']}")
    assert gone(fleet, [fleet.url("w3")])
    code, result = apply(fleet, capsys, fleet.profile(16), inventory=partial)
    assert code == 0, result
    rows = {r["host"]: r for r in result["hosts"]}
    assert rows["w3"]["gateway"] is None and rows["w3"]["status"] == "ready"
    assert rows["w1"]["gateway"]["taken_out"] and rows["w2"]["gateway"]["taken_out"]
    assert all("max-running-requests 16" in fleet.cmdline(h) for h in NAMES)
    assert fleet.states() == {"w1": "ready", "w2": "ready", "w3": "absent"}


def test_a_multinode_launch_drains_rank_0_and_never_the_last_worker(fleet: Fleet,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """nnodes = 3 on the three hosts: rank 0 alone will serve, so ranks 1 and 2 still routed to are
    refused first; with them out of the gateway, rank 0 is its last worker: refused before any
    node stops (the drain hook runs in the multi-node transaction, after every node's checks)."""
    deployed(fleet, capsys, 12)
    path = fleet.folder / "mn.toml"
    path.write_text(profile(12).replace("max_running_requests = 12", "max_running_requests = 12\nnnodes = 3\n"
                                        "tp_size = 6"))
    pids = {h: fleet.main_pid(h) for h in NAMES}
    code = cli.main(["apply", str(path), "--inventory", str(fleet.inventory), "--json", "--no-sglang-check"])
    assert code == 2 and "rank 1" in capsys.readouterr().err
    for name in NAMES[1:]:
        fleet.gateway.request("DELETE", f"/workers/{fleet.gateway.workers()[fleet.url(name)]['id']}")
    assert gone(fleet, [fleet.url(n) for n in NAMES[1:]])
    code, result = apply(fleet, capsys, path)
    assert code == 2, result
    assert all("last worker" in r["message"] and "no node was stopped" in r["message"] for r in result["hosts"]
               if r["host"] == NAMES[0]), result["hosts"]
    assert set(result["gateway"]) == {NAMES[0]} and result["gateway"][NAMES[0]]["after"] == "ready"
    assert {h: fleet.main_pid(h) for h in NAMES} == pids
