"""Simulated SGLang weight-cache daemon launcher (sglang/srt/weight_cache/daemon.py, 0.5.17+).

As the real one: from 0.5.19 SGLang's own server flags (its parser) plus --timeout, in 0.5.17
and 0.5.18 a parser of its own with a fixed set of flags; one daemon per local PP x TP rank, each
on its GPU, holding the weights' memory, binding its socket and writing its ready file (0.5.19+:
SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE / _READY_TEMPLATE keyed by the GPU's UUID; before:
/tmp/sglang_weight_cache_rank<global rank>.sock/.ready); the launcher waits for every .ready
file, logs that all are ready and stays the daemons' parent; on SIGTERM each removes its files.
Times are compressed.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

import sim_gpu

from sglang_sim import server

SOCKET_TEMPLATE = "/tmp/sglang_weight_cache_{device_uuid}.sock"
READY_TEMPLATE = "/tmp/sglang_weight_cache_{device_uuid}.ready"
RANK_SOCKET = "/tmp/sglang_weight_cache_rank{global_rank}.sock"  # 0.5.17, 0.5.18
RANK_READY = "/tmp/sglang_weight_cache_rank{global_rank}.ready"


def keyed_by_uuid() -> bool:
    return tuple(int(p) for p in server.VERSION.split(".")[:3]) >= (0, 5, 19)


def paths(uuid: str, global_rank: int) -> tuple[str, str]:
    if not keyed_by_uuid():
        return RANK_SOCKET.format(global_rank=global_rank), RANK_READY.format(global_rank=global_rank)
    env = os.environ
    return (env.get("SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE", SOCKET_TEMPLATE).format(device_uuid=uuid),
            env.get("SGLANG_WEIGHT_CACHE_READY_TEMPLATE", READY_TEMPLATE).format(device_uuid=uuid))


def own_parser() -> argparse.ArgumentParser:
    """0.5.17 and 0.5.18: the daemon's own flags (daemon.py __main__), nothing of the server's."""
    parser = argparse.ArgumentParser(description="SGLang Weight Cache Daemon")
    parser.add_argument("--model-path", required=True)
    for name in ("--tp-size", "--dp-size", "--ep-size", "--pp-size", "--nnodes"):
        parser.add_argument(name, type=int, default=1)
    for name in ("--gpu-id", "--tp-rank"):
        parser.add_argument(name, type=int, default=None)
    for name, default in (("--pp-rank", 0), ("--base-gpu-id", 0), ("--gpu-id-step", 1), ("--node-rank", 0),
                          ("--timeout", 1800)):
        parser.add_argument(name, type=int, default=default)
    for name, default in (("--load-format", "auto"), ("--dtype", "auto"), ("--quantization", None),
                          ("--model-loader-extra-config", "{}"), ("--revision", None),
                          ("--dist-init-method", None)):
        parser.add_argument(name, default=default)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--force", action="store_true")
    return parser


TENSORS = 292  # what the real 0.5.17 daemon exported of a Llama checkpoint (h200-real/weight-cache)


def daemon_log(gpu: int, tp_rank: int, msg: str) -> None:
    """0.5.17's daemon logs through Python's logging with a prefix of its own, as on the H100:
    `2026-12-05 21:56:13,543 [Daemon gpu=0 tp_rank=0] INFO [WeightCacheDaemon ...] ...`; the
    later releases' lines keep the server's format here (not seen on a GPU)."""
    if keyed_by_uuid():
        server.log(msg)
        return
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
    print(f"{stamp} [Daemon gpu={gpu} tp_rank={tp_rank}] INFO {msg}", file=sys.stderr, flush=True)


def server_args_lines(args: dict) -> list[str]:
    """What the 0.5.17 daemon's own ServerArgs logs (arg_groups/overrides.py, server_args.py), as on
    the H100: it never has an attention backend of its own."""
    cc = float(sim_gpu.config().get("compute_capability", "9.0"))
    backend = "flashinfer" if cc < 9 else ("fa3" if cc < 10 else "trtllm_mha")
    return [f"Attention backend not specified. Use {backend} backend by default.",
            *server.mm_transport_lines(args)]


def serve(gpu: int, tp_rank: int, model: str, weights_mib: int, load_s: float, tp: int = 1,
          args: dict | None = None) -> None:
    """One daemon: load (hold the memory), bind, write ready, serve until SIGTERM."""
    if not keyed_by_uuid():
        for line in server_args_lines(args or {}):
            daemon_log(gpu, tp_rank, line)
        daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu} tp_rank={tp_rank}] Distributed backend "
                   f"initialized (tp_size={tp}, pp_size=1, world_size={tp})")
    daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu} tp_rank={tp_rank}] Loading model from disk: {model}")
    sim_gpu.register(os.getpid(), [gpu], weights_mib, "python3", 0.2)
    time.sleep(load_s)
    daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu} tp_rank={tp_rank}] Model loaded from disk in "
               f"{load_s:.2f}s")
    if not keyed_by_uuid():
        daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu}] Exported {TENSORS} tensors (1 non-persistent "
                   "buffers), serialized handle size ~0.1 MB")
        daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu} tp_rank={tp_rank}] Exported {TENSORS} tensors "
                   "as IPC handles. Ready to serve.")
    sock_path, ready_path = paths(sim_gpu.gpu_uuid(gpu), tp_rank)
    for stale in (sock_path, ready_path):
        if os.path.exists(stale):
            os.unlink(stale)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(sock_path)
    finally:
        os.umask(old)
    sock.listen(8)
    with open(ready_path, "w") as f:
        f.write(f"pid={os.getpid()}\nconfig={{'model_path': {model!r}}}\n")
    daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu}] Listening on {sock_path}")
    running = True

    def stop(signum: int, _frame: object) -> None:
        nonlocal running
        daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu}] Received signal {signum}, shutting down")
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sock.settimeout(0.5)
    while running:
        try:
            conn, _ = sock.accept()
            daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu}] Serving {TENSORS} IPC handles to engine")
            conn.close()
        except (TimeoutError, OSError):
            continue
    sock.close()
    for path in (sock_path, ready_path):
        if os.path.exists(path):
            os.unlink(path)
    daemon_log(gpu, tp_rank, f"[WeightCacheDaemon gpu={gpu}] Shutdown complete")
    sim_gpu.mark_exited(os.getpid())
    os._exit(0)


def main(argv: list[str]) -> None:
    timeout = 1800
    rest = []
    words = iter(argv)
    for word in words:
        if word == "--timeout":
            timeout = int(next(words))
        elif word != "--force":
            rest.append(word)
    settings = server.load_settings()
    if keyed_by_uuid():
        args = vars(server.build_parser(server.load_catalog()).parse_args(rest))
    else:
        args = vars(own_parser().parse_args(argv))
    gpu = sim_gpu.config()
    cfg = server.model_config(args["model_path"], "launch_server")
    weights_mib = int(cfg.get("sim_weights_mib", 0)) or int(0.45 * 0.85 * int(gpu["memory_mib"]))
    tp, pp = int(args.get("tp_size") or 1), int(args.get("pp_size") or 1)
    nnodes = int(args.get("nnodes") or 1)
    ranks = max(1, tp * pp // nnodes)
    visible = server.visible_gpus(int(gpu["count"]))
    base, step = int(args.get("base_gpu_id") or 0), int(args.get("gpu_id_step") or 1)
    load_s = max(0.2, float(settings["startup_s"]) * 0.3)
    children = []
    for rank in range(ranks):
        slot = base + rank * step
        pid = os.fork()
        if pid == 0:
            serve(visible[slot], rank, args["model_path"], weights_mib, load_s, tp, args)
        children.append(pid)
        if keyed_by_uuid():  # 0.5.17 on the H100 printed no launcher lines
            server.log(f"Launched weight cache daemon gpu={visible[slot]} pp_rank=0 tp_rank={rank} pid={pid}")
    ready = [paths(sim_gpu.gpu_uuid(visible[base + r * step]), r)[1] for r in range(ranks)]
    began = time.monotonic()
    for rank, path in enumerate(ready):
        while not os.path.exists(path):
            if time.monotonic() - began > timeout:
                server.log(f"Weight cache daemon pp_rank=0 tp_rank={rank} did not become ready within {timeout}s")
                sys.exit(1)
            time.sleep(0.1)
        if keyed_by_uuid():
            server.log(f"Weight cache daemon pp_rank=0 tp_rank={rank} is ready")
    if keyed_by_uuid():
        server.log(f"All {ranks} weight cache daemons on node 0 are ready (pp_ranks=0..0, "
                   f"tp_ranks=0..{ranks - 1}, dist_init_method=tcp://127.0.0.1:29555)")

    def stop(_signum: int, _frame: object) -> None:
        for child in children:
            os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    for _ in children:
        os.wait()
    if keyed_by_uuid():
        server.log("All weight cache daemons have been terminated")
