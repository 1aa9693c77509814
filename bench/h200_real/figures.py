"""The phases of each real start, from the journals the H200 run kept (tests/fixtures/h200-real/),
as a Markdown table for docs/real-gpu.md, and the downtime a client saw during the changed flag.

    python bench/h200_real/figures.py [FIXTURES]
    python bench/h200_real/figures.py --weight-cache [FIXTURES/weight-cache]   # the daemon's runs
    python bench/h200_real/figures.py --levers [FIXTURES/weight-cache]   # the same, medians by kind

Times come from the journal's own stamps (`-o short-precise`, microseconds) of the last start in
each window: systemd's `Started`, SGLang's first output (Python has imported the entry point),
its `server_args=` line, and the lines that end each phase.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from statistics import median

STAMP = re.compile(r"^(\w{3} \d\d \d\d:\d\d:\d\d\.\d{6}) \S+ (\S+?)(?:\[\d+\])?: (.*)$")
MARKS = (  # (column, what ends it: one line of any release), in the order a start passes them
    ("first output", None),
    ("server_args", ("server_args=",)),
    ("dist init", ("Init torch distributed ends",)),
    ("weights", ("Load weight end",)),
    ("KV cache", ("KV Cache is allocated",)),
    # 0.5.11 captures decode graphs, then piecewise ones; 0.5.17 the prefill graphs first
    ("decode graphs", ("Capture cuda graph end", "Capture target decode CUDA graph end")),
    ("piecewise graphs", ("Capture piecewise CUDA graph end", "Capture target prefill CUDA graph end")),
    ("HTTP", ("Uvicorn running on",)),
    ("ready", ("The server is fired up and ready to roll",)),
)
RUNS = (("cold apply", "cold2"), ("changed flag", "restart"), ("3,951-token KV cache", "small-kv"),
        ("rollback", "rollback"))


def stamps(path: Path) -> list[tuple[float, str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = STAMP.match(line)
        if m:
            t = datetime.strptime("2026 " + m[1], "%Y %b %d %H:%M:%S.%f").timestamp()
            out.append((t, m[2], m[3]))
    return out


def phases(path: Path) -> tuple[float, dict[str, float]]:
    """Seconds from systemd's `Started` to the end of each phase, for the last start."""
    lines = stamps(path)
    start_at = max(i for i, (_, who, text) in enumerate(lines) if who == "systemd" and text.startswith("Started "))
    started = lines[start_at][0]
    ends: dict[str, float] = {}
    for t, who, text in lines[start_at + 1:]:
        if who == "systemd":
            continue
        for column, markers in MARKS:
            if column not in ends and (markers is None or any(m in text for m in markers)):
                ends[column] = round(t - started, 1)
    return started, ends


def client_downtime(fixtures: Path) -> str:
    rows = [json.loads(line) for line in (fixtures / "restart.client.jsonl").read_text().splitlines()]
    ok = [r["t"] for r in rows if r["kind"] == "generate" and r["status"] == 200]
    gaps = sorted((b - a, a, b) for a, b in itertools.pairwise(ok))
    gap, last_ok, first_ok = gaps[-1]
    health = [r for r in rows if r["kind"] == "health"]
    down = [r["t"] for r in health if r["status"] != 200 and last_ok <= r["t"] <= first_ok]
    return (f"a client's /generate every 1 s: last answer before the stop to first after the start "
            f"{gap:.1f} s; /health (every 0.1 s) failed for {down[-1] - down[0]:.1f} s")


def stop_s(path: Path) -> float | None:
    """systemd's `Stopping` to `Stopped` of the old server in the window: SGLang's own drain."""
    lines = stamps(path)
    stopping = [t for t, who, text in lines if who == "systemd" and text.startswith("Stopping sglang.")]
    stopped = [t for t, who, text in lines if who == "systemd" and text.startswith("Stopped sglang.")]
    return round(stopped[0] - stopping[0], 1) if stopping and stopped else None


def outage(rows: list[dict], kind: str, start: float, end: float) -> float | None:
    """The longest time between two answers of `kind` (`generate` each 1 s, `health` each 0.1 s)
    within a step's window: the downtime a client of that endpoint saw."""
    ok = [r["t"] for r in rows if r["kind"] == kind and r["status"] == 200]
    gaps = [b - a for a, b in itertools.pairwise(ok) if b > start and a < end]
    return round(max(gaps), 1) if gaps else None


def step_file(run: Path, step: dict, suffix: str) -> Path:
    """A step's file in a run's fixtures: numbered where the run repeats a step (PHASE=9, 10)."""
    numbered = run / f"{step['n']:02d}-{step['step']}{suffix}"
    return numbered if numbered.exists() else run / f"{step['step']}{suffix}"


WEIGHT_CACHE_COLUMNS = ["stop", *(c for c, _ in MARKS), "/generate outage", "/health outage"]


def restarts(folder: Path) -> Iterator[tuple[str, str, list[float | None]]]:
    """Each restart of each run (run folder, step, the cells of WEIGHT_CACHE_COLUMNS): the old
    server's stop, the new start's phases (seconds after systemd's `Started`) and the outage a
    client saw."""
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        with gzip.open(run / "client.jsonl.gz", "rt") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for step in map(json.loads, (run / "steps.jsonl").read_text().splitlines()):
            if step["argv"][1] != "apply" or step["step"] == "client-first":
                continue  # the first apply starts from nothing: no outage to measure
            journal = step_file(run, step, ".journal")
            stop = stop_s(journal)
            if stop is None:
                continue  # the first start on a fresh host: no server before it
            _, ends = phases(journal)
            yield run.name, step["step"], [
                stop, *(ends.get(c) for c, _ in MARKS),
                outage(rows, "generate", step["start"], step["end"]),
                outage(rows, "health", step["start"], step["end"])]


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value}"


def weight_cache_table(folder: Path) -> str:
    """PHASE=8, 9, 10, bar, rest, small (docs/weight-cache.md): every restart of every run."""
    out = ["| run | apply | " + " | ".join(WEIGHT_CACHE_COLUMNS) + " |",
           "|---" * (len(WEIGHT_CACHE_COLUMNS) + 2) + "|"]
    for run, step, cells in restarts(folder):
        out.append(f"| {run} | {step} | " + " | ".join(map(cell, cells)) + " |")
    return "\n".join(out)


def lever_table(folder: Path) -> str:
    """The same restarts by model and kind (the run folder's name less its `-N`): how many, and
    the median of each column over them."""
    groups: dict[tuple[str, str], list[list[float | None]]] = {}
    for run, step, cells in restarts(folder):
        groups.setdefault((re.sub(r"-\d+$", "", run), step), []).append(cells)
    out = ["| model | apply | runs | " + " | ".join(WEIGHT_CACHE_COLUMNS) + " |",
           "|---" * (len(WEIGHT_CACHE_COLUMNS) + 3) + "|"]
    for (model, step), rows in groups.items():
        medians = [median(v) if (v := [r[i] for r in rows if r[i] is not None]) else None
                   for i in range(len(WEIGHT_CACHE_COLUMNS))]
        out.append(f"| {model} | {step} | {len(rows)} | "
                   + " | ".join(cell(None if m is None else round(m, 1)) for m in medians) + " |")
    return "\n".join(out)


def main() -> None:
    if sys.argv[1:2] in (["--weight-cache"], ["--levers"]):
        default = Path(__file__).parents[2] / "tests/fixtures/h200-real/weight-cache"
        table = weight_cache_table if sys.argv[1] == "--weight-cache" else lever_table
        print(table(Path(sys.argv[2]) if len(sys.argv) > 2 else default))
        return
    fixtures = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[2] / "tests/fixtures/h200-real")
    columns = [c for c, _ in MARKS]
    print("| start | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for label, stem in RUNS:
        _, ends = phases(fixtures / f"{stem}.journal")
        print(f"| {label} | " + " | ".join(f"{ends.get(c, '-')}" for c in columns) + " |")
    print()
    print(client_downtime(fixtures))


if __name__ == "__main__":
    main()
