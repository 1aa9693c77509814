#!/usr/bin/env python3
"""How fast `sgdeploy validate` is: cold CLI start, 1,000 profiles in one call, per profile
in-process, and what the CLI imports.

Run from the repository root with the project's venv:

    .venv/bin/python bench/validate_bench.py [--runs 15] [--json results.json]

Targets: one profile from a cold start <= 0.3 s; 1,000 profiles in one call <= 2 s; no
fabric/paramiko/invoke/jinja2/cryptography import on the validate path. This prints results;
it does not fail on a missed target (exit 0), so it can run on a loaded machine.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._common import add_catalogs_argument, apply_catalogs_argument, code_state  # noqa: E402

PROFILE = "profiles/qwen36-mtp3.toml"
INVENTORY = "inventory.toml"
FORBIDDEN = ("fabric", "paramiko", "invoke", "jinja2", "cryptography")
TARGET_COLD_S = 0.3
TARGET_THOUSAND_S = 2.0


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"n": len(samples), "median": statistics.median(samples), "p90": p90,
            "min": ordered[0], "max": ordered[-1]}


def timed(argv: list[str], runs: int, env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall time of `argv` from fork to exit, `runs` times (one warm-up run first, not counted),
    and its CPU time (user + sys of the child), which other load on the machine disturbs less."""
    samples, cpu = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        took = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
        if i:
            samples.append(took)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {**stats(samples), "cpu_median": statistics.median(cpu)}


def remove_bytecode() -> None:
    for cache in (REPO / "sgdeploy").rglob("__pycache__"):
        shutil.rmtree(cache)


def fmt(s: dict[str, float]) -> str:
    return (f"median {s['median']:.3f} s  p90 {s['p90']:.3f} s  (min {s['min']:.3f}, max {s['max']:.3f}, "
            f"n={s['n']}; CPU median {s['cpu_median']:.3f} s)")


# --------------------------------------------------------------------------- 1,000 profiles
def make_profiles(folder: Path, count: int, typo_every: int = 0) -> list[Path]:
    """`count` varied copies of the example profiles: ports, units, memory fraction, batch sizes,
    context length and (for the H200 profile) the target host, so the versions differ too."""
    sources = sorted((REPO / "profiles").glob("*.toml"))
    texts = [p.read_text() for p in sources]
    paths = []
    for i in range(count):
        src = i % len(texts)
        text = texts[src]
        text = re.sub(r"^port = \d+", f"port = {30000 + i % 500}", text, flags=re.M)
        text = re.sub(r'^unit = "([^"]+)"', lambda m, i=i: f'unit = "{m.group(1)}-{i % 37}"', text, flags=re.M)
        text = re.sub(r"^mem_fraction_static = [\d.]+", f"mem_fraction_static = {0.70 + (i % 20) / 100:.2f}",
                      text, flags=re.M)
        text = re.sub(r"^max_running_requests = \d+", f"max_running_requests = {8 + i % 56}", text, flags=re.M)
        text = re.sub(r"^context_length = \d+", f"context_length = {32768 * (1 + i % 4)}", text, flags=re.M)
        if 'host = "h200-02"' in text and i % 2:
            text = text.replace('host = "h200-02"', 'host = "h200-01"')
        if typo_every and i % typo_every == typo_every - 1:  # a misspelt flag: the error path
            text = text.replace("[server]\n", "[server]\nspeculative_num_stepz = 3\n", 1)
        path = folder / f"p{i:04d}-{sources[src].stem}.toml"
        path.write_text(text)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- import time
def import_times(argv: list[str]) -> list[tuple[int, int, str]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), m.group(3) + m.group(4)))
    return rows


def in_process(paths: list[Path], rounds: int) -> dict[str, object]:
    """validate_file in a loop, inside one process (imports and catalogs already warm)."""
    code = f"""
import json, statistics, sys, time
sys.path.insert(0, {str(REPO)!r})
began = time.perf_counter()
from sgdeploy.profile.validate import InventoryContext, validate_file
from pathlib import Path
imported = time.perf_counter() - began
paths = {[str(p) for p in paths]!r}
inv = InventoryContext.load(Path({INVENTORY!r}))
t0 = time.perf_counter(); validate_file(paths[0], inv); first = time.perf_counter() - t0
per = []
for _ in range({rounds}):
    t0 = time.perf_counter()
    for p in paths:
        validate_file(p, inv)
    per.append((time.perf_counter() - t0) / len(paths))
print(json.dumps({{"import_s": imported, "first_profile_s": first, "per_profile_s": per}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def profile_thousand(dir_glob: list[str], top: int = 12) -> list[str]:
    """cProfile of the 1,000-profile call, cumulative, restricted to sgdeploy's own functions."""
    code = f"""
import cProfile, pstats, io, sys
sys.argv = ['sgdeploy', 'validate', '--inventory', {INVENTORY!r}, *{dir_glob!r}]
import sgdeploy.cli as cli
prof = cProfile.Profile(); prof.enable()
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
prof.disable()
out = io.StringIO()
pstats.Stats(prof, stream=out).sort_stats('tottime').print_stats({top})
sys.stderr.write(out.getvalue())
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    lines = proc.stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return [line for line in lines[start:start + top + 1] if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="cold starts per measurement (default 15)")
    parser.add_argument("--thousand-runs", type=int, default=7, help="runs of the 1,000-profile call")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--json", metavar="FILE", help="write the results here as JSON")
    add_catalogs_argument(parser)
    args = parser.parse_args()
    apply_catalogs_argument(args.catalogs)

    py = sys.executable
    console = shutil.which("sgdeploy", path=str(Path(py).parent)) or "sgdeploy"
    results: dict[str, object] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": code_state(),
        "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.platform()}, Python {platform.python_version()}",
        "loadavg_before": os.getloadavg(),
    }
    print(f"# validate benchmark  {results['date']}  {results['machine']}")
    print(f"# code: {results['code']}")
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  "
          "(other work on this machine inflates these numbers; look at min and median)")

    # (a) one profile, cold start: first with sgdeploy compiled from source on every run (an
    # editable checkout where PYTHONDONTWRITEBYTECODE=1 keeps __pycache__ from being written),
    # then with its bytecode cached, as `pip install` and any first run leave it.
    bare = timed([py, "-c", "pass"], args.runs)
    bare_s = timed([py, "-S", "-c", "pass"], args.runs)
    remove_bytecode()
    uncached = timed([py, "-m", "sgdeploy", "validate", PROFILE], args.runs,
                     env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    compileall.compile_dir(str(REPO / "sgdeploy"), quiet=1)
    module = timed([py, "-m", "sgdeploy", "validate", PROFILE], args.runs)
    script = timed([console, "validate", PROFILE], args.runs)
    results["cold"] = {"python_c_pass": bare, "python_S_c_pass": bare_s,
                       "python_m_sgdeploy_validate_no_bytecode": uncached,
                       "python_m_sgdeploy_validate": module, "console_script_validate": script}
    print("\n## (a) one profile from a cold start")
    print(f"python -c pass                       {fmt(bare)}")
    print(f"python -S -c pass (no site)          {fmt(bare_s)}")
    print(f"  sgdeploy compiled on every run     {fmt(uncached)}")
    print(f"python -m sgdeploy validate PROFILE  {fmt(module)}")
    print(f"sgdeploy validate PROFILE            {fmt(script)}")
    worst = max(module["median"], script["median"])
    print(f"target <= {TARGET_COLD_S} s: {'MET' if worst <= TARGET_COLD_S else 'MISSED'} (median)")

    # (b) 1,000 profiles in one call
    with tempfile.TemporaryDirectory(prefix="sgd-bench-") as tmp:
        print(f"\n## (b) {args.count} profiles in one call: sgdeploy validate --inventory {INVENTORY} DIR/*.toml")
        results["thousand"] = {}
        for label, typo_every in (("all valid", 0), ("1 in 10 with a misspelt flag", 10)):
            folder = Path(tmp) / f"typo{typo_every}"
            folder.mkdir()
            paths = make_profiles(folder, args.count, typo_every)
            if not typo_every:
                valid_paths = paths
            argv = [console, "validate", "--inventory", INVENTORY, *map(str, paths)]
            thousand = timed(argv, args.thousand_runs)
            check = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
            results["thousand"][label] = {"count": args.count, "exit": check.returncode, **thousand}
            print(f"{label:30} {fmt(thousand)}  exit {check.returncode}")
            print(f"{'':30} per profile: {1000 * (thousand['median'] - script['median']) / args.count:.2f} ms "
                  "(call median minus the one-profile cold start); target <= "
                  f"{TARGET_THOUSAND_S} s: {'MET' if thousand['median'] <= TARGET_THOUSAND_S else 'MISSED'}")
            top = profile_thousand([str(p) for p in paths])
            results["thousand"][label]["top_tottime"] = top
            print(f"{'':30} top functions by own time (cProfile, which roughly doubles the time):")
            for line in top:
                print("    " + line)

        # (c) in-process
        inproc = in_process(valid_paths[:200], rounds=5)
        per = [x * 1000 for x in inproc["per_profile_s"]]
        results["in_process"] = {"import_s": inproc["import_s"], "first_profile_s": inproc["first_profile_s"],
                                 "per_profile_ms": stats(per)}
        print("\n## (c) in-process: validate_file() in a loop (200 varied valid profiles x 5 rounds)")
        print(f"import sgdeploy.profile.validate: {inproc['import_s'] * 1000:.1f} ms; first profile (loads its catalog): "
              f"{inproc['first_profile_s'] * 1000:.1f} ms")
        print(f"per profile afterwards: median {statistics.median(per):.3f} ms "
              f"(min {min(per):.3f}, max {max(per):.3f})")

    # (d) the import path
    rows = import_times(["-m", "sgdeploy", "validate", PROFILE])
    names = {name.strip() for _, _, name in rows}
    bad = sorted(n for n in names if n.split(".")[0] in FORBIDDEN)
    top10 = sorted(rows, key=lambda r: r[1], reverse=True)[:10]
    results["imports"] = {"forbidden_imported": bad, "count": len(rows),
                          "top10_cumulative_us": [(c, name.strip()) for _, c, name in top10]}
    print("\n## (d) python -X importtime -m sgdeploy validate PROFILE")
    print(f"{len(rows)} modules imported; forbidden ({', '.join(FORBIDDEN)}): {', '.join(bad) or 'none'}"
          f" -> {'MET' if not bad else 'MISSED'}")
    print("top 10 by cumulative import time (one run, us):")
    for self_us, cum_us, name in top10:
        print(f"  {cum_us:>8} cum  {self_us:>7} self  {name}")
    pydantic_us = sum(c for _, c, n in rows if n.strip() in ("pydantic", "pydantic_core"))
    if pydantic_us:
        print(f"pydantic + pydantic_core: {pydantic_us / 1000:.1f} ms cumulative at the top level")

    results["loadavg_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
