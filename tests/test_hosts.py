"""The test hosts themselves: systemd over SSH, the simulated SGLang and nvidia-smi."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hosts import HostSet, HostSpec, SimSettings

pytestmark = pytest.mark.hosts

PY = "/root/ml-env/bin/python3"
READY = "The server is fired up and ready to roll!"


def wait_for(fn: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_unit(
    hs: HostSet,
    host: str,
    unit: str,
    args: str,
    env: dict[str, str] | None = None,
    *,
    serve: bool = False,
) -> None:
    """Install /etc/systemd/system/<unit>.service running the (simulated) SGLang, start it."""
    cmd = (
        f"/root/ml-env/bin/sglang serve {args}" if serve else f"{PY} -m sglang.launch_server {args}"
    )
    envs = "".join(f"Environment={k}={v}\n" for k, v in (env or {}).items())
    text = f"[Unit]\nDescription=SGLang test\n\n[Service]\nType=exec\n{envs}ExecStart={cmd}\n"
    hs.ssh(
        host,
        f"cat > /etc/systemd/system/{unit}.service && systemctl daemon-reload && "
        f"systemctl reset-failed {unit} 2>/dev/null; systemctl start {unit}",
        input=text,
    )


def unit_result(hs: HostSet, host: str, unit: str) -> dict[str, str]:
    out = hs.ssh(host, f"systemctl show -p ActiveState,Result,ExecMainCode,ExecMainStatus {unit}")
    return dict(line.split("=", 1) for line in out.stdout.split())


def killed(hs: HostSet, host: str, unit: str) -> bool:
    """The unit's main process was SIGKILLed (9/KILL).  The unit is then `failed`; systemd in
    a container now and then stays `deactivating` for a while after the cgroup is empty."""
    r = unit_result(hs, host, unit)
    return (r["Result"], r["ExecMainCode"], r["ExecMainStatus"]) == ("signal", "2", "9") and r[
        "ActiveState"
    ] in ("failed", "deactivating")


def gpu_used(hs: HostSet, host: str) -> list[int]:
    out = hs.nvidia_smi(host, "--query-gpu=memory.used --format=csv,noheader,nounits")
    return [int(x) for x in out.split()]


def test_inventory_and_ssh(hosts: HostSet) -> None:
    inv = tomllib.loads(hosts.inventory_path.read_text())
    assert set(inv["hosts"]) == {"ct129", "h200"}
    ct = inv["hosts"]["ct129"]
    assert ct["address"] == "127.0.0.1" and ct["user"] == "root"
    assert (ct["gpu"], ct["compute_capability"], ct["gpu_count"]) == ("RTX A6000", "8.6", 2)
    assert ct["sglang_version"] == "0.5.11" and inv["hosts"]["h200"]["sglang_version"] == "0.5.23"
    # known_hosts pins each host's key: strict checking with only these files works
    for name, h in inv["hosts"].items():
        kh = Path(h["known_hosts"]).read_text()
        assert f"[127.0.0.1]:{h['port']} ssh-ed25519 " in kh
        out = hosts.ssh(
            name,
            "hostname; systemctl is-system-running; "
            "python3 -c \"import importlib.metadata as m; print(m.version('sglang'))\"",
        )
        hostname, state, version = out.stdout.split()
        assert (hostname, version) == (name, h["sglang_version"])
        failed = hosts.ssh(name, "systemctl --failed --no-legend").stdout
        assert state in ("running", "degraded"), failed
        assert "sim-gpu" not in failed and "ssh" not in failed, failed
    smi = hosts.nvidia_smi(
        "h200", "--query-gpu=index,name,compute_cap,memory.total --format=csv,noheader"
    )
    assert smi.splitlines() == [
        "0, NVIDIA H200, 9.0, 143771 MiB",
        "1, NVIDIA H200, 9.0, 143771 MiB",
    ]


def test_reference_launch_ready_health_memory(hosts: HostSet) -> None:
    """0.5.11 on ct129: the reference profile's flags reach ready; what SGLang changed is
    visible in /server_info; GPU memory is held while alive and freed after the delay."""
    args = (
        "--model-path /root/models/Qwen3.6-27B --tp-size 2 --port 30000 "
        "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 8 --mamba-scheduler-strategy extra_buffer"
    )
    start_unit(hosts, "ct129", "sgl-ref", args)
    log = wait_for(
        lambda: READY in (j := hosts.journal("ct129", "sgl-ref")) and j, 15, "the ready line"
    )
    assert isinstance(log, str)
    assert "server_args=ServerArgs(model_path='/root/models/Qwen3.6-27B'" in log
    assert re.search(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP1\] Load weight begin\. avail mem=", log, re.M
    )
    assert re.search(r"TP0\] KV Cache is allocated\. #tokens: \d+, K size: [\d.]+ GB", log)
    assert "Capture cuda graph end. Time elapsed:" in log
    assert "Capture draft cuda graph end." in log
    assert "Disable piecewise CUDA graph because --disable-piecewise-cuda-graph is set" in log
    assert "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)" in log
    assert log.index("Uvicorn running") < log.index(READY)
    health = hosts.ssh(
        "ct129", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health"
    ).stdout
    assert health == "200"
    info = hosts.ssh("ct129", "curl -s http://127.0.0.1:30000/server_info").stdout
    info_d = json.loads(info)
    assert info_d["version"] == "0.5.11"
    assert info_d["speculative_algorithm"] == "EAGLE"
    assert info_d["speculative_num_draft_tokens"] == 4
    assert info_d["disable_piecewise_cuda_graph"] is True
    assert "sglang.launch_server" in info_d["launch_command"]
    ready_404 = hosts.ssh(
        "ct129", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/ready"
    ).stdout
    assert ready_404 == "404"  # /ready only exists from 0.5.2x
    # streaming generation at the configured rate
    gen = hosts.ssh(
        "ct129",
        "curl -sN http://127.0.0.1:30000/v1/completions -H "
        "'content-type: application/json' -d "
        '\'{"prompt": "hi", "max_tokens": 5, "stream": true}\'',
    ).stdout
    assert gen.count("data: ") == 6 and gen.rstrip().endswith("data: [DONE]")
    # GPU memory: held by one scheduler per rank, on both GPUs
    used = gpu_used(hosts, "ct129")
    assert all(u > 30000 for u in used), used
    apps = hosts.nvidia_smi(
        "ct129",
        "--query-compute-apps=pid,process_name,used_memory,gpu_uuid,"
        "gpu_bus_id --format=csv,noheader",
    )
    assert len(apps.splitlines()) == 2
    # a second server on the same port fails like uvicorn does, after loading
    start_unit(
        hosts,
        "ct129",
        "sgl-dup",
        "--model-path /root/models/Qwen3-8B --port 30000 "
        "--mem-fraction-static 0.05 --base-gpu-id 1",
    )
    wait_for(
        lambda: unit_result(hosts, "ct129", "sgl-dup")["ActiveState"] == "failed",
        15,
        "the duplicate to fail",
    )
    dup = hosts.journal("ct129", "sgl-dup")
    assert (
        "ERROR:    [Errno 98] error while attempting to bind on address "
        "('127.0.0.1', 30000): address already in use"
    ) in dup
    assert unit_result(hosts, "ct129", "sgl-dup")["ExecMainStatus"] == "1"
    # stop: memory stays reported until the release delay has passed, then it is free
    # stop as the real 0.5.11 stops (tests/fixtures/h200-real/restart.journal): the watchdog finds no
    # request and SGLang SIGKILLs its own tree, so systemd records the stop as a signal
    hosts.ssh("ct129", "systemctl stop sgl-ref")
    stopped = hosts.journal("ct129", "sgl-ref")
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." in stopped
    assert "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]." in stopped
    assert unit_result(hosts, "ct129", "sgl-ref")["Result"] == "signal"
    t_stop = time.monotonic()
    assert gpu_used(hosts, "ct129")[0] > 30000
    assert hosts.nvidia_smi("ct129", "--query-compute-apps=pid --format=csv,noheader") == ""
    wait_for(lambda: gpu_used(hosts, "ct129") == [0, 0], 5, "memory release")
    assert time.monotonic() - t_stop >= 0.5


FAILURE_CASES = {
    # failure: (expected lines, ActiveState/Result, ExecMainStatus)
    "cuda_oom": (
        [
            "Scheduler hit an exception: Traceback (most recent call last):",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
            "Received sigquit from a child process. It usually means the child failed.",
        ],
        "signal",
        "9",
    ),
    "kv_cache_oom": (
        [
            # pool_configurator.py MemoryPoolConfig.__post_init__: raised before the config
            # holds mem_fraction_static, so no "Current value" in any release read
            "model_executor/pool_configurator.py\", line 99, in __post_init__",  # 0.5.23
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
        ],
        "signal",
        "9",
    ),
    "graph_capture": (
        [
            # str() of torch's OutOfMemoryError: its message, without the type's name
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate",
            "Possible solutions:",
            "--cuda-graph-backend-decode=disabled",
        ],
        "signal",
        "9",
    ),
    "crash_after_ready": (
        [
            READY,
            "RuntimeError: CUDA error: an illegal memory access",
            "Received sigquit from a child process.",
        ],
        "signal",
        "9",
    ),
    "port_in_use": (
        ["ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 310"],
        "exit-code",
        "1",
    ),
    "bad_argument": (
        ["usage: sglang serve", "sglang serve: error: unrecognized arguments:"],
        "exit-code",
        "2",
    ),
}


def test_failure_modes_end_units_like_sglang(host_factory: Callable[..., HostSet]) -> None:
    """Every failure mode, each in its own unit on its own GPU of an 8-GPU 0.5.23 host."""
    hs = host_factory(
        HostSpec.like(
            "b200",
            name="fails",
            sim=SimSettings(startup_s=1.2, crash_after_ready_s=0.5, release_delay_s=0.5),
        )
    )
    units = {}
    for gpu, failure in enumerate([*FAILURE_CASES, "hang"]):
        unit = f"fail-{failure.replace('_', '-')}"
        units[failure] = unit
        start_unit(
            hs,
            "fails",
            unit,
            f"--model-path /root/models/Qwen3-8B --port {31000 + gpu}",
            {"SGLANG_SIM_FAIL": failure, "CUDA_VISIBLE_DEVICES": str(gpu)},
            serve=True,
        )
    # fail_when_arg from the host's config file: same host, profile A works, profile B fails
    hs.configure_sim(
        "fails", failure="kv_cache_oom", fail_when_arg="--cuda-graph-max-bs-decode=999"
    )
    start_unit(
        hs,
        "fails",
        "prof-a",
        "--model-path /root/models/Qwen3-8B --port 31010",
        {"CUDA_VISIBLE_DEVICES": "7"},
    )
    start_unit(
        hs,
        "fails",
        "prof-b",
        "--model-path /root/models/Qwen3-8B --port 31011 --cuda-graph-max-bs-decode=999",
        {"CUDA_VISIBLE_DEVICES": "6"},
        serve=True,
    )

    def all_done() -> bool:
        return (
            all(
                unit_result(hs, "fails", u)["ActiveState"] == "failed"
                for f, u in units.items()
                if f != "hang"
            )
            and unit_result(hs, "fails", "prof-b")["ActiveState"] == "failed"
            and READY in hs.journal("fails", "prof-a")
        )

    wait_for(all_done, 25, "every failing unit to end", interval=0.3)
    for failure, (lines, result, status) in FAILURE_CASES.items():
        log = hs.journal("fails", units[failure])
        for line in lines:
            assert line in log, f"{failure}: {line!r} not in\n{log[-3000:]}"
        r = unit_result(hs, "fails", units[failure])
        assert (r["Result"], r["ExecMainStatus"]) == (result, status), (failure, r)
        if failure != "crash_after_ready":
            assert READY not in log, failure
    # hang: still running, never ready, nothing listening
    assert unit_result(hs, "fails", units["hang"])["ActiveState"] == "active"
    hang_log = hs.journal("fails", units["hang"])
    assert "Load weight begin." in hang_log and "Load weight end." not in hang_log
    # 0.5.23 wording
    ok_log = hs.journal("fails", "prof-a")
    assert "server_args={'model_path': '/root/models/Qwen3-8B'" in ok_log
    assert "Capture target decode CUDA graph end. bs=" in ok_log
    assert "KV Cache is allocated. dtype: torch.bfloat16, #tokens:" in ok_log
    assert "UserWarning: 'python -m sglang.launch_server' is still supported" in ok_log
    assert "Not enough memory" in hs.journal("fails", "prof-b")
    ready = hs.ssh("fails", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:31010/ready")
    assert ready.stdout == "200"


def test_argument_errors(hosts: HostSet) -> None:
    def run(host: str, args: str) -> tuple[int, str]:
        cp = hosts.ssh(host, f"{PY} -m sglang.launch_server {args}", check=False)
        return cp.returncode, cp.stderr

    code, err = run("ct129", "--model-path /root/models/Qwen3-8B --foo bar")
    # 0.5.11 warns about `python -m` before it parses (launch_server.py:54, seen on the H200)
    assert err.startswith("/root/ml-env/lib/python3") and "UserWarning: 'python -m sglang" in err
    assert code == 2 and err[err.index("usage:"):].startswith("usage: sglang serve")
    assert err.rstrip().endswith("sglang serve: error: unrecognized arguments: --foo bar")
    # 0.5.23 removed the flags the reference profile uses
    code, err = run(
        "h200",
        "--model-path /m --mamba-scheduler-strategy extra_buffer --enforce-piecewise-cuda-graph",
    )
    assert (
        code == 2
        and (
            "unrecognized arguments: --mamba-scheduler-strategy extra_buffer "
            "--enforce-piecewise-cuda-graph"
        )
        in err
    )
    code, err = run("ct129", "--model-path /m --tp-size two")
    assert (
        code == 2 and "argument --tensor-parallel-size/--tp-size: invalid int value: 'two'" in err
    )
    code, err = run("ct129", "--model-path /m --speculative-algorithm MEDUSA")
    assert code == 2 and "argument --speculative-algorithm: invalid choice: 'MEDUSA'" in err
    # 0.5.11 refuses --language-only without --encoder-urls, after parsing
    code, err = run("ct129", "--model-path /root/models/Qwen3.6-27B --language-only")
    assert code == 1 and err.rstrip().endswith(
        "ValueError: requires at least one encoder urls to be set via --encoder-urls"
    )
    code, err = run("ct129", "--model-path /root/models/nope")
    assert code == 1 and "OSError: Can't load the configuration of '/root/models/nope'" in err


def test_stray_process_shows_in_nvidia_smi(hosts: HostSet) -> None:
    pid = hosts.plant_stray("h200", gpu=1, mib=5000)
    apps = hosts.nvidia_smi(
        "h200", "--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
    )
    assert f"{pid}, python3, 5000" in apps.splitlines()
    table = hosts.nvidia_smi("h200")
    assert re.search(rf"\|\s+1\s+N/A\s+N/A\s+{pid}\s+C\s+python3\s+5000MiB \|", table)
    assert gpu_used(hosts, "h200") == [0, 5009]
    hosts.ssh("h200", f"kill {pid}")
    wait_for(lambda: gpu_used(hosts, "h200") == [0, 0], 5, "the stray's memory to be freed")
    xml = hosts.nvidia_smi("h200", "-q -x")
    assert xml.count("<product_name>NVIDIA H200</product_name>") == 2
    assert "<attached_gpus>2</attached_gpus>" in xml


# --------------------------------------------------------------------- private network


def _run_net_devices(run: str) -> list[str]:
    """This run's veths, bridge and network namespaces, as seen from this machine."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    names += [line.split()[0] for line in netns.splitlines() if line.strip()]
    return [n for n in names if n.startswith(f"sgd-{run}")]


def test_private_network_hosts(host_factory: Callable[..., HostSet]) -> None:
    """Three hosts, each in its own network namespace at its own address: ssh on port 22 of
    each address, a server on port 30000 of every host at once, reachable from the others;
    no route out; teardown leaves no veth, netns or bridge behind."""
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    t0 = time.monotonic()
    hs = host_factory(
        *(HostSpec.like("ct129", name=f"pn{i}", private_network=True, sim=fast) for i in range(3))
    )
    boot_s = time.monotonic() - t0
    print(f"3 private-network hosts booted in {boot_s:.2f}s")
    assert boot_s < 10, boot_s
    run = hs.run_dir.name
    net = ipaddress.ip_network(hs.network["subnet"])
    assert net.subnet_of(ipaddress.ip_network("169.254.0.0/16")) and net.prefixlen == 24
    addrs = {h.name: h.address for h in hs}
    assert len(set(addrs.values())) == 3
    assert all(ipaddress.ip_address(a) in net for a in addrs.values())
    inv = tomllib.loads(hs.inventory_path.read_text())
    kh = hs.known_hosts_path.read_text().splitlines()
    for h in hs:
        assert (inv["hosts"][h.name]["address"], inv["hosts"][h.name]["port"]) == (h.address, 22)
        assert any(line.startswith(f"{h.address} ssh-ed25519 ") for line in kh), kh
        assert hs.ssh_argv(h)[-1] == f"root@{h.address}"
        # plain ssh with only the inventory's files, strict host-key checking, port 22
        cp = subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(hs.key_path),
             "-o", f"UserKnownHostsFile={hs.known_hosts_path}", "-o", "StrictHostKeyChecking=yes",
             "-o", "BatchMode=yes", "-p", "22", f"root@{h.address}", "hostname; ip -4 route"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert cp.returncode == 0, cp.stderr
        name, *routes = cp.stdout.splitlines()
        assert name == h.name
        # only the run's subnet: no default route, nothing beyond the bridge
        assert routes == [f"{net} dev eth0 proto kernel scope link src {h.address} "], routes
        assert hs.ssh(h, "ip route get 203.0.113.1", check=False).returncode != 0
    # the same port on every host at once
    model = "/root/models/Qwen3-8B"
    for h in hs:
        start_unit(hs, h.name, "sgl", f"--model-path {model} --port 30000 --host 0.0.0.0")
    for h in hs:
        wait_for(lambda h=h: READY in hs.journal(h.name, "sgl"), 20, f"{h.name} ready")
        assert unit_result(hs, h.name, "sgl")["ActiveState"] == "active"
        assert "Uvicorn running on http://0.0.0.0:30000" in hs.journal(h.name, "sgl")
    # from inside one host to the others, by address and by name (/etc/hosts)
    for src, dst in (("pn0", "pn1"), ("pn2", "pn0")):
        code = hs.ssh(
            src, f"curl -s -o /dev/null -w '%{{http_code}}' http://{addrs[dst]}:30000/health"
        ).stdout
        assert code == "200", (src, dst, code)
    info = hs.ssh(
        "pn1",
        '/root/ml-env/bin/python3 -c "import urllib.request as u; '
        "print(u.urlopen('http://pn2:30000/server_info', timeout=5).read().decode())\"",
    ).stdout
    assert json.loads(info)["port"] == 30000
    assert _run_net_devices(run), "the run's network devices are missing"
    hs.close()
    assert _run_net_devices(run) == []
    assert not hs.run_dir.exists()


def test_multi_node_private_network(host_factory: Callable[..., HostSet]) -> None:
    """tp 4 over two private-network hosts: rank 0 waits for node 1 at --dist-init-addr, each
    node prints its own ranks, node 1 runs only the dummy health server; node 1 dies when
    node 0 goes away; a failure knob crashes node 1 only, and node 0 follows."""
    fast = SimSettings(startup_s=1.0, release_delay_s=0.5)
    hs = host_factory(
        *(HostSpec.like("ct129", name=f"mn{i}", private_network=True, sim=fast) for i in range(2))
    )
    a0, a1 = hs["mn0"].address, hs["mn1"].address
    common = (
        "--model-path /root/models/Qwen3-8B --tp-size 4 --nnodes 2 "
        f"--dist-init-addr {a0}:5000 --host 0.0.0.0 --port 30000"
    )

    def body(host: str, unit: str = "sgl") -> str:  # the journal without the server_args line
        return "\n".join(
            line for line in hs.journal(host, unit).splitlines() if "server_args=" not in line
        )

    start_unit(hs, "mn0", "sgl", f"{common} --node-rank 0")
    wait_for(lambda: "TP1] Init torch distributed begin." in body("mn0"), 10, "rank 0 init")
    time.sleep(1.5)  # node 0 waits for node 1
    assert "Init torch distributed ends" not in body("mn0")
    start_unit(hs, "mn1", "sgl", f"{common} --node-rank 1")
    wait_for(lambda: READY in body("mn0"), 20, "node 0 ready")
    log0, log1 = body("mn0"), body("mn1")
    for r in (0, 1):
        assert f"TP{r}] Init torch distributed ends." in log0 and f"TP{r}]" not in log1
    for r in (2, 3):
        assert f"TP{r}] KV Cache is allocated." in log1 and f"TP{r}]" not in log0
    assert "Uvicorn running on http://0.0.0.0:30000" in log0
    assert "Starting dummy health check server at 0.0.0.0:30000" in log1
    assert (
        READY not in log1 and "Uvicorn running" not in log1 and "max_total_num_tokens" not in log1
    )
    assert len(gpu_used(hs, "mn1")) == 2 and all(u > 30000 for u in gpu_used(hs, "mn1"))

    def get(src: str, url: str) -> str:
        return hs.ssh(src, f"curl -s -o /dev/null -w '%{{http_code}}' {url}").stdout

    assert get("mn0", f"http://{a1}:30000/health") == "200"  # the dummy health server
    assert get("mn0", f"http://{a1}:30000/server_info") == "404"
    # its routes are FastAPI @app.get ones (utils/common.py): any other method is 405
    assert get("mn0", f"-X POST http://{a1}:30000/health") == "405"
    assert get("mn1", f"http://{a0}:30000/server_info") == "200"
    # node 0 goes away: node 1's schedulers fail in torch.distributed, the unit is killed
    hs.ssh("mn0", "systemctl stop sgl")
    wait_for(lambda: killed(hs, "mn1", "sgl"), 15, "node 1 to be killed")
    log1 = body("mn1")
    assert f"Connection closed by peer [{a0}]:5000" in log1
    assert "Received sigquit from a child process." in log1
    r = unit_result(hs, "mn1", "sgl")
    assert (r["Result"], r["ExecMainStatus"]) == ("signal", "9"), r
    # a failure for node 1 only: graph capture fails there, node 0 then loses its peer; the
    # killed ranks' GPU memory is released first, or node 1 would fail loading weights instead
    for h in ("mn0", "mn1"):
        wait_for(lambda h=h: gpu_used(hs, h) == [0, 0], 10, f"{h}'s GPUs to be released")
    for h in ("mn0", "mn1"):
        hs.configure_sim(h, failure="graph_capture", fail_when_arg="--node-rank=1")
    start_unit(hs, "mn0", "fail", f"{common} --node-rank 0")
    start_unit(hs, "mn1", "fail", f"{common} --node-rank 1")
    wait_for(
        lambda: all(killed(hs, h, "fail") for h in ("mn0", "mn1")),
        30,
        "both nodes to fail",
    )
    log0, log1 = body("mn0", "fail"), body("mn1", "fail")
    assert "Capture cuda graph failed" in log1 and "Capture cuda graph failed" not in log0, log1
    assert "Connection closed by peer [" in log0 and READY not in log0


# The lines that mark each step of a start of SGLang 0.5.11, in the order the real server logged
# them on the H200 (tests/fixtures/h200-real/restart.log), numbers as N.
REAL_0511_SHAPES = (
    r"UserWarning: 'python -m sglang\.launch_server' is still supported, but 'sglang serve' is the "
    r"recommended entrypoint\.",
    r"^server_args=ServerArgs\(model_path=",
    r"^Init torch distributed begin\.$",
    r"^Init torch distributed ends\. elapsed=N s, mem usage=N GB$",
    r"^Load weight begin\. avail mem=N GB$",
    r"^Load weight end\. elapsed=N s, type=\w+, avail mem=N GB, mem usage=N GB\.$",
    r"^Using KV cache dtype: torch\.bfloatN$",
    r"^KV Cache is allocated\. #tokens: N, K size: N GB, V size: N GB$",
    r"^Memory pool end\. avail mem=N GB$",
    r"^Capture cuda graph begin\. This can take up to several minutes\. avail mem=N GB$",
    r"^Capture cuda graph end\. Time elapsed: N s\. mem usage=N GB\. avail mem=N GB\.$",
    r"^Capture piecewise CUDA graph begin\. avail mem=N GB$",
    r"^Capture piecewise CUDA graph end\. Time elapsed: N s\. mem usage=N GB\. avail mem=N GB\.$",
    r"^max_total_num_tokens=N, chunked_prefill_size=N, max_prefill_tokens=N, max_running_requests=N, "
    r"context_len=N, available_gpu_mem=N GB$",
    r"^INFO:     Started server process \[N\]$",
    r"^INFO:     Waiting for application startup\.$",
    r"^INFO:     Application startup complete\.$",
    r"^INFO:     Uvicorn running on http://[N.]+:N \(Press CTRL\+C to quit\)$",
    r'"GET /model_info HTTP/N" N OK$',
    r"^The server is fired up and ready to roll!$",
)


def shape_positions(log: str) -> list[int | None]:
    """Where each of REAL_0511_SHAPES first appears in `log` (line index; None: never)."""
    lines = [re.sub(r"\d+(?:\.\d+)?", "N", re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: TP\d+)?\] ", "", line))
             for line in log.split("\n")]
    patterns = [re.compile(shape) for shape in REAL_0511_SHAPES]
    return [next((i for i, line in enumerate(lines) if p.search(line)), None) for p in patterns]


def test_the_simulated_start_has_the_real_lines_in_the_real_order(hosts: HostSet) -> None:
    """A plain launch on the simulated 0.5.11 logs every line that marks a step of the real
    0.5.11's start on the H200, in the same order (the fixture is held to the same list)."""
    real = (Path(__file__).parent / "fixtures" / "h200-real" / "restart.log").read_text(encoding="utf-8")
    real_at = shape_positions(real[real.rindex("Started sglang.service"):])
    assert None not in real_at and real_at == sorted(real_at)
    start_unit(hosts, "ct129", "sgl-shape", "--model-path /root/models/Qwen3-8B --port 30077 "
               "--mem-fraction-static 0.3")
    log = wait_for(lambda: READY in (j := hosts.journal("ct129", "sgl-shape")) and j, 30, "the ready line")
    assert isinstance(log, str)
    hosts.ssh("ct129", "systemctl stop sgl-shape")
    at = shape_positions(log)
    missing = [shape for shape, i in zip(REAL_0511_SHAPES, at, strict=True) if i is None]
    assert not missing, missing
    # uvicorn's lines carry SGLang's stamp too (set_uvicorn_logging_configs), access lines included
    for text in (real, log):
        assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] INFO:     Uvicorn running on ", text, re.M)
        assert re.search(r'^\[[\d :-]+\] INFO:     [\d.]+:\d+ - "GET /model_info HTTP/1\.1" 200 OK$', text, re.M)
    assert at == sorted(at), [s for s, _ in sorted(zip(REAL_0511_SHAPES, at, strict=True), key=lambda x: x[1])]
