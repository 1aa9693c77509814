"""`sgdeploy import` and `apply --adopt` end to end on a real systemd test host.

A server started by hand (`nohup`, outside systemd) with the reference launch written with
prefixes and `=` forms, and a server run by a hand-written unit, are imported; the profile
validates, renders the same launch, and `apply --adopt` takes the server over, recorded in
`history`.
"""

from __future__ import annotations

import json
import shlex
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.deploy.adopt import split_launch
from sgdeploy.sglang.argv import parse_server_argv
from sgdeploy.sglang.catalog import load_catalog
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

REPO = Path(__file__).resolve().parents[1]
MODEL = "/root/models/Qwen3.6-27B"
CATALOG = load_catalog("0.5.11")
SECRET = "hf_" + "x1y2z3" * 6


def abbreviated_reference(port: int) -> str:
    return (f"--model={MODEL} --host 0.0.0.0 --port={port} --tp 2 --mem-frac 0.88 --context-len=131072 "
            "--max-running 16 --trust-remote --mamba-full 0.5 --mamba-sched=extra_buffer --reasoning-p qwen3 "
            "--tool-call qwen3_coder --speculative-algo NEXTN --speculative-num-steps=3 --speculative-eagle 1 "
            "--speculative-num-draft 4 --enforce-piecewise --enable-single-batch")


@pytest.fixture(autouse=True)
def no_server_left(host: HostSet) -> Iterator[None]:
    """Each test starts from a host where no SGLang server runs (a failed test may leave one)."""
    yield
    host.ssh("ct129", "systemctl stop sglang.service sglang-hand.service sglang-new.service 2>/dev/null; true",
             check=False)
    for pid in server_pids(host):
        host.ssh("ct129", f"kill {pid}", check=False)
    host.wait_gpus_free("ct129")


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    with booted_or_skipped([HostSpec.like("ct129", sim=fast)]) as hs:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration")
        yield hs


def run(host: HostSet, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main([*args, "--inventory", str(host.inventory_path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def start_by_hand(host: HostSet, flags: str, log: str, env: str = "",
                  entry: str = "/root/ml-env/bin/python3 -m sglang.launch_server") -> None:
    host.ssh("ct129", f"cd /root; {env} setsid nohup {entry} {flags} >{log} 2>&1 </dev/null &")


def wait_healthy(host: HostSet, port: int, log: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    probe = f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health"
    while time.monotonic() < deadline:
        if host.ssh("ct129", probe, check=False).stdout.strip() == "200":
            return
        time.sleep(0.3)
    tail = host.ssh("ct129", f"tail -n 30 {log}", check=False).stdout
    raise AssertionError(f"no server became healthy on port {port}:\n{tail}")


def server_pids(host: HostSet, port: int | None = None) -> list[int]:
    """Main processes (parent is no SGLang process) whose argv serves `port` (any port: None)."""
    out = host.ssh("ct129", "for d in /proc/[0-9]*; do c=$(tr '\\0' '\\n' < $d/cmdline 2>/dev/null) || continue; "
                   "case $c in *sglang*) p=$(awk '{print $4}' $d/stat); "
                   "grep -q sglang /proc/$p/cmdline 2>/dev/null || echo ${d#/proc/}; esac; done",
                   check=False).stdout
    pids = []
    for pid in out.split():
        argv = host.ssh("ct129", f"cat /proc/{pid}/cmdline", check=False).stdout.split("\0")[:-1]
        try:
            launch = split_launch(argv)
        except ValueError:
            continue
        if port is None or parse_server_argv(list(launch.flags), CATALOG).server.get("port") == port:
            pids.append(int(pid))
    return pids


def sglang_flags(host: HostSet, pid: int) -> dict[str, object]:
    argv = host.ssh("ct129", f"cat /proc/{pid}/cmdline").stdout.split("\0")[:-1]
    return parse_server_argv(list(split_launch(argv).flags), CATALOG).server


def test_hand_run_server_is_imported_and_adopted(host: HostSet, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    start_by_hand(host, abbreviated_reference(port), "/root/hand.log",
                  env=f"SGLANG_ENABLE_SPEC_V2=1 HF_TOKEN={SECRET}")
    wait_healthy(host, port, "/root/hand.log")
    [hand_pid] = server_pids(host, port)
    hand_flags = sglang_flags(host, hand_pid)

    profile = tmp_path / "imported.toml"
    code, _, err = run(host, "import", "ct129", "--output", str(profile), capsys=capsys)
    assert code == 0, err
    assert "renders the same flags, values and environment" in err
    text = profile.read_text()
    assert SECRET not in text and "HF_TOKEN" in text
    data = tomllib.loads(text)
    reference = tomllib.loads((REPO / "profiles/qwen36-mtp3.toml").read_text())
    assert data["server"] == {**reference["server"], "port": port}
    assert data["env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert data["deploy"]["python"] == "/root/ml-env/bin/python3" and data["deploy"]["working_directory"] == "/root"
    assert data["deploy"]["model_architecture"] == "Qwen3_5ForConditionalGeneration"

    code, unit_text, err = run(host, "render", str(profile), capsys=capsys)
    assert code == 0, err
    assert 'Environment="SGLANG_ENABLE_SPEC_V2=1"' in unit_text

    # without --adopt (and no terminal to ask) the apply refuses: the port is taken
    code, out, _ = run(host, "apply", str(profile), "--json", capsys=capsys)
    assert code == 2 and "SGD705" in out, out[-3000:]

    host.ssh("ct129", f"mkdir -p /etc/sgdeploy && printf 'HF_TOKEN={SECRET}\\n' > /etc/sgdeploy/sglang.env")
    code, out, err = run(host, "apply", str(profile), "--adopt", "--json", "--settle", "1", capsys=capsys)
    result = json.loads(out)
    assert code == 0, result["message"]
    assert any(s["step"] == "stop" and f"pid {hand_pid}" in s["why"] for s in result["steps"])
    assert hand_pid not in server_pids(host, port)
    unit_pid = int(host.ssh("ct129", "systemctl show -p MainPID --value sglang.service").stdout)
    assert sglang_flags(host, unit_pid) == hand_flags
    environ = host.ssh("ct129", f"tr '\\0' '\\n' < /proc/{unit_pid}/environ").stdout.splitlines()
    assert "SGLANG_ENABLE_SPEC_V2=1" in environ and f"HF_TOKEN={SECRET}" in environ

    code, out, _ = run(host, "history", "--host", "ct129", "--unit", "sglang", "--json", capsys=capsys)
    history = json.loads(out)
    assert code == 0 and history["deployments"][0]["id"] == result["deployment_id"]
    assert history["deployments"][0]["outcome"] == "ready"
    host.ssh("ct129", "systemctl stop sglang.service")


HAND_UNIT = """[Unit]
Description=SGLang, written by hand

[Service]
Environment="SGLANG_ENABLE_SPEC_V2=1" "NCCL_DEBUG=WARN"
WorkingDirectory=/root
ExecStart=/root/ml-env/bin/python3 -m sglang.launch_server {flags} --served-model-name "qwen $$HOME 100%% ü"
Restart=on-failure
"""


def test_unit_that_does_not_run_is_imported_from_its_file(host: HostSet, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    host.ssh("ct129", "cat > /etc/systemd/system/sglang-cold.service && systemctl daemon-reload",
             input=HAND_UNIT.format(flags=abbreviated_reference(port)))
    code, out, err = run(host, "import", "ct129", "--unit", "sglang-cold", capsys=capsys)
    assert code == 0, err
    assert "sglang-cold does not run: read from its unit file" in err
    data = tomllib.loads(out)
    reference = tomllib.loads((REPO / "profiles/qwen36-mtp3.toml").read_text())
    assert data["server"] == {**reference["server"], "port": port, "served_model_name": "qwen $HOME 100% ü"}
    assert data["deploy"]["unit"] == "sglang-cold" and data["deploy"]["working_directory"] == "/root"
    code, _, err = run(host, "import", "ct129", "--unit", "no-such-unit", capsys=capsys)
    assert code == 2 and "no-such-unit" in err


def test_hand_written_unit_is_imported_and_adopted(host: HostSet, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    unit = HAND_UNIT.format(flags=abbreviated_reference(port))
    host.ssh("ct129", "cat > /etc/systemd/system/sglang-hand.service && systemctl daemon-reload && "
             "systemctl start sglang-hand.service", input=unit)
    wait_healthy(host, port, "/dev/null")
    hand_pid = int(host.ssh("ct129", "systemctl show -p MainPID --value sglang-hand.service").stdout)
    hand_flags = sglang_flags(host, hand_pid)
    assert hand_flags["served_model_name"] == "qwen $HOME 100% ü"

    profile = tmp_path / "hand-unit.toml"
    code, _, err = run(host, "import", "ct129", "--unit", "sglang-hand", "--output", str(profile), capsys=capsys)
    assert code == 0, err
    data = tomllib.loads(profile.read_text())
    assert data["deploy"]["unit"] == "sglang-hand"
    assert data["env"] == {"NCCL_DEBUG": "WARN", "SGLANG_ENABLE_SPEC_V2": "1"}
    assert data["server"]["served_model_name"] == "qwen $HOME 100% ü"

    code, out, _ = run(host, "apply", str(profile), "--adopt", "--json", "--settle", "1", capsys=capsys)
    result = json.loads(out)
    assert code == 0, result["message"]
    unit_pid = int(host.ssh("ct129", "systemctl show -p MainPID --value sglang-hand.service").stdout)
    assert unit_pid != hand_pid and sglang_flags(host, unit_pid) == hand_flags
    assert "managed by sgdeploy" in host.ssh("ct129", "cat /etc/systemd/system/sglang-hand.service").stdout
    code, out, _ = run(host, "history", "--host", "ct129", "--unit", "sglang-hand", "--json", capsys=capsys)
    assert json.loads(out)["deployments"][0]["id"] == result["deployment_id"]
    host.ssh("ct129", "systemctl stop sglang-hand.service")


def test_two_servers_on_one_host_need_a_pid(host: HostSet, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    ports = [free_port(), free_port()]
    host.wait_gpus_free("ct129")
    entries = ["/root/ml-env/bin/python3 -m sglang.launch_server", "/root/ml-env/bin/sglang serve"]
    for gpu, port in enumerate(ports):  # one GPU each
        start_by_hand(host, f"--model-path {MODEL} --port {port} --mem-fraction 0.5 --served-model-name "
                      f"{shlex.quote('two words')}", f"/root/small-{port}.log", env=f"CUDA_VISIBLE_DEVICES={gpu}",
                      entry=entries[gpu])
        wait_healthy(host, port, f"/root/small-{port}.log")
    try:
        code, out, err = run(host, "import", "ct129", capsys=capsys)
        assert code == 2 and out == "" and "SGLang servers run on ct129; choose one with --pid" in err
        [pid] = server_pids(host, ports[1])
        code, out, err = run(host, "import", "ct129", "--pid", str(pid), capsys=capsys)
        assert code == 0, err
        data = tomllib.loads(out)
        assert data["server"]["port"] == ports[1] and data["server"]["served_model_name"] == "two words"
        assert data["deploy"]["gpus"] == [1]
        assert "also running, not imported: pid" in err
        assert "started with `sglang serve`" in err and data["deploy"]["python"] == "/root/ml-env/bin/python3"
        code, _, err = run(host, "import", "ct129", "--pid", "1", capsys=capsys)
        assert code == 2 and "pid 1 on ct129 is no SGLang server" in err
    finally:
        for port in ports:
            for pid in server_pids(host, port):
                host.ssh("ct129", f"kill {pid}", check=False)


def test_server_of_another_unit_is_taken_over_under_a_new_name(host: HostSet, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    host.ssh("ct129", "cat > /etc/systemd/system/sglang-hand.service && systemctl daemon-reload && "
             "systemctl enable --quiet sglang-hand.service && systemctl start sglang-hand.service",
             input=HAND_UNIT.format(flags=abbreviated_reference(port)) + "[Install]\nWantedBy=multi-user.target\n")
    wait_healthy(host, port, "/dev/null")
    hand_flags = sglang_flags(host, int(host.ssh("ct129", "systemctl show -p MainPID --value sglang-hand").stdout))
    profile = tmp_path / "renamed.toml"
    code, _, err = run(host, "import", "ct129", "--unit", "sglang-hand", "--name", "sglang-new", "--output",
                       str(profile), capsys=capsys)
    assert code == 0, err
    code, out, _ = run(host, "apply", str(profile), "--adopt", "--json", "--settle", "1", capsys=capsys)
    result = json.loads(out)
    assert code == 0, result["message"]
    assert any("sglang-hand.service" in s["why"] and "disables its unit" in s["why"] for s in result["steps"])
    state = host.ssh("ct129", "systemctl is-enabled sglang-hand.service; systemctl is-active sglang-hand.service",
                     check=False).stdout.split()
    assert state == ["disabled", "inactive"]
    new_pid = int(host.ssh("ct129", "systemctl show -p MainPID --value sglang-new.service").stdout)
    assert sglang_flags(host, new_pid) == hand_flags
    host.ssh("ct129", "systemctl stop sglang-new.service")
