"""Runs sgdeploy against the systemd host of the H200 run as a user would, and keeps what it saw.

    python scenario.py RUN_DIR OUT_DIR PHASE    (sgdeploy on PATH; the host booted by host.sh;
                                                 PHASE 1: cold apply and a changed flag, 2: failure,
                                                 stranger, probe; 3: rollback, import, adopt;
                                                 4: from a hand launch; 5: the strict unit; 6: page cache dropped;
                                                 7: today's restart, warm and with the page cache
                                                 dropped; 8: the weight-cache daemon's restart, then
                                                 today's beside it (SGLANG_RELEASE 0.5.17+);
                                                 9: the daemon's restart with each lever, three
                                                 times with all; 10: today's restart, three
                                                 times warm and three dropped; bar: issue #37's
                                                 bar alone; rest: what bar leaves for three runs
                                                 of each; small: the levers with llama-8b;
                                                 readahead: today's restart with the page cache
                                                 dropped, with and without the read-ahead; each
                                                 within one call)
    python scenario.py --poll URL LOG           (the client: /health every 0.1 s, /generate every 1 s)

RUN_DIR holds inventory.toml, profiles/, the SSH key and known_hosts. Each step's command line,
exit code, wall time, stdout and stderr go to OUT_DIR/steps.jsonl and OUT_DIR/NN-name.{out,err};
the unit's journal over each step's window to OUT_DIR/NN-name.journal (`-o short-precise`) and
.log (`-o cat`, what `logcheck` reads); the client's requests to OUT_DIR/client.jsonl.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

PORT = 30000
SGL = "/opt/sgl/bin/python3"


def poll(url: str, log: str) -> None:
    """A client of the server: /health every 0.1 s, a real /generate every second."""
    body = json.dumps({"text": "def main():", "sampling_params": {"max_new_tokens": 8,
                                                                  "temperature": 0}}).encode()
    with open(log, "a", buffering=1) as out:
        def call(kind: str, req: urllib.request.Request | str, timeout: float) -> None:
            t0 = time.time()
            try:
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    status = r.status
                    r.read()
            except Exception as exc:  # any failure is what a client sees: keep its kind
                status = getattr(exc, "code", None) or type(exc).__name__
            out.write(json.dumps({"t": round(t0, 3), "kind": kind, "status": status,
                                  "latency_s": round(time.time() - t0, 3)}) + "\n")

        def generate_loop() -> None:
            while True:
                req = urllib.request.Request(url + "/generate", data=body,
                                             headers={"Content-Type": "application/json"})
                t0 = time.time()
                call("generate", req, 30)
                time.sleep(max(0.0, 1.0 - (time.time() - t0)))

        threading.Thread(target=generate_loop, daemon=True).start()
        while True:
            t0 = time.time()
            call("health", url + "/health", 2)
            time.sleep(max(0.0, 0.1 - (time.time() - t0)))


class Run:
    def __init__(self, run_dir: str, out: str) -> None:
        self.run_dir, self.out, self.n = run_dir, out, 0
        os.makedirs(out, exist_ok=True)
        self.steps = open(os.path.join(out, "steps.jsonl"), "a", buffering=1)

    def ssh(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A command on the host, through the same key and known_hosts sgdeploy uses."""
        code = ("import paramiko, sys\n"
                "c = paramiko.SSHClient(); c.load_host_keys(sys.argv[2])\n"
                "c.connect('127.0.0.1', 2222, 'root', key_filename=sys.argv[1], timeout=10)\n"
                "_, o, e = c.exec_command(sys.argv[3], timeout=float(sys.argv[4]))\n"
                "sys.stdout.write(o.read().decode()); sys.stderr.write(e.read().decode())\n"
                "sys.exit(o.channel.recv_exit_status())\n")
        return subprocess.run([sys.executable, "-c", code, f"{self.run_dir}/key",
                               f"{self.run_dir}/known_hosts", command, str(timeout)],
                              capture_output=True, text=True, timeout=timeout + 30)

    def step(self, name: str, argv: list[str], timeout: float = 300, journal: bool = True) -> dict:
        self.n += 1
        stem = os.path.join(self.out, f"{self.n:02d}-{name}")
        start = time.time()
        try:
            p = subprocess.run(argv, cwd=self.run_dir, capture_output=True, text=True,
                               timeout=timeout)
            rc, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
        end = time.time()
        open(stem + ".out", "w").write(stdout)
        open(stem + ".err", "w").write(stderr)
        row = {"n": self.n, "step": name, "argv": argv, "rc": rc, "start": round(start, 3),
               "end": round(end, 3), "wall_s": round(end - start, 2)}
        if journal:
            window = f"--since=@{int(start) - 1} --until=@{int(end) + 2}"
            for suffix, fmt in ((".journal", "short-precise"), (".log", "cat")):
                j = self.ssh(f"journalctl -u sglang.service -o {fmt} --no-pager {window}")
                open(stem + suffix, "w").write(j.stdout)
        self.steps.write(json.dumps(row) + "\n")
        self.keep()
        print(f"[{self.n:02d}] {name}: rc={rc} {row['wall_s']} s | "
              f"{(stdout.strip().splitlines() or [''])[-1][:160]}", flush=True)
        return row

    def keep(self) -> None:
        """Everything seen so far as one tar in $OUT_TAR, after every step: a call cut off by the
        device's limits still brings back what it saw."""
        if os.environ.get("OUT_TAR"):
            subprocess.run(["tar", "-C", self.out, "-czf", os.environ["OUT_TAR"], "--exclude=setup", "."],
                           check=False)

    def capture(self, name: str, command: str) -> None:
        r = self.ssh(command)
        open(os.path.join(self.out, name), "w").write(r.stdout + (r.stderr and "\n# stderr\n" + r.stderr))


def gpu_release(run: Run) -> None:
    """How long GPU memory stays held once the unit is told to stop (nvidia-smi every 50 ms)."""
    code = r"""
import subprocess, time, json
def used():
    return int(subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True).stdout.split()[0])
before = used(); t0 = time.time()
p = subprocess.Popen(["systemctl", "stop", "sglang.service"])
samples = []; stop_s = None
while True:
    u = used(); now = round(time.time() - t0, 3); samples.append((now, u))
    if stop_s is None and p.poll() is not None: stop_s = now
    if stop_s is not None and u < 1024: break
    if now > 120: break
    time.sleep(0.05)
print(json.dumps({"used_before_mib": before, "systemctl_stop_s": stop_s, "samples": samples}))
"""
    r = run.ssh(f"python3 -c '{code}'", timeout=200)
    open(os.path.join(run.out, "gpu-release.json"), "w").write(r.stdout + r.stderr)


def main() -> None:
    run_dir, out, phase = sys.argv[1], sys.argv[2], sys.argv[3]
    run = Run(run_dir, out)
    run.n = {"1": 0, "2": 20, "3": 40, "4": 60, "5": 80, "6": 90, "7": 100, "8": 110, "9": 120,
             "10": 140, "bar": 160, "rest": 180, "small": 200, "readahead": 220, "short": 0}[phase]
    # a second run of a phase in the same out/ folder (another model after STAGE=swap) numbers
    # its steps on from here, so keep.py tells the runs apart
    run.n = int(os.environ.get("STEP_BASE", run.n))
    sgd = ["sgdeploy"]
    poller = subprocess.Popen([sys.executable, __file__, "--poll", f"http://127.0.0.1:{PORT}",
                               os.path.join(out, "client.jsonl")])
    try:
        if phase in ("1", "4", "5", "6", "7", "8", "9", "10", "bar", "rest", "small", "readahead") \
                or not os.path.exists(os.path.join(out, "NO-SERVER")):
            {"1": phase_one, "2": phase_two, "3": phase_three, "4": phase_four, "5": phase_five,
             "6": phase_six, "7": phase_seven, "8": phase_eight, "9": phase_nine, "10": phase_ten,
             "bar": phase_bar, "rest": phase_rest, "small": phase_small, "readahead": phase_readahead,
             "short": phase_short}[phase](run, sgd, out)
    finally:
        poller.kill()
        run.capture(f"journal.all.{phase}.txt", "journalctl -u sglang.service -o short-precise --no-pager")
        run.capture(f"journal.boot.{phase}.txt", "journalctl -b -o short-precise --no-pager | tail -400")
        if phase in ("8", "9", "bar", "rest", "small"):
            run.capture(f"journal.weights.{phase}.txt", "journalctl -u sglang-weights.service -o short-precise --no-pager")


APPLY_TIMEOUT_S = 560


def phase_one(run: Run, sgd: list[str], out: str) -> None:
    """Validate, the cold apply, what the real server answers, a changed flag."""
    run.step("validate", sgd + ["validate", "profiles/big-a.toml", "profiles/big-b.toml",
                                "profiles/big-oom.toml", "--format", "json"], journal=False)
    run.step("render", sgd + ["render", "profiles/big-a.toml"], journal=False)
    if os.environ.get("SCENARIO_PLAN", "1") == "1":
        run.step("plan-cold", sgd + ["plan", "profiles/big-a.toml"], journal=False)
    cold = run.step("apply-cold", sgd + ["apply", "profiles/big-a.toml", "--json"],
                    timeout=APPLY_TIMEOUT_S)
    if cold["rc"] != 0:  # what follows needs a server: the journal of this step says why there is none
        open(os.path.join(out, "NO-SERVER"), "w").write("the cold apply failed\n")
        return
    for path in ("health", "health_generate", "server_info", "get_server_info", "model_info",
                 "get_model_info", "v1/models", "metrics"):
        run.capture(f"endpoint-{path.replace('/', '-')}.json",
                    f"curl -s -m 10 -w '\\n# HTTP %{{http_code}}\\n' http://127.0.0.1:{PORT}/{path}")
    run.capture("nvidia-smi.running.txt", "nvidia-smi")
    run.capture("nvidia-smi.running.query-gpu.csv",
                "nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,compute_cap "
                "--format=csv")
    run.capture("nvidia-smi.running.compute-apps.csv",
                "nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv")
    run.capture("ps.running.txt", "ps -eo pid,ppid,user,rss,args --forest")
    run.capture("unit.running.service", "systemctl cat sglang.service")
    run.step("status", sgd + ["status", "profiles/big-a.toml", "--json"], journal=False)
    if os.environ.get("SCENARIO_FLAG_CHANGE", "1") == "1":
        run.step("apply-flag-change", sgd + ["apply", "profiles/big-b.toml", "--json"],
                 timeout=APPLY_TIMEOUT_S)


def phase_two(run: Run, sgd: list[str], out: str, current: str = "big-b") -> None:
    """A launch that fails on the GPU and rolls back; a stranger on the GPU; probe, history."""
    failed = run.step("apply-fails-rollback", sgd + ["apply", "profiles/big-oom.toml", "--json"],
                      timeout=APPLY_TIMEOUT_S)
    stem = os.path.join(out, f"{failed['n']:02d}-apply-fails-rollback")
    run.step("logcheck-failure", sgd + ["logcheck", stem + ".log", "--json"], journal=False)
    run.step("logcheck-failure-text", sgd + ["logcheck", stem + ".log"], journal=False)
    run.step("status-after-rollback", sgd + ["status", f"profiles/{current}.toml", "--json"],
             journal=False)
    # weights that 5 % of the GPU cannot hold: refused before the running server is touched
    run.step("apply-refused-weights", sgd + ["apply", "profiles/big-tiny.toml", "--json"])
    run.ssh(f"setsid nohup {SGL} -c 'import torch, time; x = torch.empty(10 << 30, "
            f"dtype=torch.uint8, device=\"cuda\"); x.fill_(1); time.sleep(900)' "
            "> /root/holder.log 2>&1 < /dev/null &")
    time.sleep(12)
    run.capture("nvidia-smi.stranger.compute-apps.csv",
                "nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv;"
                " nvidia-smi --query-gpu=memory.used --format=csv; nvidia-smi")
    other = "big-b" if current == "big-a" else "big-a"
    run.step("apply-refused-stranger", sgd + ["apply", f"profiles/{other}.toml"])
    run.ssh("pkill -f 'x.fill_' ; sleep 2")
    run.step("probe", sgd + ["probe", f"profiles/{current}.toml", "--json"], journal=False)
    run.step("history", sgd + ["history", f"profiles/{current}.toml", "--json"], journal=False)


def phase_short(run: Run, sgd: list[str], out: str) -> None:
    """Phases one and two in one call, without plan; the changed flag last (a rollback restarts
    the server too), then the GPU's release after a stop."""
    os.environ["SCENARIO_PLAN"] = "0"
    os.environ["SCENARIO_FLAG_CHANGE"] = "0"
    phase_one(run, sgd, out)
    if os.path.exists(os.path.join(out, "NO-SERVER")):
        return
    phase_two(run, sgd, out, current="big-a")
    run.step("apply-flag-change", sgd + ["apply", "profiles/big-b.toml", "--json"],
             timeout=APPLY_TIMEOUT_S)
    gpu_release(run)
    run.keep()


def phase_four(run: Run, sgd: list[str], out: str) -> None:
    """From a bare host: a server started by hand (venv activated), import, adopt; then a launch
    whose weights are a partial download fails after start and the adopted server comes back."""
    # without piecewise graphs each of its three starts is ~20 s shorter on a lease of minutes
    hand_launch(run, out, activated=True, extra=" --disable-piecewise-cuda-graph")
    adopt(run, sgd)
    failed = run.step("apply-fails-rollback", sgd + ["apply", "profiles/partial.toml", "--json"],
                      timeout=APPLY_TIMEOUT_S)
    stem = os.path.join(out, f"{failed['n']:02d}-apply-fails-rollback")
    run.step("logcheck-failure", sgd + ["logcheck", stem + ".log", "--json"], journal=False)
    run.step("logcheck-failure-text", sgd + ["logcheck", stem + ".log"], journal=False)
    run.step("status-after-rollback", sgd + ["status", "profiles/imported.toml", "--json"],
             journal=False)
    run.step("history", sgd + ["history", "profiles/imported.toml", "--json"], journal=False)
    run.step("probe", sgd + ["probe", "profiles/imported.toml", "--json"], journal=False)


CACHE = "/var/cache/sgdeploy/sglang"


def phase_five(run: Run, sgd: list[str], out: str) -> None:
    """The strict unit (deploy.hardening): refused without its user; with it, a cold start, a
    changed flag with the compile caches warm, the same with them wiped, rollback, probe; then
    the same launch unhardened for comparison."""
    run.ssh("systemctl stop sglang.service; systemctl reset-failed sglang.service; pkill -f sglang.launch_server; "
            "sleep 2", timeout=60)
    run.capture("proc-devices.txt", "cat /proc/devices; ls -l /dev/nvidia* /dev/nvidia-caps 2>&1")
    run.step("apply-strict-no-user", sgd + ["apply", "profiles/hard-a.toml", "--json"], journal=False)
    run.ssh("useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sglang")
    run.step("render-strict", sgd + ["render", "profiles/hard-a.toml"], journal=False)
    run.step("plan-strict", sgd + ["plan", "profiles/hard-a.toml"], journal=False)
    cold = run.step("apply-strict-cold", sgd + ["apply", "profiles/hard-a.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.capture("strict.security.txt", "systemd-analyze security sglang.service --no-pager")
    run.capture("strict.unit.service", "systemctl cat sglang.service")
    run.capture("strict.show.txt", "systemctl show sglang.service -p User,DevicePolicy,DeviceAllow,ProtectSystem,"
                "ProtectHome,PrivateTmp,CapabilityBoundingSet,NoNewPrivileges,RestrictAddressFamilies,MainPID")
    run.capture("strict.ps.txt", "ps -eo pid,ppid,user,rss,args --forest | grep -v grep | grep -A3 -B1 sglang")
    run.capture("strict.cache-cold.txt", f"du -sh {CACHE}/* {CACHE}/.[a-z]* 2>/dev/null; find {CACHE} -maxdepth 3 -type d | head -60")
    run.capture("strict.generate.json", f"curl -s -m 30 -H 'Content-Type: application/json' -d "
                "'{\"text\": \"def main():\", \"sampling_params\": {\"max_new_tokens\": 16}}' "
                f"http://127.0.0.1:{PORT}/generate")
    if cold["rc"] != 0:
        return
    run.step("apply-strict-flag-change", sgd + ["apply", "profiles/hard-b.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.capture("strict.cache-warm.txt", f"du -sh {CACHE}/* {CACHE}/.[a-z]* 2>/dev/null")
    run.step("rollback-strict", sgd + ["rollback", "profiles/hard-a.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.step("probe-strict", sgd + ["probe", "profiles/hard-a.toml", "--json"], journal=False)


def phase_six(run: Run, sgd: list[str], out: str) -> None:
    """Restarts of the strict unit with its compile caches wiped, with the page cache dropped
    (the weights read from disk) without and with the read-ahead, then the same launch
    unhardened, for comparison with the strict restarts of phase five."""
    run.ssh(f"find {CACHE} -mindepth 1 -delete")
    run.step("apply-strict-caches-wiped", sgd + ["apply", "profiles/hard-b.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    drop = ["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"]
    subprocess.run(drop, check=False)
    run.step("apply-strict-page-cache-dropped", sgd + ["apply", "profiles/hard-a.toml", "--json", "--no-read-ahead"],
             timeout=APPLY_TIMEOUT_S)
    subprocess.run(drop, check=False)
    run.step("apply-strict-page-cache-dropped-read-ahead", sgd + ["apply", "profiles/hard-b.toml", "--json"],
             timeout=APPLY_TIMEOUT_S)
    run.step("apply-unhardened", sgd + ["apply", "profiles/soft-a.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.step("history-strict", sgd + ["history", "profiles/hard-a.toml", "--json"], journal=False)


DROP_PAGE_CACHE = ["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"]


def phase_seven(run: Run, sgd: list[str], out: str) -> None:
    """Today's restart for reference: a cold apply, the same flag change with the page cache warm,
    and with it dropped (the weights and libraries read from disk; no read-ahead)."""
    run.ssh("systemctl stop sglang.service sglang-weights.service; systemctl reset-failed; sleep 2", timeout=60)
    run.step("plain-cold", sgd + ["apply", "profiles/big-a.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.step("plain-flag-change-warm", sgd + ["apply", "profiles/big-b.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    subprocess.run(DROP_PAGE_CACHE, check=False)
    run.step("plain-flag-change-dropped", sgd + ["apply", "profiles/big-a.toml", "--json", "--no-read-ahead"],
             timeout=APPLY_TIMEOUT_S)


def phase_eight(run: Run, sgd: list[str], out: str) -> None:
    """The weight-cache daemon as a unit, then today's restart beside it, in one call: the first
    client apply (daemon, then server), a flag change that keeps the weights, the same launch
    without the cache (daemon removed: today's restart, page cache warm), and a flag change with
    the page cache dropped (no read-ahead)."""
    run.step("plan-client", sgd + ["plan", "profiles/wc-a.toml"], journal=False)
    first = run.step("client-first", sgd + ["apply", "profiles/wc-a.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.capture("client.units.service", "systemctl cat sglang-weights.service sglang.service")
    run.capture("client.nvidia-smi.txt", "nvidia-smi")
    if first["rc"] != 0:
        return
    run.step("plan-client-flag-change", sgd + ["plan", "profiles/wc-b.toml"], journal=False)
    run.step("client-flag-change-warm", sgd + ["apply", "profiles/wc-b.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    run.step("plain-flag-change-warm", sgd + ["apply", "profiles/big-a.toml", "--json"], timeout=APPLY_TIMEOUT_S)
    subprocess.run(DROP_PAGE_CACHE, check=False)
    run.step("plain-flag-change-dropped", sgd + ["apply", "profiles/big-b.toml", "--json", "--no-read-ahead"],
             timeout=APPLY_TIMEOUT_S)
    run.step("history-client", sgd + ["history", "profiles/wc-a.toml", "--json"], journal=False)


def applies(run: Run, sgd: list[str], runs: tuple[tuple[str, str], ...]) -> list[dict]:
    """Each (step name, profile) in turn; a name with `dropped` drops the page cache first, and
    applies without the read-ahead where it ends there. APPLY_EXTRA adds apply options to each, e.g.
    `--no-sglang-check --settle 1` where device time is short: both act before the stop or after
    ready, outside the downtime measured."""
    extra = os.environ.get("APPLY_EXTRA", "").split()
    rows = []
    for name, profile in runs:
        if "dropped" in name:
            subprocess.run(DROP_PAGE_CACHE, check=False)
        rows.append(run.step(name, [*sgd, "apply", f"profiles/{profile}.toml", "--json", *extra]
                             + (["--no-read-ahead"] if name.endswith("dropped") else []), timeout=APPLY_TIMEOUT_S))
    return rows


def alternating(runs: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """(step name, profile stem) as (step name, profile): b, a, b, ... so each apply changes a
    flag (max_running_requests 128 <-> 64)."""
    return tuple((name, f"{stem}-{'b' if i % 2 == 0 else 'a'}") for i, (name, stem) in enumerate(runs))


def phase_nine(run: Run, sgd: list[str], out: str) -> None:
    """Issue #37's levers on the daemon's restart, each a flag change that keeps the weights
    (max_running_requests 64 <-> 128): the first client apply, then the daemon with sgdeploy's
    stop (crash diagnostics off) three times, all levers three times (+ skip_server_warmup,
    + disable_prefill_cuda_graph), each of those two alone once."""
    first = applies(run, sgd, (("client-first", "wc-a"),))[0]
    run.capture("client.units.service", "systemctl cat sglang-weights.service sglang.service")
    if first["rc"] != 0:
        return
    times = int(os.environ.get("RUNS_EACH", "3"))  # fewer where the device time is short
    applies(run, sgd, alternating([("client-flag-change-warm", "wc")] * times + [("levers-all", "wcx")] * 3
                                  + [("lever-skip-warmup", "wcw"), ("lever-no-prefill-graphs", "wcp")]))
    run.step("history-client", sgd + ["history", "profiles/wc-a.toml", "--json"], journal=False)


def phase_ten(run: Run, sgd: list[str], out: str) -> None:
    """Today's restart, as the unit was before sgdeploy turned SGLang's crash diagnostics off:
    a cold apply (the daemon's pair goes), the flag change three times with the page cache warm
    and three times with it dropped (no read-ahead)."""
    warm = int(os.environ.get("RUNS_EACH", "3"))  # fewer where the device time is short
    applies(run, sgd, (("today-cold", "today-a"),) + alternating(
        [("today-flag-change-warm", "today")] * warm + [("today-flag-change-dropped", "today")] * 3))


def phase_bar(run: Run, sgd: list[str], out: str) -> None:
    """Issue #37's bar alone, for a session short of device time (prepare+scenario, one call): the
    client's first apply, the daemon with sgdeploy's stop once, with all levers twice; then
    today's restart, cold and twice with the page cache dropped."""
    if applies(run, sgd, (("client-first", "wc-a"),))[0]["rc"] != 0:
        return
    applies(run, sgd, (("client-flag-change-warm", "wc-b"), ("levers-all", "wcx-a"), ("levers-all", "wcx-b"),
                       ("today-cold", "today-a"), ("today-flag-change-dropped", "today-b"),
                       ("today-flag-change-dropped", "today-a")))


def phase_rest(run: Run, sgd: list[str], out: str) -> None:
    """What PHASE=bar leaves for three runs of each (its call's limit allows no more): from
    bar's last server (today-a), today's restart twice warm and once dropped, then the daemon's
    first apply, all levers with the prefill graphs capped rather than off, each lever alone, the
    daemon with sgdeploy's stop and all levers once more."""
    applies(run, sgd, (("today-flag-change-warm", "today-b"), ("today-flag-change-warm", "today-a"),
                       ("today-flag-change-dropped", "today-b"), ("client-first", "wc-a"),
                       ("levers-prefill-graphs-512", "wcs-b"), ("lever-skip-warmup", "wcw-a"),
                       ("lever-no-prefill-graphs", "wcp-b"), ("client-flag-change-warm", "wc-a"),
                       ("levers-all", "wcx-b")))
    run.step("history-client", sgd + ["history", "profiles/wc-a.toml", "--json"], journal=False)


def phase_small(run: Run, sgd: list[str], out: str) -> None:
    """The levers with the 8B model (BIG_MODEL=llama-8b after STAGE=swap), once each, most
    telling first: the daemon's first apply, all levers, each alone, the daemon with sgdeploy's
    stop; then today's restart cold, warm and twice dropped."""
    applies(run, sgd, (("client-first", "wc-a"), ("levers-all", "wcx-b"), ("levers-prefill-graphs-512", "wcs-a"),
                       ("lever-skip-warmup", "wcw-b"), ("lever-no-prefill-graphs", "wcp-a"),
                       ("client-flag-change-warm", "wc-b"), ("today-cold", "today-a"),
                       ("today-flag-change-warm", "today-b"), ("today-flag-change-dropped", "today-a"),
                       ("today-flag-change-dropped", "today-b")))


def phase_readahead(run: Run, sgd: list[str], out: str) -> None:
    """The read-ahead's share with the model of BIG_MODEL, right after prepare or swap (one call):
    today's restart cold (the first start on the fresh host), then the flag change with the page
    cache dropped, twice read ahead before the stop and once without. READAHEAD_AGAIN=1, from the
    server that run left: without, read ahead, without (three of each over the two calls)."""
    if os.environ.get("READAHEAD_AGAIN"):
        applies(run, sgd, (("today-flag-change-dropped", "today-a"), ("today-flag-change-dropped-read-ahead", "today-b"),
                           ("today-flag-change-dropped", "today-a")))
        return
    applies(run, sgd, (("today-cold", "today-a"), ("today-flag-change-dropped-read-ahead", "today-b"),
                       ("today-flag-change-dropped", "today-a"), ("today-flag-change-dropped-read-ahead", "today-b")))


def phase_three(run: Run, sgd: list[str], out: str) -> None:
    """rollback, the GPU's release after a stop, and a server started by hand: import, adopt."""
    run.step("rollback", sgd + ["rollback", "profiles/big-b.toml", "--json"],
             timeout=APPLY_TIMEOUT_S)
    run.step("history-after-rollback", sgd + ["history", "profiles/big-a.toml"], journal=False)
    gpu_release(run)
    hand_launch(run, out)
    adopt(run, sgd)


def hand_launch(run: Run, out: str, activated: bool = False, extra: str = "") -> None:
    """A server started by hand over SSH, as people do; `activated` puts the venv's bin/ first
    on PATH, as `source /opt/sgl/bin/activate` does (SGLang's JIT kernels run ninja from PATH)."""
    hand = (f"{SGL} -m sglang.launch_server --model-path /opt/models/small-llama "
            f"--host 127.0.0.1 --port {PORT} --attention-backend triton "
            "--sampling-backend pytorch --mem-fraction-static 0.6 --cuda-graph-max-bs 16" + extra)
    path = "PATH=/opt/sgl/bin:$PATH " if activated else ""
    open(os.path.join(out, "hand-launch.txt"), "w").write(path + hand + "\n")
    run.ssh(f"cd /root && {path}NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 "
            f"setsid nohup {hand} > /root/hand.log 2>&1 < /dev/null &")
    t0 = time.time()
    while time.time() - t0 < 240:
        if run.ssh(f"curl -sf -m 2 http://127.0.0.1:{PORT}/health").returncode == 0:
            break
        if run.ssh("pgrep -f sglang.launch_server").returncode != 0:
            break
        time.sleep(1)
    run.capture("hand.log", "cat /root/hand.log")
    open(os.path.join(out, "hand-ready-s.txt"), "w").write(f"{time.time() - t0:.1f}\n")


def adopt(run: Run, sgd: list[str]) -> None:
    """import the server started by hand, then take it over with apply --adopt."""
    run.step("import", sgd + ["import", "h200", "-o", "profiles/imported.toml", "--force"],
             journal=False)
    imported = os.path.join(run.run_dir, "profiles", "imported.toml")
    if os.path.exists(imported):
        open(os.path.join(run.out, "imported.toml"), "w").write(open(imported).read())
    run.step("plan-adopt", sgd + ["plan", "profiles/imported.toml", "--adopt"], journal=False)
    run.step("apply-adopt", sgd + ["apply", "profiles/imported.toml", "--adopt", "--json"],
             timeout=APPLY_TIMEOUT_S)
    run.capture("unit.adopted.service", "systemctl cat sglang.service")
    run.capture("ps.adopted.txt", "ps -eo pid,ppid,user,rss,args --forest")
    run.step("status-adopted", sgd + ["status", "profiles/imported.toml", "--json"],
             journal=False)


if __name__ == "__main__":
    if sys.argv[1] == "--poll":
        poll(sys.argv[2], sys.argv[3])
    else:
        main()
