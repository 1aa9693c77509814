"""Reading a model's weights into the host's page cache while the old server still serves.

SGLang reads every checkpoint file when it starts; from the page cache that is memory speed (an
8B model's 14.5 GB took 4.1 s on an H200 host), from disk it is the disk's. A restart after a
new model was copied, or after memory pressure evicted the files, pays the disk inside the
downtime. Read before the stop, the same bytes cost wall time instead, with the old server up.

Only when the host can hold them: the files must fit in half of MemAvailable, so the old
server's own pages are not pushed out; the read runs at idle I/O and CPU priority and is bounded.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from sgdeploy.host.facts import WEIGHT_SUFFIXES, parse_key_values

WEIGHT_PATTERNS = tuple(f"*{suffix}" for suffix in WEIGHT_SUFFIXES)
MAX_SHARE_OF_AVAILABLE = 0.5
WARM_TIMEOUT_S = 600  # the read's bound; it only costs wall time, the old server still serves


@dataclass(frozen=True)
class PageCacheWarmth:
    """What the read did: `warmed` (with bytes and seconds), `skipped` (why) or `failed`."""

    outcome: str
    bytes: int = 0
    seconds: float = 0.0
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        if self.outcome == "warmed":
            return (f"read {self.bytes / 2**30:.1f} GiB of weights into the page cache in "
                    f"{self.seconds:.1f} s")
        return f"weights not read ahead: {self.reason or self.outcome}"


def warm_command(model_path: str, timeout_s: int = WARM_TIMEOUT_S) -> str:
    """One sh command: the weight files' size against MemAvailable, then read them (nice, idle
    I/O class, `timeout_s` at most); prints `outcome=`, `bytes=`, `seconds=`, `reason=` lines."""
    folder = shlex.quote(model_path.rstrip("/") or "/")
    names = " -o ".join(f"-name {shlex.quote(p)}" for p in WEIGHT_PATTERNS)
    share = int(MAX_SHARE_OF_AVAILABLE * 100)
    return (
        f"d={folder}; [ -d \"$d\" ] || {{ echo outcome=skipped; echo reason=no model folder on the "
        f"host; exit 0; }}; size=$(find -L \"$d\" -maxdepth 1 -type f \\( {names} \\) -printf "
        "'%s\\n' | awk '{s+=$1} END {printf \"%.0f\", s}'); avail=$(awk '/^MemAvailable:/ {printf "
        "\"%.0f\", $2 * 1024}' /proc/meminfo); echo bytes=$size; [ \"$size\" -gt 0 ] || { echo "
        "outcome=skipped; echo reason=no weight files beside config.json; exit 0; }; if [ "
        f"\"$size\" -gt $((avail / 100 * {share})) ]; then echo outcome=skipped; echo "
        "\"reason=$((size >> 30)) GiB of weights do not fit in half of the $((avail >> 30)) GiB "
        "available\"; exit 0; fi; t0=$(date +%s.%N); find -L \"$d\" -maxdepth 1 -type f \\( "
        f"{names} \\) -print0 | timeout {int(timeout_s)} nice -n 19 ionice -c 3 xargs -0 -r cat > "
        "/dev/null 2>&1; rc=$?; t1=$(date +%s.%N); echo seconds=$(awk -v a=$t0 -v b=$t1 'BEGIN "
        "{printf \"%.2f\", b - a}'); if [ $rc = 0 ]; then echo outcome=warmed; else echo "
        "outcome=failed; echo reason=read ended with status $rc; fi"
    )


def parse_warmth(output: str) -> PageCacheWarmth:
    values = parse_key_values(output)
    size = values.get("bytes", "0")
    seconds = values.get("seconds", "0")
    return PageCacheWarmth(
        outcome=values.get("outcome", "failed"),
        bytes=int(size) if size.isdigit() else 0,
        seconds=float(seconds) if seconds.replace(".", "", 1).isdigit() else 0.0,
        reason=values.get("reason", "" if "outcome" in values else "no answer from the host"),
    )
