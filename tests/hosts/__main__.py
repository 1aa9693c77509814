"""python -m tests.hosts up|down|list|build: test hosts for demos and manual poking.

python -m tests.hosts up --count 1 --like ct129     # boots, prints the inventory path
python -m tests.hosts up --count 3 --like ct129 --private-network   # own netns + address each
python -m tests.hosts down                          # stops every host started by `up`
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .machine import PRESETS, RUN_ROOT, HostSpec, start_hosts, teardown_run
from .rootfs import ensure_rootfs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.hosts")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="boot hosts and leave them running")
    up.add_argument("--count", type=int, default=1)
    up.add_argument("--like", default="ct129", choices=sorted(PRESETS))
    up.add_argument("--name", help="host name (default: the preset's; -N suffixes if count > 1)")
    up.add_argument("--sglang-version", help="override the preset's SGLang version")
    up.add_argument("--failure", default="", help="simulated SGLang failure mode")
    up.add_argument(
        "--private-network",
        action="store_true",
        help="each host in its own network namespace, at its own address on the run's bridge "
        "(sshd on port 22; every host can serve on the same port)",
    )
    down = sub.add_parser("down", help="stop hosts started by `up`")
    down.add_argument("run", nargs="?", help="run id (default: all runs)")
    sub.add_parser("list", help="list runs")
    sub.add_parser("build", help="build the cached rootfs now")
    a = p.parse_args(argv)

    if a.cmd == "build":
        print(ensure_rootfs())
        return 0
    if a.cmd == "up":
        base = a.name or a.like
        specs = []
        for i in range(a.count):
            name = base if a.count == 1 else f"{base}-{i + 1}"
            spec = HostSpec.like(a.like, name=name, private_network=a.private_network)
            if a.sglang_version:
                spec.sglang_version = a.sglang_version
            spec.sim.failure = a.failure
            specs.append(spec)
        t0 = time.monotonic()
        hs = start_hosts(specs, owner="cli")
        print(
            f"booted {len(hs)} host(s) in {time.monotonic() - t0:.1f}s (run {hs.run_dir.name})",
            file=sys.stderr,
        )
        for h in hs:
            print(f"  {h.name}: {' '.join(hs.ssh_argv(h, control=False))}", file=sys.stderr)
        if hs.network:
            print(
                f"  network: bridge {hs.network['bridge']}, {hs.network['subnet']} "
                f"(this machine is {hs.network['gateway']})",
                file=sys.stderr,
            )
        print(f"stop with: python -m tests.hosts down {hs.run_dir.name}", file=sys.stderr)
        print(hs.inventory_path)
        return 0
    runs = (
        sorted(d for d in RUN_ROOT.glob("*") if (d / "state.json").exists())
        if RUN_ROOT.exists()
        else []
    )
    if a.cmd == "list":
        for d in runs:
            st = json.loads((d / "state.json").read_text())
            names = ", ".join(
                f"{h['name']}:{h.get('ip') or ''}{':' if h.get('ip') else ''}{h['port']}"
                for h in st["hosts"]
            )
            print(f"{d.name}  {names}  {d / 'inventory.toml'}")
        return 0
    if a.cmd == "down":

        def stale_or_cli(d: object) -> bool:
            st = json.loads((d / "state.json").read_text())  # type: ignore[operator]
            if st.get("owner") == "cli":
                return True
            try:
                os.kill(int(st["owner_pid"]), 0)
            except ProcessLookupError:
                return True  # left behind by a process that is gone
            return False

        todo = [d for d in runs if (d.name == a.run if a.run else stale_or_cli(d))]
        if a.run and not todo:
            print(f"no run {a.run}", file=sys.stderr)
            return 1
        for d in todo:
            teardown_run(d)
            print(f"stopped {d.name}", file=sys.stderr)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
