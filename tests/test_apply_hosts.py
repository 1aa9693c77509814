"""`sgdeploy apply` and `plan` end to end on a real systemd test host (simulated SGLang and GPUs).

One ct129-like host (2x RTX A6000, SGLang 0.5.11) serves the whole module. Each test brings
the host into the state it needs first (a good deployment running), so tests do not depend
on their order.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port
from tests.variants import BROKEN, reference, write_variants

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
PORT = free_port()
REFERENCE = reference(PORT)
MODEL = "/root/models/Qwen3.6-27B"


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5, crash_after_ready_s=0.5)  # well inside --settle 1
    with booted_or_skipped([HostSpec.like("ct129", sim=fast)]) as hs:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration")
        yield hs


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_variants(
        tmp_path_factory.mktemp("profiles"), PORT, broken_timeout_s=8,
        **{"missing-model": REFERENCE.replace(MODEL, "/root/models/missing"),
           "fresh-unit": REFERENCE.replace('unit = "sglang"', 'unit = "sglang-fresh"')
           .replace('[server]\n', '[server]\nserved_model_name = "broken"\n')
           .replace(f"port = {PORT}", f"port = {free_port()}")})


def sgdeploy(host: HostSet, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = cli.main([*args, "--inventory", str(host.inventory_path), "--json", "--settle", "2"]
                    if args[0] == "apply" else [*args, "--inventory", str(host.inventory_path), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def unit_state(host: HostSet, unit: str = "sglang") -> dict[str, str]:
    out = host.ssh("ct129", f"systemctl show -p ActiveState,SubState,MainPID,NRestarts {unit}.service").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def running_cmdline(host: HostSet, unit: str = "sglang") -> str:
    pid = unit_state(host, unit)["MainPID"]
    return host.ssh("ct129", f"tr '\\0' ' ' < /proc/{pid}/cmdline", check=False).stdout


def health(host: HostSet, port: int = PORT) -> int:
    probe = (f"python3 -c \"import urllib.request as u,sys\ntry: print(u.urlopen('http://127.0.0.1:{port}/health',"
             " timeout=3).status)\nexcept Exception as e: print(getattr(e, 'code', 0))\"")
    return int(host.ssh("ct129", probe, check=False).stdout.strip() or 0)


def ensure_good(host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    host.configure_sim("ct129", failure="", fail_when_arg=[])
    code, result = sgdeploy(host, "apply", str(profiles["good"]), capsys=capsys)
    assert code == 0, result["message"]
    assert unit_state(host)["ActiveState"] == "active"
    return result


def test_apply_reaches_ready_and_records(host: HostSet, profiles: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    host.configure_sim("ct129", failure="", fail_when_arg=[])
    code, result = sgdeploy(host, "apply", str(profiles["good"]), "--force", capsys=capsys)
    assert code == 0, result
    # the lock is free when apply returns (an apply right after must not find it busy)
    assert (host["ct129"].root / "var/lib/sgdeploy/sglang/lock").read_text() == ""
    assert host.ssh("ct129", "flock -n /var/lib/sgdeploy/sglang/lock true", check=False).returncode == 0
    assert result["status"] == "ready"
    deployment = result["deployment_id"]
    assert host.ssh("ct129", "cat /var/lib/sgdeploy/sglang/last_good").stdout.strip() == deployment
    meta = json.loads(host.ssh("ct129", f"cat /var/lib/sgdeploy/sglang/{deployment}/meta.json").stdout)
    assert meta["outcome"] == "ready" and meta["sglang_version"] == "0.5.11"
    assert meta["phase_times"]["total"] is not None
    assert result["kv_cache_tokens"] and result["phase_times"]["graph_capture"] is not None
    adjusted = {a["field"]: a["value"] for a in result["auto_adjusted"]}
    assert adjusted.get("speculative_algorithm") == "EAGLE"
    # the server_args= line (over 4096 bytes, as SGLang's own) reached the follower whole
    assert "args_parsed" in [e.get("name") for e in result["events"] if e["event"] == "phase"]
    assert health(host) == 200
    assert "--speculative-num-steps 3" in running_cmdline(host)
    unit_file = host.ssh("ct129", "cat /etc/systemd/system/sglang.service").stdout
    assert host.ssh("ct129", f"cat /var/lib/sgdeploy/sglang/{deployment}/unit.service").stdout == unit_file
    assert host.ssh("ct129", "stat -c %a /etc/systemd/system/sglang.service").stdout.strip() == "644"
    assert result["ssh"]["connections"] == 1


def test_identical_reapply_changes_nothing(host: HostSet, profiles: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    before = unit_state(host)["MainPID"]
    code, result = sgdeploy(host, "apply", str(profiles["good"]), capsys=capsys)
    assert (code, result["status"]) == (0, "up_to_date")
    assert unit_state(host)["MainPID"] == before


def test_plan_changes_nothing(host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    before = unit_state(host)["MainPID"]
    code, result = sgdeploy(host, "plan", str(profiles["other"]), capsys=capsys)
    assert (code, result["status"]) == (0, "planned")
    assert [s["step"] for s in result["steps"]] == ["lock", "sglang_check", "stop", "wait_gpus_idle", "install",
                                                    "start", "wait_ready", "check_health", "record"]
    assert unit_state(host)["MainPID"] == before


FAILURES = {
    # simulated failure -> (the failure kind apply reports)
    "cuda_oom": "cuda_oom",
    "kv_cache_oom": "kv_cache_oom",
    "graph_capture": "graph_capture_failed",
    "port_in_use": "port_in_use",
    "bad_argument": "bad_argument",
    "hang": "timeout",
    "crash_after_ready": "unhealthy",
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_failed_apply_rolls_back(failure: str, host: HostSet, profiles: dict[str, Path],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    good = ensure_good(host, profiles, capsys)
    good_id = host.ssh("ct129", "cat /var/lib/sgdeploy/sglang/last_good").stdout.strip()
    host.configure_sim("ct129", failure=failure, fail_when_arg=[BROKEN])
    code, result = sgdeploy(host, "apply", str(profiles["broken"]), capsys=capsys)
    assert code == 1, result["message"]
    assert result["status"] == "rolled_back"
    assert result["failure"]["kind"] == FAILURES[failure], result["failure"]
    assert result["rollback"]["ready"] is True
    assert result["rollback"]["restored"] == good_id
    # the live progress counted down from the last good deployment's startup time
    good_meta = json.loads(host.ssh("ct129", f"cat /var/lib/sgdeploy/sglang/{good_id}/meta.json").stdout)
    assert {"event": "expected", "seconds": good_meta["startup_s"], "deployment": good_id}.items() <= next(
        e for e in result["events"] if e["event"] == "expected").items()
    assert "broken" not in running_cmdline(host)
    assert health(host) == 200
    last_good = host.ssh("ct129", "cat /var/lib/sgdeploy/sglang/last_good").stdout.strip()
    assert last_good == result["rollback"]["deployment_id"]
    failed = json.loads(host.ssh("ct129", f"cat /var/lib/sgdeploy/sglang/{result['deployment_id']}/meta.json").stdout)
    assert failed["outcome"] == "failed"
    assert good["status"] in ("ready", "up_to_date")


def test_failure_names_the_root_cause_line(host: HostSet, profiles: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    host.configure_sim("ct129", failure="cuda_oom", fail_when_arg=[BROKEN])
    code, result = sgdeploy(host, "apply", str(profiles["broken"]), capsys=capsys)
    assert code == 1
    assert any("CUDA out of memory" in line for line in result["explain"]), result["explain"]


def test_wrapped_multi_rank_failure_names_its_first_cause(host: HostSet, profiles: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every line inside a launcher's Python logging record; NCCL cannot connect on the last rank
    while the TP group forms (its own WARN line, then DistBackendError), rank 0 then fails with
    gloo's consequence and the parent's sigquit follows: apply's explanation is the reader's."""
    ensure_good(host, profiles, capsys)
    host.configure_sim("ct129", failure="nccl_init", fail_when_arg=[BROKEN], log_wrapper="pylog")
    try:
        code, result = sgdeploy(host, "apply", str(profiles["broken"]), capsys=capsys)
    finally:
        host.configure_sim("ct129", failure="", fail_when_arg=[], log_wrapper="")
    assert (code, result["status"]) == (1, "rolled_back"), result["message"]
    failure = result["failure"]
    assert failure["kind"] == "nccl_error", failure
    assert "NCCL WARN socketStartConnect" in failure["reason"], failure
    assert "NCCL WARN" in result["explain"][0] and any("DistBackendError" in e for e in result["explain"])
    assert not any(" - INFO - " in e for e in result["explain"])  # the wrapper is not part of a line
    later = [text for _, text in failure["consequences"]]
    assert any("Connection closed by peer" in t for t in later), later
    assert health(host) == 200


def test_stray_gpu_process_is_refused_before_the_stop(host: HostSet, profiles: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    before = unit_state(host)["MainPID"]
    pid = host.plant_stray("ct129", gpu=1, mib=4000, name="stray-trainer")
    try:
        code, result = sgdeploy(host, "apply", str(profiles["other"]), "--gpu-idle-timeout", "3", capsys=capsys)
        assert (code, result["status"]) == (2, "refused"), result["message"]
        held = [d for d in result["diagnostics"] if d["rule"] == "SGD710"]
        assert held and f"pid {pid}" in held[0]["message"] and "stray-trainer" in held[0]["message"]
        assert unit_state(host)["MainPID"] == before
        assert "max-running-requests 16" in running_cmdline(host)
    finally:
        host.ssh("ct129", f"kill {pid}", check=False)


def test_preflight_refusal_never_stops_the_running_unit(host: HostSet, profiles: dict[str, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    before = unit_state(host)["MainPID"]
    code, result = sgdeploy(host, "apply", str(profiles["missing-model"]), capsys=capsys)
    assert (code, result["status"]) == (2, "refused")
    assert any(d["rule"] == "SGD704" and d["field"] == "server.model_path" for d in result["diagnostics"])
    assert unit_state(host)["MainPID"] == before


def test_a_host_file_the_unit_cannot_open_is_refused_before_the_stop(host: HostSet, profiles: dict[str, Path],
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    before = unit_state(host)["MainPID"]
    host.ssh("ct129", "mkdir -p /etc/sglang && printf key > /etc/sglang/key.pem && chmod 600 /etc/sglang/key.pem")
    profile = tmp_path / "ssl.toml"
    profile.write_text(REFERENCE.replace("[deploy]\n", '[deploy]\nworking_directory = "/etc/sglang"\nuser = "nosudo"\n')
                       .replace("[server]\n", '[server]\nssl_keyfile = "key.pem"\nssl_certfile = "tls/cert.pem"\n'))
    for command in ("plan", "apply"):
        code, result = sgdeploy(host, command, str(profile), capsys=capsys)
        unusable = {d["field"]: d["message"] for d in result["diagnostics"] if d["rule"] == "SGD713"}
        assert unusable == {
            "server.ssl_keyfile": "ssl_keyfile: 'key.pem' (/etc/sglang/key.pem) cannot be read by user nosudo, "
                                  "who runs the server on ct129",
            "server.ssl_certfile": "ssl_certfile: 'tls/cert.pem' (/etc/sglang/tls/cert.pem) does not exist on ct129",
        }, (command, result.get("message"))
    assert (code, result["status"]) == (2, "refused")
    assert unit_state(host)["MainPID"] == before


def test_offline_invalid_profile_is_refused_before_connecting(host: HostSet, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(REFERENCE.replace("[server]\n", "[server]\nlanguage_only = true\n"))
    code = cli.main(["apply", str(bad), "--inventory", str(host.inventory_path)])
    captured = capsys.readouterr()
    assert code == 2
    assert "SGD301" in captured.err


def test_failure_without_previous_deployment_exits_3(host: HostSet, profiles: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    host.ssh("ct129", "systemctl stop sglang", check=False)  # its server would hold the new unit's GPUs (SGD710)
    host.configure_sim("ct129", failure="graph_capture", fail_when_arg=[BROKEN])
    code, result = sgdeploy(host, "apply", str(profiles["fresh-unit"]), capsys=capsys)
    assert (code, result["status"]) == (3, "failed"), result["message"]
    assert "no previous deployment" in result["message"]
    assert unit_state(host, "sglang-fresh")["ActiveState"] in ("inactive", "failed")


def test_no_rollback_leaves_nothing_running(host: HostSet, profiles: dict[str, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    host.configure_sim("ct129", failure="kv_cache_oom", fail_when_arg=[BROKEN])
    code, result = sgdeploy(host, "apply", str(profiles["broken"]), "--no-rollback", capsys=capsys)
    assert (code, result["status"]) == (3, "failed")
    assert result["rollback"] is None
    assert unit_state(host)["ActiveState"] in ("inactive", "failed")


def test_concurrent_applies_one_is_refused(host: HostSet, profiles: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    ensure_good(host, profiles, capsys)
    import subprocess
    import sys

    def run(out: list[subprocess.CompletedProcess[str]]) -> None:
        out.append(subprocess.run(
            [sys.executable, "-m", "sgdeploy", "apply", str(profiles["other"]), "--force", "--settle", "1",
             "--inventory", str(host.inventory_path), "--json"], capture_output=True, text=True, cwd=REPO))

    results: list[subprocess.CompletedProcess[str]] = []
    threads = [threading.Thread(target=run, args=(results,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.returncode for r in results)
    refused = [json.loads(r.stdout) for r in results if r.returncode == 2]
    assert codes == [0, 2], [r.stdout[-500:] + r.stderr[-500:] for r in results]
    assert "another apply holds the lock" in refused[0]["message"]
    assert unit_state(host)["ActiveState"] == "active"
