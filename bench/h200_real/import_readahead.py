"""What a cold page cache costs Python's imports, and what reading the environment ahead gives
back: on a GPU machine, no SGLang needed (torch's own environment stands in for the server's).

    python bench/h200_real/import_readahead.py [VENV_PYTHON] [RUNS]   (root: it drops the page cache)

Each run: the page cache dropped, then `import torch` and `torch.cuda.init()` cold; again warm;
dropped again, the environment's files read ahead (as a read-ahead before a stop would: `cat` of
every file of its site-packages, idle I/O class), then the import. Prints one JSON line per
measurement and a summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import time

PYTHON = sys.argv[1] if len(sys.argv) > 1 else "/opt/torch/.venv/bin/python3"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
IMPORT = "import time; t = time.time(); import torch; torch.cuda.init(); print(time.time() - t)"


def drop() -> None:
    subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)


def imported() -> float:
    out = subprocess.run([PYTHON, "-c", IMPORT], capture_output=True, text=True, check=True)
    return round(float(out.stdout.strip().splitlines()[-1]), 2)


def read_ahead(folder: str) -> tuple[float, int]:
    t = time.time()
    size = subprocess.run(f"du -sb {folder} | cut -f1", shell=True, capture_output=True, text=True).stdout
    subprocess.run(f"find {folder} -type f -print0 | ionice -c 3 xargs -0 -r cat > /dev/null", shell=True,
                   check=False)
    return round(time.time() - t, 2), int(size.strip() or 0)


def main() -> None:
    purelib = subprocess.run([PYTHON, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    rows = []
    for n in range(RUNS):
        drop()
        cold = imported()
        warm = imported()
        drop()
        seconds, size = read_ahead(purelib)
        ahead = imported()
        row = {"run": n, "cold_s": cold, "warm_s": warm, "read_ahead_s": seconds,
               "read_ahead_bytes": size, "after_read_ahead_s": ahead}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"python": PYTHON, "site_packages": purelib, "here": sysconfig.get_platform(),
                      "median": {k: sorted(r[k] for r in rows)[len(rows) // 2] for k in rows[0] if k != "run"}}))


if __name__ == "__main__":
    main()
