"""Executing a plan on a host: the deployment transaction, readiness, records and rollback.

Everything here talks to the host through one `RemoteHost`. The order is SPEC §6: facts and
preflight (nothing changed yet), lock, stop, wait for idle GPUs, install, start, follow the
journal until the launch's readiness lines, check health, record. A failure rolls back to the
last good deployment with the same steps.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import re
import shlex
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sgdeploy.diagnostics import Diagnostic
from sgdeploy.facts import (
    APPS_QUERY_FIELDS,
    GPU_OWNERS_SH,
    GPU_QUERY_FIELDS,
    GpuHolder,
    HostFacts,
    IdleVerdict,
    facts_command,
    gpu_strangers,
    gpus_idle,
    idle_check_sh,
    parse_compute_apps,
    parse_facts,
    parse_gpu_owners,
    parse_query_gpu,
    state_dir,
    with_owners,
)
from sgdeploy.inventory import HostEntry, HostTarget
from sgdeploy.logs import LogReader, LogReport
from sgdeploy.plan import (
    UNIT_DIR,
    Deployment,
    Plan,
    Takeover,
    deployment_meta,
    gpus_for,
    make_plan,
    new_deployment_id,
    who,
)
from sgdeploy.preflight import gpu_holders, preflight
from sgdeploy.profile import LoadedProfile, ProbeSettings
from sgdeploy.remote import (
    CommandResult,
    CommandTimeout,
    ConnectError,
    ConnectionLost,
    HeldCommand,
    RemoteError,
    RemoteHost,
    write_files_command,
)
from sgdeploy.secret_args import (
    api_key_for,
    bearer_headers,
    check_argv,
    host_secret_diagnostics,
    recorded_secret_diagnostics,
    redact,
    without_secrets,
)
from sgdeploy.sglangcheck.verdict import CheckRequest, HostVerdict

Reporter = Callable[..., None]

EXITED_MARKER = "@@sgdeploy:exited@@"
# After the first error, read on this long (or until the unit exits): the other ranks' tracebacks
# and the native lines behind them belong to the explanation.
FAILURE_SETTLE_S = 1.5
FOLLOWER_MARKER = "@@sgdeploy:follower@@"
LOCKED_MARKER = "@@sgdeploy:locked@@"
LOCK_BUSY_RC = 75
# Runs under flock on <state>/lock ($1 the state folder, $2 who holds it); the kernel frees the
# lock when this dies. The file's text names the holder while held and is emptied on release,
# so text found on entry was left by a holder that is gone.
_LOCK_HOLDER = (
    'd=$1; if [ -s "$d/lock" ]; then printf "stale:%s\\n" "$(cat "$d/lock")"; fi; '
    'printf "%s\\n" "$2" > "$d/lock"; '
    'for m in "$d"/*/meta.json; do grep -q \'"outcome": "starting"\' "$m" 2>/dev/null || continue; '
    'sed -i \'s/"outcome": "starting"/"outcome": "interrupted"/\' "$m" && '
    'printf "interrupted:%s\\n" "$(basename "$(dirname "$m")")"; done; '
    # What "up to date" is decided on, read under the lock: last good, installed unit, unit state.
    'if [ -n "$3" ]; then lg=$(readlink "$d/last_good" 2>/dev/null || head -n 1 "$d/last_good" 2>/dev/null); '
    'lg=${lg%/}; us=$(sha256sum "$3" 2>/dev/null); '
    'printf "state:%s %s %s\\n" "${lg##*/}" "${us%% *}" "$(systemctl show -p ActiveState --value "$4")"; fi; '
    # $5: staging the new unit and its record, under the lock (`HostSession.stage_command`).
    'if [ -n "$5" ]; then e=$(sh -c "$5" 2>&1 >/dev/null); printf "staged:%s\\n" "$?"; '
    'printf "%s\\n" "$e" | sed "s/^/stage-err:/"; fi; '
    f"echo {LOCKED_MARKER}; cat >/dev/null; : > \"$d/lock\""
)
UNIT_FILE_MARKER = "@@sgdeploy:unit-file@@"
RECORD_MARKER = "@@sgdeploy:last-good@@"
SWAP_INSTALL_FAILED = "@@sgdeploy:install-failed@@"
SWAP_WINDOW_S = 5.0  # how long `HostSession.swap` waits on the host for the GPUs to be idle


class Exit(enum.IntEnum):
    READY = 0
    ROLLED_BACK = 1
    REFUSED = 2
    NOTHING_HEALTHY = 3


@dataclass
class ApplyOptions:
    rollback: bool = True
    force: bool = False
    dry_run: bool = False
    gpu_idle_timeout_s: float = 120.0
    health_timeout_s: float = 60.0
    settle_s: float = 5.0  # after ready: the unit must keep running and healthy this long
    keep: int = 20  # deployment records kept per unit on the host (the last good one always)
    probe: bool = False  # measure throughput after ready and record it
    min_ratio: float | None = None  # fail (and roll back) below this share of the last good figure
    sglang: str | None = None
    adopt: bool = False  # stop an SGLang server on the profile's port outside its unit, then take over
    sglang_check: bool = True  # ask the host's own SGLang about the launch before anything stops
    sglang_check_timeout_s: float = 60.0
    wait_for_gpus_s: float | None = None  # wait (bounded) for processes outside the unit to leave its GPUs
    # Run last before the stop (a gateway drains the server): a sentence refuses the start, nothing stopped
    before_stop: Callable[[HostSession, Handover], str | None] | None = None
    # Run once the result is known, over the host's connection still open (a gateway puts the worker back)
    after_host: Callable[[HostSession, ApplyResult], None] | None = None


@dataclass(frozen=True)
class Handover:
    """What a `before_stop` hook is told: the deployment about to start, the one a failure
    restores, and the port of the server running now (None: nothing runs)."""

    deployment: Deployment
    previous: Deployment | None
    running_port: int | None


@dataclass
class StartupResult:
    """How one start of a unit went."""

    ready: bool
    report: LogReport | None = None
    reason: str = ""
    failure_kind: str | None = None
    explain: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ready_seen_at: float | None = None
    auto_adjusted: list[dict[str, Any]] = field(default_factory=list)
    probe: dict[str, Any] | None = None


@dataclass
class ApplyResult:
    exit_code: int
    status: str
    host: str
    unit: str
    message: str
    deployment_id: str | None = None
    phase_times: dict[str, float | None] = field(default_factory=dict)
    kv_cache_tokens: int | None = None
    auto_adjusted: list[dict[str, Any]] = field(default_factory=list)
    failure: dict[str, Any] | None = None
    explain: list[str] = field(default_factory=list)
    rollback: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    plan: Plan | None = None
    timings: dict[str, float] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    sglang_check: dict[str, Any] | None = None  # SGLang's own verdict on the host, its prediction and what differed
    disagreements: list[dict[str, Any]] = field(default_factory=list)  # host verdict vs offline rules

    def as_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "status": self.status,
            "host": self.host,
            "unit": self.unit,
            "message": self.message,
            "deployment_id": self.deployment_id,
            "phase_times": self.phase_times,
            "kv_cache_tokens": self.kv_cache_tokens,
            "auto_adjusted": self.auto_adjusted,
            "failure": self.failure,
            "explain": self.explain,
            "rollback": self.rollback,
            "probe": self.probe,
            "diagnostics": [d.as_dict() for d in self.diagnostics],
            "steps": [{"step": s.kind.value, "why": s.why} for s in self.plan.steps] if self.plan else [],
            "timings": self.timings,
            "ssh": self.stats,
            "sglang_check": self.sglang_check,
            "disagreements": self.disagreements,
        }


def _quiet(*_: Any, **__: Any) -> None:
    return None


# --------------------------------------------------------------------------- building a deployment
def build_deployment(
    loaded: LoadedProfile, host: str, sglang_version: str, rollback_of: str | None = None
) -> Deployment:
    from sgdeploy.render import render_unit
    from sgdeploy.sglang.catalog import load_catalog, nearest_version

    profile = loaded.model
    assert profile is not None
    # A release without a bundled catalog (newer, a dev build) renders with the closest older one.
    unit = render_unit(loaded, load_catalog(nearest_version(sglang_version)), host)
    check = CheckRequest(python=unit.argv[0], argv=tuple(check_argv(profile, list(unit.argv[3:]))),
                         environment=unit.environment,
                         user=profile.deploy.user, working_directory=profile.deploy.working_directory,
                         env_file=profile.deploy.env_file)
    return Deployment(
        id=new_deployment_id(loaded.sha256),
        unit=profile.deploy.unit,
        unit_text=unit.text,
        profile_name=loaded.name,
        profile_sha256=loaded.sha256,
        profile_text=loaded.text,
        sglang_version=sglang_version,
        server=dict(profile.server),
        gpus=gpus_for(dict(profile.server), profile.deploy.gpus),
        ready_timeout_s=profile.deploy.ready_timeout_s,
        rollback_of=rollback_of,
        probe_settings=profile.probe.model_dump(mode="json") if profile.probe else None,
        check=check,
    )


# --------------------------------------------------------------------------- the host side
@dataclass
class Swapped:
    """What `HostSession.swap` did: the unit installed, the GPUs' state after the stop, started."""

    result: CommandResult
    installed: bool
    verdict: IdleVerdict | None = None
    started: bool = False
    invocation: str | None = None


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

    def __init__(self, remote: RemoteHost, report: Reporter = _quiet) -> None:
        self.remote = remote
        self.report = report
        self._records: dict[tuple[str, str], dict[str, str] | None] = {}
        self._health_paths: dict[str, str] = {}  # deployment id -> /health where /ready is missing
        self._facts_ahead: dict[tuple[Any, ...], tuple[HostFacts, str | None]] = {}  # `read_ahead`
        self.checks_ahead: list[_Background] = []  # SGLang's checks begun before the plan (`EarlyConnection`)

    def read_ahead(self, loaded: LoadedProfile) -> None:
        """Read the facts `_decide` will ask for, now (while the CLI still validates offline)."""
        key = facts_key(loaded)
        self._facts_ahead[key] = self.facts(*key)

    # -- facts --------------------------------------------------------------------------
    def facts(self, unit: str, python: str, model_path: str, port: int,
              user: str | None = None) -> tuple[HostFacts, str | None]:
        """Host facts and the current unit file text, in one round trip; the interpreter and the
        model are probed as `user` (the unit's User=, None: root)."""
        ahead = self._facts_ahead.pop((unit, python, model_path, port, user), None)
        if ahead is not None:
            return ahead
        script = facts_command(unit, python, model_path, port, user=user)
        path = f"/etc/systemd/system/{unit}.service"
        state = state_dir(unit)
        record_sh = _record_files_sh('"$d/$lg"')
        # The last good record comes in the same round trip: apply reads it to decide "up to
        # date", as the rollback target and as the probe's baseline (`read_record`).
        command = (f"sh -c {shlex.quote(script)}; printf '%s\\n' {UNIT_FILE_MARKER}; "
                   f"cat {shlex.quote(path)} 2>/dev/null || printf '%s' '@@none@@'; "
                   f"d={shlex.quote(state)}; lg=$(readlink \"$d/last_good\" 2>/dev/null || "
                   f"head -n 1 \"$d/last_good\" 2>/dev/null); lg=${{lg%/}}; lg=${{lg##*/}}; "
                   f"printf '\\n%s%s\\n' {RECORD_MARKER} \"$lg\"; [ -z \"$lg\" ] || "
                   f"{record_sh}")
        output = self.remote.run(command).stdout
        facts_out, _, rest = output.partition(UNIT_FILE_MARKER + "\n")
        unit_text, _, record = rest.rpartition("\n" + RECORD_MARKER)
        facts = parse_facts(facts_out)
        last_good, _, files = record.partition("\n")
        if facts.last_good and last_good.strip() == facts.last_good:
            self._records[(state, facts.last_good)] = _split_files(files)
        return facts, (None if unit_text == "@@none@@" else unit_text)

    # -- lock ----------------------------------------------------------------------------
    def lock(self, state_dir: str, unit: str | None = None, stage: Deployment | None = None) -> UnitLock:
        """Take the per-unit lock. Under it, records that an earlier apply left at `starting` (it
        died or lost its connection) are marked `interrupted`, with `unit` what "up to date"
        depends on is read (`UnitLock.state`), and `stage` is staged (`UnitLock.staged`), all in
        the same round trip."""
        holder = f"{who()} pid={os.getpid()} since={datetime.now(UTC).isoformat(timespec='seconds')}"
        q = shlex.quote(state_dir)
        extra = (f" {shlex.quote(f'{UNIT_DIR}/{unit}.service')} {shlex.quote(f'{unit}.service')}" if unit else "")
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
        return UnitLock(None, refusal=f"cannot take the lock under {state_dir}: "
                                      f"{held.output.strip() or held.exit_code}")

    def lock_held(self, state_dir: str) -> str | None:
        """Who holds the unit's lock right now (what it wrote into the file); None when it is free."""
        q = shlex.quote(f"{state_dir}/lock")
        out = self.remote.run(f"[ -e {q} ] || exit 0; flock -n -E {LOCK_BUSY_RC} {q} true; "
                              f"[ $? -ne {LOCK_BUSY_RC} ] || {{ echo busy; cat {q}; }}").stdout
        return (out.partition("\n")[2].strip() or "unknown") if out.startswith("busy") else None

    # -- stop and GPUs -------------------------------------------------------------------
    def stop(self, unit: str) -> CommandResult:
        self.report("step", step="stop", unit=unit)
        q = shlex.quote(f"{unit}.service")
        return self.remote.run(f"systemctl stop {q}; systemctl show -p ActiveState --value {q}", timeout=600)

    def take_over(self, takeover: tuple[Takeover, ...]) -> CommandResult:
        """Stop servers outside the unit (`apply --adopt`): another unit, or a process run by hand."""
        from sgdeploy.adopt import takeover_command

        for other in takeover:
            self.report("step", step="stop", pid=other.pid, unit=other.unit or "(outside systemd)")
        return self.remote.run(takeover_command(takeover), timeout=600)

    def running_servers(self) -> Any:
        """Every SGLang launch on the host (sgdeploy.running), in one round trip."""
        from sgdeploy.running import read_servers

        return read_servers(self.remote)

    def gpu_state(self) -> tuple[Any, Any]:
        """The GPUs and their compute processes with each one's user and cgroup (one round trip)."""
        # the two queries run side by side: this is polled while the old server lets go of the GPUs
        command = (f"a=$(mktemp) || exit; nvidia-smi --query-compute-apps={','.join(APPS_QUERY_FIELDS)} "
                   f'--format=csv,noheader,nounits >"$a" & '
                   f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} --format=csv,noheader,nounits; "
                   f'wait; echo @@apps@@; cat "$a"; echo @@owners@@; {GPU_OWNERS_SH} "$a"; rm -f "$a"')
        out = self.remote.run(command, timeout=60).stdout
        gpus_text, _, rest = out.partition("@@apps@@\n")
        apps_text, _, owners_text = rest.partition("@@owners@@\n")
        return parse_query_gpu(gpus_text), with_owners(parse_compute_apps(apps_text), parse_gpu_owners(owners_text))

    def wait_gpus_free(self, gpus: tuple[int | str, ...], unit: str, own_pids: tuple[int, ...],
                       timeout_s: float) -> tuple[GpuHolder, ...]:
        """Wait (before anything stops) until no process outside `unit` is on `gpus`; what is left."""
        self.report("step", step="wait_gpus_free", gpus=list(gpus), seconds=timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            info, apps = self.gpu_state()
            strangers, _ = gpu_strangers(info, apps, gpus, unit, own_pids)
            if not strangers or time.monotonic() >= deadline:
                return strangers
            self.report("waiting", what="gpus", detail="; ".join(h.describe() for h in strangers))
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.05)))

    def sglang_check(self, request: CheckRequest, limit_s: float) -> HostVerdict:
        """SGLang's own verdict on the launch, asked of the host's SGLang (one round trip)."""
        from sgdeploy.sglangcheck.verdict import check_command, parse_verdict, program_bytes

        self.report("step", step="sglang_check", python=request.python)
        began = time.monotonic()
        try:
            result = self.remote.run(check_command(request, limit_s), timeout=limit_s + 30,
                                     stdin=program_bytes())
        except CommandTimeout:
            return HostVerdict("unavailable", seconds=time.monotonic() - began,
                               reason=f"no answer within {limit_s + 30:.0f} s")
        return parse_verdict(result.stdout, result.stderr, result.exit_code, time.monotonic() - began)

    def wait_gpus_idle(self, gpus: tuple[int | str, ...], timeout_s: float) -> IdleVerdict:
        from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential

        self.report("step", step="wait_gpus_idle", gpus=list(gpus))

        def check() -> IdleVerdict:
            info, apps = self.gpu_state()
            verdict = gpus_idle(info, apps, gpus)
            if not verdict.idle:
                self.report("waiting", what="gpus", detail=verdict.describe())
            return verdict

        # Memory is usually released within a second of the stop: poll often at first, then back off.
        retrying = Retrying(stop=stop_after_delay(timeout_s),
                            wait=wait_exponential(multiplier=0.1, min=0.1, max=2),
                            retry=retry_if_result(lambda v: not v.idle))
        try:
            verdict: IdleVerdict = retrying(check)
        except RetryError as exc:
            verdict = exc.last_attempt.result()
        return verdict

    # -- install, start, follow ----------------------------------------------------------
    def stage(self, deployment: Deployment) -> CommandResult:
        """Write the new unit beside the live one, and the deployment's record, before anything stops.

        A unit folder that is read-only or full fails here, while the old server still runs.
        """
        return self.remote.run(self.stage_command(deployment))

    def unstage(self, deployment: Deployment) -> None:
        """Take back what `stage` wrote (a plan decided again under the lock)."""
        self.remote.run(f"rm -rf {shlex.quote(deployment.record_dir)} {shlex.quote(deployment.staged_unit_path)}")

    def stage_command(self, deployment: Deployment) -> str:
        meta = deployment_meta(deployment, "starting")
        record = deployment.record_dir
        files = {  # the unit first: if it cannot be written, nothing else is
            deployment.staged_unit_path: deployment.unit_text.encode(),
            f"{record}/profile.toml": deployment.profile_text.encode(),
            f"{record}/unit.service": deployment.unit_text.encode(),
            f"{record}/meta.json": (json.dumps(meta, indent=2) + "\n").encode(),
        }
        self.remote.stats.uploads += len(files)
        return write_files_command(files)

    def install_and_start(self, deployment: Deployment, start: bool = True) -> tuple[CommandResult, str | None]:
        """Move the staged unit into place (an atomic rename), daemon-reload and start it (or,
        with `start=False`, leave it stopped: the GPUs are not free for it)."""
        self.report("step", step="install", path=deployment.unit_path)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        command = (f"set -e; mv -f {shlex.quote(deployment.staged_unit_path)} {shlex.quote(deployment.unit_path)}; "
                   f"systemctl daemon-reload; systemctl reset-failed {unit_q} 2>/dev/null || true; "
                   f"systemctl enable --quiet --no-reload {unit_q} 2>/dev/null || true; "
                   + (f"systemctl start {unit_q}; " if start else "")
                   + f"echo @@invocation@@; systemctl show -p InvocationID --value {unit_q}")
        if start:
            self.report("step", step="start", unit=deployment.unit)
        result = self.remote.run(command)
        _, _, tail = result.stdout.partition("@@invocation@@\n")
        invocation = tail.strip() or None
        return result, invocation

    def swap(self, deployment: Deployment, stop_first: bool, window_s: float) -> Swapped:
        """Install the staged unit (rename, daemon-reload) while the old server still serves; then,
        in the same round trip, stop it, wait up to `window_s` on the host until the GPUs are idle
        (`gpus_idle`'s rule, decided there by `idle_check_sh`) and start the new unit. The downtime
        is the stop, the GPUs' release and the start. GPUs still busy leave it installed, stopped."""
        self.report("step", step="install", path=deployment.unit_path)
        if stop_first:
            self.report("step", step="stop", unit=deployment.unit)
        self.report("step", step="wait_gpus_idle", gpus=list(deployment.gpus))
        unit_q = shlex.quote(f"{deployment.unit}.service")
        tries = max(1, int(window_s / 0.1))
        live = shlex.quote(deployment.unit_path)
        command = (
            f'l={live}; b="$l.sgdeploy-prev"; rm -f "$b"; [ ! -e "$l" ] || cp -p "$l" "$b" || exit 1; '
            f'mv -f {shlex.quote(deployment.staged_unit_path)} "$l" || {{ rm -f "$b"; echo {SWAP_INSTALL_FAILED}; '
            "exit 1; }; systemctl daemon-reload; "
            f"systemctl reset-failed {unit_q} 2>/dev/null; systemctl enable --quiet --no-reload {unit_q} 2>/dev/null; "
            # Nothing stops once sgdeploy is gone (this write fails): the unit file that was there goes back.
            '[ ! -e "$b" ] || trap \'mv -f "$b" "$l"; systemctl daemon-reload; exit 1\' PIPE; '
            'echo @@installed@@ || exit 1; trap - PIPE; rm -f "$b"; '
            + (f"systemctl stop {unit_q}; " if stop_first else "")
            + f"{idle_check_sh(deployment.gpus)}; d=$(mktemp -d) || exit 1; i=0; idle=0; "
            f"while :; do nvidia-smi --query-compute-apps={','.join(APPS_QUERY_FIELDS)} "
            f'--format=csv,noheader,nounits >"$d/a" 2>/dev/null & '
            f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} --format=csv,noheader,nounits "
            f'>"$d/g" 2>/dev/null; wait; if sgd_idle "$d/g" "$d/a"; then idle=1; break; fi; '
            f"i=$((i + 1)); [ $i -lt {tries} ] || break; sleep 0.1; done; rc=0; "
            f'if [ $idle = 1 ]; then systemctl start {unit_q} || rc=$?; echo @@invocation@@; '
            f"systemctl show -p InvocationID --value {unit_q}; fi; "
            f'echo @@gpus@@; cat "$d/g"; echo @@apps@@; cat "$d/a"; echo @@owners@@; '
            f'[ $idle = 1 ] || {GPU_OWNERS_SH} "$d/a"; rm -rf "$d"; exit $rc'
        )
        self.report("step", step="start", unit=deployment.unit)
        result = self.remote.run(command, timeout=600 + window_s)
        if SWAP_INSTALL_FAILED in result.stdout:
            return Swapped(result, installed=False)
        head, _, state = result.stdout.partition("@@gpus@@\n")
        gpus_text, _, rest = state.partition("@@apps@@\n")
        apps_text, _, owners_text = rest.partition("@@owners@@\n")
        apps = with_owners(parse_compute_apps(apps_text), parse_gpu_owners(owners_text))
        verdict = gpus_idle(parse_query_gpu(gpus_text), apps, deployment.gpus)
        _, started, invocation = head.partition("@@invocation@@\n")
        if started and not verdict.idle:  # the host's rule and gpus_idle disagree: never run on busy GPUs
            self.remote.run(f"systemctl stop {unit_q}")
            started, invocation = "", ""
        return Swapped(result, True, verdict, bool(started), invocation.strip() or None)

    def start_installed(self, deployment: Deployment) -> tuple[CommandResult, str | None]:
        """Start the unit `swap` installed and left stopped (its GPUs were freed later)."""
        self.report("step", step="start", unit=deployment.unit)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        result = self.remote.run(f"set -e; systemctl reset-failed {unit_q} 2>/dev/null || true; "
                                 f"systemctl start {unit_q}; echo @@invocation@@; "
                                 f"systemctl show -p InvocationID --value {unit_q}")
        return result, result.stdout.partition("@@invocation@@\n")[2].strip() or None

    def follow(
        self,
        deployment: Deployment,
        invocation: str,
        expected: list[str] | None,
        stop: threading.Event | None = None,
    ) -> StartupResult:
        """Read the unit's journal for this invocation until ready, a failure, or the deadline.

        With `expected=None` the unit is only watched for failures (a non-zero multi-node rank)
        until `stop` is set; `stop` also ends a normal follow early (another node failed).
        """
        self.report("step", step="wait_ready" if expected is not None else "watch", expected=expected)
        reader = LogReader(deployment.server, deployment.sglang_version)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        # journalctl --follow is woken by journald at most every 250 ms; reading by cursor every
        # 50 ms sees a line sooner. The cursor file makes every line come exactly once.
        read = (f'journalctl --no-pager -q -o json --output-fields=MESSAGE --cursor-file="$c" '
                f"_SYSTEMD_INVOCATION_ID={shlex.quote(invocation)}")
        # The loop ends by itself when the unit stops, when a `stop` file appears in its folder
        # (how sgdeploy ends it: the channel then closes from the host's side, never mid-stream),
        # or when a heartbeat finds the channel gone (sgdeploy died).
        command = (
            'd=$(mktemp -d) || exit 1; c="$d/cursor"; trap \'rm -rf "$d"\' EXIT; trap \'exit 0\' PIPE HUP TERM; '
            f'echo "{FOLLOWER_MARKER}$d"; '
            f'i=0; while :; do [ ! -e "$d/stop" ] || exit 0; {read} || :; i=$((i + 1)); '
            f'if [ $((i % 10)) -eq 0 ] && [ "$(systemctl show -p SubState --value {unit_q})" != running ]; then '
            f"sleep 0.5; {read}; echo {EXITED_MARKER}; "
            f"systemctl show -p ActiveState,SubState,ExecMainStatus,ExecMainCode,NRestarts --no-pager {unit_q} "
            "| tr '\\n' ' '; echo; exit 0; fi; "
            "[ $((i % 20)) -ne 0 ] || printf '\\n' || exit 0; sleep 0.05; done"
        )
        started = time.monotonic()
        deadline = started + deployment.ready_timeout_s
        exited: str | None = None
        failed_at: float | None = None
        folder: str | None = None
        lines = self.remote.stream_lines(command)
        try:
            for line in lines:
                if time.monotonic() > deadline:
                    break
                if failed_at is not None and time.monotonic() - failed_at > FAILURE_SETTLE_S:
                    return self._failed(reader, started, "the server logged a failure")
                if stop is not None and stop.is_set():
                    return StartupResult(expected is None, reader.report(), "stopped: another node failed",
                                         None if expected is None else "peer_failed",
                                         seconds=time.monotonic() - started)
                if not line:
                    continue
                if folder is None and line.startswith(FOLLOWER_MARKER):
                    folder = line[len(FOLLOWER_MARKER):]
                    continue
                if exited is not None:
                    exited += line
                    continue
                if line == EXITED_MARKER:
                    exited = ""
                    continue
                message = _journal_message(line)
                message = None if message is None else redact(message)  # SGLang logs its api_key
                if message is None:
                    continue
                for event in reader.feed(message):
                    self.report(event.kind, name=event.name, line=event.line, t=event.t,
                                elapsed=round(time.monotonic() - started, 2), data=dict(event.data))
                    if event.kind == "failure" and failed_at is None:
                        failed_at = time.monotonic()
                self.report("log", text=message)
                report = reader.report()
                if expected is not None and report.ready and not report.missing(expected):
                    # The health check goes first: the follower is ended beside it.
                    ending = threading.Thread(target=self._end_follower, args=(folder, lines), daemon=True,
                                              name="sgdeploy-end-follower")
                    ending.start()
                    folder, lines = None, iter(())
                    return StartupResult(True, report, seconds=time.monotonic() - started,
                                         ready_seen_at=time.monotonic())
        finally:
            self._end_follower(folder, lines)
        if exited is not None:
            return self._failed(reader, started, f"the unit stopped before ready ({exited.strip()})")
        missing = ", ".join(reader.report().missing(expected or []))
        result = self._failed(reader, started, f"not ready within {deployment.ready_timeout_s} s "
                              f"(still waiting for: {missing})")
        result.failure_kind = result.failure_kind if result.failure_kind != "incomplete" else "timeout"
        return result

    def _end_follower(self, folder: str | None, lines: Iterator[str | None]) -> None:
        """Ask the follower loop to exit and read its channel to the end before closing it."""
        try:
            if folder is not None:
                self.remote.run(f"touch {shlex.quote(folder + '/stop')} 2>/dev/null || true")
                drain_until = time.monotonic() + 3
                for _ in lines:
                    if time.monotonic() > drain_until:
                        break
        except RemoteError:
            pass  # the connection is gone: so is the loop (its heartbeat fails)
        finally:
            close = getattr(lines, "close", None)
            if close:
                close()

    def _failed(self, reader: LogReader, started: float, reason: str) -> StartupResult:
        reader.finish()
        report = reader.report()
        failure = report.failure
        explain = [text for _, text in failure.context] if failure else []
        if failure and failure.kind != "incomplete":
            reason = f"{failure.kind}: {failure.message}"
        return StartupResult(False, report, reason, failure.kind if failure else None, explain,
                             time.monotonic() - started)

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
            self.report("warning", text=f"GET /ready on port {deployment.port} answered 404: this SGLang build "
                        "has no /ready endpoint; checking /health instead")
            status = self.remote.http_get(deployment.port, "/health").status
        return status

    def check_health(self, deployment: Deployment, timeout_s: float) -> tuple[bool, str]:
        self.report("step", step="check_health", path=self.health_path(deployment))
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                status = self.get_health(deployment)
                if status == 200:
                    return True, "200"
                last = f"HTTP {status}"
            except ConnectionRefusedError as exc:
                last = str(exc)
            time.sleep(0.5)
        return False, f"{self.health_path(deployment)} did not return 200 within {timeout_s:.0f} s ({last})"

    def settle(self, deployment: Deployment, seconds: float) -> tuple[bool, str]:
        """Watch a ready server for `seconds`: same main process, no restart, still healthy."""
        if seconds <= 0:
            return True, "not watched"
        self.report("step", step="settle", seconds=seconds)
        unit_q = shlex.quote(f"{deployment.unit}.service")
        probe = f"systemctl show -p MainPID,NRestarts,ActiveState --no-pager {unit_q}"
        first = self.remote.run(probe).stdout
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
            now = self.remote.run(probe).stdout
            if now != first:
                return False, f"the server died after becoming ready ({' '.join(now.split())})"
        try:
            status = self.get_health(deployment)
        except ConnectionRefusedError:
            status = 0
        if status != 200:
            return False, f"{self.health_path(deployment)} answered {status or 'nothing'} {seconds:.0f} s after ready"
        return True, "stable"

    def journal_tail(self, unit: str, lines: int = 15) -> list[str]:
        out = self.remote.run(f"journalctl -u {shlex.quote(unit + '.service')} -o cat -n {lines} --no-pager").stdout
        return redact(out).splitlines()

    def server_info(self, deployment: Deployment) -> dict[str, Any] | None:
        """SGLang's resolved arguments, less the secret ones (SGLang returns its api_key here)."""
        headers = bearer_headers(self.remote, deployment.profile_text, deployment.unit, deployment.sglang_version)
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
        from sgdeploy.operate import prune_command

        files = {f"{deployment.record_dir}/meta.json": (json.dumps(meta, indent=2) + "\n").encode()}
        if last_good:
            files[f"{deployment.state_dir}/last_good"] = (deployment.id + "\n").encode()
        prune = prune_command(deployment.state_dir, keep, deployment.id if last_good else None)
        if unstage:
            prune += f"\nrm -f {shlex.quote(deployment.staged_unit_path)}"
        result = self.remote.write_files(files, then=prune)
        if not result.ok:
            self.report("warning", text=f"could not record {deployment.id}: {result.stderr.strip()}")

    def read_record(self, state_dir: str, deployment_id: str) -> dict[str, str] | None:
        """A finished deployment's files (None if missing or damaged), read once per session: an
        apply asks for the last good one up to three times (up-to-date check, rollback target,
        probe baseline), and sgdeploy never rewrites a record other than the one it is writing."""
        key = (state_dir, deployment_id)
        if key not in self._records:
            out = self.remote.run(_record_files_sh(shlex.quote(f"{state_dir}/{deployment_id}"))).stdout
            self._records[key] = _split_files(out)
        return self._records[key]


def _record_files_sh(folder: str) -> str:
    """Print a record's files in `folder` (a shell word) for `_split_files`."""
    return (f"for f in meta.json profile.toml unit.service; do printf '@@file %s@@\\n' $f; "
            f"base64 {folder}/$f 2>/dev/null || exit 1; done")


def _split_files(output: str) -> dict[str, str] | None:
    files: dict[str, str] = {}
    name: str | None = None
    chunks: list[str] = []
    for line in [*output.splitlines(), "@@file @@"]:
        if line.startswith("@@file ") and line.endswith("@@"):
            if name:
                try:
                    files[name] = base64.b64decode("".join(chunks)).decode("utf-8", "replace")
                except (binascii.Error, ValueError):
                    return None
            name, chunks = line[7:-2], []
        else:
            chunks.append(line.strip())
    return files if {"meta.json", "profile.toml", "unit.service"} <= files.keys() else None


def _journal_message(line: str) -> str | None:
    if not line.startswith("{"):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    message = entry.get("MESSAGE")
    if isinstance(message, list):  # journald stores non-UTF-8 messages as byte arrays
        return bytes(v for v in message if isinstance(v, int) and 0 <= v < 256).decode("utf-8", "replace")
    return message if isinstance(message, str) else None


# --------------------------------------------------------------------------- the transaction
class Transaction:
    """One apply or rollback on one host, holding the unit's lock throughout."""

    def __init__(self, session: HostSession, host: str, options: ApplyOptions, report: Reporter) -> None:
        self.session = session
        self.host = host
        self.options = options
        self.report = report

    def start(self, deployment: Deployment, stop_first: bool, best_effort_idle: bool = False,
              takeover: tuple[Takeover, ...] = (),
              gate: Callable[[], StartupResult | None] | None = None,
              staged: CommandResult | None = None) -> StartupResult:
        """Stop what runs, wait for the GPUs, install and start `deployment`, wait until healthy.

        `gate` runs after staging and before the stop; a result from it ends the start there,
        nothing stopped (SGLang refused the launch, strangers kept the GPUs). `best_effort_idle`
        is a restore (rollback): GPUs still busy at the deadline then leave the unit installed
        but stopped, never started into GPUs that are not free.
        """
        began = time.monotonic()
        staged = staged or self.session.stage(deployment)  # done already when taking the lock
        if not staged.ok:
            return StartupResult(False, reason=f"cannot write {deployment.unit_path} or the record (nothing was "
                                 f"stopped): {staged.stderr.strip() or 'exit ' + str(staged.exit_code)}",
                                 failure_kind="stage_failed", seconds=time.monotonic() - began)
        refused = gate() if gate is not None else None
        if refused is not None:
            refused.seconds = time.monotonic() - began
            return refused
        if takeover:
            result, invocation, busy = self._stop_and_start_adopting(deployment, stop_first, takeover,
                                                                     best_effort_idle)
        else:
            result, invocation, busy = self._swap(deployment, stop_first)
        if busy is not None:
            busy.seconds = time.monotonic() - began
            return busy
        if not result.ok or not invocation:
            return StartupResult(False, reason="installing or starting the unit failed: "
                                 + (result.stderr.strip() or f"exit {result.exit_code}"),
                                 failure_kind="start_failed", explain=result.stderr.strip().splitlines()[-10:],
                                 seconds=time.monotonic() - began)
        startup = self.session.follow(deployment, invocation, deployment.expected_phases)
        if startup.ready:
            info: list[dict[str, Any] | None] = []  # /server_info, asked beside the health check
            asking = threading.Thread(target=self._server_info, args=(deployment, info), daemon=True,
                                      name="sgdeploy-server-info")
            asking.start()
            healthy, why = self.session.check_health(deployment, self.options.health_timeout_s)
            if healthy:
                healthy, why = self.session.settle(deployment, self.options.settle_s)
            if not healthy:
                startup.ready, startup.reason, startup.failure_kind = False, why, "unhealthy"
                startup.explain = self.session.journal_tail(deployment.unit)
            else:
                asking.join()
                startup.auto_adjusted = _adjustments(startup.report, info[0] if info else None, deployment.server)
        startup.seconds = time.monotonic() - began
        return startup

    def _server_info(self, deployment: Deployment, into: list[dict[str, Any] | None]) -> None:
        with contextlib.suppress(RemoteError):  # none: the adjustments come from the log alone
            into.append(self.session.server_info(deployment))

    def _swap(self, deployment: Deployment, stop_first: bool) -> tuple[CommandResult, str | None, StartupResult | None]:
        """Install, stop, start in one round trip when the GPUs free at once; else wait for them."""
        swap = self.session.swap(deployment, stop_first, min(SWAP_WINDOW_S, self.options.gpu_idle_timeout_s))
        if not swap.installed:
            return swap.result, None, StartupResult(
                False, reason=f"cannot install {deployment.unit_path} (nothing was stopped): "
                f"{swap.result.stderr.strip() or 'exit ' + str(swap.result.exit_code)}", failure_kind="stage_failed")
        if swap.started:
            return swap.result, swap.invocation, None
        left = max(self.options.gpu_idle_timeout_s - SWAP_WINDOW_S, 0.0)
        verdict = self.session.wait_gpus_idle(deployment.gpus, left) if left else swap.verdict
        if verdict is None or not verdict.idle:
            # Started into held GPUs it would crash and restart in a loop: installed, left stopped.
            detail = (f"GPUs still busy after {self.options.gpu_idle_timeout_s:.0f} s: "
                      f"{verdict.describe() if verdict else 'unknown'}; {deployment.unit}.service is installed "
                      "but left stopped")
            return swap.result, None, StartupResult(False, reason=detail, failure_kind="gpus_busy")
        result, invocation = self.session.start_installed(deployment)
        return result, invocation, None

    def _stop_and_start_adopting(self, deployment: Deployment, stop_first: bool, takeover: tuple[Takeover, ...],
                                 best_effort_idle: bool) -> tuple[CommandResult, str | None, StartupResult | None]:
        """`--adopt`: stop the unit and the servers outside it, wait for the GPUs, install, start."""
        if stop_first:
            self.session.stop(deployment.unit)
        self.session.take_over(takeover)
        verdict = self.session.wait_gpus_idle(deployment.gpus, self.options.gpu_idle_timeout_s)
        if not verdict.idle:
            detail = f"GPUs still busy after {self.options.gpu_idle_timeout_s:.0f} s: {verdict.describe()}"
            if best_effort_idle:
                self.session.install_and_start(deployment, start=False)
                detail += f"; {deployment.unit}.service is installed but left stopped"
            return CommandResult("", 1, "", ""), None, StartupResult(False, reason=detail, failure_kind="gpus_busy")
        result, invocation = self.session.install_and_start(deployment)
        return result, invocation, None

    def measure(self, deployment: Deployment, startup: StartupResult, baseline: dict[str, Any] | None) -> None:
        """Run the throughput probe on a ready server; below --min-ratio the start counts as failed."""
        from sgdeploy.probe import compare, probe_remote

        settings = ProbeSettings.model_validate(deployment.probe_settings or {})
        self.report("step", step="probe", endpoint=settings.endpoint, concurrency=settings.concurrency)
        measured = probe_remote(self.session.remote, deployment.port, settings,
                                api_key_for(self.session.remote, deployment))
        verdict = compare(measured, baseline, self.options.min_ratio or 0.0)
        startup.probe = {**measured.as_dict(), "verdict": verdict.as_dict(),
                         "summary": measured.summary()}
        self.report("probe", summary=measured.summary(), verdict=verdict.message)
        if self.options.min_ratio is not None and not verdict.ok:
            startup.ready, startup.failure_kind, startup.reason = False, "throughput_regression", verdict.message

    def record(self, deployment: Deployment, startup: StartupResult, outcome: str,
               extra: dict[str, Any] | None = None, unstage: bool = False) -> None:
        report = startup.report
        meta = deployment_meta(
            deployment, outcome,
            host=self.host,
            startup_s=round(startup.seconds, 2),
            phases=[p.as_dict() for p in report.phases] if report else [],
            phase_times=report.phase_times() if report else {},
            kv_cache_tokens=report.kv_cache_tokens if report else None,
            auto_adjusted=startup.auto_adjusted,
            failure={"kind": startup.failure_kind, "reason": startup.reason} if not startup.ready else None,
            probe=startup.probe,
            **{k: v for k, v in (extra or {}).items() if v},
        )
        self.session.record(deployment, meta, last_good=outcome == "ready", keep=self.options.keep, unstage=unstage)


def _adjustments(report: LogReport | None, info: dict[str, Any] | None, server: dict[str, Any]) -> list[dict[str, Any]]:
    """What SGLang changed on its own: from the log, confirmed or completed by /server_info."""
    from sgdeploy.logs import settings_changed

    found = {a.field: a.as_dict() for a in report.auto_adjusted} if report else {}
    if info:
        for adjustment in settings_changed(server, info, "/server_info"):
            found.setdefault(adjustment.field, adjustment.as_dict())
    return list(found.values())


def _probe_baseline(session: HostSession, plan: Plan) -> dict[str, Any] | None:
    """The last good deployment's probe figures, if it served the same model."""
    if not plan.last_good:
        return None
    files = session.read_record(plan.deployment.state_dir, plan.last_good)
    if files is None:
        return None
    try:
        server = tomllib.loads(files["profile.toml"]).get("server", {}) if files["profile.toml"] else {}
    except ValueError:
        return None
    if server.get("model_path") != plan.deployment.server.get("model_path"):
        return None
    return _recorded_probe(files)


def _recorded_probe(files: dict[str, str]) -> dict[str, Any] | None:
    """The throughput figures a deployment record holds, if it has any."""
    try:
        meta = json.loads(files["meta.json"])
    except ValueError:
        return None
    probe = meta.get("probe") if isinstance(meta, dict) else None
    return probe if isinstance(probe, dict) else None


def _result_from(startup: StartupResult, **kwargs: Any) -> ApplyResult:
    report = startup.report
    failure: dict[str, Any] | None = None
    if not startup.ready:
        f = report.failure if report else None
        failure = {"kind": startup.failure_kind or (f.kind if f else "failed"), "reason": startup.reason,
                   "line": f.line if f else None}
        if f is not None:  # what the log reader weighed: how sure, and the later errors it set aside
            failure.update(confidence=f.confidence, consequences=[[n, text] for n, text in f.consequences])
    return ApplyResult(
        phase_times=report.phase_times() if report and startup.ready else {},
        kv_cache_tokens=report.kv_cache_tokens if report else None,
        auto_adjusted=startup.auto_adjusted,
        failure=failure,
        explain=startup.explain,
        probe=startup.probe,
        **kwargs,
    )


def previous_deployment(session: HostSession, plan: Plan, current_unit_text: str | None) -> Deployment | None:
    """What to restore if the new deployment fails: the last good record, else the unit as it was."""
    deployment = plan.deployment
    if plan.last_good:
        restored = deployment_from_record(session, deployment.unit, plan.last_good)
        if restored is not None:
            return restored
        session.report("warning", text=f"the last good record {plan.last_good} is missing or corrupt; "
                       "the rollback target is the unit found on the host" if current_unit_text else
                       f"the last good record {plan.last_good} is missing or corrupt; nothing to roll back to")
    if current_unit_text is not None and plan.previous_active:
        port = _exec_port(current_unit_text)
        return Deployment(
            id=new_deployment_id("0" * 8), unit=deployment.unit, unit_text=current_unit_text,
            profile_name="(unit found on the host)", profile_sha256="", profile_text="",
            sglang_version=deployment.sglang_version, server={"port": port} if port else {},
            gpus=deployment.gpus, ready_timeout_s=deployment.ready_timeout_s,
            rollback_of=plan.last_good or "unit-on-host", expect=("ready",))
    return None


def _exec_port(unit_text: str) -> int | None:
    """The --port of a unit's ExecStart= (quoted or not), for a unit sgdeploy did not render."""
    match = re.search(r'"?--port"?(?:\s+|=)"?(\d{1,5})"?', unit_text)
    return int(match.group(1)) if match else None


def deployment_from_record(session: HostSession, unit: str, deployment_id: str) -> Deployment | None:
    """Rebuild a recorded deployment (for rollback) from its folder on the host."""
    files = session.read_record(state_dir(unit), deployment_id)
    return None if files is None else _deployment_from_files(unit, deployment_id, files)


def _deployment_from_files(unit: str, deployment_id: str, files: dict[str, str]) -> Deployment | None:
    """A recorded deployment from its files (`HostSession.read_record`); None if they are corrupt."""
    try:
        meta = json.loads(files["meta.json"])
        profile = tomllib.loads(files["profile.toml"]) if files["profile.toml"] else {}
    except (ValueError, tomllib.TOMLDecodeError):
        return None
    if not isinstance(meta, dict):
        return None
    server = profile.get("server", {}) if isinstance(profile.get("server"), dict) else {}
    deploy = profile.get("deploy", {}) if isinstance(profile.get("deploy"), dict) else {}
    expect: tuple[str, ...] | None = None
    if not server:  # a restored hand-made unit has no profile: its unit says the port
        port = _exec_port(files["unit.service"])
        server, expect = ({"port": port} if port else {}), ("ready",)
    timeout = deploy.get("ready_timeout_s", 1200)
    gpus = deploy.get("gpus") if isinstance(deploy.get("gpus"), list) else None
    return Deployment(
        id=new_deployment_id(str(meta.get("profile_sha256") or "0" * 8)),
        unit=unit,
        unit_text=files["unit.service"],
        profile_name=str(meta.get("profile", "")),
        profile_sha256=str(meta.get("profile_sha256", "")),
        profile_text=files["profile.toml"],
        sglang_version=str(meta.get("sglang_version") or "0.5.23"),
        server=server,
        gpus=gpus_for(server, gpus),
        ready_timeout_s=timeout if isinstance(timeout, int) and timeout > 0 else 1200,
        rollback_of=deployment_id,
        probe_settings=profile.get("probe") if isinstance(profile.get("probe"), dict) else None,
        expect=expect,
    )


# --------------------------------------------------------------------------- entry points
def connect(name: str, entry: HostEntry) -> RemoteHost:
    return RemoteHost(name, entry).connect()


def facts_key(loaded: LoadedProfile) -> tuple[str, str, str, int, str | None]:
    """What `HostSession.facts` is asked for a profile: unit, python, model path, port, user."""
    profile = loaded.model
    assert profile is not None
    port = profile.server.get("port", 30000)
    return (profile.deploy.unit, profile.deploy.python, str(profile.server.get("model_path", "")),
            port if isinstance(port, int) else 30000, profile.deploy.user)


class EarlyConnection:
    """The connection to a host and its facts, begun before the profile is known to be valid
    (`sgdeploy apply` starts it while it still validates offline): nothing on the host changes
    until `apply_profile` takes it over. Built and run on a thread of the caller's."""

    def __init__(self, name: str, entry: HostEntry, loaded: LoadedProfile, check: EarlyCheck | None = None,
                 connected: RemoteHost | ConnectError | None = None) -> None:
        """`connected`: the connection (or why there is none) when the caller made it already."""
        self.name = name
        self.session: HostSession | None = None
        self.error: ConnectError | None = None
        try:
            if isinstance(connected, ConnectError):
                raise connected
            remote = connected or RemoteHost(name, entry).connect()
        except ConnectError as exc:
            self.error = exc
            return
        session = self.session = HostSession(remote)
        if remote.privileges.refusal:
            return
        facts = threading.Thread(target=self._read_ahead, args=(session, loaded), daemon=True,
                                 name="sgdeploy-facts")
        facts.start()
        if check is not None and check.validated.wait(60):
            check.begin(session, loaded, name)
        facts.join()

    @staticmethod
    def _read_ahead(session: HostSession, loaded: LoadedProfile) -> None:
        with contextlib.suppress(RemoteError, ValueError):  # apply reads them again and says what went wrong
            session.read_ahead(loaded)

    def close(self) -> None:
        if self.session is not None:
            self.session.remote.close()


@dataclass
class EarlyCheck:
    """SGLang's own check of the launch as rendered for the release the inventory declares,
    begun beside the facts once offline validation has passed (`validated` is set); apply
    keeps it when the release the host reports renders the same launch."""

    version: str
    timeout_s: float
    validated: threading.Event = field(default_factory=threading.Event)

    cancelled: bool = False

    def cancel(self) -> None:
        """Offline validation refused the profile: begin nothing."""
        self.cancelled = True
        self.validated.set()

    def begin(self, session: HostSession, loaded: LoadedProfile, name: str) -> None:
        if self.cancelled:
            return
        try:
            request = build_deployment(loaded, name, self.version).check
        except (KeyError, ValueError, LookupError):
            return  # apply renders it again, after the facts, and says what is wrong
        if request is not None:
            session.checks_ahead.append(
                _Background(lambda: session.sglang_check(request, self.timeout_s), request))


def apply_profile(
    loaded: LoadedProfile,
    name: str,
    entry: HostEntry,
    declared: HostTarget | None,
    options: ApplyOptions,
    report: Reporter = _quiet,
    early: EarlyConnection | None = None,
) -> ApplyResult:
    """`sgdeploy apply` (and `plan` with options.dry_run) on one host; `early`: the connection
    and facts already begun for it."""
    profile = loaded.model
    assert profile is not None
    began = time.monotonic()
    return _on_host(name, entry, profile.deploy.unit, report, "apply",
                    lambda session: _apply(session, loaded, name, declared, options, report, began), early,
                    options.after_host)


def _on_host(
    name: str, entry: HostEntry, unit: str, report: Reporter, what: str,
    work: Callable[[HostSession], ApplyResult], early: EarlyConnection | None = None,
    after: Callable[[HostSession, ApplyResult], None] | None = None,
) -> ApplyResult:
    """Connect (or take over `early`'s connection), run `work` over it, and turn connection
    problems into results."""
    try:
        if early is not None and early.error is not None:
            raise early.error
        remote = early.session.remote if early is not None and early.session else connect(name, entry)
    except ConnectError as exc:
        return ApplyResult(Exit.REFUSED, "refused", name, unit, str(exc))
    with remote:
        if remote.privileges.refusal:
            return ApplyResult(Exit.REFUSED, "refused", name, unit,
                               f"{remote.privileges.refusal}; nothing was changed", stats=remote.stats.as_dict())
        session = early.session if early is not None and early.session else HostSession(remote, report)
        session.report = report
        try:
            result = confirmed(session, work(session))
            if after is not None:
                after(session, result)
            return result
        except ConnectionLost as exc:
            return connection_lost(name, entry, unit, what, exc, remote.stats.as_dict())
        finally:
            report("ssh", **remote.stats.as_dict())


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
    port = _exec_port(unit_text) or 30000
    try:
        status = session.remote.http_get(port, "/health").status
    except (ConnectionRefusedError, RemoteError):
        return None
    return (f"{unit}.service is running (main pid {state.get('MainPID')}) and GET /health on port {port} "
            "answers 200") if status == 200 else None


def confirmed(session: HostSession, result: ApplyResult) -> ApplyResult:
    """`result`, checked against the host when it says that nothing healthy is running (exit 3):
    a healthy server found makes it exit 1, saying what runs."""
    if result.exit_code != Exit.NOTHING_HEALTHY:
        return result
    try:
        healthy = healthy_now(session, result.unit)
    except RemoteError as exc:
        result.message += f" (the host could not be checked again: {exc})"
        return result
    if healthy is not None:
        result.exit_code = Exit.ROLLED_BACK
        result.message += f"; checked again before reporting: {healthy}, so a healthy server does run"
    return result


def connection_lost(name: str, entry: HostEntry, unit: str, what: str, exc: ConnectionLost,
                    stats: dict[str, int]) -> ApplyResult:
    """The result of a connection lost mid-way, after connecting again to see what runs now:
    exit 3 only when nothing healthy does (or the host cannot be reached to tell)."""
    result = ApplyResult(Exit.NOTHING_HEALTHY, "connection_lost", name, unit,
                         f"{exc}; the host may be mid-deployment: re-run {what} (it converges) or "
                         "`sgdeploy status`", stats=stats)
    try:
        with RemoteHost(name, entry, connect_timeout=5.0).connect() as again:
            return confirmed(HostSession(again), result)
    except RemoteError as error:
        result.message += f" (the host could not be reached again to check what runs: {error})"
        return result


def _apply(
    session: HostSession,
    loaded: LoadedProfile,
    name: str,
    declared: HostTarget | None,
    options: ApplyOptions,
    report: Reporter,
    began: float,
) -> ApplyResult:
    profile = loaded.model
    assert profile is not None
    unit = profile.deploy.unit
    decided = _decide(session, loaded, name, declared, options, report)
    if isinstance(decided, ApplyResult):
        held = None if options.dry_run else session.lock_held(state_dir(unit))
        if held is not None:  # another apply is mid-way: the state it leaves half-done refused this one
            decided.message = f"another apply holds the lock on this unit: {held}; nothing was changed"
        return decided
    plan, current_unit = decided
    common: dict[str, Any] = {"host": name, "unit": unit, "plan": plan, "diagnostics": list(plan.diagnostics)}
    if options.dry_run:
        if (planned := _start_check(session, plan, options)) is not None:
            plan = _judged(plan, planned.result(), loaded)
            common.update(plan=plan, diagnostics=list(plan.diagnostics), sglang_check=_check_doc(plan))
        return ApplyResult(Exit.READY, "planned", message=f"{len(plan.steps)} steps would run", **common)
    # SGLang's own check takes seconds on a real host: it starts now, beside the lock and the staging.
    check = _start_check(session, plan, options)
    lock = session.lock(plan.deployment.state_dir, unit, None if plan.up_to_date else plan.deployment)
    if lock.holder is None:
        return ApplyResult(Exit.REFUSED, "refused", message=f"{lock.refusal}; nothing was changed", **common)
    for text in lock.warnings:
        report("warning", text=text)
    try:
        if lock.state is not None and lock.state != host_state(plan.facts, current_unit):
            # Another apply changed the unit since the facts were read: decide again, under the lock.
            report("warning", text=f"{unit}.service changed on {name} since its facts were read (another apply?); "
                   "deciding again under the lock")
            if lock.staged is not None:
                session.unstage(plan.deployment)
                lock.staged = None
            decided = _decide(session, loaded, name, declared, options, report)
            if isinstance(decided, ApplyResult):
                return decided
            plan, current_unit = decided
            common.update(plan=plan, diagnostics=list(plan.diagnostics))
        if plan.up_to_date:
            return ApplyResult(Exit.READY, "up_to_date", deployment_id=plan.last_good,
                               message=f"{unit}.service already runs this unit (deployment {plan.last_good}, "
                               "checked under the lock); nothing to do (--force redeploys)", **common)
        if check is not None and check.request != plan.deployment.check:
            check = None  # decided again under the lock: another launch, its own check
        return _transact(session, plan, current_unit, options, report, began, common, loaded,
                         check or _start_check(session, plan, options), lock.staged)
    finally:
        lock.release()


def _start_check(session: HostSession, plan: Plan, options: ApplyOptions) -> _Background | None:
    """SGLang's own check of the plan's launch, running on its own channel; None when skipped."""
    request = plan.deployment.check
    if plan.up_to_date or not options.sglang_check or request is None:
        return None
    begun = next((c for c in session.checks_ahead if c.request == request), None)
    return begun or _Background(lambda: session.sglang_check(request, options.sglang_check_timeout_s), request)


def host_state(facts: HostFacts | None, unit_text: str | None) -> str:
    """What `UnitLock.state` reads under the lock, from facts read before it: last good, the
    installed unit's sha256, the unit's ActiveState."""
    sha = hashlib.sha256(unit_text.encode()).hexdigest() if unit_text is not None else ""
    active = facts.unit.active_state if facts and facts.unit else ""
    return f"{facts.last_good or '' if facts else ''} {sha} {active or ''}"


def _decide(
    session: HostSession, loaded: LoadedProfile, name: str, declared: HostTarget | None, options: ApplyOptions,
    report: Reporter,
) -> tuple[Plan, str | None] | ApplyResult:
    """Facts, preflight (GPU holders included) and the plan: what apply will do, or its refusal."""
    profile = loaded.model
    assert profile is not None
    unit = profile.deploy.unit
    port = profile.server.get("port", 30000)
    report("step", step="facts", host=name)
    facts, current_unit = session.facts(*facts_key(loaded))
    diagnostics, _, version = preflight(loaded, name, facts, declared, host_check=options.sglang_check)
    version = options.sglang or version
    diagnostics += host_secret_diagnostics(session.remote, loaded, name, version)
    takeover: tuple[Takeover, ...] = ()
    if options.adopt and version is not None:
        from sgdeploy.adopt import takeovers

        takeover, found = takeovers(session.running_servers(), unit, port if isinstance(port, int) else 30000,
                                    version)
        diagnostics = [d for d in diagnostics if not (takeover and d.rule == "SGD705")] + found
    own = tuple(pid for t in takeover for pid in (t.pid, *t.family))
    held, strangers = gpu_holders(loaded, name, facts, gpus_for(dict(profile.server), profile.deploy.gpus), own,
                                  options.wait_for_gpus_s)
    diagnostics += held
    if version is None or any(d.is_error for d in diagnostics):
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"preflight refused the profile on {name}; nothing was changed",
                           diagnostics=diagnostics, stats=session.remote.stats.as_dict())
    try:
        deployment = build_deployment(loaded, name, version)
    except KeyError as exc:  # a release without a catalog: a flag the closest older one lacks
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"cannot render the unit for SGLang {version} on "
                           f"{name}: {exc.args[0] if exc.args else exc}, and no catalog of {version} is bundled; "
                           "nothing was changed", diagnostics=diagnostics, stats=session.remote.stats.as_dict())
    recorded = (session.read_record(deployment.state_dir, facts.last_good)
                if facts.last_good and current_unit == deployment.unit_text else None)
    # Up to date only if the installed unit is the one the last good deployment recorded: an
    # apply cut off after installing leaves the same unit text without having proved it ready.
    installed_is_last_good = recorded is not None and recorded.get("unit.service") == current_unit
    plan = make_plan(name, deployment, facts, current_unit, diagnostics,
                     force=options.force or not installed_is_last_good or bool(takeover), takeover=takeover,
                     sglang_check=options.sglang_check, strangers=strangers, wait_for_gpus_s=options.wait_for_gpus_s)
    return plan, current_unit


def _judged(plan: Plan, verdict: HostVerdict, loaded: LoadedProfile) -> Plan:
    """The plan with SGLang's own verdict: a refusal (SGD711) or a note that it could not run
    (SGD712; an error when no catalog judged the launch either)."""
    from sgdeploy.diagnostics import Severity
    from sgdeploy.sglangcheck.verdict import covering_text, site_for

    deployment = plan.deployment
    found: list[Diagnostic] = []
    where = f"SGLang {verdict.sglang_version or deployment.sglang_version} on {plan.host}"
    if verdict.refused:
        covering = site_for(deployment.sglang_version, verdict.error or "")
        found.append(loaded.diagnostic("SGD711", f"{where} refuses the launch at {verdict.stage}: "
                                       f"{verdict.message}; {covering_text(covering)}", dotted="server",
                                       hint="change the profile as SGLang's message says"))
    elif verdict.status == "unavailable":
        uncatalogued = any(d.rule == "SGD703" for d in plan.notes)
        if verdict.timed_out:  # SGLang hangs resolving this launch: so would the server, after the stop
            then = "refusing: a launch whose arguments SGLang cannot resolve in time is not started"
        elif uncatalogued:
            then = "no catalog checked this version either, so nothing has judged the launch"
        else:
            then = "the offline (catalog) verdict stands"
        found.append(loaded.diagnostic(
            "SGD712", f"SGLang's own check could not run on {plan.host}: {verdict.reason}; {then}",
            dotted="deploy.python", hint="check deploy.python and the SGLang install on the host, raise "
            "--sglang-check-timeout, or skip the check with --no-sglang-check",
            severity=Severity.ERROR if uncatalogued or verdict.timed_out else Severity.WARNING))
    refusals = plan.refusals + tuple(d for d in found if d.is_error)
    notes = plan.notes + tuple(d for d in found if not d.is_error)
    return dataclasses.replace(plan, sglang_check=verdict, refusals=refusals, notes=notes)


def _check_doc(plan: Plan, seen: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """`sglang_check` of a result or record: the verdict, its prediction, what the start showed."""
    from sgdeploy.sglangcheck.verdict import differences, predicted, summary

    verdict = plan.sglang_check
    if verdict is None:
        return None
    server = plan.deployment.server
    doc = {**verdict.as_dict(), "summary": summary(verdict, plan.host, server),
           "predicted": predicted(verdict, server) if verdict.status == "accepted" else []}
    if seen is not None and verdict.status == "accepted":
        doc["differences"] = differences(doc["predicted"], seen)
    return doc


def _transact(
    session: HostSession,
    plan: Plan,
    current_unit: str | None,
    options: ApplyOptions,
    report: Reporter,
    began: float,
    common: dict[str, Any],
    loaded: LoadedProfile,
    check: _Background | None,
    staged: CommandResult | None = None,
) -> ApplyResult:
    deployment = plan.deployment
    transaction = Transaction(session, plan.host, options, report)
    previous = previous_deployment(session, plan, current_unit)  # while SGLang's check runs
    judged = [plan]

    def gate() -> StartupResult | None:
        judged[0], refused = pre_stop(session, plan, check, options, loaded)
        if refused is None and options.before_stop is not None:
            running = (_exec_port(current_unit) or 30000) if plan.previous_active and current_unit else None
            refusal = options.before_stop(session, Handover(deployment, previous, running))
            if refusal:
                return StartupResult(False, reason=refusal, failure_kind="drain_refused")
        return refused

    startup = transaction.start(deployment, stop_first=plan.previous_active, takeover=plan.takeover, gate=gate,
                                staged=staged)
    plan = judged[0]
    common.update(plan=plan, diagnostics=plan.diagnostics)
    checked = _check_doc(plan, startup.auto_adjusted if startup.ready else None)
    disagreeing = _disagreements(plan)
    common.update(sglang_check=checked, disagreements=disagreeing)
    if startup.ready and (options.probe or options.min_ratio is not None):
        transaction.measure(deployment, startup, _probe_baseline(session, plan))
    if startup.failure_kind == "stage_failed":
        return ApplyResult(Exit.REFUSED, "refused", message=f"{startup.reason}; the running server was not touched",
                           stats=session.remote.stats.as_dict(), **common)
    extra = {"sglang_check": checked, "disagreements": disagreeing}
    if startup.failure_kind in ("sglang_refused", "gpus_held", "drain_refused"):
        transaction.record(deployment, startup, "refused", extra=extra, unstage=True)
        return ApplyResult(Exit.REFUSED, "refused", deployment_id=deployment.id,
                           message=f"{startup.reason}; nothing was stopped", failure={
                               "kind": startup.failure_kind, "reason": startup.reason, "line": None},
                           stats=session.remote.stats.as_dict(), **common)
    installed = startup.failure_kind != "gpus_busy"
    transaction.record(deployment, startup, "ready" if startup.ready else "failed", extra=extra)
    for text in (checked or {}).get("differences", []):
        report("warning", text=f"SGLang's check on the host did not foresee this: {text}")
    if startup.ready:
        return _result_from(startup, exit_code=Exit.READY, status="ready", deployment_id=deployment.id,
                            message=f"{deployment.id} is ready on {plan.host} after {startup.seconds:.1f} s",
                            timings=_timings(startup, began), stats=session.remote.stats.as_dict(), **common)
    report("failed", reason=startup.reason, explain=startup.explain)
    failed = _result_from(startup, exit_code=Exit.NOTHING_HEALTHY, status="failed",
                          deployment_id=deployment.id if installed else None,
                          message=f"{deployment.id} failed on {plan.host}: {startup.reason}", **common)
    if not options.rollback or previous is None:
        if installed:
            session.stop(deployment.unit)
        why = "--no-rollback was given" if not options.rollback else "there is no previous deployment to restore"
        failed.message += f"; {why}, so nothing healthy is running"
        failed.stats = session.remote.stats.as_dict()
        return failed
    report("step", step="rollback", to=previous.rollback_of)
    unusable = unrestorable(session, previous, plan.host)
    if unusable is not None:
        session.stop(deployment.unit)  # stopped, not left restarting into the same failure
        failed.rollback = {"deployment_id": None, "restored": previous.rollback_of, "ready": False,
                           "reason": unusable, "startup_s": 0.0}
        failed.message += f"; the rollback to {previous.rollback_of} was not started: {unusable}; the unit is stopped"
        failed.stats = session.remote.stats.as_dict()
        return failed
    restored = transaction.start(previous, stop_first=True, best_effort_idle=True)
    transaction.record(previous, restored, "ready" if restored.ready else "failed")
    failed.rollback = {"deployment_id": previous.id, "restored": previous.rollback_of, "ready": restored.ready,
                       "reason": restored.reason, "startup_s": round(restored.seconds, 2)}
    failed.stats = session.remote.stats.as_dict()
    if restored.ready:
        failed.exit_code, failed.status = Exit.ROLLED_BACK, "rolled_back"
        failed.message += f"; rolled back to {previous.rollback_of} (now {previous.id}), which is ready"
    elif restored.failure_kind == "gpus_busy":
        failed.message += (f"; the rollback to {previous.rollback_of} was not started: {restored.reason}; "
                           "run `sgdeploy rollback` once they are free")
    else:
        session.stop(previous.unit)  # stopped, not left restarting into the same failure
        failed.message += f"; the rollback to {previous.rollback_of} failed too: {restored.reason}; the unit is stopped"
    return failed


def unrestorable(session: HostSession, previous: Deployment, host: str) -> str | None:
    """Why a recorded deployment cannot be started again (its [secrets] file is not usable on
    the host), asked before it is; None when it can."""
    problems = [d.message for d in recorded_secret_diagnostics(session.remote, previous, host) if d.is_error]
    return f"its secrets file is not usable: {'; '.join(problems)}" if problems else None


def pre_stop(session: HostSession, plan: Plan, check: _Background | None, options: ApplyOptions,
             loaded: LoadedProfile) -> tuple[Plan, StartupResult | None]:
    """What must hold before the stop: strangers gone from the GPUs (--wait-for-gpus) and
    SGLang's own verdict. The plan with that verdict, and the refusal (None: go on)."""
    deployment = plan.deployment
    held = None
    if plan.strangers:
        own = tuple(pid for t in plan.takeover for pid in (t.pid, *t.family))
        unit_state = plan.facts.unit if plan.facts else None
        own += (unit_state.main_pid,) if unit_state and unit_state.main_pid else ()
        held = _strangers_left(session, deployment, own, options)
    judged = _judged(plan, check.result(), loaded) if check is not None else plan
    verdict = judged.sglang_check
    if judged.refused and verdict is not None:
        why = (f"SGLang {verdict.sglang_version or deployment.sglang_version} on {plan.host} refuses the "
               f"launch ({verdict.stage})" if verdict.refused else "SGLang's own check did not answer in time")
        return judged, StartupResult(False, reason=why, failure_kind="sglang_refused")
    return judged, held


class _Background:
    """A call run on a thread while the caller goes on (SGLang's check beside the other pre-stop work)."""

    def __init__(self, call: Callable[[], HostVerdict], request: CheckRequest | None = None) -> None:
        self._call = call
        self.request = request  # what is being checked
        self._value: HostVerdict | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="sgdeploy-sglang-check")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc

    def result(self) -> HostVerdict:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


def _strangers_left(session: HostSession, deployment: Deployment, own: tuple[int, ...],
                    options: ApplyOptions) -> StartupResult | None:
    """--wait-for-gpus, before the stop: None once no process outside the unit holds its GPUs."""
    held = session.wait_gpus_free(deployment.gpus, deployment.unit, own, options.wait_for_gpus_s or 0.0)
    if not held:
        return None
    return StartupResult(False, failure_kind="gpus_held", reason=f"processes outside {deployment.unit}.service "
                         f"still hold its GPUs after {options.wait_for_gpus_s or 0:.0f} s: "
                         + "; ".join(h.describe() for h in held))


def _disagreements(plan: Plan) -> list[dict[str, Any]]:
    """Where SGLang's own verdict and the offline rules disagree (recorded, shown by history)."""
    from sgdeploy.sglangcheck.verdict import disagreements, site_for

    verdict = plan.sglang_check
    if verdict is None:
        return []
    checked = not any(d.rule == "SGD703" for d in plan.notes)
    offline = [d.rule for d in plan.refusals if d.rule not in ("SGD711", "SGD712")]
    return disagreements(verdict, offline, checked, site_for(plan.deployment.sglang_version, verdict.error or ""))


def _timings(startup: StartupResult, began: float) -> dict[str, float]:
    total = time.monotonic() - began
    return {"total_s": round(total, 3), "startup_s": round(startup.seconds, 3)}


def rollback_unit(
    name: str,
    entry: HostEntry,
    unit: str,
    to: str | None,
    options: ApplyOptions,
    report: Reporter = _quiet,
) -> ApplyResult:
    """`sgdeploy rollback`: redeploy the last good (or the given) recorded deployment."""
    began = time.monotonic()
    return _on_host(name, entry, unit, report, "the rollback",
                    lambda session: _rollback(session, name, unit, to, options, report, began),
                    after=options.after_host)


def _rollback(
    session: HostSession, name: str, unit: str, to: str | None, options: ApplyOptions, report: Reporter,
    began: float,
) -> ApplyResult:
    report("step", step="facts", host=name)
    facts, current_unit = session.facts(unit, "/bin/true", "/nonexistent", 1)
    target = to or facts.last_good
    if target is None:
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"no last good deployment of {unit} is recorded on {name}; give --to ID")
    if target not in facts.deployments:
        known = ", ".join(facts.deployments[-5:]) or "none"
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"no deployment {target} of {unit} on {name} (recent: {known})")
    deployment = deployment_from_record(session, unit, target)
    if deployment is None:
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"the record of {target} on {name} is incomplete or corrupt; choose another with --to")
    secrets = recorded_secret_diagnostics(session.remote, deployment, name)  # its [secrets] file, before the stop
    if any(d.is_error for d in secrets):
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"the secrets file of {target} is not usable on "
                           f"{name}; nothing was stopped", diagnostics=secrets, stats=session.remote.stats.as_dict())
    # Never start the previous deployment into GPUs others hold: decided before the stop.
    own = (facts.unit.main_pid,) if facts.unit and facts.unit.main_pid else ()
    strangers, _ = gpu_strangers(facts.gpus, facts.gpu_processes, deployment.gpus, unit, own,
                                 bool(facts.unit and facts.unit.active))
    if strangers and options.wait_for_gpus_s is None:
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"processes outside {unit}.service hold the GPUs {target} needs: "
                           + "; ".join(h.describe() for h in strangers)
                           + "; nothing was stopped (--wait-for-gpus SECONDS waits for them to leave)")
    lock = session.lock(deployment.state_dir)
    if lock.holder is None:
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{lock.refusal}; nothing was changed")
    for text in lock.warnings:
        report("warning", text=text)
    try:
        transaction = Transaction(session, name, options, report)
        active = bool(facts.unit and facts.unit.exists)
        running = (_exec_port(current_unit) or 30000) if facts.unit and facts.unit.active and current_unit else None

        def gate() -> StartupResult | None:
            refused = _strangers_left(session, deployment, own, options) if strangers else None
            if refused is None and options.before_stop is not None:
                refusal = options.before_stop(session, Handover(deployment, None, running))
                if refusal:
                    return StartupResult(False, reason=refusal, failure_kind="drain_refused")
            return refused

        startup = transaction.start(deployment, stop_first=active, best_effort_idle=True, gate=gate)
        held = startup.failure_kind in ("gpus_held", "drain_refused")
        transaction.record(deployment, startup, "refused" if held else "ready" if startup.ready else "failed",
                           unstage=held)
    finally:
        lock.release()
    if startup.failure_kind in ("gpus_held", "drain_refused"):
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{startup.reason}; nothing was stopped",
                           stats=session.remote.stats.as_dict())
    if startup.failure_kind == "stage_failed":  # nothing was stopped: the running server is as it was
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{startup.reason}; the running server was not "
                           "touched", stats=session.remote.stats.as_dict())
    if startup.ready:
        return _result_from(startup, exit_code=Exit.READY, status="ready", host=name, unit=unit,
                            deployment_id=deployment.id,
                            message=f"rolled back to {target} (recorded as {deployment.id}); ready after "
                            f"{startup.seconds:.1f} s", timings=_timings(startup, began),
                            stats=session.remote.stats.as_dict())
    session.stop(unit)
    again = "; run it again once they are free" if startup.failure_kind == "gpus_busy" else ""
    return _result_from(startup, exit_code=Exit.NOTHING_HEALTHY, status="failed", host=name, unit=unit,
                        deployment_id=deployment.id,
                        message=f"the rollback to {target} failed: {startup.reason}; nothing healthy is running{again}",
                        stats=session.remote.stats.as_dict())


def probe_unit(name: str, entry: HostEntry, unit: str, min_ratio: float | None) -> tuple[int, dict[str, Any]]:
    """`sgdeploy probe`: measure the running deployment and compare with its recorded figure."""
    try:
        remote = connect(name, entry)
    except ConnectError as exc:
        return int(Exit.REFUSED), {"host": name, "unit": unit, "message": str(exc)}
    with remote:
        try:
            return _probe(HostSession(remote), name, unit, min_ratio)
        except ConnectionLost as exc:
            return int(Exit.REFUSED), {"host": name, "unit": unit, "message": f"{exc}; nothing was measured"}


def _probe(session: HostSession, name: str, unit: str, min_ratio: float | None) -> tuple[int, dict[str, Any]]:
    from sgdeploy.probe import compare, probe_remote

    facts, _ = session.facts(unit, "/bin/true", "/nonexistent", 1)
    if facts.last_good is None:
        return int(Exit.REFUSED), {"host": name, "unit": unit,
                                   "message": f"no deployment of {unit} is recorded on {name}"}
    files = session.read_record(state_dir(unit), facts.last_good)
    deployment = None if files is None else _deployment_from_files(unit, facts.last_good, files)
    if deployment is None or files is None:
        return int(Exit.REFUSED), {"host": name, "unit": unit,
                                   "message": f"the record of {facts.last_good} is incomplete"}
    settings = ProbeSettings.model_validate(deployment.probe_settings or {})
    measured = probe_remote(session.remote, deployment.port, settings, api_key_for(session.remote, deployment))
    verdict = compare(measured, _recorded_probe(files), min_ratio or 0.0)
    failed = not measured.ok or (min_ratio is not None and not verdict.ok)
    return int(Exit.ROLLED_BACK if failed else Exit.READY), {
        "host": name, "unit": unit, "deployment_id": facts.last_good,
        "probe": measured.as_dict(), "verdict": verdict.as_dict(),
        "message": f"{measured.summary()}; {verdict.message}",
    }
