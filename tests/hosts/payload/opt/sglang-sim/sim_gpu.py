"""Simulated NVIDIA GPUs of a test host: configuration, per-process memory, nvidia-smi.

GPUs are described by /etc/sim-gpu.toml ([gpu] name, compute_capability, count,
memory_mib, driver_version, cuda_version, reserved_mib).  A process "holds" GPU
memory by writing /run/sim-gpu/<pid>.json (pid, its start time, gpus, used_mib,
name, release_delay_s, exited_at).  When the process is gone its memory stays
counted until exited_at + release_delay_s, like a driver tearing down a context;
it is no longer listed as a compute app meanwhile.  sim-gpu.service stamps exit
times and removes expired records; nvidia-smi does the same lazily.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path

CONFIG = Path(os.environ.get("SIM_GPU_CONFIG", "/etc/sim-gpu.toml"))
STATE_DIR = Path(os.environ.get("SIM_GPU_STATE", "/run/sim-gpu"))
XML_TEMPLATE = Path(os.environ.get("SIM_GPU_XML", "/usr/share/sim-gpu/nvidia-smi-q.xml.in"))
CONTEXT_MIB = 9  # memory.used exceeds the sum of the apps by this much while any app runs

_MODELS = {  # name fragment -> (architecture, power cap W, idle W, fan, persistence)
    "H200": ("Hopper", 700, 78, "N/A", "On"),
    "H100": ("Hopper", 700, 72, "N/A", "On"),
    "B200": ("Blackwell", 1000, 140, "N/A", "On"),
    "A100": ("Ampere", 400, 55, "N/A", "On"),
    "A6000": ("Ampere", 300, 22, "30%", "Off"),
    "L40": ("Ada Lovelace", 300, 35, "N/A", "On"),
    "4090": ("Ada Lovelace", 450, 18, "0%", "Off"),
}


def config() -> dict:
    cfg = _read_config()
    cfg.setdefault("name", "NVIDIA H200")
    cfg.setdefault("compute_capability", "9.0")
    cfg.setdefault("count", 1)
    cfg.setdefault("memory_mib", 143771)
    cfg.setdefault("driver_version", "580.159.04")
    cfg.setdefault("cuda_version", "13.0")
    cfg.setdefault("reserved_mib", 615)
    return cfg


def _read_config() -> dict:
    """The [gpu] table of CONFIG, through a JSON copy in STATE_DIR kept for as long as CONFIG is
    unchanged: every nvidia-smi call reads it, and tomllib's import costs a third of a call (real
    nvidia-smi answers in ~22 ms on an H200: the simulated one should not cost more than that)."""
    try:
        stat = CONFIG.stat()
    except FileNotFoundError:
        return {}
    key = f"{stat.st_mtime_ns}:{stat.st_size}"
    cache = STATE_DIR / "config.cache"  # not *.json: those are the process records
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return cached["gpu"]
    import tomllib

    cfg = tomllib.loads(CONFIG.read_text()).get("gpu", {})
    with contextlib.suppress(OSError):
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        _write(cache, {"key": key, "gpu": cfg})
    return cfg


def model_facts(name: str) -> tuple[str, int, int, str, str]:
    for frag, facts in _MODELS.items():
        if frag in name:
            return facts
    return ("Hopper", 700, 70, "N/A", "On")


_NAMESPACE_DNS = bytes.fromhex("6ba7b8109dad11d180b400c04fd430c8")


def gpu_uuid(index: int) -> str:
    """uuid.uuid5(NAMESPACE_DNS, "<hostname>.sim-gpu.<index>"), without importing uuid and socket."""
    import hashlib

    name = f"{os.uname().nodename}.sim-gpu.{index}".encode()
    raw = bytearray(hashlib.sha1(_NAMESPACE_DNS + name).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def bus_id(index: int, count: int) -> str:
    if count == 1:
        return "00000000:00:06.0"
    return f"00000000:{(0x18 + 0x10 * index) % 0x100:02X}:00.0"


# ------------------------------------------------------------------- process records


def proc_starttime(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _write(path: Path, rec: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, path)


def register(
    pid: int, gpus: list[int], used_mib: int, name: str, release_delay_s: float = 2.0
) -> None:
    """Record that process `pid` holds `used_mib` MiB on each GPU in `gpus`."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    rec = {
        "pid": pid,
        "starttime": proc_starttime(pid),
        "gpus": list(gpus),
        "used_mib": int(used_mib),
        "name": name,
        "release_delay_s": float(release_delay_s),
        "exited_at": None,
    }
    _write(STATE_DIR / f"{pid}.json", rec)


def update(pid: int, used_mib: int) -> None:
    p = STATE_DIR / f"{pid}.json"
    with contextlib.suppress(FileNotFoundError, ValueError):
        rec = json.loads(p.read_text())
        rec["used_mib"] = int(used_mib)
        _write(p, rec)


def mark_exited(pid: int, when: float | None = None) -> None:
    p = STATE_DIR / f"{pid}.json"
    with contextlib.suppress(FileNotFoundError, ValueError):
        rec = json.loads(p.read_text())
        if rec.get("exited_at") is None:
            rec["exited_at"] = time.time() if when is None else when
            _write(p, rec)


def records(now: float | None = None, *, gc: bool = True) -> list[dict]:
    """Records still holding memory; each gets "alive". Stamps exits, drops expired ones."""
    now = time.time() if now is None else now
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        alive = rec.get("exited_at") is None and proc_starttime(rec["pid"]) == rec.get("starttime")
        if not alive and rec.get("exited_at") is None:
            rec["exited_at"] = now
            if gc:
                with contextlib.suppress(OSError):
                    _write(p, rec)
        if not alive and now >= rec["exited_at"] + rec.get("release_delay_s", 0):
            if gc:
                with contextlib.suppress(OSError):
                    p.unlink()
            continue
        rec["alive"] = alive
        out.append(rec)
    return out


def snapshot() -> list[dict]:
    """Per GPU: index, uuid, name, bus_id, total, used, free, reserved, apps."""
    cfg = config()
    n = int(cfg["count"])
    total = int(cfg["memory_mib"])
    reserved = int(cfg["reserved_mib"])
    gpus = [
        {
            "index": i,
            "uuid": gpu_uuid(i),
            "name": cfg["name"],
            "bus_id": bus_id(i, n),
            "total": total,
            "reserved": reserved,
            "used": 0,
            "apps": [],
            "cc": str(cfg["compute_capability"]),
        }
        for i in range(n)
    ]
    for rec in records():
        for g in rec["gpus"]:
            if 0 <= g < n:
                gpus[g]["used"] += rec["used_mib"]
                if rec["alive"]:
                    gpus[g]["apps"].append(rec)
    for g in gpus:
        if g["apps"]:
            g["used"] += CONTEXT_MIB
        g["used"] = min(g["used"], total - reserved)
        g["free"] = total - reserved - g["used"]
    return gpus


def free_mib(index: int, exclude_pid: int | None = None) -> int:
    cfg = config()
    total = int(cfg["memory_mib"]) - int(cfg["reserved_mib"])
    used = sum(r["used_mib"] for r in records() if index in r["gpus"] and r["pid"] != exclude_pid)
    return total - used


def reap_forever(interval: float = 0.1) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    while True:
        records()
        time.sleep(interval)


# ------------------------------------------------------------------------ nvidia-smi

_GPU_FIELDS = {
    "index": ("index", None),
    "uuid": ("uuid", None),
    "gpu_uuid": ("uuid", None),
    "name": ("name", None),
    "gpu_name": ("name", None),
    "count": ("count", None),
    "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.used": ("memory.used [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"),
    "memory.reserved": ("memory.reserved [MiB]", "MiB"),
    "utilization.gpu": ("utilization.gpu [%]", "%"),
    "utilization.memory": ("utilization.memory [%]", "%"),
    "compute_cap": ("compute_cap", None),
    "driver_version": ("driver_version", None),
    "pci.bus_id": ("pci.bus_id", None),
    "gpu_bus_id": ("pci.bus_id", None),
    "mig.mode.current": ("mig.mode.current", None),
    "persistence_mode": ("persistence_mode", None),
    "temperature.gpu": ("temperature.gpu", None),
    "power.draw": ("power.draw [W]", "W"),
    "power.limit": ("power.limit [W]", "W"),
    "compute_mode": ("compute_mode", None),
}

_APP_FIELDS = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "name": ("process_name", None),
    "used_memory": ("used_gpu_memory [MiB]", "MiB"),
    "used_gpu_memory": ("used_gpu_memory [MiB]", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_bus_id": ("gpu_bus_id", None),
    "gpu_name": ("gpu_name", None),
    "gpu_serial": ("gpu_serial", None),
}


def _gpu_value(field: str, g: dict, ngpu: int, cfg: dict) -> str:
    arch, cap, idle_w, _fan, pm = model_facts(g["name"])
    busy = bool(g["apps"])
    return {
        "index": str(g["index"]),
        "uuid": g["uuid"],
        "gpu_uuid": g["uuid"],
        "name": g["name"],
        "gpu_name": g["name"],
        "count": str(ngpu),
        "memory.total": str(g["total"]),
        "memory.used": str(g["used"]),
        "memory.free": str(g["free"]),
        "memory.reserved": str(g["reserved"]),
        "utilization.gpu": "0",
        "utilization.memory": "0",
        "compute_cap": g["cc"],
        "driver_version": cfg["driver_version"],
        "pci.bus_id": g["bus_id"],
        "gpu_bus_id": g["bus_id"],
        "mig.mode.current": "Disabled" if arch in ("Hopper", "Blackwell") else "[N/A]",
        "persistence_mode": "Enabled" if pm == "On" else "Disabled",
        "temperature.gpu": "33" if busy else "32",
        "power.draw": f"{idle_w + (42 if busy else 0):.2f}",
        "power.limit": f"{cap:.2f}",
        "compute_mode": "Default",
    }[field]


def _app_value(field: str, rec: dict, g: dict) -> str:
    return {
        "pid": str(rec["pid"]),
        "process_name": rec["name"],
        "name": rec["name"],
        "used_memory": str(rec["used_mib"]),
        "used_gpu_memory": str(rec["used_mib"]),
        "gpu_uuid": g["uuid"],
        "gpu_bus_id": g["bus_id"],
        "gpu_name": g["name"],
        "gpu_serial": str(1653724033031 + g["index"]),
    }[field]


def _csv(fields: list[str], table: dict, rows: list[list[str]], fmt: set[str]) -> str:
    out = []
    if "noheader" not in fmt:
        out.append(", ".join(table[f][0] for f in fields))
    for row in rows:
        vals = []
        for f, v in zip(fields, row, strict=False):
            unit = table[f][1]
            vals.append(f"{v} {unit}" if unit and "nounits" not in fmt else v)
        out.append(", ".join(vals))
    return "".join(line + "\n" for line in out)


def _table(gpus: list[dict], cfg: dict) -> str:
    ts = time.asctime()
    drv, cuda = cfg["driver_version"], cfg["cuda_version"]
    bar = "+-----------------------------------------+------------------------+----------------------+"
    lines = [
        f"{ts}       ",
        "+-----------------------------------------------------------------------------------------+",
        "| "
        + f"NVIDIA-SMI {drv}".ljust(34)
        + f"Driver Version: {drv}".ljust(31)
        + f"CUDA Version: {cuda}".ljust(22)
        + " |",
        bar,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for k, g in enumerate(gpus):
        arch, cap, idle_w, fan, pm = model_facts(g["name"])
        busy = bool(g["apps"])
        temp = 33 if busy else 32
        watts = idle_w + (42 if busy else 0)
        ecc = "0" if arch in ("Hopper", "Blackwell") or "A100" in g["name"] else "Off"
        mig = "Disabled" if arch in ("Hopper", "Blackwell") else "N/A"
        name = g["name"] if len(g["name"]) <= 29 else g["name"][:26] + "..."
        c1 = f"{g['index']:>4}  {name:<29}{pm:>4}  "
        c2 = f"{g['bus_id']:>19} {'Off':>3} "
        c3 = f"{ecc:>21} "
        lines.append(f"|{c1}|{c2}|{c3}|")
        c1 = f" {fan:>3}   {temp:>2}C    P0" + f"{watts}W / {cap:>4}W ".rjust(25)
        c2 = f"{g['used']}MiB / {g['total']}MiB".rjust(23) + " "
        c3 = f"{0:>7}%{'Default':>13} "
        lines.append(f"|{c1}|{c2}|{c3}|")
        lines.append(f"|{'':41}|{'':24}|{mig:>21} |")
        lines.append(bar)
        del k
    lines += [
        "",
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
    ]
    apps = [(g, a) for g in gpus for a in g["apps"]]
    if not apps:
        lines.append(
            "|  No running processes found                                                             |"
        )
    for g, a in apps:
        name = a["name"] if len(a["name"]) <= 36 else "..." + a["name"][-33:]
        mem = f"{a['used_mib']}MiB"
        lines.append(
            f"|  {g['index']:>3}   N/A  N/A {a['pid']:>15}  {'C':>5}   {name:<36}{mem:>10} |"
        )
    lines.append(
        "+-----------------------------------------------------------------------------------------+"
    )
    return "\n".join(lines) + "\n"


def _xml(gpus: list[dict], cfg: dict) -> str:
    text = XML_TEMPLATE.read_text()
    start = text.index("\t<gpu id=")
    end = text.index("</gpu>", start) + len("</gpu>\n")
    head, block, tail = text[:start], text[start:end], text[end:]
    head = re.sub(r"<timestamp>.*?</timestamp>", f"<timestamp>{time.asctime()}</timestamp>", head)
    head = re.sub(
        r"<driver_version>.*?</driver_version>",
        f"<driver_version>{cfg['driver_version']}</driver_version>",
        head,
    )
    head = re.sub(
        r"<cuda_version>.*?</cuda_version>",
        f"<cuda_version>{cfg['cuda_version']}</cuda_version>",
        head,
    )
    head = re.sub(
        r"<attached_gpus>.*?</attached_gpus>", f"<attached_gpus>{len(gpus)}</attached_gpus>", head
    )
    blocks = []
    for g in gpus:
        arch = model_facts(g["name"])[0]
        b = block
        bus = g["bus_id"]
        dom, rest = bus.split(":", 1)
        pci_bus, dev_fn = rest.split(":")
        pci_dev = dev_fn.split(".")[0]

        def tag(name: str, value: str, b: str) -> str:
            return re.sub(rf"<{name}>[^<]*</{name}>", f"<{name}>{value}</{name}>", b, count=1)

        b = b.replace('<gpu id="00000000:00:06.0">', f'<gpu id="{bus}">')
        b = tag("product_name", g["name"], b)
        b = tag("product_architecture", arch, b)
        b = tag("serial", str(1653724033031 + g["index"]), b)
        b = tag("uuid", g["uuid"], b)
        b = tag("minor_number", str(g["index"]), b)
        b = tag("pci_bus", pci_bus, b)
        b = tag("pci_device", pci_dev, b)
        b = tag("pci_domain", dom[-4:], b)
        b = tag("pci_bus_id", bus, b)
        fb = (
            "<fb_memory_usage>\n"
            f"\t\t\t<total>{g['total']} MiB</total>\n"
            f"\t\t\t<reserved>{g['reserved'] + 1} MiB</reserved>\n"
            f"\t\t\t<used>{g['used']} MiB</used>\n"
            f"\t\t\t<free>{g['free']} MiB</free>\n"
            "\t\t</fb_memory_usage>"
        )
        b = re.sub(r"<fb_memory_usage>.*?</fb_memory_usage>", fb, b, count=1, flags=re.S)
        procs = "".join(
            "\t\t\t<process_info>\n"
            "\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>\n"
            "\t\t\t\t<compute_instance_id>N/A</compute_instance_id>\n"
            f"\t\t\t\t<pid>{a['pid']}</pid>\n"
            "\t\t\t\t<type>C</type>\n"
            f"\t\t\t\t<process_name>{a['name']}</process_name>\n"
            f"\t\t\t\t<used_memory>{a['used_mib']} MiB</used_memory>\n"
            "\t\t\t</process_info>\n"
            for a in g["apps"]
        )
        b = re.sub(r"<processes>\n\t\t</processes>", f"<processes>\n{procs}\t\t</processes>", b)
        blocks.append(b)
    return head + "".join(blocks) + tail


def _usage_error(msg: str) -> int:
    print(msg)
    print("Please run 'nvidia-smi -h' for help.")
    return 2


def nvidia_smi(argv: list[str]) -> int:
    cfg = config()
    opts: dict[str, str] = {}
    flags: set[str] = set()
    it = iter(argv)
    for a in it:
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            opts[k] = v
        elif a in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id"):
            opts[a] = next(it, "")
        elif a in (
            "-q",
            "--query",
            "-x",
            "--xml-format",
            "-L",
            "--list-gpus",
            "--version",
            "-h",
            "--help",
        ):
            flags.add(a)
        elif a.startswith("-i") and len(a) > 2:
            opts["-i"] = a[2:]
        else:
            return _usage_error(f'Invalid combination of input arguments. "{a}" is not recognized.')
    if "--version" in flags:
        drv = cfg["driver_version"]
        sys.stdout.write(
            f"NVIDIA-SMI version  : {drv}\nNVML version        : {drv.rsplit('.', 1)[0]}\n"
            f"DRIVER version      : {drv}\nCUDA Version        : {cfg['cuda_version']}\n"
        )
        return 0
    if flags & {"-h", "--help"}:
        print("NVIDIA System Management Interface -- v" + cfg["driver_version"] + " (simulated)")
        return 0
    gpus = snapshot()
    sel = opts.get("-i") or opts.get("--id")
    if sel:
        wanted = sel.split(",")
        chosen = [g for g in gpus if str(g["index"]) in wanted or g["uuid"] in wanted]
        if not chosen:
            print("No devices were found")
            return 6
        gpus = chosen
    fmt = {f.strip() for f in opts.get("--format", "").split(",") if f.strip()}
    if "--query-gpu" in opts or "--query-compute-apps" in opts:
        if "csv" not in fmt:
            return _usage_error('"--format" must be specified with a csv format.')
        if "--query-gpu" in opts:
            fields = [f.strip() for f in opts["--query-gpu"].split(",") if f.strip()]
            for f in fields:
                if f not in _GPU_FIELDS:
                    print(f'Field "{f}" is not a valid field to query.')
                    return 2
            rows = [[_gpu_value(f, g, len(gpus), cfg) for f in fields] for g in gpus]
            sys.stdout.write(_csv(fields, _GPU_FIELDS, rows, fmt))
        else:
            fields = [f.strip() for f in opts["--query-compute-apps"].split(",") if f.strip()]
            for f in fields:
                if f not in _APP_FIELDS:
                    print(f'Field "{f}" is not a valid field to query.')
                    return 2
            rows = [[_app_value(f, a, g) for f in fields] for g in gpus for a in g["apps"]]
            sys.stdout.write(_csv(fields, _APP_FIELDS, rows, fmt))
        return 0
    if flags & {"-L", "--list-gpus"}:
        for g in gpus:
            print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        return 0
    if flags & {"-q", "--query"}:
        if flags & {"-x", "--xml-format"}:
            sys.stdout.write(_xml(gpus, cfg))
            return 0
        # plain -q: the handful of fields a deployer reads
        print(
            f"\n==============NVSMI LOG==============\n\nTimestamp                                 : {time.asctime()}"
        )
        print(f"Driver Version                            : {cfg['driver_version']}")
        print(f"CUDA Version                              : {cfg['cuda_version']}\n")
        print(f"Attached GPUs                             : {len(gpus)}")
        for g in gpus:
            print(f"GPU {g['bus_id']}")
            print(f"    Product Name                          : {g['name']}")
            print(f"    GPU UUID                              : {g['uuid']}")
            print("    FB Memory Usage")
            print(f"        Total                             : {g['total']} MiB")
            print(f"        Reserved                          : {g['reserved'] + 1} MiB")
            print(f"        Used                              : {g['used']} MiB")
            print(f"        Free                              : {g['free']} MiB")
        return 0
    sys.stdout.write(_table(gpus, cfg))
    return 0


def hold_main(argv: list[str]) -> int:
    """sim-gpu-hold --gpu K --mib X [--name N] [--seconds S]: a stray process holding memory."""
    import argparse

    p = argparse.ArgumentParser(prog="sim-gpu-hold")
    p.add_argument("--gpu", type=int, action="append", required=True)
    p.add_argument("--mib", type=int, required=True)
    p.add_argument("--name", default="python3")
    p.add_argument("--seconds", type=int, default=3600)
    p.add_argument("--release-delay", type=float, default=0.0)
    a = p.parse_args(argv)
    register(os.getpid(), a.gpu, a.mib, a.name, a.release_delay)
    os.execvp("sleep", ["sleep", str(a.seconds)])
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "reap":
        reap_forever()
    elif cmd == "hold":
        sys.exit(hold_main(sys.argv[2:]))
    else:
        sys.exit(nvidia_smi(sys.argv[1:]))
