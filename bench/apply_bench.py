#!/usr/bin/env python3
"""What `sgdeploy apply` costs on top of the server's own startup, on a real systemd test host.

Boots one ct129-like test host (systemd-nspawn; needs root, see docs/test-hosts.md) whose
simulated SGLang takes a known time to start, then runs

    sgdeploy apply PROFILE --json --force --settle 0

N times, alternating two profiles so that every apply really stops, swaps and starts the
server, and reads the unit's journal (`journalctl -o json`, `__REALTIME_TIMESTAMP`) to split the
wall time into the server's own startup and what apply adds. Then once with the default
`--settle 5`, and, when bench/.venv-ansible exists, the same swap with bench/ansible/apply.yml.

    .venv/bin/python bench/apply_bench.py [--runs 7] [--startup 3.0] [--json results.json]

Host and client are the same machine, so journal timestamps and the client's clock agree.
Targets: apply adds <= 1 s; readiness detected <= 0.2 s after the ready line is journaled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import add_catalogs_argument, apply_catalogs_argument, code_state  # noqa: E402
from tests.hosts import HostSet, HostSpec, SimSettings, free_port, skip_reason, start_hosts  # noqa: E402

MODEL = "/root/models/Qwen3.6-27B"
READY_LINE = "The server is fired up and ready to roll!"
ANSIBLE_VENV = REPO / "bench" / ".venv-ansible"
PLAYBOOK = REPO / "bench" / "ansible" / "apply.yml"
TARGET_OVERHEAD_S = 1.0
TARGET_DETECT_S = 0.2

# Runs the real CLI (cli.main) and reports, on stderr, the wall-clock time at which apply's
# progress clock started, so that the `elapsed_s` of its JSON events can be put on the journal's
# clock. Nothing else is changed.
CLI_WRAPPER = """
import sys, time
import sgdeploy.cli as cli
_init = cli.Progress.__init__
def _init_and_tell(self, *a, **k):
    _init(self, *a, **k)
    sys.stderr.write("@@bench progress_started=%.6f\\n" % (time.time() - (time.monotonic() - self.started)))
cli.Progress.__init__ = _init_and_tell
sys.exit(cli.main())  # argv from sys.argv, as the console script runs it
"""


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(values), "min": ordered[0], "max": ordered[-1], "n": len(values)}


def fmt(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    s = summary([v * scale for v in values])
    return f"{s['median']:7.3f} {unit}  ({s['min']:.3f} .. {s['max']:.3f})"


# --------------------------------------------------------------------------- the journal
def journal_entries(hs: HostSet, match: str) -> list[dict[str, Any]]:
    out = hs.ssh("ct129", f"journalctl --no-pager -o json {match}", check=False).stdout
    entries = []
    for line in out.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def _message(entry: dict[str, Any]) -> str:
    message = entry.get("MESSAGE")
    if isinstance(message, list):
        return bytes(message).decode("utf-8", "replace")
    return str(message or "")


def server_times(hs: HostSet, unit: str = "sglang") -> dict[str, float]:
    """Journal times (epoch seconds) of the unit's current invocation: systemd's `Started` line,
    the server's first line and its ready line."""
    invocation = hs.ssh("ct129", f"systemctl show -p InvocationID --value {unit}.service").stdout.strip()
    own = journal_entries(hs, f"_SYSTEMD_INVOCATION_ID={invocation}")
    manager = journal_entries(hs, f"_PID=1 INVOCATION_ID={invocation}")
    ts = lambda e: int(e["__REALTIME_TIMESTAMP"]) / 1e6  # noqa: E731
    started = [ts(e) for e in manager if _message(e).startswith(("Started", "Starting"))]
    ready = [ts(e) for e in own if READY_LINE in _message(e)]
    if not own or not ready:
        raise RuntimeError(f"no ready line in invocation {invocation} of {unit}")
    return {"started": min(started) if started else ts(own[0]), "first_line": ts(own[0]), "ready": ready[0],
            "invocation": invocation}  # type: ignore[dict-item]


# --------------------------------------------------------------------------- one sgdeploy apply
def run_apply(hs: HostSet, profile: Path, settle: float, measure: bool = True) -> dict[str, Any]:
    argv = [sys.executable, "-c", CLI_WRAPPER, "apply", str(profile), "--inventory", str(hs.inventory_path),
            "--json", "--force", "--settle", str(settle)]
    launched = time.time()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    ended = time.time()
    try:
        document = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"apply exited {proc.returncode} without JSON: {proc.stderr[-2000:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"apply exited {proc.returncode}: {document.get('message')}")
    if not measure:
        return document
    match = re.search(r"@@bench progress_started=([\d.]+)", proc.stderr)
    assert match, proc.stderr[-500:]
    origin = float(match.group(1))
    journal = server_times(hs)
    events = document["events"]
    at = {}  # first time each step / phase was reported, epoch seconds
    for event in events:
        key = event.get("step") if event["event"] == "step" else (
            f"phase:{event.get('name')}" if event["event"] == "phase" else event["event"])
        at.setdefault(key, origin + event["elapsed_s"])
    ready_seen = at["phase:ready"]
    end = at["ssh"]  # reported when apply closes the connection, after the record
    breakdown = {
        "cli start + offline validation": origin - launched,
        "connect": at["facts"] - origin,
        "facts + preflight + lock": at["stop"] - at["facts"],
        "stop old server": at["wait_gpus_idle"] - at["stop"],
        "GPU idle wait": at["install"] - at["wait_gpus_idle"],
        "install + daemon-reload + start": at["wait_ready"] - at["install"],
        "until systemd started it": journal["started"] - at["wait_ready"],
        "server's own startup": journal["ready"] - journal["started"],
        "ready line -> apply saw it": ready_seen - journal["ready"],
        "saw ready -> health check": at["check_health"] - ready_seen,
    }
    if "settle" in at:
        breakdown["health check"] = at["settle"] - at["check_health"]
        breakdown["settle + server_info + record + close"] = end - at["settle"]
    else:
        breakdown["health + server_info + record + close"] = end - at["check_health"]
    breakdown["JSON out + exit"] = ended - end
    total = ended - launched
    own = journal["ready"] - journal["started"]
    return {
        "profile": profile.name,
        "total_s": total,
        "server_startup_s": own,
        "server_first_line_to_ready_s": journal["ready"] - journal["first_line"],
        "overhead_s": total - own,
        "detect_s": ready_seen - journal["ready"],
        "ssh": document["ssh"],
        "timings": document["timings"],
        "breakdown": breakdown,
        "events": events,
    }


def round_trip(hs: HostSet, count: int = 20) -> dict[str, float]:
    """Connect once and run `true` `count` times through sgdeploy's RemoteHost: the unit cost
    of one SSH round trip here."""
    from sgdeploy.inventory import load_inventory
    from sgdeploy.remote import RemoteHost

    inventory = load_inventory(hs.inventory_path).model
    assert inventory is not None
    began = time.perf_counter()
    remote = RemoteHost("ct129", inventory.hosts["ct129"]).connect()
    connected = time.perf_counter() - began
    samples = []
    with remote:
        for _ in range(count):
            t0 = time.perf_counter()
            remote.run("true")
            samples.append(time.perf_counter() - t0)
    return {"connect_s": connected, "command_median_s": statistics.median(samples), "command_min_s": min(samples)}


# --------------------------------------------------------------------------- Ansible
def ansible_inventory(hs: HostSet, folder: Path) -> Path:
    host = hs["ct129"]
    path = folder / "hosts.ini"
    path.write_text(
        "[gpu]\n"
        f"ct129 ansible_host={host.address} ansible_port={host.port} ansible_user=root "
        f"ansible_ssh_private_key_file={hs.key_path} ansible_python_interpreter=/usr/bin/python3 "
        f"ansible_ssh_common_args='-F /dev/null -o UserKnownHostsFile={hs.known_hosts_path} "
        "-o StrictHostKeyChecking=yes'\n")
    return path


def run_ansible(hs: HostSet, inventory: Path, unit_file: Path, pipelining: bool, folder: Path) -> dict[str, Any]:
    control = Path(tempfile.mkdtemp(prefix="cp-", dir=folder))  # a fresh SSH master per run, as apply
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
           "ANSIBLE_PIPELINING": "True" if pipelining else "False", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(folder / "tmp"),
           "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    argv = [str(ANSIBLE_VENV / "bin" / "ansible-playbook"), "-vvv", "-i", str(inventory), str(PLAYBOOK),
            "-e", f"unit_src={unit_file}"]
    launched = time.time()
    try:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=180)
    except subprocess.TimeoutExpired as exc:
        Path(folder.parent / "sgd-apply-bench-ansible.log").write_text(str(exc.stdout or ""))
        raise RuntimeError("ansible-playbook ran past 180 s; its output is in "
                           f"{folder.parent / 'sgd-apply-bench-ansible.log'}") from None
    ended = time.time()
    shutil.rmtree(control, ignore_errors=True)
    if proc.returncode != 0:
        cause = hs.ssh("ct129", "journalctl -u sglang.service -o cat --no-pager -n 400 | grep -E "
                       "'Error|error|Received sigquit' | tail -2", check=False).stdout.strip()
        return {"failed": True, "total_s": ended - launched, "cause": cause or proc.stdout[-300:]}
    journal = server_times(hs)
    commands = len(re.findall(r"SSH: EXEC ssh ", proc.stdout))
    polls = len(re.findall(r"FAILED - RETRYING", proc.stdout)) + 1
    own = journal["ready"] - journal["started"]
    return {"total_s": ended - launched, "server_startup_s": own, "overhead_s": ended - launched - own,
            "after_ready_s": ended - journal["ready"], "ssh_commands": commands, "ready_polls": polls}


def render_units(hs: HostSet, profiles: list[Path], folder: Path) -> list[Path]:
    units = []
    for profile in profiles:
        out = subprocess.run([sys.executable, "-m", "sgdeploy", "render", str(profile), "--inventory",
                              str(hs.inventory_path)], cwd=REPO, capture_output=True, text=True, check=True)
        path = folder / f"{profile.stem}.service"
        path.write_text(out.stdout)
        units.append(path)
    return units


# --------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="measured applies, alternating two profiles")
    parser.add_argument("--startup", type=float, default=3.0, help="the simulated server's startup_s")
    parser.add_argument("--release-delay", type=float, default=0.5,
                        help="simulated GPU memory release after the old server exits (s)")
    parser.add_argument("--ansible-runs", type=int, default=5, help="per Ansible variant; 0 skips Ansible")
    parser.add_argument("--pipelining-first", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="FILE", help="write every measurement here")
    add_catalogs_argument(parser)
    args = parser.parse_args()
    apply_catalogs_argument(args.catalogs)

    reason = skip_reason()
    if reason:
        print(f"test hosts unavailable: {reason}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": code_state(),
        "machine": f"{platform.node()} {os.cpu_count()} cpu, {platform.platform()}, Python {platform.python_version()}",
        "startup_s": args.startup, "release_delay_s": args.release_delay, "loadavg_before": os.getloadavg(),
    }
    print(f"# apply benchmark  {results['date']}  {results['machine']}")
    print(f"# code: {results['code']}")
    print(f"# simulated server startup_s={args.startup}, GPU release delay {args.release_delay} s; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sim = SimSettings(startup_s=args.startup, release_delay_s=args.release_delay)
    hs = start_hosts([HostSpec.like("ct129", sim=sim)], owner="apply_bench")
    folder = Path(tempfile.mkdtemp(prefix="sgd-apply-bench-"))
    try:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration")
        # test hosts share this machine's network: a port of its own, not the profile's 30000
        port = free_port()
        reference = (REPO / "profiles" / "qwen36-mtp3.toml").read_text().replace("port = 30000", f"port = {port}")
        results["server_port"] = port
        a = folder / "ref.toml"
        a.write_text(reference)
        b = folder / "ref-mrr12.toml"
        b.write_text(reference.replace("max_running_requests = 16", "max_running_requests = 12"))
        run_apply(hs, a, 0, measure=False)  # first deployment on a fresh host (nothing to stop): not counted

        runs = [run_apply(hs, (b, a)[i % 2], 0) for i in range(args.runs)]
        results["settle0"] = runs
        print(f"\n## sgdeploy apply --json --force --settle 0, {len(runs)} runs alternating two profiles")
        print(f"total apply wall time          {fmt([r['total_s'] for r in runs])}")
        print(f"server's own startup (journal) {fmt([r['server_startup_s'] for r in runs])}   "
              f"(first server line -> ready: {fmt([r['server_first_line_to_ready_s'] for r in runs])})")
        over = [r["overhead_s"] for r in runs]
        print(f"what apply adds                {fmt(over)}   target <= {TARGET_OVERHEAD_S} s: "
              f"{'MET' if statistics.median(over) <= TARGET_OVERHEAD_S else 'MISSED'}")
        detect = [r["detect_s"] for r in runs]
        print(f"ready line -> apply saw it     {fmt(detect, 'ms', 1000)}   target <= {TARGET_DETECT_S * 1000:.0f} ms: "
              f"{'MET' if statistics.median(detect) <= TARGET_DETECT_S else 'MISSED'}")
        print("breakdown (median over runs; min .. max):")
        for key in runs[0]["breakdown"]:
            values = [r["breakdown"][key] for r in runs]
            print(f"  {key:34} {fmt(values)}")
        ssh = runs[0]["ssh"]
        same = all(r["ssh"] == ssh for r in runs)
        print(f"SSH per apply: {ssh} ({'every run the same' if same else 'varies: ' + str([r['ssh'] for r in runs])})")
        rt = round_trip(hs)
        results["round_trip"] = rt
        print(f"one SSH connect {rt['connect_s'] * 1000:.0f} ms; one command on an open connection: median "
              f"{rt['command_median_s'] * 1000:.1f} ms (min {rt['command_min_s'] * 1000:.1f})")

        settle = run_apply(hs, b if args.runs % 2 == 0 else a, 5.0)
        results["settle5"] = settle
        print("\n## the same with the default --settle 5 (one run)")
        print(f"total {settle['total_s']:.3f} s, server startup {settle['server_startup_s']:.3f} s, adds "
              f"{settle['overhead_s']:.3f} s (settle + record "
              f"{settle['breakdown']['settle + server_info + record + close']:.3f} s), "
              f"detect {settle['detect_s'] * 1000:.0f} ms, ssh {settle['ssh']}")

        if args.ansible_runs and (ANSIBLE_VENV / "bin" / "ansible-playbook").exists():
            version = subprocess.run([str(ANSIBLE_VENV / "bin" / "ansible-playbook"), "--version"],
                                     capture_output=True, text=True).stdout.splitlines()[0]
            units = render_units(hs, [a, b], folder)
            inventory = ansible_inventory(hs, folder)
            (folder / "tmp").mkdir()
            results["ansible"] = {"version": version}
            print(f"\n## Ansible ({version}): bench/ansible/apply.yml, the same swap on the same host")
            for pipelining in ((True, False) if args.pipelining_first else (False, True)):
                label = "pipelining on" if pipelining else "defaults (ControlPersist, no pipelining)"
                tried = [run_ansible(hs, inventory, units[(1, 0)[i % 2]], pipelining, folder)
                         for i in range(args.ansible_runs)]
                results["ansible"][label] = tried
                failed = [r for r in tried if r.get("failed")]
                rows = [r for r in tried if not r.get("failed")]
                print(f"### {label}: {len(failed)} of {len(tried)} runs failed (the new server did not get ready)")
                for r in failed:
                    print(f"    failed after {r['total_s']:.1f} s: {r['cause'][-300:]}")
                if not rows:
                    continue
                print(f"### {label}, {len(rows)} successful runs")
                print(f"total wall time       {fmt([r['total_s'] for r in rows])}")
                print(f"server's own startup  {fmt([r['server_startup_s'] for r in rows])}")
                print(f"what Ansible adds     {fmt([r['overhead_s'] for r in rows])}")
                print(f"ready line -> done    {fmt([r['after_ready_s'] for r in rows])}")
                print(f"ssh commands per run: {statistics.median([r['ssh_commands'] for r in rows]):.0f}; "
                      f"journal polls: {statistics.median([r['ready_polls'] for r in rows]):.0f}")
        elif args.ansible_runs:
            print(f"\n(Ansible skipped: no {ANSIBLE_VENV}/bin/ansible-playbook; see bench/README.md)")
    finally:
        hs.ssh("ct129", "systemctl stop sglang.service", check=False)
        hs.close()
        shutil.rmtree(folder, ignore_errors=True)
    results["loadavg_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
