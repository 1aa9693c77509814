#!/usr/bin/env python3
"""What each host-side command of `sgdeploy apply` costs on a test host, measured on the host
itself (no SSH in the numbers): the facts script as a whole and probe by probe, the GPU query,
daemon-reload, start, stop, and how late `journalctl --follow` sees a new journal line.

    .venv/bin/python bench/host_steps.py [--repeat 5]

Used to explain the apply benchmark's breakdown (docs/performance.md). Needs root and
systemd-nspawn, like bench/apply_bench.py.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import pin_catalogs  # noqa: E402
from sgdeploy.host import facts  # noqa: E402
from tests.hosts import HostSpec, SimSettings, skip_reason, start_hosts  # noqa: E402

PY = "/root/ml-env/bin/python3"
MODEL = "/root/models/Qwen3.6-27B"


def timed_on_host(hs, command: str, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Run `command` `repeat` times inside the host, timing it there with the monotonic clock."""
    script = (f"for i in $(seq {repeat}); do a=$(cat /proc/uptime); s=$(date +%s%N); "
              f"sh -c {shlex.quote(command)} >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); done")
    out = hs.ssh("ct129", script).stdout.split()
    return [int(x) / 1e6 for x in out]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--catalogs", default="tree", metavar="tree|head|REV")
    args = parser.parse_args()
    pin_catalogs(args.catalogs)
    if skip_reason():
        print(f"test hosts unavailable: {skip_reason()}", file=sys.stderr)
        return 2
    hs = start_hosts([HostSpec.like("ct129", sim=SimSettings(startup_s=1.0, release_delay_s=0.5))],
                     owner="host_steps")
    try:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration")
        script = facts.facts_command("sglang", PY, MODEL, 30000)
        gpu_fields = ",".join(facts.GPU_QUERY_FIELDS)
        app_fields = ",".join(facts.APPS_QUERY_FIELDS)
        probes = {
            "facts script (whole)": script,
            "nvidia-smi --query-gpu": f"nvidia-smi --query-gpu={gpu_fields} --format=csv,noheader,nounits",
            "nvidia-smi --query-compute-apps":
                f"nvidia-smi --query-compute-apps={app_fields} --format=csv,noheader,nounits",
            "python -c 'print(version)'": f"{PY} -c 'import sys; print(sys.version)'",
            "python -c importlib.metadata.version('sglang')": f"{PY} -c {shlex.quote(facts._SGLANG_PROBE)}",
            "python model config probe": f"{PY} -c {shlex.quote(facts._MODEL_PROBE)} {MODEL}/config.json",
            "systemctl show (unit props)": f"systemctl show sglang.service -p {','.join(facts.UNIT_PROPERTIES)}",
            "ss -Hltn": "ss -Hltn",
            "systemctl daemon-reload": "systemctl daemon-reload",
            "true (process start floor)": "true",
        }
        print(f"# on-host times, {args.repeat} runs each: median (min .. max) ms")
        for label, command in probes.items():
            samples = timed_on_host(hs, command, args.repeat)
            print(f"{label:48} {statistics.median(samples) * 1000:8.1f}  "
                  f"({min(samples) * 1000:.1f} .. {max(samples) * 1000:.1f})")
        # journal visibility: write a line into the journal and see when a follower prints it
        probe = (
            "journalctl -f -n0 -o cat -t sgdbench > /tmp/follow.out 2>&1 & jp=$!; sleep 0.5; "
            "for i in $(seq 10); do echo \"$(date +%s%N)\" | systemd-cat -t sgdbench; sleep 0.37; done; "
            "sleep 0.6; kill $jp; cat /tmp/follow.out")
        # the follower prints the line when it sees it; stamp each output line on arrival
        stamped = hs.ssh("ct129", probe.replace(
            "journalctl -f -n0 -o cat -t sgdbench > /tmp/follow.out",
            "journalctl -f -n0 -o cat -t sgdbench | while read l; do echo \"$l $(date +%s%N)\"; done > /tmp/follow.out",
        )).stdout.split("\n")
        lags = [(int(b) - int(a)) / 1e6 for a, b in (line.split() for line in stamped if len(line.split()) == 2)]
        if lags:
            print(f"journalctl --follow sees a new line after: median {statistics.median(lags):.0f} ms "
                  f"({min(lags):.0f} .. {max(lags):.0f}), n={len(lags)} (write time to arrival, on the host)")
    finally:
        hs.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
