#!/usr/bin/env python3
"""What `sgdeploy apply` costs on top of the server's own startup, on a real systemd test host:
wall time and downtime, measured apart, next to an Ansible playbook and a bare ssh script.

Boots one ct129-like test host (systemd-nspawn; needs root, see docs/test-hosts.md) whose
simulated SGLang takes a known time to start, deploys the reference profile once (not counted),
then runs rounds; each round swaps the server three ways, each swap to the other of two
profiles, so that every run really stops, replaces and starts the server:

- `sgdeploy apply PROFILE --json --force --settle 0`;
- `bench/ansible/apply.yml` (when bench/.venv-ansible exists), pipelining on;
- a bare ssh script: upload the unit, stop, daemon-reload, start, poll the journal every 50 ms.

During each run a poller on the host asks the server's /health every 50 ms. For each run:

- wall-time overhead: the command's wall time minus the server's own startup (the journal's
  systemd `Started` line of the new invocation to its ready line, `__REALTIME_TIMESTAMP`);
- downtime overhead: the longest stretch in which /health did not answer 200 (first sample
  without a 200 to the first one with it again) minus the same own startup.

Then one sgdeploy apply with the default `--settle 5`, reported separately.

    .venv/bin/python bench/apply_bench.py [--rounds 3] [--startup 2.6] [--release-delay 0] [--json FILE]

Host and client are the same machine, so journal timestamps, the poller's and the client's
clocks agree. Targets (medians): wall-time overhead <= 1.0 s, downtime overhead <= 0.5 s,
readiness detected <= 0.2 s after the ready line is journaled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
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
TARGET_DOWNTIME_S = 0.5
TARGET_DETECT_S = 0.2
POLL_S = 0.05

# Runs the real CLI (cli.main) and reports, on stderr, the wall-clock time at which apply's
# progress clock started, so that the `elapsed_s` of its JSON events can be put on the journal's
# clock. Nothing else is changed.
CLI_WRAPPER = """
import sys, time
from sgdeploy.cli import main
from sgdeploy.cli.progress import Progress
_init = Progress.__init__
def _init_and_tell(self, *a, **k):
    _init(self, *a, **k)
    sys.stderr.write("@@bench progress_started=%.6f\\n" % (time.time() - (time.monotonic() - self.started)))
Progress.__init__ = _init_and_tell
sys.exit(main())  # argv from sys.argv, as the console script runs it
"""

# On the host: GET /health every POLL_S seconds, one line per answer: epoch seconds, status (0: none).
POLLER = """
import socket, sys, time
port, out, every = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
request = b"GET /health HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n"
with open(out, "w", buffering=1) as f:
    due = time.time()
    while True:
        t = time.time()
        status = 0
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.settimeout(0.2)
                s.sendall(request)
                head = s.recv(64).split(b" ")
                status = int(head[1]) if len(head) > 1 and head[1].isdigit() else 0
        except OSError:
            pass
        f.write("%.6f %d\\n" % (t, status))
        due += every
        time.sleep(max(0.0, due - time.time()))
"""

# The floor: what a hand-written deploy script does over one ssh connection.
BARE_SCRIPT = """set -e
u=/etc/systemd/system/sglang.service
cat > "$u.new"
systemctl stop sglang.service
mv -f "$u.new" "$u"
systemctl daemon-reload
systemctl start sglang.service
inv=$(systemctl show -p InvocationID --value sglang.service)
i=0
until journalctl --no-pager -q -o cat "_SYSTEMD_INVOCATION_ID=$inv" | grep -qF 'fired up and ready'; do
  i=$((i + 1)); [ $i -lt 2400 ] || exit 3; sleep 0.05
done
"""


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(values), "min": ordered[0], "max": ordered[-1], "n": len(values)}


def fmt(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    if not values:
        return "      -"
    s = summary([v * scale for v in values])
    return f"{s['median']:7.3f} {unit}  ({s['min']:.3f} .. {s['max']:.3f})"


def met(values: list[float], target: float) -> str:
    return "MET" if values and statistics.median(values) <= target else "MISSED"


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


# --------------------------------------------------------------------------- health on the host
class HealthPoller:
    """GET /health on the host every POLL_S seconds while one swap runs (a process on the host)."""

    def __init__(self, hs: HostSet, port: int) -> None:
        self.hs, self.port = hs, port
        self.out = "/tmp/sgd-bench-health.log"

    def __enter__(self) -> HealthPoller:
        script = shlex.quote(POLLER)
        self.pid = self.hs.ssh("ct129", f"nohup python3 -c {script} {self.port} {self.out} {POLL_S} "
                               ">/dev/null 2>&1 </dev/null & echo $!").stdout.strip()
        deadline = time.time() + 10
        while time.time() < deadline:  # until the old server has answered 200
            if " 200" in self.hs.ssh("ct129", f"tail -n 1 {self.out} 2>/dev/null", check=False).stdout:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"the health poller saw no 200 on port {self.port} before the swap")

    def __exit__(self, *exc: object) -> None:
        self.samples = self.read()

    def read(self) -> list[tuple[float, int]]:
        time.sleep(3 * POLL_S)
        text = self.hs.ssh("ct129", f"kill {self.pid}; cat {self.out}; rm -f {self.out}", check=False).stdout
        samples = []
        for line in text.splitlines():
            t, _, status = line.partition(" ")
            if status.strip().isdigit():
                samples.append((float(t), int(status)))
        return samples


def longest_outage(samples: list[tuple[float, int]]) -> dict[str, float]:
    """The longest stretch without a 200: from its first sample to the next sample answering 200."""
    best = {"seconds": 0.0, "from": 0.0, "to": 0.0, "failed_samples": 0}
    began: float | None = None
    failed = 0
    for t, status in samples:
        if status != 200:
            began = t if began is None else began
            failed += 1
        elif began is not None:
            if t - began > best["seconds"]:
                best = {"seconds": t - began, "from": began, "to": t, "failed_samples": failed}
            began, failed = None, 0
    if began is not None:
        raise RuntimeError("the server never answered /health with 200 again during the measurement")
    return best


def measured(hs: HostSet, tool: str, launched: float, ended: float, samples: list[tuple[float, int]],
             **extra: Any) -> dict[str, Any]:
    journal = server_times(hs)
    own = journal["ready"] - journal["started"]
    outage = longest_outage(samples)
    return {"tool": tool, "total_s": ended - launched, "server_startup_s": own, "overhead_s": ended - launched - own,
            "downtime_s": outage["seconds"], "downtime_overhead_s": outage["seconds"] - own,
            "failed_health_samples": outage["failed_samples"], "ready_to_first_200_s": outage["to"] - journal["ready"],
            "last_200_to_started_s": journal["started"] - outage["from"], "journal": journal, **extra}


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
        problems = "; ".join(f"{d.get('rule')}: {d.get('message')}" for d in document.get("diagnostics", [])
                             if d.get("severity") == "error")
        raise RuntimeError(f"apply exited {proc.returncode}: {document.get('message')} {problems}")
    if not measure:
        return document
    match = re.search(r"@@bench progress_started=([\d.]+)", proc.stderr)
    assert match, proc.stderr[-500:]
    origin = float(match.group(1))
    journal = server_times(hs)
    events = document["events"]
    marks: list[tuple[float, str]] = [(launched, "cli start"), (origin, "(offline validation done)")]
    seen: set[str] = set()
    for event in events:  # each step, where it was first reported, on the wall clock
        key = (event["step"] if event["event"] == "step" else
               f"phase:{event.get('name')}" if event["event"] == "phase" else event["event"])
        if key not in seen and (event["event"] == "step" or key in ("phase:ready", "ssh")):
            seen.add(key)
            marks.append((origin + event["elapsed_s"], key))
    ready_seen = next(t for t, k in marks if k == "phase:ready")
    marks += [(journal["started"], "(systemd: Started)"), (journal["ready"], "(journal: ready line)"),
              (ended, "(exit)")]
    marks.sort()
    breakdown = {f"{k} -> {marks[i + 1][1]}": marks[i + 1][0] - t for i, (t, k) in enumerate(marks[:-1])}
    total = ended - launched
    own = journal["ready"] - journal["started"]
    return {
        "tool": "sgdeploy",
        "profile": profile.name,
        "launched": launched,
        "ended": ended,
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
    """Connect once and run `true` `count` times through sgdeploy's RemoteHost, in its shell on
    the host and on a channel of its own each time: the unit cost of one command here."""
    from sgdeploy.host.remote import RemoteHost
    from sgdeploy.profile.inventory import load_inventory

    inventory = load_inventory(hs.inventory_path).model
    assert inventory is not None
    began = time.perf_counter()
    remote = RemoteHost("ct129", inventory.hosts["ct129"]).connect()
    connected = time.perf_counter() - began
    found: dict[str, float] = {"connect_s": connected}
    with remote:
        for name, run in (("command", remote.run), ("channel_command", remote._run_on_channel)):
            samples = []
            for _ in range(count):
                t0 = time.perf_counter()
                run("true")
                samples.append(time.perf_counter() - t0)
            found |= {f"{name}_median_s": statistics.median(samples), f"{name}_min_s": min(samples)}
    return found


# --------------------------------------------------------------------------- the bare script
def run_bare(hs: HostSet, unit_file: Path) -> tuple[float, float]:
    """One fresh `ssh` running BARE_SCRIPT with the unit on stdin: (launched, ended)."""
    argv = [*hs.ssh_argv("ct129", control=False), f"sh -c {shlex.quote(BARE_SCRIPT)}"]
    launched = time.time()
    proc = subprocess.run(argv, input=unit_file.read_text(), capture_output=True, text=True, timeout=180)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"the bare script exited {proc.returncode}: {proc.stderr[-500:]}")
    return launched, ended


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


def run_ansible(hs: HostSet, inventory: Path, unit_file: Path, pipelining: bool, folder: Path
                ) -> tuple[float, float, dict[str, Any]]:
    """One ansible-playbook run: (launched, ended, what it did), or RuntimeError with the cause."""
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
        raise RuntimeError(f"ansible-playbook failed: {cause or proc.stdout[-300:]}")
    return launched, ended, {"ssh_commands": len(re.findall(r"SSH: EXEC ssh ", proc.stdout)),
                             "ready_polls": len(re.findall(r"FAILED - RETRYING", proc.stdout)) + 1}


def render_units(hs: HostSet, profiles: list[Path], folder: Path) -> dict[Path, Path]:
    units = {}
    for profile in profiles:
        out = subprocess.run([sys.executable, "-m", "sgdeploy", "render", str(profile), "--inventory",
                              str(hs.inventory_path)], cwd=REPO, capture_output=True, text=True, check=True)
        path = folder / f"{profile.stem}.service"
        path.write_text(out.stdout)
        units[profile] = path
    return units


# --------------------------------------------------------------------------- main
class Bench:
    """The host, the two profiles and which of them runs now: every swap goes to the other one."""

    def __init__(self, hs: HostSet, profiles: tuple[Path, Path], port: int, folder: Path) -> None:
        self.hs, self.profiles, self.port, self.folder = hs, profiles, port, folder
        self.current = profiles[0]
        self.units = render_units(hs, list(profiles), folder)
        self.inventory = ansible_inventory(hs, folder)
        (folder / "tmp").mkdir(exist_ok=True)

    def next_profile(self) -> Path:
        self.current = self.profiles[1] if self.current == self.profiles[0] else self.profiles[0]
        return self.current

    def sgdeploy(self, settle: float = 0.0) -> dict[str, Any]:
        profile = self.next_profile()
        with HealthPoller(self.hs, self.port) as poller:
            run = run_apply(self.hs, profile, settle)
        return {**run, **measured(self.hs, "sgdeploy", run["launched"], run["ended"], poller.samples)}

    def bare(self) -> dict[str, Any]:
        unit = self.units[self.next_profile()]
        with HealthPoller(self.hs, self.port) as poller:
            launched, ended = run_bare(self.hs, unit)
        return measured(self.hs, "bare ssh script", launched, ended, poller.samples)

    def ansible(self, pipelining: bool = True) -> dict[str, Any]:
        unit = self.units[self.next_profile()]
        with HealthPoller(self.hs, self.port) as poller:
            launched, ended, did = run_ansible(self.hs, self.inventory, unit, pipelining, self.folder)
        return measured(self.hs, "Ansible", launched, ended, poller.samples, **did)


def report_tool(name: str, runs: list[dict[str, Any]]) -> None:
    over = [r["overhead_s"] for r in runs]
    down = [r["downtime_overhead_s"] for r in runs]
    print(f"### {name}: {len(runs)} runs")
    print(f"  total wall time              {fmt([r['total_s'] for r in runs])}")
    print(f"  server's own startup         {fmt([r['server_startup_s'] for r in runs])}")
    print(f"  wall-time overhead           {fmt(over)}")
    print(f"  downtime (no 200 on /health) {fmt([r['downtime_s'] for r in runs])}")
    print(f"  downtime overhead            {fmt(down)}")
    print(f"    last 200 -> systemd Started  {fmt([r['last_200_to_started_s'] for r in runs])}")
    print(f"    ready line -> first 200      {fmt([r['ready_to_first_200_s'] for r in runs])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of sgdeploy, Ansible and the bare script")
    parser.add_argument("--startup", type=float, default=2.6, help="the simulated server's startup_s")
    parser.add_argument("--release-delay", type=float, default=0.0,
                        help="simulated GPU memory release after the old server exits (s)")
    parser.add_argument("--no-ansible", action="store_true", help="leave Ansible out")
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
    ansible = not args.no_ansible and (ANSIBLE_VENV / "bin" / "ansible-playbook").exists()
    if not args.no_ansible and not ansible:
        print(f"# Ansible left out: no {ANSIBLE_VENV}/bin/ansible-playbook (see bench/README.md)")
    sim = SimSettings(startup_s=args.startup, release_delay_s=args.release_delay)
    hs = start_hosts([HostSpec.like("ct129", sim=sim)], owner="apply_bench")
    folder = Path(tempfile.mkdtemp(prefix="sgd-apply-bench-"))
    try:
        hs.make_model("ct129", MODEL, "Qwen3_5ForConditionalGeneration", max_position_embeddings=262144)
        port = free_port()  # test hosts share this machine's ports: a port of its own, not the profile's 30000
        reference = (REPO / "profiles" / "qwen36-mtp3.toml").read_text().replace("port = 30000", f"port = {port}")
        results["server_port"] = port
        a, b = folder / "ref.toml", folder / "ref-mrr12.toml"
        a.write_text(reference)
        b.write_text(reference.replace("max_running_requests = 16", "max_running_requests = 12"))
        run_apply(hs, a, 0, measure=False)  # first deployment on a fresh host (nothing to stop): not counted
        bench = Bench(hs, (a, b), port, folder)
        if ansible:
            results["ansible_version"] = subprocess.run(
                [str(ANSIBLE_VENV / "bin" / "ansible-playbook"), "--version"], capture_output=True,
                text=True).stdout.splitlines()[0]
        tools: dict[str, list[dict[str, Any]]] = {"sgdeploy": [], "bare ssh script": [], "Ansible": []}
        failures: list[str] = []
        for i in range(args.rounds):
            load = os.getloadavg()[0]
            tools["sgdeploy"].append({**bench.sgdeploy(), "round": i, "load1": load})
            tools["bare ssh script"].append({**bench.bare(), "round": i, "load1": load})
            if ansible:
                try:
                    tools["Ansible"].append({**bench.ansible(), "round": i, "load1": load})
                except RuntimeError as exc:
                    failures.append(str(exc))
                    bench.next_profile()  # it may or may not have swapped: deploy on from sgdeploy's side
            print(f"# round {i + 1}: load {load:.2f}; sgdeploy adds {tools['sgdeploy'][-1]['overhead_s']:.3f} s "
                  f"wall, {tools['sgdeploy'][-1]['downtime_overhead_s']:.3f} s downtime", flush=True)
        results["runs"] = tools
        results["ansible_failures"] = failures
        runs = tools["sgdeploy"]

        print(f"\n## {args.rounds} rounds, each: sgdeploy apply --settle 0, the bare ssh script"
              f"{', Ansible (pipelining)' if ansible else ''}; each run swaps to the other profile")
        for name, rows in tools.items():
            if rows:
                report_tool(name, rows)
        for failure in failures:
            print(f"  Ansible run failed: {failure[-300:]}")
        over = [r["overhead_s"] for r in runs]
        down = [r["downtime_overhead_s"] for r in runs]
        detect = [r["detect_s"] for r in runs]
        print(f"\nsgdeploy wall-time overhead {fmt(over)}  target <= {TARGET_OVERHEAD_S} s: "
              f"{met(over, TARGET_OVERHEAD_S)}")
        print(f"sgdeploy downtime overhead  {fmt(down)}  target <= {TARGET_DOWNTIME_S} s: "
              f"{met(down, TARGET_DOWNTIME_S)}")
        print(f"ready line -> apply saw it  {fmt(detect, 'ms', 1000)}  target <= {TARGET_DETECT_S * 1000:.0f} ms: "
              f"{met(detect, TARGET_DETECT_S)}")
        print("sgdeploy breakdown, each step to the next event (median; min .. max):")
        for key in runs[0]["breakdown"]:
            values = [r["breakdown"][key] for r in runs if key in r["breakdown"]]
            print(f"  {key:52} {fmt(values)}")
        ssh = runs[0]["ssh"]
        same = all(r["ssh"] == ssh for r in runs)
        print(f"SSH per apply: {ssh} ({'every run the same' if same else 'varies: ' + str([r['ssh'] for r in runs])})")
        rt = round_trip(hs)
        results["round_trip"] = rt
        print(f"one SSH connect {rt['connect_s'] * 1000:.0f} ms; one command on an open connection: median "
              f"{rt['command_median_s'] * 1000:.1f} ms (min {rt['command_min_s'] * 1000:.1f}) in sgdeploy's "
              f"shell on the host, {rt['channel_command_median_s'] * 1000:.1f} ms "
              f"(min {rt['channel_command_min_s'] * 1000:.1f}) on a channel of its own")

        settle = bench.sgdeploy(5.0)
        results["settle5"] = settle
        print("\n## sgdeploy with the default --settle 5 (one run)")
        print(f"total {settle['total_s']:.3f} s, server startup {settle['server_startup_s']:.3f} s, adds "
              f"{settle['overhead_s']:.3f} s, downtime overhead {settle['downtime_overhead_s']:.3f} s, "
              f"detect {settle['detect_s'] * 1000:.0f} ms, ssh {settle['ssh']}")
        for key, value in settle["breakdown"].items():
            print(f"  {key:52} {value:7.3f} s")
    finally:
        hs.ssh("ct129", "systemctl stop sglang.service", check=False)
        hs.close()
        shutil.rmtree(folder, ignore_errors=True)
    results["loadavg_after"] = os.getloadavg()
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in results['loadavg_after'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
