"""Fleets and multi-node SGLang end to end on three real systemd test hosts, each with its own
network namespace and address (so every host serves on the same port, as in production)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.faults import HealthPoller
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
QWEN3 = "/root/models/Qwen3-8B"
NAMES = ("n1", "n2", "n3")


def profile(host: str, *extra: str, tp: int = 1) -> str:
    lines = "\n".join(extra)
    return f"""[deploy]
host = "{host}"
unit = "sglang"
python = "/root/ml-env/bin/python3"
ready_timeout_s = 60

[server]
model_path = "{QWEN3}"
host = "0.0.0.0"
port = 30000
tp_size = {tp}
{lines}
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HostSet, Path]]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    with booted_or_skipped([HostSpec.like("ct129", name=n, private_network=True, sim=fast) for n in NAMES]) as hs:
        for name in NAMES:
            hs.make_model(name, QWEN3, "Qwen3ForCausalLM")
        inventory = tmp_path_factory.mktemp("fleet") / "inventory.toml"
        text = Path(hs.inventory_path).read_text()
        inventory.write_text(text.replace("[groups]", '[groups]\npair = ["n1", "n2"]'))
        yield hs, inventory


def run(inventory: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = cli.main([*args, "--inventory", str(inventory), "--json", "--settle", "1"])
    return code, json.loads(capsys.readouterr().out)


def no_failures(hs: HostSet) -> None:
    """Every simulated SGLang of the group starts normally."""
    for name in NAMES:
        hs.configure_sim(name, failure="", fail_when_arg=[])


def main_pid(hs: HostSet, host: str) -> str:
    return hs.ssh(host, "systemctl show -p MainPID --value sglang.service").stdout.strip()


def cmdline(hs: HostSet, host: str) -> str:
    pid = hs.ssh(host, "systemctl show -p MainPID --value sglang.service").stdout.strip()
    return hs.ssh(host, f"tr '\\0' ' ' < /proc/{pid}/cmdline", check=False).stdout


def test_rolling_apply_stops_at_the_failing_host(fleet: tuple[HostSet, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    hs, inventory = fleet
    no_failures(hs)
    v1, v2 = tmp_path / "v1.toml", tmp_path / "v2.toml"
    v1.write_text(profile("all", "max_running_requests = 16"))
    v2.write_text(profile("all", "max_running_requests = 12"))
    code, first = run(inventory, capsys, "apply", str(v1))
    assert code == 0, first
    assert [h["status"] for h in first["hosts"]] == ["ready", "ready", "ready"]

    hs.configure_sim("n2", failure="graph_capture", fail_when_arg=["--max-running-requests=12"])
    code, second = run(inventory, capsys, "apply", str(v2))
    assert code == 1, second
    rows = {h["host"]: h for h in second["hosts"]}
    assert rows["n1"]["status"] == "ready"
    assert rows["n2"]["status"] == "rolled_back"
    assert rows["n3"]["status"] == "not started"
    assert second["stopped_at"] == "n2"
    assert "max-running-requests 12" in cmdline(hs, "n1")
    assert "max-running-requests 16" in cmdline(hs, "n2")
    assert "max-running-requests 16" in cmdline(hs, "n3")


def test_multi_node_profile_comes_up(fleet: tuple[HostSet, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    hs, inventory = fleet
    no_failures(hs)
    path = tmp_path / "mn.toml"
    path.write_text(profile("pair", "nnodes = 2", tp=4))
    code, result = run(inventory, capsys, "apply", str(path))
    assert code == 0, result
    assert [h["status"] for h in result["hosts"]] == ["ready", "ready"]
    assert "--node-rank 0" in cmdline(hs, "n1") and "--node-rank 1" in cmdline(hs, "n2")
    rank0 = hs["n1"].address
    assert f"--dist-init-addr {rank0}:50000" in cmdline(hs, "n2")


def test_multi_node_rank_one_crash_rolls_back_both(fleet: tuple[HostSet, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    hs, inventory = fleet
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(profile("pair", "nnodes = 2", "max_running_requests = 16", tp=4))
    bad.write_text(profile("pair", "nnodes = 2", "max_running_requests = 8", tp=4))
    no_failures(hs)
    code, result = run(inventory, capsys, "apply", str(good))
    assert code == 0, result
    for name in ("n1", "n2"):
        hs.configure_sim(name, failure="graph_capture", fail_when_arg=["--node-rank=1", "--max-running-requests=8"])
    code, result = run(inventory, capsys, "apply", str(bad))
    assert code == 1, result
    assert {h["status"] for h in result["hosts"]} == {"rolled_back"}
    for name in ("n1", "n2"):
        assert "max-running-requests 16" in cmdline(hs, name)


def _two_nodes_deployed(hs: HostSet, inventory: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, str]]:
    """A two-node launch deployed on `pair`: the profile of a change to it, and each node's main pid."""
    no_failures(hs)
    good, other = tmp_path / "good.toml", tmp_path / "other.toml"
    good.write_text(profile("pair", "nnodes = 2", "max_running_requests = 16", tp=4))
    other.write_text(profile("pair", "nnodes = 2", "max_running_requests = 12", tp=4))
    code, result = run(inventory, capsys, "apply", str(good))
    assert code == 0, result
    return other, {name: main_pid(hs, name) for name in ("n1", "n2")}


def test_multi_node_stranger_on_rank_one_refuses_before_any_stop(fleet: tuple[HostSet, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A process outside the unit on a GPU of node 1: refused before anything stops, on every node."""
    hs, inventory = fleet
    other, pids = _two_nodes_deployed(hs, inventory, tmp_path, capsys)
    stray = hs.plant_stray("n2", gpu=1, mib=4000, name="other-team-job")
    try:
        with HealthPoller(30000, every_s=0.1, host=hs["n1"].address) as poll:
            code, result = run(inventory, capsys, "apply", str(other))
    finally:
        hs.ssh("n2", f"kill {stray}", check=False)
    assert code == 2, result
    found = [d for d in result["results"]["n2"]["diagnostics"] if d["rule"] == "SGD710"]
    assert found and f"pid {stray}" in found[0]["message"] and "other-team-job" in found[0]["message"], found
    assert "no node was changed" in result["results"]["n2"]["message"]
    assert {name: main_pid(hs, name) for name in ("n1", "n2")} == pids  # nothing stopped on any node
    assert poll.checks > 0 and not poll.failures, poll.failures
    assert "max-running-requests 16" in cmdline(hs, "n1") and "max-running-requests 16" in cmdline(hs, "n2")


def test_multi_node_sglang_check_refusing_on_rank_one_stops_no_node(fleet: tuple[HostSet, Path], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's own check runs on every node: one that does not answer on node 1 refuses the launch
    before any node stops (its time limit; a refusal ends the same way)."""
    hs, inventory = fleet
    other, pids = _two_nodes_deployed(hs, inventory, tmp_path, capsys)
    hs.configure_sim("n2", resolve_hang_s=60.0)
    try:
        code, result = run(inventory, capsys, "apply", str(other), "--sglang-check-timeout", "2")
    finally:
        hs.configure_sim("n2", resolve_hang_s=0.0)
    assert code == 2, result
    n2 = result["results"]["n2"]
    assert "no node was stopped" in n2["message"] and n2["failure"]["kind"] == "sglang_refused", n2
    assert any(d["rule"] == "SGD712" for d in n2["diagnostics"]), n2["diagnostics"]
    assert result["results"]["n1"]["status"] == "refused"
    assert {name: main_pid(hs, name) for name in ("n1", "n2")} == pids
    for name in ("n1", "n2"):
        assert "max-running-requests 16" in cmdline(hs, name)
        assert not hs.ssh(name, "ls -a /etc/systemd/system | grep sgdeploy || true").stdout.strip()


def test_status_and_history_across_a_group(fleet: tuple[HostSet, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    hs, inventory = fleet
    no_failures(hs)
    path = tmp_path / "v1.toml"
    path.write_text(profile("all", "max_running_requests = 16"))
    code, _ = run(inventory, capsys, "apply", str(path))
    assert code == 0
    code = cli.main(["status", str(path), "--inventory", str(inventory), "--json"])
    status = json.loads(capsys.readouterr().out)
    assert code == 0, status
    assert [h["host"] for h in status["hosts"]] == list(NAMES)
    code = cli.main(["history", str(path), "--inventory", str(inventory), "--json"])
    history = json.loads(capsys.readouterr().out)
    assert code == 0
    assert all(h["last_good"] for h in history["hosts"])
    code = cli.main(["status", str(path), "--inventory", str(inventory), "--host", "n2"])
    assert code == 0
    assert "n2" in capsys.readouterr().out
