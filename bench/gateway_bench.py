#!/usr/bin/env python3
"""Client requests lost during a 3-host rollout behind SGLang's gateway, three ways, in one run.

Boots three private-network test hosts (needs root, systemd-nspawn and the cached rootfs; see
docs/test-hosts.md), runs the real gateway (`smg launch`, installed by scripts/setup) on
127.0.0.1 in front of them with its default settings, and sends a bounded client load through
it (`--rate` chat completions a second, every other one streamed) for the whole of each rollout:

  (a) `sgdeploy apply` with the gateway in the inventory: each worker drained before its stop
      and back in rotation before the next host (docs/fleets.md);
  (b) `sgdeploy apply` of the same group with an inventory without the gateway: a rolling
      restart, one host at a time, each ready before the next, the gateway left to notice;
  (c) bench/ansible/apply.yml with `serial: 1`: the unit installed, `systemctl restart`, the
      journal polled for the ready line, host after host.

The simulated servers stop as SGLang does on SIGTERM (`sigterm_drain`: /health answers 503, the
requests in flight finish, checked every 5 s, then the exit), so (b) and (c) are not charged for
streams a real server would have finished.

Each rollout changes the profile, so every host restarts its server. Failed requests (an error
status, a refused or cut connection, a stream without its end) and the latency of the others are
counted from 1 s before the rollout to 1 s after. Only loopback and the test hosts' addresses are
used. (c) runs when bench/.venv-ansible has ansible-playbook (bench/README.md).

    .venv/bin/python bench/gateway_bench.py [--rate 20] [--startup 3.0] [--sigterm-exit] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import code_state  # noqa: E402
from bench.fleet_bench import profile  # noqa: E402
from tests.hosts import HostSet, HostSpec, SimSettings, skip_reason, start_hosts  # noqa: E402
from tests.hosts.gateway import ClientLoad, Gateway, smg_missing, start_gateway  # noqa: E402

MODEL = "/root/models/Qwen3-8B"
NAMES = ("g1", "g2", "g3")
ANSIBLE = REPO / "bench" / ".venv-ansible" / "bin" / "ansible-playbook"
PLAYBOOK = REPO / "bench" / "ansible" / "apply.yml"
KEY = "bench-gateway-key"


def sgdeploy_apply(inventory: Path, path: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "sgdeploy", "apply", str(path), "--inventory", str(inventory), "--json",
            "--settle", "1"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env={**os.environ, "BENCH_SMG_KEY": KEY})
    if proc.returncode != 0:
        raise RuntimeError(f"apply exited {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-800:]}")
    return json.loads(proc.stdout)


def ansible_inventory(hs: HostSet, folder: Path) -> Path:
    path = folder / "hosts.ini"
    lines = ["[gpu]"]
    for h in hs.hosts:
        lines.append(f"{h.name} ansible_host={h.address} ansible_port={h.port} ansible_user=root "
                     f"ansible_ssh_private_key_file={hs.key_path} ansible_python_interpreter=/usr/bin/python3 "
                     f"ansible_ssh_common_args='-F /dev/null -o UserKnownHostsFile={hs.known_hosts_path} "
                     "-o StrictHostKeyChecking=yes'")
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible_serial(hs: HostSet, folder: Path, unit_file: Path) -> None:
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(folder / "ansible-tmp"), "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    argv = [str(ANSIBLE), "-i", str(ansible_inventory(hs, folder)), str(PLAYBOOK), "-e", f"unit_src={unit_file}",
            "-e", "serial=1"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"ansible-playbook exited {proc.returncode}: {proc.stdout[-1500:]}")


def render(inventory: Path, path: Path, folder: Path) -> Path:
    out = subprocess.run([sys.executable, "-m", "sgdeploy", "render", str(path), "--host", NAMES[0],
                          "--inventory", str(inventory)], cwd=REPO, capture_output=True, text=True, check=True)
    unit = folder / f"{path.stem}.service"
    unit.write_text(out.stdout)
    return unit


def measured(name: str, gateway: Gateway, rate: float, rollout: Any) -> dict[str, Any]:
    """Run `rollout` under the client load; what the clients saw."""
    load = ClientLoad(gateway.url, rate=rate, api_key=KEY).start()
    time.sleep(1.0)
    began = time.monotonic()
    rollout()
    took = time.monotonic() - began
    time.sleep(1.0)
    s = load.stop()
    kinds: dict[str, int] = {}
    for failure in s.failures:
        kind = failure.split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    row = {"name": name, "rollout_s": round(took, 1), "sent": s.sent, "failed": s.failed,
           "p50_ms": round(s.p(0.50) * 1000, 1), "p99_ms": round(s.p(0.99) * 1000, 1),
           "max_ms": round(max(s.latencies_s, default=0) * 1000, 1), "failure_kinds": kinds,
           "failure_examples": s.failures[:3]}
    print(f"{name:<44} {row['rollout_s']:6.1f} s  sent {s.sent:4d}  failed {s.failed:4d}  "
          f"p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms  max {row['max_ms']:7.1f} ms  {kinds or ''}",
          flush=True)
    return row


def settle(gateway: Gateway, hs: HostSet, timeout: float = 180.0) -> float:
    """Wait until the gateway routes to all three workers again; how long that took."""
    began = time.monotonic()
    urls = [f"http://{h.address}:30000" for h in hs.hosts]
    deadline = began + timeout
    while time.monotonic() < deadline:
        known = gateway.workers()
        missing = [u for u in urls if u not in known]
        for url in missing:  # a gateway that dropped a worker (remove-unhealthy): added again
            gateway.add(url)
        if not missing and all(known[u]["status"] == "ready" for u in urls):
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(f"the gateway does not route to all workers after {timeout:.0f} s: {gateway.workers()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="client requests a second (default 20)")
    parser.add_argument("--startup", type=float, default=3.0, help="the simulated server's startup_s")
    parser.add_argument("--sigterm-exit", action="store_true",
                        help="servers exit at SIGTERM at once, cutting what is in flight (a killed server)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    reason = skip_reason() or smg_missing()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    from importlib.metadata import version

    smg_version = version("smg")

    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "code": code_state(),
        "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.platform()}", "smg": smg_version,
        "rate": args.rate, "startup_s": args.startup, "sigterm": "exit" if args.sigterm_exit else "drain",
        "loadavg_before": os.getloadavg(), "runs": []}
    print(f"# gateway benchmark  {results['date']}  {results['machine']}\n# code: {results['code']}; smg "
          f"{smg_version}; {args.rate:.0f} req/s; simulated startup_s={args.startup}; SIGTERM: {results['sigterm']}; "
          "load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    # SIGTERM as SGLang answers it (sigterm_watchdog): requests in flight finish before the exit
    sim = SimSettings(startup_s=args.startup, release_delay_s=0.5, sigterm_drain=not args.sigterm_exit)
    hs = start_hosts([HostSpec.like("ct129", name=n, private_network=True, sim=sim) for n in NAMES],
                     owner="gateway_bench")
    folder = Path(tempfile.mkdtemp(prefix="sgd-gateway-bench-"))
    gateway = None
    try:
        for name in NAMES:
            hs.make_model(name, MODEL, "Qwen3ForCausalLM")
        gateway = start_gateway(folder, KEY)
        plain = folder / "plain.toml"
        plain.write_text(Path(hs.inventory_path).read_text())
        fronted = folder / "fronted.toml"
        fronted.write_text(plain.read_text() + f'\n[gateways.front]\nurl = "{gateway.url}"\n'
                           'api_key_env = "BENCH_SMG_KEY"\nhosts = ["all"]\n')
        paths = {}
        for running in (16, 12, 8, 24):
            paths[running] = folder / f"p{running}.toml"
            paths[running].write_text(profile("all", running))
        sgdeploy_apply(fronted, paths[16])  # first deployment; adds the workers to the gateway
        settle(gateway, hs)
        runs = results["runs"]
        runs.append(measured("(a) sgdeploy apply, drained through smg", gateway, args.rate,
                             lambda: sgdeploy_apply(fronted, paths[12])))
        settle(gateway, hs)
        runs.append(measured("(b) sgdeploy apply, rolling, no gateway steps", gateway, args.rate,
                             lambda: sgdeploy_apply(plain, paths[8])))
        runs[-1]["gateway_caught_up_s"] = round(settle(gateway, hs), 1)
        if ANSIBLE.exists():
            unit = render(plain, paths[24], folder)
            runs.append(measured("(c) Ansible apply.yml, serial: 1", gateway, args.rate,
                                 lambda: ansible_serial(hs, folder, unit)))
            runs[-1]["gateway_caught_up_s"] = round(settle(gateway, hs), 1)
        else:
            print(f"(c) skipped: no {ANSIBLE} (bench/README.md says how to make it)")
    finally:
        if gateway is not None:
            gateway.stop()
        hs.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
