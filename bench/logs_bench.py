#!/usr/bin/env python3
"""The log reader against real logs and against a long one.

Run from the repository root with the project's venv:

    .venv/bin/python bench/logs_bench.py agreement [--corpus DIR]   # verdict / kind / root line
    .venv/bin/python bench/logs_bench.py speed [--mb 100]           # a startup, then request lines

`agreement` reads DIR/index.json (the format of tests/fixtures/logs/index.json: file, ready,
kind, root_line, split) and says, per log and per split, whether the reader agrees. The public
corpus has a `dev` split (the logs the reader is built against) and a `heldout` split (set aside
when collected, never tuned to); both are reported apart, then together. Another corpus in the
same format (without `split`, it is one part) is checked with the same bars. Targets: verdict
100 %, kind >= 95 %, root line >= 95 %.

`speed` writes a log of a real startup (tests/logs/ok-0.5.11-qwen36-mtp-tp2.log) followed by
request lines (decode and prefill batches, uvicorn access lines) up to --mb megabytes, then reads
it as `sgdeploy logcheck` does, in a fresh process per size (a quarter, half and all of --mb), and
reports wall and CPU seconds and the peak memory the reading added. Targets: 100 MB within 3 s,
memory that does not grow with the size. Neither command fails on a missed target (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._common import code_state  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "logs"
STARTUP = REPO / "tests" / "logs" / "ok-0.5.11-qwen36-mtp-tp2.log"
TARGETS = {"verdict": 1.0, "kind": 0.95, "root line": 0.95}
TARGET_SPEED_S = 3.0
SERVING = (
    "[2026-05-12 00:05:01 TP0] Decode batch, #running-req: 12, #token: 20431, token usage: 0.08, "
    "accept len: 3.21, cuda graph: True, gen throughput (token/s): 412.55, #queue-req: 0\n",
    "[2026-05-12 00:05:01 TP1] Decode batch, #running-req: 12, #token: 20431, token usage: 0.08, "
    "accept len: 3.21, cuda graph: True, gen throughput (token/s): 412.55, #queue-req: 0\n",
    '[2026-05-12 00:05:01] INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    "[2026-05-12 00:05:02 TP0] Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 64, "
    "token usage: 0.08, #running-req: 12, #queue-req: 0\n",
)
# Runs in a fresh interpreter: the peak RSS the read adds over the imports, and its times.
_READER = """
import json, resource, sys, time
from sgdeploy.logs import read_log
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
wall, cpu = time.perf_counter(), time.process_time()
with open(sys.argv[1], encoding="utf-8", errors="replace") as handle:
    report = read_log(handle)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "base_mib": base / 1024, "peak_mib": peak / 1024,
                  "added_mib": (peak - base) / 1024, "lines": report.lines, "ready": report.ready}))
"""


def agree(entry: dict[str, Any], corpus: Path) -> dict[str, Any]:
    from sgdeploy.logs import read_log

    lines = (corpus / entry["file"]).read_text(encoding="utf-8").splitlines()
    report = read_log(lines, None, entry.get("sglang_version"))
    failure = report.failure
    got_kind, got_line = (failure.kind, failure.line) if failure else (None, None)
    return {
        "file": entry["file"],
        "split": entry.get("split", "all"),
        "verdict": report.ready is entry["ready"],
        "kind": got_kind == entry["kind"],
        "root line": got_line == entry["root_line"],
        "got": [report.ready, got_kind, got_line],
        "want": [entry["ready"], entry["kind"], entry["root_line"]],
    }


def cmd_agreement(args: argparse.Namespace) -> dict[str, Any]:
    corpus = Path(args.corpus)
    index = json.loads((corpus / "index.json").read_text(encoding="utf-8"))
    rows = [agree(entry, corpus) for entry in index]
    print(f"# log reader agreement on {corpus} ({len(rows)} logs), code {code_state()}")
    for row in rows:
        if not (row["verdict"] and row["kind"] and row["root line"]):
            print(f"  differs ({row['split']}): {row['file']}: got {row['got']}, want {row['want']}")
    parts = sorted({r["split"] for r in rows}, key=lambda name: ("dev", "heldout").index(name)
                   if name in ("dev", "heldout") else 2)
    groups = [(name, [r for r in rows if r["split"] == name]) for name in parts]
    if len(groups) > 1:
        groups.append(("all", rows))
    print("| part | logs | verdict | kind | root line |")
    print("| --- | --- | --- | --- | --- |")
    splits: dict[str, dict[str, float]] = {}
    for name, part in groups:
        splits[name] = {m: sum(r[m] for r in part) / len(part) for m in TARGETS}
        cells = [f"{splits[name][m]:.1%} ({sum(r[m] for r in part)}/{len(part)}) "
                 f"{'MET' if splits[name][m] >= TARGETS[m] else 'MISSED'}" for m in TARGETS]
        print(f"| {name} | {len(part)} | " + " | ".join(cells) + " |")
    print("targets: " + ", ".join(f"{m} >= {t:.0%}" for m, t in TARGETS.items()))
    shares = splits["all"] if "all" in splits else splits[parts[0]]
    return {"corpus": str(corpus), "shares": shares, "splits": splits, "rows": rows}


def write_log(path: Path, megabytes: int) -> int:
    """A real startup, then request lines up to `megabytes`; the number of lines."""
    startup = STARTUP.read_text(encoding="utf-8").splitlines(keepends=True)[1:]  # no `# source:`
    limit = megabytes * 1_000_000
    block = "".join(SERVING) * 250
    size, lines = 0, 0
    with path.open("w", encoding="utf-8") as out:
        for line in startup:
            out.write(line)
            size += len(line.encode())
            lines += 1
        while size < limit:
            out.write(block)
            size += len(block.encode())
            lines += len(SERVING) * 250
    return lines


def _cli_run(path: Path) -> dict[str, Any]:
    """The whole command an operator runs, from a cold start: wall, CPU and peak memory."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "subprocess.run([sys.executable, '-m', 'sgdeploy', 'logcheck', sys.argv[1], '--json'],"
        " stdout=subprocess.DEVNULL, check=False)\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(wall, u.ru_utime + u.ru_stime, u.ru_maxrss / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(path)], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.split()
    return {"command": "sgdeploy logcheck --json", "wall_s": float(out[0]), "cpu_s": float(out[1]),
            "peak_mib": float(out[2])}


def cmd_speed(args: argparse.Namespace) -> dict[str, Any]:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# log reader speed, code {code_state()}, Python {platform.python_version()}, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {load} on {os.cpu_count()} CPUs")
    print("| size | lines | wall | CPU | peak RSS | added by reading | target | met? |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    results = []
    with tempfile.TemporaryDirectory(prefix="sgd-logbench-") as tmp:
        for mb in (args.mb // 4, args.mb // 2, args.mb):
            path = Path(tmp) / f"{mb}.log"
            lines = write_log(path, mb)
            best: dict[str, Any] | None = None
            for _ in range(args.runs):
                done = subprocess.run([sys.executable, "-c", _READER, str(path)], cwd=REPO, check=True,
                                      capture_output=True, text=True)
                run = json.loads(done.stdout)
                best = run if best is None or run["wall_s"] < best["wall_s"] else best
            assert best is not None
            best.update(mb=mb, file_lines=lines)
            results.append(best)
            target = TARGET_SPEED_S * mb / args.mb
            met = "MET" if best["wall_s"] <= target else "MISSED"
            print(f"| {mb} MB | {lines:,} | {best['wall_s']:.2f} s | {best['cpu_s']:.2f} s | "
                  f"{best['peak_mib']:.0f} MiB | {best['added_mib']:.1f} MiB | {target:.2f} s | {met} |")
            if mb == args.mb:
                cli = _cli_run(path)
                results.append(cli)
                met = "MET" if cli["wall_s"] <= TARGET_SPEED_S else "MISSED"
                print(f"| {mb} MB, `sgdeploy logcheck --json` | {lines:,} | {cli['wall_s']:.2f} s | "
                      f"{cli['cpu_s']:.2f} s | {cli['peak_mib']:.0f} MiB | (whole command) | "
                      f"{TARGET_SPEED_S:.2f} s | {met} |")
            path.unlink()
    results = [r for r in results if "mb" in r]
    grows = results[-1]["added_mib"] - results[0]["added_mib"]
    print(f"memory added by reading, {results[0]['mb']} MB vs {results[-1]['mb']} MB: {grows:+.1f} MiB "
          f"({'constant' if abs(grows) < 8 else 'GROWS'})")
    return {"runs": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    agreement = sub.add_parser("agreement", help="verdict, kind and root line against an index.json")
    agreement.add_argument("--corpus", default=str(CORPUS), help="folder with index.json and its logs")
    speed = sub.add_parser("speed", help="a long log: a startup, then request lines")
    speed.add_argument("--mb", type=int, default=100, help="size of the largest log (default 100)")
    speed.add_argument("--runs", type=int, default=3, help="reads per size; the fastest is reported")
    for p in (agreement, speed):
        p.add_argument("--json", metavar="FILE", help="also write every result to FILE")
    args = parser.parse_args()
    result = cmd_agreement(args) if args.command == "agreement" else cmd_speed(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
