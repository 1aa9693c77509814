"""The host session: every remote operation of a deployment on one connected host.

Each `HostSession` method is one or two round trips over its `RemoteHost` (the only SSH user):
facts, the per-unit lock, stopping and swapping units, the GPUs' state, SGLang's own check,
health, records. Following the journal is `sgdeploy.deploy.journal`'s. What to run when is decided
by the transaction (`sgdeploy.deploy.transaction`), never here.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from sgdeploy.deploy.journal import JournalFollower, Reporter, StartupResult
from sgdeploy.deploy.plan import (
    DEFAULT_PORT,
    UNIT_DIR,
    Deployment,
    Takeover,
    deployment_meta,
    server_port,
    who,
)
from sgdeploy.deploy.records import WEIGHTS_FILE, exec_port, record_files_sh, split_files
from sgdeploy.deploy.secret_args import bearer_headers, without_secrets
from sgdeploy.deploy.weight_daemon import daemon_unit_name, deployment_strangers
from sgdeploy.host.facts import (
    APPS_QUERY_FIELDS,
    GPU_OWNERS_SH,
    GPU_QUERY_FIELDS,
    GpuHolder,
    GpuInfo,
    GpuProcess,
    HostFacts,
    IdleVerdict,
    facts_command,
    gpus_idle,
    idle_check_sh,
    parse_compute_apps,
    parse_facts,
    parse_gpu_owners,
    parse_query_gpu,
    state_dir,
    with_owners,
)
from sgdeploy.host.pagecache import WARM_TIMEOUT_S, PageCacheWarmth, parse_warmth, warm_command
from sgdeploy.host.remote import (
    CommandResult,
    CommandTimeout,
    HeldCommand,
    RemoteError,
    RemoteHost,
    write_files_command,
)
from sgdeploy.host.systemd import stop_sh
from sgdeploy.profile.model import LoadedProfile
from sgdeploy.sglang.check.verdict import CheckRequest, HostVerdict
from sgdeploy.sglang.secrets import redact, redact_data

if TYPE_CHECKING:  # for the annotations only: the reader of running servers loads when it is used
    from sgdeploy.host.running import HostServers

LOCKED_MARKER = "@@sgdeploy:locked@@"
LOCK_BUSY_RC = 75
# Runs under flock on <state>/lock ($1 the state folder, $2 who holds it); the kernel frees the
# lock when this dies. The file's text names the holder while held and is emptied on release,
# so text found on entry was left by a holder that is gone.
_LOCK_HOLDER = (
    'd=$1; if [ -s "$d/lock" ]; then printf "stale:%s\\n" "$(cat "$d/lock")"; fi; '
    'printf "%s\\n" "$2" > "$d/lock"; '
    # one grep for every record (up to `keep` of them), not one each
    'grep -l -- \'"outcome": "starting"\' "$d"/*/meta.json 2>/dev/null | while IFS= read -r m; do '
    'sed -i \'s/"outcome": "starting"/"outcome": "interrupted"/\' "$m" && '
    'm=${m%/meta.json} && printf "interrupted:%s\\n" "${m##*/}"; done; '
    # What "up to date" is decided on, read under the lock: last good, installed unit, unit state.
    'if [ -n "$3" ]; then lg=$(readlink "$d/last_good" 2>/dev/null || head -n 1 "$d/last_good" '
    '2>/dev/null); lg=${lg%/}; us=$(sha256sum "$3" 2>/dev/null); printf "state:%s %s %s\\n" '
    '"${lg##*/}" "${us%% *}" "$(systemctl show -p ActiveState --value "$4")"; fi; '
    # $5: staging the new unit and its record, under the lock (`HostSession.stage_command`).
    'if [ -n "$5" ]; then e=$(sh -c "$5" 2>&1 >/dev/null); printf "staged:%s\\n" "$?"; '
    '[ -z "$e" ] || printf "%s\\n" "$e" | sed "s/^/stage-err:/"; fi; '
    f"echo {LOCKED_MARKER}; cat >/dev/null; : > \"$d/lock\""
)
UNIT_FILE_MARKER = "@@sgdeploy:unit-file@@"
DAEMON_FILE_MARKER = "@@sgdeploy:daemon-file@@"
RECORD_MARKER = "@@sgdeploy:last-good@@"
SWAP_INSTALL_FAILED = "@@sgdeploy:install-failed@@"
SWAP_WINDOW_S = 5.0  # how long `HostSession.swap` waits on the host for the GPUs to be idle



def quiet(*_: Any, **__: Any) -> None:
    return None



class FactsKey(NamedTuple):
    """What `HostSession.facts` is asked for a profile (`facts_key`)."""

    unit: str
    python: str
    model_path: str
    port: int
    user: str | None
    files: tuple[str, ...]


class FactsRead(NamedTuple):
    """The host's facts and the texts of the unit files installed now (None: there is none)."""

    facts: HostFacts
    unit_text: str | None
    daemon_text: str | None = None  # the weight-cache daemon's unit (`<unit>-weights.service`)


class Launched(NamedTuple):
    """A start of the unit: the command's result and the systemd invocation it started (None:
    none)."""

    result: CommandResult
    invocation: str | None


class GpuState(NamedTuple):
    """The host's GPUs and their compute processes, each with its user and cgroup."""

    gpus: tuple[GpuInfo, ...]
    processes: tuple[GpuProcess, ...]


class Watched(NamedTuple):
    """Whether a server passed a health check or its settle time, and what was seen."""

    ok: bool
    detail: str


@dataclass
class Swapped:
    """What `HostSession.swap` did: the unit installed, the GPUs' state after the stop, started."""

    result: CommandResult
    installed: bool
    verdict: IdleVerdict | None = None
    started: bool = False
    invocation: str | None = None
    kept_pids: tuple[int, ...] = ()  # the weight-cache daemon kept running for the new server
    # the host's clock at each step of the swap: stop, stopped (the daemon's too), gpus_idle,
    # started (`systemctl start` returned)
    times: dict[str, float] = field(default_factory=dict)


SWAP_STEPS = ("stop", "stopped", "gpus_idle", "started")


def swap_times(output: str) -> dict[str, float]:
    """The `@@times@@` line of the swap: {step: seconds since the epoch}; {} when unreadable."""
    for line in output.splitlines():
        if line.startswith("@@times@@ "):
            try:
                return dict(zip(SWAP_STEPS, map(float, line.split()[1:]), strict=True))
            except ValueError:
                return {}
    return {}


@dataclass
class UnitLock:
    """The per-unit lock: held (release it when done) or refused, with what taking it found."""

    holder: HeldCommand | None
    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)
    state: str | None = None  # `last_good unit-sha256 active` as read under the lock (`host_state`)
    staged: CommandResult | None = None  # the staging done under the lock, when asked for

    def release(self) -> None:
        if self.holder is not None:
            self.holder.release()


class HostSession:
    """The deployment steps on one connected host. Each method is one or two round trips."""

    def __init__(self, remote: RemoteHost, report: Reporter = quiet) -> None:
        self.remote = remote
        self.report = report
        self._records: dict[tuple[str, str], dict[str, str] | None] = {}
        self._health_paths: dict[str, str] = {}  # deployment id -> /health where /ready is missing
        self._facts_ahead: dict[FactsKey, FactsRead] = {}  # `read_ahead`
        # SGLang's checks begun before the plan (sgdeploy.deploy.early)
        self.checks_ahead: list[BackgroundCheck] = []

    def read_ahead(self, loaded: LoadedProfile) -> None:
        """Read the facts `decide` will ask for, now (while the CLI still validates offline)."""
        key = facts_key(loaded)
        self._facts_ahead[key] = self.facts(*key)

    # -- facts --------------------------------------------------------------------------
    def facts(self, unit: str, python: str, model_path: str, port: int,
              user: str | None = None, files: tuple[str, ...] = ()) -> FactsRead:
        """Host facts and the current unit file text, in one round trip; the interpreter, the
        model and `files` are probed as `user` (the unit's User=, None: root)."""
        ahead = self._facts_ahead.pop(FactsKey(unit, python, model_path, port, user, files), None)
        if ahead is not None:
            return ahead
        script = facts_command(unit, python, model_path, port, user=user, files=files)
        path = f"/etc/systemd/system/{unit}.service"
        daemon_path = f"/etc/systemd/system/{daemon_unit_name(unit)}.service"
        state = state_dir(unit)
        record_sh = record_files_sh('"$d/$lg"')
        # The last good record comes in the same round trip: apply reads it to decide "up to
        # date", as the rollback target and as the probe's baseline (`read_record`).
        command = (f"sh -c {shlex.quote(script)}; printf '%s\\n' {UNIT_FILE_MARKER}; "
                   f"cat {shlex.quote(path)} 2>/dev/null || printf '%s' '@@none@@'; "
                   f"printf '\\n%s\\n' {DAEMON_FILE_MARKER}; "
                   f"cat {shlex.quote(daemon_path)} 2>/dev/null || printf '%s' '@@none@@'; "
                   f"d={shlex.quote(state)}; lg=$(readlink \"$d/last_good\" 2>/dev/null || "
                   f"head -n 1 \"$d/last_good\" 2>/dev/null); lg=${{lg%/}}; lg=${{lg##*/}}; "
                   f"printf '\\n%s%s\\n' {RECORD_MARKER} \"$lg\"; [ -z \"$lg\" ] || "
                   f"{record_sh}")
        output = self.remote.run(command).stdout
        facts_out, _, rest = output.partition(UNIT_FILE_MARKER + "\n")
        units, _, record = rest.rpartition("\n" + RECORD_MARKER)
        unit_text, found, daemon_text = units.rpartition("\n" + DAEMON_FILE_MARKER + "\n")
        if not found:
            unit_text, daemon_text = units, "@@none@@"
        facts = parse_facts(facts_out)
        last_good, _, record_files = record.partition("\n")
        if facts.last_good and last_good.strip() == facts.last_good:
            self._records[(state, facts.last_good)] = split_files(record_files)
        return FactsRead(facts, None if unit_text == "@@none@@" else unit_text,
                         None if daemon_text == "@@none@@" else daemon_text)

    # -- lock ----------------------------------------------------------------------------
    def lock(
        self, state_dir: str, unit: str | None = None, stage: Deployment | None = None
    ) -> UnitLock:
        """Take the per-unit lock. Under it, records that an earlier apply left at `starting` (it
        died or lost its connection) are marked `interrupted`, with `unit` what "up to date"
        depends on is read (`UnitLock.state`), and `stage` is staged (`UnitLock.staged`), all in
        the same round trip."""
        holder = (f"{who()} pid={os.getpid()} "
                  f"since={datetime.now(UTC).isoformat(timespec='seconds')}")
        q = shlex.quote(state_dir)
        extra = (f" {shlex.quote(f'{UNIT_DIR}/{unit}.service')} "
                 f"{shlex.quote(f'{unit}.service')}" if unit else "")
        if unit and stage is not None:
            extra += f" {shlex.quote(self.stage_command(stage))}"
        command = (f"mkdir -p {q} && exec flock -n -E {LOCK_BUSY_RC} {q}/lock "
                   f"sh -c {shlex.quote(_LOCK_HOLDER)} sh {q} {shlex.quote(holder)}{extra}")
        held = self.remote.hold(command, LOCKED_MARKER)
        if held.held:
            lines = held.output.splitlines()
            state = next((line[6:] for line in lines if line.startswith("state:")), None)
            warnings = [f"a stale lock was left by an apply that is gone ({line[6:]}); taken over"
                        for line in lines if line.startswith("stale:")]
            interrupted = [line[12:] for line in lines if line.startswith("interrupted:")]
            if interrupted:
                warnings.append(f"earlier applies did not finish (connection lost or killed): "
                                f"{', '.join(interrupted)}; marked interrupted")
            rc = next((line[7:] for line in lines if line.startswith("staged:")), None)
            staged = None if rc is None else CommandResult(
                "stage", int(rc) if rc.isdigit() else 1, "",
                "\n".join(line[10:] for line in lines if line.startswith("stage-err:")))
            return UnitLock(held, warnings=warnings, state=state, staged=staged)
        if held.exit_code == LOCK_BUSY_RC:
            current = self.remote.run(f"cat {q}/lock 2>/dev/null").stdout.strip() or "unknown"
            return UnitLock(None, refusal=f"another apply holds the lock on this unit: {current}")
        why = held.output.strip() or (
            "the connection closed before the lock command reported (no exit status); run it again"
            if held.exit_code is None or held.exit_code < 0 else f"exit status {held.exit_code}")
        return UnitLock(None, refusal=f"cannot take the lock under {state_dir}: {why}")

    def lock_held(self, state_dir: str) -> str | None:
        """Who holds the unit's lock right now (what it wrote into the file); None when it is
        free."""
        q = shlex.quote(f"{state_dir}/lock")
        out = self.remote.run(f"[ -e {q} ] || exit 0; flock -n -E {LOCK_BUSY_RC} {q} true; "
                              f"[ $? -ne {LOCK_BUSY_RC} ] || {{ echo busy; cat {q}; }}").stdout
        return (out.partition("\n")[2].strip() or "unknown") if out.startswith("busy") else None

    # -- stop and GPUs -------------------------------------------------------------------
    def stop(self, unit: str) -> CommandResult:
        self.report("step", step="stop", unit=unit)
        q = shlex.quote(f"{unit}.service")
        return self.remote.run(f"{stop_sh(unit)}; systemctl show -p ActiveState --value "
                               f"{q}", timeout=600)

    def take_over(self, takeover: tuple[Takeover, ...]) -> CommandResult:
        """Stop servers outside the unit (`apply --adopt`): another unit, or a process run by
        hand."""
        # imported here: early.py's connection thread imports this module while the CLI validates
        from sgdeploy.deploy.adopt import takeover_command

        for other in takeover:
            self.report("step", step="stop", pid=other.pid, unit=other.unit or "(outside systemd)")
        return self.remote.run(takeover_command(takeover), timeout=600)

    def running_servers(self) -> HostServers:
        """Every SGLang launch on the host (sgdeploy.host.running), in one round trip."""
        # imported here: early.py's connection thread imports this module while the CLI validates
        from sgdeploy.host.running import read_servers

        return read_servers(self.remote)

    def gpu_state(self) -> GpuState:
        """The GPUs and their compute processes with each one's user and cgroup (one round trip)."""
        # the two queries run side by side: this is polled while the old server lets go of the GPUs
        command = ("a=$(mktemp) || exit; nvidia-smi "
                   f"--query-compute-apps={','.join(APPS_QUERY_FIELDS)} "
                   f'--format=csv,noheader,nounits >"$a" & '
                   f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} "
                   "--format=csv,noheader,nounits; "
                   f'wait; echo @@apps@@; cat "$a"; echo @@owners@@; {GPU_OWNERS_SH} "$a"; rm -f '
                   '"$a"')
        out = self.remote.run(command, timeout=60).stdout
        return _gpu_sections(out)

    def wait_gpus_free(self, gpus: tuple[int | str, ...], unit: str, own_pids: tuple[int, ...],
                       timeout_s: float) -> tuple[GpuHolder, ...]:
        """Wait (before anything stops) until no process outside `unit` is on `gpus`; what is
        left."""
        self.report("step", step="wait_gpus_free", gpus=list(gpus), seconds=timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            info, apps = self.gpu_state()
            strangers, _ = deployment_strangers(info, apps, gpus, unit, own_pids)
            if not strangers or time.monotonic() >= deadline:
                return strangers
            self.report("waiting", what="gpus", detail="; ".join(h.describe() for h in strangers))
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.05)))

    def sglang_check(self, request: CheckRequest, limit_s: float) -> HostVerdict:
        """SGLang's own verdict on the launch, asked of the host's SGLang (one round trip)."""
        # imported here: early.py's connection thread imports this module while the CLI validates
        from sgdeploy.sglang.check.verdict import check_command, parse_verdict, program_bytes

        self.report("step", step="sglang_check", python=request.python)
        began = time.monotonic()
        try:
            result = self.remote.run(check_command(request, limit_s), timeout=limit_s + 30,
                                     stdin=program_bytes())
        except CommandTimeout:
            return HostVerdict("unavailable", seconds=time.monotonic() - began,
                               reason=f"no answer within {limit_s + 30:.0f} s")
        return parse_verdict(
            result.stdout, result.stderr, result.exit_code, time.monotonic() - began
        )

    def wait_gpus_idle(self, gpus: tuple[int | str, ...], timeout_s: float,
                       kept_pids: tuple[int, ...] = ()) -> IdleVerdict:
        # imported here: early.py's connection thread imports this module while the CLI validates
        from tenacity import (
            RetryError,
            Retrying,
            retry_if_result,
            stop_after_delay,
            wait_exponential,
        )

        self.report("step", step="wait_gpus_idle", gpus=list(gpus))

        def check() -> IdleVerdict:
            info, apps = self.gpu_state()
            verdict = gpus_idle(info, apps, gpus, kept_pids=kept_pids)
            if not verdict.idle:
                self.report("waiting", what="gpus", detail=verdict.describe())
            return verdict

        # Memory is usually released within a second of the stop: poll often at first, then back
        # off.
        retrying = Retrying(stop=stop_after_delay(timeout_s),
                            wait=wait_exponential(multiplier=0.1, min=0.1, max=2),
                            retry=retry_if_result(lambda v: not v.idle))
        try:
            verdict: IdleVerdict = retrying(check)
        except RetryError as exc:
            verdict = exc.last_attempt.result()
        return verdict

    def warm_page_cache(self, model_path: str) -> PageCacheWarmth:
        """Read the launch's weights into the host's page cache while the old server serves
        (sgdeploy.host.pagecache: only when they fit in half of the available memory)."""
        self.report("step", step="warm_page_cache", path=model_path)
        try:
            result = self.remote.run(
                warm_command(model_path, WARM_TIMEOUT_S), timeout=WARM_TIMEOUT_S + 30
            )
            warmth = parse_warmth(result.stdout)
        except CommandTimeout:
            warmth = PageCacheWarmth("failed", reason=f"no answer within {WARM_TIMEOUT_S + 30} s")
        self.report("page_cache", outcome=warmth.outcome, text=warmth.describe())
        return warmth

    # -- install, start, follow ----------------------------------------------------------
    def stage(self, deployment: Deployment) -> CommandResult:
        """Write the new unit beside the live one, and the deployment's record, before anything
        stops.

        A unit folder that is read-only or full fails here, while the old server still runs.
        """
        return self.remote.run(self.stage_command(deployment))

    def unstage(self, deployment: Deployment) -> None:
        """Take back what `stage` wrote (a plan decided again under the lock)."""
        self.remote.run(f"rm -rf {shlex.quote(deployment.record_dir)} "
                        f"{shlex.quote(deployment.staged_unit_path)} "
                        f"{shlex.quote(deployment.daemon_files.staged)}")

    def stage_command(self, deployment: Deployment) -> str:
        meta = deployment_meta(deployment, "starting")
        record = deployment.record_dir
        # the record holds no secret (a comment's token, a log line's): the unit is kept as it
        # runs, and the renderer writes none into it (render.refuse_secrets)
        files = {  # the unit first: if it cannot be written, nothing else is
            deployment.staged_unit_path: deployment.unit_text.encode(),
            f"{record}/profile.toml": redact(deployment.profile_text).encode(),
            f"{record}/unit.service": deployment.unit_text.encode(),
            f"{record}/meta.json": (json.dumps(redact_data(meta), indent=2) + "\n").encode(),
        }
        # the weight-cache daemon's unit, beside the server's
        if deployment.daemon_text is not None:
            files[deployment.daemon_files.staged] = deployment.daemon_text.encode()
            files[f"{record}/{WEIGHTS_FILE}"] = deployment.daemon_text.encode()
        self.remote.stats.uploads += len(files)
        return write_files_command(files)

    def install_and_start(self, deployment: Deployment, start: bool = True) -> Launched:
        """Move the staged unit into place (an atomic rename), daemon-reload and start it (or,
        with `start=False`, leave it stopped: the GPUs are not free for it)."""
        self.report("step", step="install", path=deployment.unit_path)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        command = (f"set -e; mv -f {shlex.quote(deployment.staged_unit_path)} "
                   f"{shlex.quote(deployment.unit_path)}; {deployment.daemon_files.install_sh()}; "
                   f"{deployment.daemon_files.stop_sh()}; systemctl daemon-reload; systemctl "
                   f"reset-failed {unit_q} 2>/dev/null || true; systemctl enable --quiet "
                   f"--no-reload {unit_q} 2>/dev/null || true; "
                   + (f"systemctl start {unit_q}; " if start else "")
                   + f"echo @@invocation@@; systemctl show -p InvocationID --value {unit_q}")
        if start:
            self.report("step", step="start", unit=deployment.unit)
        result = self.remote.run(command)
        return Launched(result, _invocation(result.stdout))

    def swap(self, deployment: Deployment, stop_first: bool, window_s: float) -> Swapped:
        """Install the staged unit (rename, daemon-reload) while the old server still serves; then,
        in the same round trip, stop it, wait up to `window_s` on the host until the GPUs are idle
        (`gpus_idle`'s rule, decided there by `idle_check_sh`) and start the new unit. The downtime
        is the stop, the GPUs' release and the start. GPUs still busy leave it installed,
        stopped."""
        self.report("step", step="install", path=deployment.unit_path)
        if stop_first:
            self.report("step", step="stop", unit=deployment.unit)
        self.report("step", step="wait_gpus_idle", gpus=list(deployment.gpus))
        unit_q = shlex.quote(f"{deployment.unit}.service")
        tries = max(1, int(window_s / 0.1))
        live = shlex.quote(deployment.unit_path)
        command = (
            f'l={live}; b="$l.sgdeploy-prev"; rm -f "$b"; [ ! -e "$l" ] || cp -p "$l" "$b" || exit '
            f'1; mv -f {shlex.quote(deployment.staged_unit_path)} "$l" || {{ rm -f "$b"; echo '
            f'{SWAP_INSTALL_FAILED}; '
            f"exit 1; }}; {deployment.daemon_files.install_sh()}; systemctl daemon-reload; "
            f"systemctl reset-failed {unit_q} 2>/dev/null; systemctl enable --quiet --no-reload "
            f"{unit_q} 2>/dev/null; "
            # Nothing stops once sgdeploy is gone (this write fails): the unit file that was there
            # goes back.
            '[ ! -e "$b" ] || trap \'mv -f "$b" "$l"; systemctl daemon-reload; exit 1\' PIPE; '
            'echo @@installed@@ || exit 1; trap - PIPE; rm -f "$b"; t0=$(date +%s.%N); '
            + (f"systemctl stop {unit_q}; " if stop_first else "")
            + f"{deployment.daemon_files.stop_sh()}; t1=$(date +%s.%N); "
            + f"{idle_check_sh(deployment.gpus)}; d=$(mktemp -d) || exit 1; i=0; idle=0; "
            + f'{{ {deployment.daemon_files.kept_pids_sh()}; }} >"$d/k"; '
            + 'echo @@kept@@; cat "$d/k"; echo @@end-kept@@; '
            f"while :; do nvidia-smi --query-compute-apps={','.join(APPS_QUERY_FIELDS)} "
            f'--format=csv,noheader,nounits >"$d/a" 2>/dev/null & '
            f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} --format=csv,noheader,nounits "
            f'>"$d/g" 2>/dev/null; wait; if sgd_idle "$d/g" "$d/a" "$d/k"; then idle=1; break; fi; '
            f"i=$((i + 1)); [ $i -lt {tries} ] || break; sleep 0.1; done; rc=0; "
            f'if [ $idle = 1 ]; then t2=$(date +%s.%N); systemctl start {unit_q} || rc=$?; '
            'echo "@@times@@ $t0 $t1 $t2 $(date +%s.%N)"; echo @@invocation@@; '
            f"systemctl show -p InvocationID --value {unit_q}; fi; "
            f'echo @@gpus@@; cat "$d/g"; echo @@apps@@; cat "$d/a"; echo @@owners@@; '
            f'[ $idle = 1 ] || {{ {GPU_OWNERS_SH} "$d/a"; }}; rm -rf "$d"; exit $rc'
        )
        self.report("step", step="start", unit=deployment.unit)
        result = self.remote.run(command, timeout=600 + window_s)
        if SWAP_INSTALL_FAILED in result.stdout:
            return Swapped(result, installed=False)
        head, _, state = result.stdout.partition("@@gpus@@\n")
        kept = _kept_pids(head)
        verdict = gpus_idle(*_gpu_sections(state), deployment.gpus, kept_pids=kept)
        before, started, invocation = head.partition("@@invocation@@\n")
        # the host's rule and gpus_idle disagree: never run on busy GPUs
        if started and not verdict.idle:
            self.remote.run(stop_sh(deployment.unit))
            started, invocation = "", ""
        times = swap_times(before) if started else {}
        if not stop_first:  # nothing was serving: the downtime begins at the start
            times = {k: v for k, v in times.items() if k not in ("stop", "stopped")}
        return Swapped(result, True, verdict, bool(started), invocation.strip() or None, kept,
                       times)

    def start_installed(self, deployment: Deployment) -> Launched:
        """Start the unit `swap` installed and left stopped (its GPUs were freed later)."""
        self.report("step", step="start", unit=deployment.unit)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        result = self.remote.run(f"set -e; systemctl reset-failed {unit_q} 2>/dev/null || true; "
                                 f"systemctl start {unit_q}; echo @@invocation@@; "
                                 f"systemctl show -p InvocationID --value {unit_q}")
        return Launched(result, _invocation(result.stdout))

    def follow(self, deployment: Deployment, invocation: str, expected: list[str] | None,
               stop: threading.Event | None = None) -> StartupResult:
        """Follow the unit's journal for this invocation (`JournalFollower.follow`)."""
        return JournalFollower(self.remote, self.report).follow(
            deployment, invocation, expected, stop
        )

    def health_path(self, deployment: Deployment) -> str:
        return self._health_paths.get(deployment.id, deployment.health_path)

    def get_health(self, deployment: Deployment) -> int:
        """The status of the deployment's health endpoint. A `/ready` answering 404 is a build
        without that endpoint (SGLang serves it from 0.5.20): `/health` stands in for it from
        then on, for this deployment."""
        path = self.health_path(deployment)
        status = self.remote.http_get(deployment.port, path).status
        if status == 404 and path == "/ready":
            self._health_paths[deployment.id] = "/health"
            self.report("warning", text=f"GET /ready on port {deployment.port} answered 404: this "
                        "SGLang build has no /ready endpoint; checking /health instead")
            status = self.remote.http_get(deployment.port, "/health").status
        return status

    def check_health(self, deployment: Deployment, timeout_s: float) -> Watched:
        self.report("step", step="check_health", path=self.health_path(deployment))
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                status = self.get_health(deployment)
                if status == 200:
                    return Watched(True, "200")
                last = f"HTTP {status}"
            except ConnectionRefusedError as exc:
                last = str(exc)
            time.sleep(0.5)
        return Watched(False, f"{self.health_path(deployment)} did not return 200 within "
                              f"{timeout_s:.0f} s ({last})")

    def settle(self, deployment: Deployment, seconds: float) -> Watched:
        """Watch a ready server for `seconds`: same main process, no restart, still healthy."""
        if seconds <= 0:
            return Watched(True, "not watched")
        self.report("step", step="settle", seconds=seconds)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        probe = f"systemctl show -p MainPID,NRestarts,ActiveState --no-pager {unit_q}"
        first = self.remote.run(probe).stdout
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
            now = self.remote.run(probe).stdout
            if now != first:
                return Watched(False, "the server died after becoming ready "
                                      f"({' '.join(now.split())})")
        try:
            status = self.get_health(deployment)
        except ConnectionRefusedError:
            status = 0
        if status != 200:
            return Watched(False, f"{self.health_path(deployment)} answered {status or 'nothing'} "
                           f"{seconds:.0f} s after ready")
        return Watched(True, "stable")

    def journal_tail(self, unit: str, lines: int = 15) -> list[str]:
        out = self.remote.run(f"journalctl -u {shlex.quote(unit + '.service')} -o cat -n {lines} "
                              "--no-pager").stdout
        return redact(out).splitlines()

    def server_info(self, deployment: Deployment) -> dict[str, Any] | None:
        """SGLang's resolved arguments, less the secret ones (SGLang returns its api_key here)."""
        headers = bearer_headers(
            self.remote, deployment.profile_text, deployment.unit, deployment.sglang_version
        )
        for path in ("/server_info", "/get_server_info"):
            try:
                response = self.remote.http_get(deployment.port, path, headers=headers)
            except (ConnectionRefusedError, RemoteError):
                return None
            if response.status == 200:
                try:
                    info = json.loads(response.body)
                except ValueError:
                    return None
                return without_secrets(info) if isinstance(info, dict) else None
        return None

    # -- records -------------------------------------------------------------------------
    def record(self, deployment: Deployment, meta: dict[str, Any], last_good: bool, keep: int,
               unstage: bool = False) -> None:
        """Write the outcome, move `last_good` on success, and prune old records (one round trip);
        `unstage` also removes the staged unit (a start refused before the stop)."""
        # imported here: early.py's connection thread imports this module while the CLI validates
        from sgdeploy.deploy.operate import prune_command

        shown = json.dumps(redact_data(meta), indent=2) + "\n"
        files = {f"{deployment.record_dir}/meta.json": shown.encode()}
        if last_good:
            files[f"{deployment.state_dir}/last_good"] = (deployment.id + "\n").encode()
        prune = prune_command(deployment.state_dir, keep, deployment.id if last_good else None)
        if unstage:
            prune += f"\nrm -f {shlex.quote(deployment.staged_unit_path)}"
        result = self.remote.write_files(files, then=prune)
        if not result.ok:
            self.report(
                "warning", text=f"could not record {deployment.id}: {result.stderr.strip()}"
            )

    def read_record(self, state_dir: str, deployment_id: str) -> dict[str, str] | None:
        """A finished deployment's files (None if missing or damaged), read once per session: an
        apply asks for the last good one up to three times (up-to-date check, rollback target,
        probe baseline), and sgdeploy never rewrites a record other than the one it is writing."""
        key = (state_dir, deployment_id)
        if key not in self._records:
            out = self.remote.run(record_files_sh(shlex.quote(f"{state_dir}/"
                                                              f"{deployment_id}"))).stdout
            self._records[key] = split_files(out)
        return self._records[key]


def _invocation(stdout: str) -> str | None:
    """The unit's InvocationID printed after `@@invocation@@` (None: the unit was not started)."""
    return stdout.partition("@@invocation@@\n")[2].strip() or None


def _kept_pids(out: str) -> tuple[int, ...]:
    """The pids `kept_pids_sh` printed between `@@kept@@` and `@@end-kept@@`."""
    _, _, rest = out.partition("@@kept@@\n")
    block, _, _ = rest.partition("@@end-kept@@")
    return tuple(int(word) for word in block.split() if word.isdigit())


def _gpu_sections(out: str) -> GpuState:
    """The GPUs and their compute processes (with each one's owner) from `nvidia-smi` output
    printed as GPUS `@@apps@@` APPS `@@owners@@` OWNERS."""
    gpus_text, _, rest = out.partition("@@apps@@\n")
    apps_text, _, owners_text = rest.partition("@@owners@@\n")
    return GpuState(parse_query_gpu(gpus_text),
                    with_owners(parse_compute_apps(apps_text), parse_gpu_owners(owners_text)))


def healthy_now(session: HostSession, unit: str) -> str | None:
    """The healthy server `unit` runs on the host right now, in words; None when it runs none.

    Asked before any result says that nothing healthy is running: the unit active and running,
    and /health (every SGLang version has it) answering 200 on its unit's --port.
    """
    unit_q = shlex.quote(f"{unit}.service")
    out = session.remote.run(f"systemctl show -p ActiveState,SubState,MainPID --no-pager {unit_q}; "
                             f"printf '%s\\n' {UNIT_FILE_MARKER}; "
                             f"cat {shlex.quote(f'{UNIT_DIR}/{unit}.service')} 2>/dev/null").stdout
    head, _, unit_text = out.partition(UNIT_FILE_MARKER + "\n")
    state = {k: v for k, _, v in (line.partition("=") for line in head.splitlines())}
    if (state.get("ActiveState"), state.get("SubState")) != ("active", "running"):
        return None
    port = exec_port(unit_text) or DEFAULT_PORT
    try:
        status = session.remote.http_get(port, "/health").status
    except (ConnectionRefusedError, RemoteError):
        return None
    return (f"{unit}.service is running (main pid {state.get('MainPID')}) and GET /health on port "
            f"{port} answers 200") if status == 200 else None


class BackgroundCheck:
    """SGLang's own check of one launch, run on a thread of its own while the caller goes on."""

    def __init__(self, session: HostSession, request: CheckRequest, limit_s: float) -> None:
        self.request = request  # what is being checked
        self._value: HostVerdict | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(session, limit_s), daemon=True,
                                        name="sgdeploy-sglang-check")
        self._thread.start()

    def _run(self, session: HostSession, limit_s: float) -> None:
        try:
            self._value = session.sglang_check(self.request, limit_s)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def result(self) -> HostVerdict:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


def facts_key(loaded: LoadedProfile) -> FactsKey:
    """What `HostSession.facts` is asked for a profile: unit, python, model path, port, user and
    the host files the launch opens (SGD713)."""
    # imported here: early.py's connection thread imports this module while the CLI validates
    from sgdeploy.deploy.preflight import host_file_paths

    profile = loaded.model
    assert profile is not None
    return FactsKey(
        profile.deploy.unit,
        profile.deploy.python,
        str(profile.server.get("model_path", "")),
        server_port(profile.server),
        profile.deploy.run_as,
        host_file_paths(loaded),
    )
