#!/usr/bin/env python3
"""Time the facts script on the machine it runs on (a real GPU host): the whole script, and
nvidia-smi alone, N times each. Stdlib only, so it runs wherever `python3` and this checkout are.

    python3 bench/facts_timing.py [--repeat 7] [--python /path/to/python] [--model DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sgdeploy.host.facts import facts_command, parse_facts


def timed(argv: list[str], repeat: int) -> tuple[list[float], str]:
    samples, out = [], ""
    for _ in range(repeat):
        began = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        samples.append(time.perf_counter() - began)
    return samples, out


def line(label: str, samples: list[float]) -> str:
    ms = sorted(1000 * s for s in samples)
    return f"{label:40} median {statistics.median(ms):7.1f} ms  ({ms[0]:.1f} .. {ms[-1]:.1f}, n={len(ms)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--model", default="/nonexistent-model")
    args = parser.parse_args()
    script = facts_command("sglang", args.python, args.model, 30000)
    whole, out = timed(["sh", "-c", script], args.repeat)
    facts = parse_facts(out)
    print(line("facts script (whole)", whole))
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
        print(line("nvidia-smi --query-gpu", timed(query, args.repeat)[0]))
    print(f"parsed: {len(facts.gpus or ())} GPUs, python {facts.python_version}, errors {list(facts.errors)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
