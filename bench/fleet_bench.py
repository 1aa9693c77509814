"""Wall time of a group apply: one host, three hosts rolling (canary, then one at a time), and
three hosts with --parallel 3 (canary, then the other two together).

Needs root, systemd-nspawn and the test hosts' cached rootfs. The three hosts get their own
network namespaces, so every one serves on port 30000 as in production. Every apply redeploys
(alternating two profiles, --force), so each host stops and starts a server each time.

    .venv/bin/python bench/fleet_bench.py [--runs 3] [--startup 3.0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import code_state  # noqa: E402
from tests.hosts import HostSpec, SimSettings, start_hosts  # noqa: E402

MODEL = "/root/models/Qwen3-8B"
NAMES = ("f1", "f2", "f3")


def profile(target: str, max_running: int) -> str:
    return f"""[deploy]
host = "{target}"
unit = "sglang"
python = "/root/ml-env/bin/python3"

[server]
model_path = "{MODEL}"
host = "0.0.0.0"
port = 30000
max_running_requests = {max_running}
"""


def timed_apply(inventory: Path, path: Path, *extra: str) -> tuple[float, int]:
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sgdeploy", "apply", str(path), "--inventory", str(inventory),
                           "--json", "--force", "--settle", "0", *extra], cwd=REPO, capture_output=True, text=True)
    elapsed = time.monotonic() - began
    if proc.returncode != 0:
        raise RuntimeError(f"apply exited {proc.returncode}: {proc.stdout[-600:]} {proc.stderr[-600:]}")
    return elapsed, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--startup", type=float, default=3.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    print(f"# fleet benchmark  {time.strftime('%Y-%m-%dT%H:%M:%S%z')}  code {code_state()}  "
          f"load {os.getloadavg()[0]:.2f}; simulated startup_s={args.startup}")
    sim = SimSettings(startup_s=args.startup, release_delay_s=0.5)
    hs = start_hosts([HostSpec.like("ct129", name=n, private_network=True, sim=sim) for n in NAMES], owner="bench")
    results: dict[str, list[float]] = {"one host": [], "3 hosts rolling": [], "3 hosts --parallel 3": []}
    try:
        for name in NAMES:
            hs.make_model(name, MODEL, "Qwen3ForCausalLM")
        folder = Path(hs.run_dir) / "bench"
        folder.mkdir(exist_ok=True)
        inventory = folder / "inventory.toml"
        inventory.write_text(Path(hs.inventory_path).read_text().replace("[groups]", '[groups]\none = ["f1"]'))
        paths = {}
        for target in ("one", "all"):
            for variant, running in (("a", 16), ("b", 12)):
                paths[target, variant] = folder / f"{target}-{variant}.toml"
                paths[target, variant].write_text(profile(target, running))
        timed_apply(inventory, paths["all", "a"])  # first deployment everywhere: not counted
        for run in range(args.runs):
            variant = "b" if run % 2 == 0 else "a"
            other = "a" if variant == "b" else "b"
            results["one host"].append(timed_apply(inventory, paths["one", variant])[0])
            results["3 hosts rolling"].append(timed_apply(inventory, paths["all", variant])[0])
            results["3 hosts --parallel 3"].append(timed_apply(inventory, paths["all", other], "--parallel", "3")[0])
    finally:
        hs.close()
    for name, samples in results.items():
        print(f"{name:<22} median {statistics.median(samples):6.2f} s  "
              f"(min {min(samples):.2f}, max {max(samples):.2f}, n={len(samples)})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
