"""A `deploy.hardening = "strict"` unit end to end on a real systemd test host (simulated SGLang).

What runs here is systemd's own sandbox: the service user, the read-only file system, the closed
device list, the cache folder. The simulated GPU driver keeps its bookkeeping in /run/sim-gpu
(where a real driver has /dev/nvidia*), so the profile lists it in deploy.writable_paths; the
same unit with the real NVIDIA nodes ran on an H200 (docs/real-gpu.md, docs/hardening.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

PORT = free_port()
MODEL = "/srv/models/Qwen3-8B"


def strict_profile(max_running: int) -> str:
    return f"""# a strict unit on the test host
[deploy]
host = "ct129"
unit = "sglang-strict"
python = "/usr/bin/python3"
ready_timeout_s = 60
hardening = "strict"
writable_paths = ["/run/sim-gpu"]

[server]
model_path = "{MODEL}"
host = "127.0.0.1"
port = {PORT}
tp_size = 2
max_running_requests = {max_running}
"""


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    with booted_or_skipped([HostSpec.like("ct129", sim=fast)]) as hs:
        hs.make_model("ct129", MODEL, "Qwen3ForCausalLM")
        hs.ssh("ct129", f"head -c 1048576 /dev/zero > {MODEL}/model-00001-of-00001.safetensors")
        hs.ssh("ct129", "mkdir -p /run/sim-gpu && chmod 1777 /run/sim-gpu")
        yield hs


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("strict")
    paths = {}
    for name, running in (("a", 16), ("b", 12)):
        paths[name] = folder / f"strict-{name}.toml"
        paths[name].write_text(strict_profile(running))
    return paths


def sgdeploy(host: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    extra = ["--settle", "1"] if args[0] in ("apply", "rollback") else []
    code = cli.main([*args, "--inventory", str(host.inventory_path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_a_missing_service_user_is_refused_before_anything_changes(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    host.ssh("ct129", "userdel sglang 2>/dev/null; true")
    code, result = sgdeploy(host, capsys, "apply", str(profiles["a"]))
    assert code == 2, result
    rules = [d["rule"] for d in result["diagnostics"]]
    assert rules == ["SGD715"], result["diagnostics"]
    assert "useradd --system" in result["diagnostics"][0]["hint"]
    assert host.ssh("ct129", "test -e /etc/systemd/system/sglang-strict.service", check=False).returncode != 0


def test_the_strict_unit_runs_sandboxed_restarts_and_rolls_back(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    host.ssh("ct129", "id -u sglang >/dev/null 2>&1 || useradd --system --no-create-home "
             "--home-dir /nonexistent --shell /usr/sbin/nologin sglang")
    code, first = sgdeploy(host, capsys, "apply", str(profiles["a"]))
    assert (code, first["status"]) == (0, "ready"), first.get("message")
    # SGLang's own check ran in the unit's sandbox, as its user, and accepted the launch
    assert first["sglang_check"]["status"] == "accepted", first["sglang_check"]
    # the weights were read into the page cache before the stop, as the service user would need
    warmed = [e for e in first["events"] if e["event"] == "page_cache"]
    assert [e["outcome"] for e in warmed] == ["warmed"], warmed
    assert warmed[0]["text"].startswith("read 0.0 GiB of weights into the page cache in ")
    # and apply's result and the deployment's record keep how the read went
    assert first["read_ahead"]["outcome"] == "warmed" and first["read_ahead"]["bytes"] > 0, first["read_ahead"]
    code, history = sgdeploy(host, capsys, "history", str(profiles["a"]))
    assert history["deployments"][0]["read_ahead"] == first["read_ahead"], history["deployments"][0]
    shown = host.ssh("ct129", "systemctl show sglang-strict.service -p User,MainPID,ProtectSystem,DevicePolicy,"
                     "NoNewPrivileges,PrivateTmp").stdout
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    assert props["User"] == "sglang" and props["ProtectSystem"] == "strict"
    assert props["DevicePolicy"] == "closed" and props["NoNewPrivileges"] == "yes"
    pid = props["MainPID"]
    assert host.ssh("ct129", f"stat -c %U /proc/{pid}").stdout.strip() == "sglang"
    # the server sees its HOME in the unit's cache folder, owned by it, and a read-only /usr
    environ = host.ssh("ct129", f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout.splitlines()
    assert "HOME=/var/cache/sgdeploy/sglang-strict" in environ
    assert host.ssh("ct129", "stat -c %U /var/cache/sgdeploy/sglang-strict").stdout.strip() == "sglang"
    written = host.ssh("ct129", f"nsenter -t {pid} -m -- sh -c 'touch /usr/x 2>&1; touch /root/x 2>&1; true'",
                       check=False).stdout
    assert "Read-only file system" in written or "Permission denied" in written
    exposure = host.ssh("ct129", "systemd-analyze security sglang-strict.service --no-pager | tail -1").stdout
    assert float(exposure.split("level for sglang-strict.service:")[1].split()[0]) <= 4.5, exposure

    code, planned = sgdeploy(host, capsys, "plan", str(profiles["b"]))
    install = next(step["why"] for step in planned["steps"] if step["step"] == "install")
    assert "strict sandbox: runs as sglang, writes only /var/cache/sgdeploy/sglang-strict, /run/sim-gpu" in install
    code, changed = sgdeploy(host, capsys, "apply", str(profiles["b"]))
    assert (code, changed["status"]) == (0, "ready"), changed.get("message")
    code, back = sgdeploy(host, capsys, "rollback", str(profiles["b"]))
    assert code == 0, back
    code, status = sgdeploy(host, capsys, "status", str(profiles["a"]))
    assert code == 0, status


def test_systemd_verifies_the_strict_unit(host: HostSet, profiles: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["render", str(profiles["a"]), "--inventory", str(host.inventory_path)]) == 0
    rendered = capsys.readouterr().out
    host.ssh("ct129", "cat > /tmp/verify-strict.service", input=rendered)
    verify = host.ssh("ct129", "systemd-analyze verify /tmp/verify-strict.service", check=False)
    assert verify.returncode == 0, verify.stderr


def test_a_folder_the_strict_unit_writes_must_exist(host: HostSet, profiles: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    host.ssh("ct129", "id -u sglang >/dev/null 2>&1 || useradd --system --no-create-home sglang")
    missing = tmp_path / "strict-missing.toml"
    missing.write_text(strict_profile(16).replace("[server]\n", '[server]\ndownload_dir = "/data/missing"\n'))
    code, result = sgdeploy(host, capsys, "plan", str(missing))
    assert (code, result["status"]) == (1, "refused"), result
    found = [(d["rule"], d["field"]) for d in result["diagnostics"] if d["severity"] == "error"]
    assert found == [("SGD713", "server.download_dir")], result["diagnostics"]
    assert "must exist before the start" in result["diagnostics"][0]["hint"] or any(
        "must exist before the start" in d["hint"] for d in result["diagnostics"])


def test_weights_the_service_user_cannot_read_are_refused_before_the_stop(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Found on a real GPU (tests/fixtures/h200-real/strict/unreadable-weights.journal): shards saved
    0600 by root; the strict unit's user got 'No such file or directory' from safetensors after the
    stop. Refused at preflight now, with the running server left alone."""
    host.ssh("ct129", "id -u sglang >/dev/null 2>&1 || useradd --system --no-create-home sglang")
    code, result = sgdeploy(host, capsys, "apply", str(profiles["a"]))
    assert code == 0, result
    before = host.ssh("ct129", "systemctl show -p MainPID --value sglang-strict.service").stdout.strip()
    shard = f"{MODEL}/model-00001-of-00001.safetensors"
    host.ssh("ct129", f"chmod 600 {shard}")
    try:
        code, result = sgdeploy(host, capsys, "apply", str(profiles["b"]))
    finally:
        host.ssh("ct129", f"chmod 644 {shard}")
    assert (code, result["status"]) == (2, "refused"), result
    found = [d for d in result["diagnostics"] if d["severity"] == "error"]
    assert [(d["rule"], d["field"]) for d in found] == [("SGD704", "server.model_path")], found
    assert "model-00001-of-00001.safetensors" in found[0]["message"] and "user sglang" in found[0]["message"]
    assert "chmod a+r" in found[0]["hint"]
    after = host.ssh("ct129", "systemctl show -p MainPID --value sglang-strict.service").stdout.strip()
    assert after == before != "0"


def test_a_shard_cut_short_fails_after_the_start_and_rolls_back(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A partial download passes every check (the files are there and readable) and fails when
    SGLang reads the shard, as the real server did (tests/fixtures/h200-real/adopt/partial.log)."""
    code, result = sgdeploy(host, capsys, "apply", str(profiles["a"]))
    assert code == 0, result
    partial = f"{MODEL}-partial"
    shard = f"{partial}/model-00001-of-00001.safetensors"
    # a header that says 4096 bytes follow, in a file of 64
    host.ssh("ct129", f"rm -rf {partial} && cp -a {MODEL} {partial} && "
             f"printf '\\000\\020\\000\\000\\000\\000\\000\\000' > {shard} && head -c 56 /dev/zero >> {shard}")
    cut = tmp_path / "strict-partial.toml"
    cut.write_text(strict_profile(12).replace(f'"{MODEL}"', f'"{partial}"'))
    code, result = sgdeploy(host, capsys, "apply", str(cut))
    assert code == 1, result
    assert result["failure"]["kind"] == "model_not_found", result["failure"]
    assert "incomplete metadata" in result["failure"]["reason"], result["failure"]
    assert result["rollback"]["ready"] is True, result["rollback"]
