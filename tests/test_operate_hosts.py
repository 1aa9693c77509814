"""`history`, `status` and `rollback` end to end on a real systemd test host.

One ct129-like host (2x RTX A6000, SGLang 0.5.11, simulated) serves the module; the reference
profile, on a port of its own, is applied once by the `deployed` fixture. Each test brings the
host back to that deployment first, so the tests do not depend on their order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, free_port, skip_reason, start_hosts

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
MODEL = "/root/models/Qwen3.6-27B"
UNIT_FILE = "/etc/systemd/system/sglang.service"
STATE = "/var/lib/sgdeploy/sglang"
BROKEN_ARG = "--cuda-graph-max-bs=8"  # the simulated server fails graph capture only with this


@dataclass
class Deployed:
    hs: HostSet
    profiles: dict[str, Path]
    first: str  # the id of the first, good deployment


def sgdeploy(hs: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    extra = ["--settle", "1"] if args[0] in ("apply", "rollback") else []
    code = cli.main([*args, "--inventory", str(hs.inventory_path), "--json", *extra])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    reason = skip_reason()
    if reason:
        pytest.skip(f"test hosts unavailable: {reason}")
    # Hosts share the machine's network: a port of our own, never 30000.
    reference = (REPO / "profiles" / "qwen36-mtp3.toml").read_text().replace("port = 30000", f"port = {free_port()}")
    folder = tmp_path_factory.mktemp("operate-profiles")
    profiles = {}
    for name, text in {
        "qwen36-mtp3": reference,
        "other": reference.replace("max_running_requests = 16", "max_running_requests = 12"),
        "capture-fails": reference.replace("[server]\n", "[server]\ncuda_graph_max_bs = 8\n"),
    }.items():
        profiles[name] = folder / f"{name}.toml"
        profiles[name].write_text(text)
    hs = start_hosts([HostSpec.like("ct129", sim=SimSettings(startup_s=1.0, release_delay_s=0.5))], owner="pytest")
    try:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration")
        hs.configure_sim("ct129", failure="graph_capture", fail_when_arg=[BROKEN_ARG])
        code = cli.main(["apply", str(profiles["qwen36-mtp3"]), "--inventory", str(hs.inventory_path),
                         "--json", "--settle", "1"])
        assert code == 0
        first = hs.ssh("ct129", f"cat {STATE}/last_good").stdout.strip()
        yield Deployed(hs, profiles, first)
    finally:
        hs.close()


@pytest.fixture
def good(deployed: Deployed, capsys: pytest.CaptureFixture[str]) -> Deployed:
    """The host running the first deployment's unit, untouched, and healthy."""
    capsys.readouterr()
    hs = deployed.hs
    installed = hs.ssh("ct129", f"cmp -s {UNIT_FILE} {STATE}/{deployed.first}/unit.service && "
                       "systemctl is-active sglang.service", check=False)
    if installed.returncode != 0:
        code, _ = sgdeploy(hs, capsys, "rollback", str(deployed.profiles["qwen36-mtp3"]), "--to", deployed.first)
        assert code == 0
    return deployed


def test_history_and_status_after_apply(good: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    hs, profile = good.hs, str(good.profiles["qwen36-mtp3"])
    code, history = sgdeploy(hs, capsys, "history", profile)
    assert code == 0 and history["unit"] == "sglang" and history["host"] == "ct129"
    first = next(d for d in history["deployments"] if d["id"] == good.first)
    assert first["outcome"] == "ready" and first["profile"] == "qwen36-mtp3"
    assert first["sglang_version"] == "0.5.11" and first["startup_s"] > 0 and "@" in first["deployed_by"]
    assert history["deployments"][0]["last_good"] and history["last_good"] == history["deployments"][0]["id"]

    code, status = sgdeploy(hs, capsys, "status", profile)
    assert code == 0, status
    assert status["healthy"] and status["problems"] == [] and status["drift"] == []
    assert status["unit_state"]["active_state"] == "active" and status["unit_state"]["main_pid"]
    assert status["deployment"]["installed_is_last_good"]
    assert status["health"]["path"] == "/health" and status["health"]["status"] == 200
    assert status["sglang_version"] == "0.5.11"
    assert {p["gpu_index"] for p in status["gpu_processes"]} == {0, 1}
    assert all(g["memory_used_mib"] > 1024 for g in status["gpus"])

    # the same through --host/--unit, and as text
    assert cli.main(["status", "--host", "ct129", "--unit", "sglang", "--inventory", str(hs.inventory_path)]) == 0
    text = capsys.readouterr().out
    assert "HEALTHY" in text and "drift: none" in text and "the last good one" in text
    assert cli.main(["history", "--host", "ct129", "--unit", "sglang", "--inventory", str(hs.inventory_path)]) == 0
    assert f"*  {history['last_good']}" in capsys.readouterr().out


def test_hand_edited_unit_and_profile_drift(good: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    hs, profile = good.hs, str(good.profiles["qwen36-mtp3"])
    # the repo's profile changed since the deployment: drift (b), with a diff
    code, status = sgdeploy(hs, capsys, "status", str(good.profiles["other"]))
    assert code == 0
    assert [d["kind"] for d in status["drift"]] == ["profile"]
    assert '-    "--max-running-requests" "16"' in status["drift"][0]["diff"]
    assert '+    "--max-running-requests" "12"' in status["drift"][0]["diff"]

    # someone edits the unit on the host: drift (a), still healthy (the old file still runs)
    hs.ssh("ct129", f"sed -i 's/\"--max-running-requests\" \"16\"/\"--max-running-requests\" \"24\"/' {UNIT_FILE}")
    try:
        code, status = sgdeploy(hs, capsys, "status", profile)
        assert code == 0
        kinds = [d["kind"] for d in status["drift"]]
        assert kinds == ["unit_edited", "daemon_reload", "profile"], status["drift"]
        assert '+    "--max-running-requests" "24"' in status["drift"][0]["diff"]
        assert status["deployment"]["installed"] is None
        assert cli.main(["status", "--host", "ct129", "--unit", "sglang", "--inventory", str(hs.inventory_path)]) == 0
        assert "unit_edited:" in capsys.readouterr().out
    finally:
        hs.ssh("ct129", f"cp {STATE}/{good.first}/unit.service {UNIT_FILE}; systemctl daemon-reload")
    code, status = sgdeploy(hs, capsys, "status", profile)
    assert code == 0 and status["drift"] == []


def test_failed_apply_then_rollback(good: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    hs, profile = good.hs, str(good.profiles["qwen36-mtp3"])
    _, before = sgdeploy(hs, capsys, "history", profile)
    last_good = before["last_good"]

    code, result = sgdeploy(hs, capsys, "apply", str(good.profiles["capture-fails"]), "--no-rollback")
    assert code == 3 and result["failure"]["kind"] == "graph_capture_failed", result
    failed_id = result["deployment_id"]

    code, status = sgdeploy(hs, capsys, "status", profile)
    assert code == 1 and not status["healthy"]
    assert status["health"] is None and status["deployment"]["installed"] == failed_id
    assert [d["kind"] for d in status["drift"]] == ["not_last_good", "profile"]

    code, result = sgdeploy(hs, capsys, "rollback", profile)
    assert code == 0 and result["status"] == "ready", result
    restored = result["deployment_id"]
    assert result["events"] and result["phase_times"]
    code, status = sgdeploy(hs, capsys, "status", profile)
    assert code == 0 and status["healthy"] and status["drift"] == []
    assert status["deployment"]["installed"] == restored

    code, history = sgdeploy(hs, capsys, "history", profile)
    rows = history["deployments"]
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)
    assert [(r["id"], r["outcome"]) for r in rows[:2]] == [(restored, "ready"), (failed_id, "failed")]
    assert rows[0]["rollback_of"] == last_good and rows[0]["last_good"] and history["last_good"] == restored
    assert rows[1]["failure"]["kind"] == "graph_capture_failed" and not rows[1]["last_good"]

    # back to an older deployment by id
    code, result = sgdeploy(hs, capsys, "rollback", "--host", "ct129", "--unit", "sglang", "--to", good.first)
    assert code == 0, result
    code, history = sgdeploy(hs, capsys, "history", profile)
    assert history["deployments"][0]["rollback_of"] == good.first and history["deployments"][0]["last_good"]

    code, result = sgdeploy(hs, capsys, "rollback", profile, "--to", "20000101T000000Z-00000000")
    assert code == 2 and result["status"] == "refused"


def test_corrupt_record_on_the_host(good: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    hs, profile = good.hs, str(good.profiles["qwen36-mtp3"])
    bad, empty = "20000101T000000Z-0badc0de", "20000102T000000Z-00000000"
    hs.ssh("ct129", f"mkdir -p {STATE}/{bad} {STATE}/{empty} && printf '{{\"id\": ' > {STATE}/{bad}/meta.json")
    try:
        code, history = sgdeploy(hs, capsys, "history", profile)
        assert code == 0
        rows = {r["id"]: r for r in history["deployments"]}
        assert rows[bad]["outcome"] == "corrupt" and rows[empty]["outcome"] == "corrupt"
        assert [r["id"] for r in history["deployments"]][-2:] == [empty, bad]
        assert rows[good.first]["outcome"] == "ready"
    finally:
        hs.ssh("ct129", f"rm -rf {STATE}/{bad} {STATE}/{empty}")
