"""The phases of each real start, from the journals the H200 run kept (tests/fixtures/h200-real/),
as a Markdown table for docs/real-gpu.md, and the downtime a client saw during the changed flag.

    python bench/h200_real/figures.py [FIXTURES]

Times come from the journal's own stamps (`-o short-precise`, microseconds) of the last start in
each window: systemd's `Started`, SGLang's first output (Python has imported the entry point),
its `server_args=` line, and the lines that end each phase.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^(\w{3} \d\d \d\d:\d\d:\d\d\.\d{6}) \S+ (\S+?)(?:\[\d+\])?: (.*)$")
MARKS = (  # (column, what ends it), in the order a start passes them
    ("first output", None),
    ("server_args", "server_args="),
    ("dist init", "Init torch distributed ends"),
    ("weights", "Load weight end"),
    ("KV cache", "KV Cache is allocated"),
    ("decode graphs", "Capture cuda graph end"),
    ("piecewise graphs", "Capture piecewise CUDA graph end"),
    ("HTTP", "Uvicorn running on"),
    ("ready", "The server is fired up and ready to roll"),
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
        for column, marker in MARKS:
            if column not in ends and (marker is None or marker in text):
                ends[column] = round(t - started, 1)
    return started, ends


def client_downtime(fixtures: Path) -> str:
    rows = [json.loads(line) for line in (fixtures / "restart.client.jsonl").read_text().splitlines()]
    ok = [r["t"] for r in rows if r["kind"] == "generate" and r["status"] == 200]
    gaps = sorted((b - a, a, b) for a, b in zip(ok, ok[1:], strict=False))
    gap, last_ok, first_ok = gaps[-1]
    health = [r for r in rows if r["kind"] == "health"]
    down = [r["t"] for r in health if r["status"] != 200 and last_ok <= r["t"] <= first_ok]
    return (f"a client's /generate every 1 s: last answer before the stop to first after the start "
            f"{gap:.1f} s; /health (every 0.1 s) failed for {down[-1] - down[0]:.1f} s")


def main() -> None:
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
