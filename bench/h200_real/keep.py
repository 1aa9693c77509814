"""Keeps what one run of bench/h200_real_deploy.sh saw as a fixture folder that figures.py and
tests/test_h200_real.py read: the steps numbered FIRST..LAST (their rows of steps.jsonl and their
NN-step.journal/.log/.out/.err), the client's requests over those steps (client.jsonl.gz), the
daemon's journal and the machine's facts.

    python bench/h200_real/keep.py OUT_DIR DEST FIRST LAST   # OUT_DIR: the scenario's out/ folder
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path


def keep(out: Path, dest: Path, first: int, last: int) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    kept = [r for r in rows if first <= r["n"] <= last]
    (dest / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    for row in kept:
        for suffix in (".journal", ".log", ".out", ".err"):
            src = out / f"{row['n']:02d}-{row['step']}{suffix}"
            if src.exists() and src.stat().st_size:
                shutil.copyfile(src, dest / src.name)
    start, end = kept[0]["start"] - 5, kept[-1]["end"] + 5
    requests = [line for line in (out / "client.jsonl").read_text().splitlines()
                if line.strip() and start <= json.loads(line)["t"] <= end]
    (dest / "client.jsonl.gz").write_bytes(gzip.compress("".join(r + "\n" for r in requests).encode(), mtime=0))
    for pattern, name in (("journal.weights.*.txt", "daemon.journal"), ("machine.txt", "machine.txt")):
        found = sorted(out.glob(pattern))
        if found:
            shutil.copyfile(found[-1], dest / name)


if __name__ == "__main__":
    keep(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
