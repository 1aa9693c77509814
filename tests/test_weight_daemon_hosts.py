"""The weight-cache daemon as a unit of its own, end to end on a real systemd test host (the
daemon and SGLang simulated, systemd, the journal and SSH real; docs/weight-cache.md).

A client launch gets `<unit>-weights.service` beside its server unit: the first apply starts the
daemon before the server (systemd orders it; the server maps the weights), a change of a flag
that keeps the weights restarts the server alone and keeps the daemon's process and memory, a
change of the weights replaces the daemon, and a rollback brings the recorded pair back.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sgdeploy import cli
from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, free_port

pytestmark = pytest.mark.hosts

PORT = free_port()
PORT_0517 = free_port()
PORT_PLAIN = free_port()
MODEL = "/srv/models/Qwen3-8B"
OTHER = "/srv/models/Qwen3-8B-other"
DEPLOYED: dict[str, str] = {}  # profile name -> the deployment id its apply recorded


def client_profile(max_running: int, model: str = MODEL) -> str:
    return f"""# a client of the weight cache
[deploy]
host = "wc23"
unit = "sglang-wc"
python = "/root/ml-env/bin/python3"
ready_timeout_s = 60

[server]
model_path = "{model}"
host = "127.0.0.1"
port = {PORT}
tp_size = 2
weight_cache_mode = "client"
max_running_requests = {max_running}
"""


@pytest.fixture(scope="module")
def host() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.3)
    with booted_or_skipped([HostSpec.like("a6000-new", "wc23", sim=fast)]) as hs:
        for path in (MODEL, OTHER):
            hs.make_model("wc23", path, "Qwen3ForCausalLM", sim_weights_mib=16000)
        yield hs


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("wc")
    paths = {}
    for name, text in (("a", client_profile(16)), ("b", client_profile(12)), ("other", client_profile(12, OTHER))):
        paths[name] = folder / f"wc-{name}.toml"
        paths[name].write_text(text)
    return paths


def sgdeploy(host: HostSet, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    extra = ["--settle", "1"] if args[0] in ("apply", "rollback") else []
    code = cli.main([*args, "--inventory", str(host.inventory_path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def daemon_pid(host: HostSet) -> str:
    return host.ssh("wc23", "systemctl show -p MainPID --value sglang-wc-weights.service").stdout.strip()


def journal(host: HostSet, unit: str) -> str:
    return host.ssh("wc23", f"journalctl -u {unit} -o cat --no-pager").stdout


def test_the_first_apply_starts_the_daemon_then_the_server_maps_the_weights(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, result = sgdeploy(host, capsys, "apply", str(profiles["a"]))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    assert daemon_pid(host) not in ("", "0")
    # nothing was serving: the downtime begins at the start, no stop in it
    assert "stop_s" not in result["downtime"] and result["downtime"]["downtime_s"] > 0, result["downtime"]
    daemon_log = journal(host, "sglang-wc-weights")
    assert "All 2 weight cache daemons on node 0 are ready" in daemon_log
    server_log = journal(host, "sglang-wc")
    assert "[IpcModelLoader] Loaded model via IPC (mode=client)" in server_log
    assert "Daemon socket not found" not in server_log
    listed = host.ssh("wc23", "ls /run/sgdeploy-weights/sglang-wc/").stdout.split()
    assert len([n for n in listed if n.endswith(".ready")]) == 2, listed
    verified = host.ssh("wc23", "systemd-analyze verify /etc/systemd/system/sglang-wc-weights.service "
                        "/etc/systemd/system/sglang-wc.service 2>&1; true").stdout
    assert "sglang-wc" not in verified, verified


def test_a_flag_change_restarts_the_server_alone_and_keeps_the_weights(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = daemon_pid(host)
    code, result = sgdeploy(host, capsys, "apply", str(profiles["b"]))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    DEPLOYED["b"] = result["deployment_id"]
    assert daemon_pid(host) == before  # the daemon, and the weights it holds, stayed
    # where the downtime went, on the host's clock, and history keeps it
    spans = result["downtime"]
    assert {"stop_s", "gpu_release_s", "unit_start_s", "to_first_line_s", "to_ready_s"} <= set(spans), spans
    parts = sum(v for k, v in spans.items() if k != "downtime_s")
    assert 0 < spans["downtime_s"] and abs(parts - spans["downtime_s"]) < 0.01, spans
    code, history = sgdeploy(host, capsys, "history", str(profiles["b"]))
    assert history["deployments"][0]["downtime"] == spans
    holders = host.ssh("wc23", "nvidia-smi --query-compute-apps=pid --format=csv,noheader").stdout.split()
    assert holders, "the daemon and the new server hold the GPUs"


def test_status_watches_the_daemon_beside_the_server(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, status = sgdeploy(host, capsys, "status", str(profiles["b"]))
    assert (code, status["healthy"]) == (0, True), status["problems"]
    daemon = status["weight_daemon"]
    assert daemon["unit"] == "sglang-wc-weights.service"
    assert daemon["unit_state"]["active_state"] == "active" and status["drift"] == []
    path = "/etc/systemd/system/sglang-wc-weights.service"
    kept = host.ssh("wc23", f"cat {path}").stdout
    host.ssh("wc23", f"echo '# edited by hand' >> {path}")
    # the daemon dies on its own: Requires= leaves the server running, with weights it can no
    # longer map on its next start
    host.ssh("wc23", "systemctl kill -s KILL sglang-wc-weights.service")
    for _ in range(50):
        if host.ssh("wc23", "systemctl is-active sglang-wc-weights.service", check=False).stdout.strip() != "active":
            break
        time.sleep(0.1)
    code, status = sgdeploy(host, capsys, "status", str(profiles["b"]))
    assert (code, status["healthy"]) == (1, False)
    assert any("sglang-wc-weights.service is not running" in p for p in status["problems"]), status["problems"]
    assert {d["kind"] for d in status["drift"]} >= {"weights_unit_edited"}, status["drift"]
    # a flag change that would keep the weights: the edited daemon unit is replaced, and plan says so
    cli.main(["plan", str(profiles["a"]), "--inventory", str(host.inventory_path), "--no-sglang-check"])
    planned = " ".join(capsys.readouterr().out.split())
    # the daemon loads the weights again; the server's compiled kernels stay (same release, user)
    assert "restart: caches warm (the same SGLang release" in planned, planned
    assert "the daemon's unit on the host differs" in planned, planned
    host.ssh("wc23", f"printf %s {shlex.quote(kept)} > {path} && systemctl daemon-reload")


def test_a_change_of_weights_replaces_the_daemon_and_rollback_restores_the_pair(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = daemon_pid(host)
    code, result = sgdeploy(host, capsys, "apply", str(profiles["other"]))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    replaced = daemon_pid(host)
    assert replaced not in ("", "0", before)
    unit = host.ssh("wc23", "systemctl cat sglang-wc-weights.service").stdout
    assert OTHER in unit
    code, back = sgdeploy(host, capsys, "rollback", str(profiles["b"]), "--to", DEPLOYED["b"])
    assert code == 0, back["message"]
    unit = host.ssh("wc23", "systemctl cat sglang-wc-weights.service").stdout
    assert f'"{MODEL}"' in unit and daemon_pid(host) not in ("", "0", replaced)


def test_a_change_of_weights_that_fails_rolls_back_to_the_old_pair(
        host: HostSet, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The new daemon loads the other weights, the new server dies at its start: apply brings back
    the daemon of the last good deployment (its weights, its unit) and a server that maps them."""
    broken = tmp_path / "other-broken.toml"
    broken.write_text(client_profile(11, OTHER))
    host.configure_sim("wc23", failure="kv_cache_oom", fail_when_arg=["--max-running-requests=11"])
    try:
        code, result = sgdeploy(host, capsys, "apply", str(broken))
    finally:
        host.configure_sim("wc23", failure="", fail_when_arg=[])
    assert (code, result["status"]) == (1, "rolled_back"), result.get("message")
    assert result["rollback"]["ready"], result["rollback"]
    unit = host.ssh("wc23", "systemctl cat sglang-wc-weights.service").stdout
    assert f'"{MODEL}"' in unit and OTHER not in unit
    for name in ("sglang-wc-weights.service", "sglang-wc.service"):
        assert host.ssh("wc23", f"systemctl is-active {name}", check=False).stdout.strip() == "active", name
    since = host.ssh("wc23", "systemctl show -p ActiveEnterTimestamp --value sglang-wc.service").stdout.strip()
    served = host.ssh("wc23", f"journalctl -u sglang-wc -o cat --no-pager --since {shlex.quote(since)}").stdout
    assert "[IpcModelLoader] Loaded model via IPC (mode=client)" in served


def test_the_levers_of_a_fast_restart_are_the_launchs_own_settings(
        host: HostSet, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Without SGLang's warm-up and the prefill CUDA graph (the levers measured on the H200):
    ready on /health_generate, and SGLang's "Disable prefill CUDA graph because cuda_graph_config
    resolved ..." line is the launch's own request, not a setting SGLang changed."""
    fast = tmp_path / "fast.toml"
    fast.write_text(client_profile(16) + "skip_server_warmup = true\ndisable_prefill_cuda_graph = true\n")
    code, result = sgdeploy(host, capsys, "apply", str(fast))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    assert result["auto_adjusted"] == [], result["auto_adjusted"]
    health = next(s["why"] for s in result["steps"] if s["step"] == "check_health")
    assert health.startswith("GET /health_generate "), health
    assert "restart: weights kept" in next(s["why"] for s in result["steps"] if s["step"] == "start")
    assert "Disable prefill CUDA graph because cuda_graph_config resolved" in journal(host, "sglang-wc")


def test_a_launch_without_the_cache_removes_the_daemon(
        host: HostSet, profiles: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text(client_profile(12).replace('weight_cache_mode = "client"\n', ""))
    code, result = sgdeploy(host, capsys, "apply", str(plain))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    assert host.ssh("wc23", "test -e /etc/systemd/system/sglang-wc-weights.service", check=False).returncode != 0
    state = host.ssh("wc23", "systemctl is-active sglang-wc-weights.service", check=False).stdout.strip()
    assert state in ("inactive", "unknown"), state


@pytest.fixture(scope="module")
def host_0517() -> Iterator[HostSet]:
    fast = SimSettings(startup_s=1.0, release_delay_s=0.3)
    with booted_or_skipped([HostSpec.like("a6000-new", "wc17", sim=fast, sglang_version="0.5.17")]) as hs:
        hs.make_model("wc17", MODEL, "Qwen3ForCausalLM", sim_weights_mib=16000)
        yield hs


# The lines that mark each step of a start of SGLang 0.5.17, and of its stop, in the order the real
# server logged them on the H100 (tests/fixtures/h200-real/weight-cache/), numbers as N.
REAL_0517_START = (
    r"UserWarning: 'python -m sglang\.launch_server' is still supported, but 'sglang serve' is the "
    r"recommended entrypoint\.",
    r"^  Example: sglang serve --model-path <model> \[options\]$",
    r"^Multimodal feature transport auto-resolved to cuda_ipc \(single-node CUDA\)\. Pass "
    r"--mm-feature-transport=cpu to opt out\.$",
    r"^Using CUDA IPC for multimodal features: reserving up to N MiB on base GPU N across N tokenizer worker",
    r"^CUDA IPC pool-handle caching is enabled\. ",
    r"^server_args=ServerArgs\(model_path=",
    r"^Init torch distributed begin\.$",
    r"^Init torch distributed ends\. elapsed=N s, mem usage=N GB$",
    r"^Load weight begin\. avail mem=N GB$",
    r"^Load weight end\. elapsed=N s, type=\w+, avail mem=N GB, mem usage=N GB\.$",
    r"^KV Cache is allocated\. dtype: torch\.bfloatN, #tokens: N, K size: N GB, V size: N GB$",
    r"^Memory pool end\. avail mem=N GB$",
    r"^Capture target prefill CUDA graph begin\. backend=breakable, num_tokens=\[[N, ]+\], avail mem=N GB$",
    r"^Capture target prefill CUDA graph end\. elapsed=N s, mem usage=N GB, avail mem=N GB\.$",
    r"^Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=N, bs=\[[N, ]+\], avail mem=N GB$",
    r"^Capture target decode CUDA graph end\. elapsed=N s, mem usage=N GB, avail mem=N GB\.$",
    r"^max_total_num_tokens=N, chunked_prefill_size=N, max_prefill_tokens=N, max_running_requests=N, "
    r"context_len=N, available_gpu_mem=N GB$",
    r"^Tree cache initialized: source=default impl=RadixCache hybrid_swa=False hybrid_ssm=False "
    r"hierarchical=False streaming_wrapped=False$",
    r"^Engine startup timings \(s\): load_weight=N, kv_cache_allocation=N, scheduler_eNe=N, cuda_graph=\{"
    r"prefill=N, decode=N, target_verify=N, draft_prefill=N, draft_decode=N, draft_extend=N\}, tokenizer_eNe=N$",
    r"^INFO:     Started server process \[N\]$",
    r"^INFO:     Application startup complete\.$",
    r"^INFO:     Uvicorn running on http://[N.]+:N \(Press CTRL\+C to quit\)$",
    r'"GET /model_info HTTP/N" N OK$',
    r"^The server is fired up and ready to roll!$",
)
REAL_0517_STOP = (  # crash diagnostics off, as sgdeploy's unit has them
    r"^SIGTERM received\. signum=None frame=None\. Draining requests and shutting down\.\.\.$",
    r"^Subprocess scheduler_N \(pid=N\) crashed with exit code -N\. Triggering SIGQUIT for cleanup\.\.\.$",
    r"^SIGQUIT received\. signum=None, frame=None\. It usually means one child failed\.$",
    r"^kill_process_tree called: parent_pid=N, include_parent=True, pid=N$",
)


def shape_positions(log: str, shapes: tuple[str, ...]) -> list[int | None]:
    """Where each of `shapes` first appears in `log` (line index; None: never)."""
    lines = [re.sub(r"\d+(?:\.\d+)?", "N", re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+)?\] ", "", line))
             for line in log.split("\n")]
    return [next((i for i, line in enumerate(lines) if re.search(shape, line)), None) for shape in shapes]


def test_on_0_5_17_a_start_and_a_stop_log_the_real_lines_in_the_real_order(host_0517: HostSet) -> None:
    """A plain launch on the simulated 0.5.17 logs every line that marks a step of the real 0.5.17's
    start and stop on the H100, in the same order (the fixture is held to the same lists)."""
    real = (Path(__file__).parent / "fixtures" / "h200-real" / "weight-cache" / "llama-8b-bar" /
            "207-today-cold.log").read_text(encoding="utf-8")
    started = real.rindex("Started sglang.service")
    for text, shapes in ((real[started:], REAL_0517_START), (real[:started], REAL_0517_STOP)):
        at = shape_positions(text, shapes)
        assert None not in at and at == sorted(at), list(zip(shapes, at, strict=True))
    unit = ("[Service]\nType=exec\nEnvironment=SGLANG_PYSPY_DUMP_BEFORE_CRASH=0\n"
            "Environment=SGLANG_CUDA_COREDUMP_BEFORE_CRASH=0\nExecStart=/root/ml-env/bin/python3 -m "
            f"sglang.launch_server --model-path {MODEL} --port {PORT_PLAIN}\n")
    hs = host_0517
    hs.ssh("wc17", "cat > /etc/systemd/system/sgl-shape.service && systemctl daemon-reload && "
           "systemctl start sgl-shape", input=unit)
    deadline = time.monotonic() + 30
    while "ready to roll" not in (log := hs.journal("wc17", "sgl-shape")) and time.monotonic() < deadline:
        time.sleep(0.2)
    hs.ssh("wc17", "systemctl stop sgl-shape; systemctl reset-failed sgl-shape; true")
    log = hs.journal("wc17", "sgl-shape")
    positions = []
    for shapes in (REAL_0517_START, REAL_0517_STOP):
        at = shape_positions(log, shapes)
        missing = [shape for shape, i in zip(shapes, at, strict=True) if i is None]
        assert not missing, (missing, log[-3000:])
        assert at == sorted(at), [s for s, _ in sorted(zip(shapes, at, strict=True), key=lambda x: x[1])]
        positions += at
    assert positions == sorted(positions)
    hs.wait_gpus_free("wc17", 10)  # the next tests' server needs them


def test_on_0_5_17_the_pair_meets_in_a_private_tmp_of_its_own(
        host_0517: HostSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.17 fixes each daemon's socket at /tmp/sglang_weight_cache_rank<N>.sock: the daemon unit's
    PrivateTmp=, joined by the server's unit (JoinsNamespaceOf=), is where both look."""
    hs, paths = host_0517, []
    for running in (16, 12):
        path = tmp_path / f"wc17-{running}.toml"
        # its own port: wc23's server may still hold PORT on the shared loopback
        path.write_text(client_profile(running).replace('host = "wc23"', 'host = "wc17"')
                        .replace(f"port = {PORT}", f"port = {PORT_0517}"))
        paths.append(path)
    code, result = sgdeploy(hs, capsys, "apply", str(paths[0]))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    server_log = hs.ssh("wc17", "journalctl -u sglang-wc -o cat --no-pager").stdout
    assert "[IpcModelLoader] Loaded model via IPC (mode=client)" in server_log, server_log[-2000:]
    # the lines the real 0.5.17 wrote on the H100 (tests/fixtures/h200-real/weight-cache/)
    assert "[IpcModelLoader] Zero-copy: mapped 292 tensors (0 new post-quant)" in server_log
    daemon_log = hs.ssh("wc17", "journalctl -u sglang-wc-weights -o cat --no-pager").stdout
    for line in ("INFO [WeightCacheDaemon gpu=0 tp_rank=0] Exported 292 tensors as IPC handles. Ready to serve.",
                 "INFO [WeightCacheDaemon gpu=0] Listening on /tmp/sglang_weight_cache_rank0.sock",
                 "INFO [WeightCacheDaemon gpu=0] Serving 292 IPC handles to engine"):
        assert line in daemon_log, daemon_log
    # the sockets are in the pair's /tmp, not the host's
    assert hs.ssh("wc17", "ls /tmp/sglang_weight_cache_rank0.sock", check=False).returncode != 0
    # TorchInductor's kernels are not: the unit's cache folder outlives the pair's /tmp
    server_pid = hs.ssh("wc17", "systemctl show -p MainPID --value sglang-wc.service").stdout.strip()
    environ = hs.ssh("wc17", f"tr '\\0' '\\n' < /proc/{server_pid}/environ").stdout.splitlines()
    assert "TORCHINDUCTOR_CACHE_DIR=/var/cache/sgdeploy/sglang-wc/torchinductor" in environ, environ
    assert hs.ssh("wc17", "test -d /var/cache/sgdeploy/sglang-wc", check=False).returncode == 0
    pid = hs.ssh("wc17", "systemctl show -p MainPID --value sglang-wc-weights.service").stdout.strip()
    code, result = sgdeploy(hs, capsys, "apply", str(paths[1]))
    assert (code, result["status"]) == (0, "ready"), result.get("message")
    assert hs.ssh("wc17", "systemctl show -p MainPID --value sglang-wc-weights.service").stdout.strip() == pid
    server_log = hs.ssh("wc17", "journalctl -u sglang-wc -o cat --no-pager").stdout
    assert server_log.count("Loaded model via IPC (mode=client)") >= 2 * 2  # two ranks, two starts
    # the stop of a unit sgdeploy rendered: the scheduler's death is still taken for a crash, but
    # the crash diagnostics that would sleep 5 s are off (sgdeploy.sglang.shutdown)
    assert "crashed with exit code -15" in server_log
    assert "Sleeping 5 seconds before crash diagnostics" not in server_log
    assert result["downtime"]["stop_s"] < 3, result["downtime"]
    # SGLang's own account of the start (its `Engine startup timings` line), read by apply
    timings = result["engine_timings"]
    assert {"load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"} <= set(timings), timings
    assert "decode" in timings["cuda_graph"], timings
    verified = hs.ssh("wc17", "systemd-analyze verify /etc/systemd/system/sglang-wc-weights.service "
                      "/etc/systemd/system/sglang-wc.service 2>&1; true").stdout
    assert "sglang-wc" not in verified, verified


def test_on_0_5_17_a_profile_that_keeps_the_crash_diagnostics_pays_their_sleep_at_every_stop(
        host_0517: HostSet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """[env] turning SGLang's crash diagnostics on gets today's stop back: 5 s asleep, for nothing."""
    hs, paths = host_0517, []
    for running in (16, 12):
        path = tmp_path / f"wc17-diag-{running}.toml"
        path.write_text(client_profile(running).replace('host = "wc23"', 'host = "wc17"')
                        .replace(f"port = {PORT}", f"port = {PORT_0517}")
                        + '\n[env]\nSGLANG_PYSPY_DUMP_BEFORE_CRASH = true\n')
        paths.append(path)
    for path in paths:
        code, result = sgdeploy(hs, capsys, "apply", str(path))
        assert (code, result["status"]) == (0, "ready"), result.get("message")
    assert result["downtime"]["stop_s"] >= 5, result["downtime"]
    unit = hs.ssh("wc17", "systemctl cat sglang-wc.service").stdout
    assert "SGLANG_PYSPY_DUMP_BEFORE_CRASH=1" in unit and "SGLANG_CUDA_COREDUMP_BEFORE_CRASH=0" in unit
    server_log = hs.ssh("wc17", "journalctl -u sglang-wc -o cat --no-pager").stdout
    assert "Sleeping 5 seconds before crash diagnostics to let GPU activity settle." in server_log
