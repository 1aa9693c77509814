"""`sgdeploy apply` (and `plan`) on one host: decide, then run the transaction.

The order is SPEC §6: facts and preflight (nothing changed yet: `decide`), lock, the pre-stop
gate (`sgdeploy.deploy.prestop`), stop, wait for idle GPUs, install, start, follow the journal until
the launch's readiness lines, check health, record (`sgdeploy.deploy.transaction`). A failure rolls
back to the last good deployment with the same steps (`sgdeploy.deploy.rollback`).
`sgdeploy.deploy.early` lets the CLI connect and read the facts while it still validates offline.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.deploy.adopt import takeovers
from sgdeploy.deploy.hardening import unit_sandbox
from sgdeploy.deploy.journal import Reporter, StartupResult
from sgdeploy.deploy.plan import (
    BeforeStop,
    Deployment,
    Plan,
    Takeover,
    gpus_for,
    make_plan,
    new_deployment_id,
    server_port,
)
from sgdeploy.deploy.preflight import gpu_holders, preflight
from sgdeploy.deploy.prestop import (
    REFUSED_BEFORE_STOP,
    Handover,
    before_stop_gate,
    check_report,
    disagreements_of,
    judged_plan,
    pre_stop,
    start_check,
    takeover_pids,
)
from sgdeploy.deploy.probe import ProbeOutcome, compare, probe_remote
from sgdeploy.deploy.records import (
    deployment_from_files,
    recorded_probe,
    recorded_server,
    recorded_startup_s,
    running_port,
)
from sgdeploy.deploy.render import SecretInUnit, render_unit
from sgdeploy.deploy.rollback import previous_deployment, restore
from sgdeploy.deploy.secret_args import api_key_for, check_argv, host_secret_diagnostics
from sgdeploy.deploy.session import BackgroundCheck, HostSession, facts_key, quiet
from sgdeploy.deploy.transaction import (
    ApplyOptions,
    ApplyResult,
    Exit,
    StartFailure,
    Transaction,
    connect,
    on_host,
    result_from,
    timings,
)
from sgdeploy.host.facts import HostFacts, state_dir
from sgdeploy.host.pagecache import PageCacheWarmth
from sgdeploy.host.remote import CommandResult, ConnectError, ConnectionLost
from sgdeploy.logs.report import LogReport
from sgdeploy.profile.inventory import HostEntry
from sgdeploy.profile.model import LoadedProfile, ProbeSettings
from sgdeploy.sglang.catalog import load_catalog, nearest_version
from sgdeploy.sglang.check.verdict import CheckRequest
from sgdeploy.sglang.target import HostTarget


# --------------------------------------------------------------------------- building a deployment
def build_deployment(
    loaded: LoadedProfile, host: str, sglang_version: str, rollback_of: str | None = None
) -> Deployment:
    profile = loaded.model
    assert profile is not None
    # A release without a bundled catalog (newer, a dev build) renders with the closest older one.
    unit = render_unit(loaded, load_catalog(nearest_version(sglang_version)), host)
    sandbox = unit_sandbox(profile)  # a strict unit: the check runs in the same sandbox
    check = CheckRequest(
        python=unit.argv[0],
        argv=tuple(check_argv(profile, list(unit.argv[3:]))),
        environment=(*(sandbox.environment if sandbox else ()), *unit.environment),
        user=profile.deploy.run_as,
        working_directory=profile.deploy.working_directory,
        env_file=profile.deploy.env_file,
        properties=tuple(f"{k}={v}" for k, v in sandbox.properties()) if sandbox else (),
    )
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
        sandbox=sandbox.describe() if sandbox else None,
        daemon_text=unit.daemon.text if unit.daemon else None,
    )


def apply_profile(
    loaded: LoadedProfile,
    name: str,
    entry: HostEntry,
    declared: HostTarget | None,
    options: ApplyOptions,
    report: Reporter = quiet,
    begun: HostSession | ConnectError | None = None,
) -> ApplyResult:
    """`sgdeploy apply` (and `plan` with options.dry_run) on one host; `begun`: the session with
    its facts already read ahead (`sgdeploy.deploy.early`), or why it could not connect."""
    profile = loaded.model
    assert profile is not None
    began = time.monotonic()
    return on_host(
        name,
        entry,
        profile.deploy.unit,
        report,
        "apply",
        lambda session: _apply(session, loaded, name, declared, options, began),
        options.after_host,
        begun,
    )


def _apply(session: HostSession, loaded: LoadedProfile, name: str, declared: HostTarget | None,
           options: ApplyOptions, began: float) -> ApplyResult:
    decided = decide(session, loaded, name, declared, options)
    if isinstance(decided, ApplyResult):
        held = None if options.dry_run else session.lock_held(state_dir(decided.unit))
        # another apply is mid-way: the state it leaves half-done refused this one
        if held is not None:
            return replace(
                decided, message=f"another apply holds the lock on this unit: {held}; nothing was "
                         "changed")
        return decided
    plan, current_unit = decided
    if options.dry_run:
        return _planned(session, plan, loaded, options)
    # SGLang's own check takes seconds on a real host: it starts now, beside the lock and the
    # staging.
    check = start_check(session, plan, options.sglang_check_timeout_s, options.sglang_check)
    lock = session.lock(
        plan.deployment.state_dir,
        plan.deployment.unit,
        None if plan.up_to_date else plan.deployment,
    )
    if lock.holder is None:
        return ApplyResult(Exit.REFUSED, "refused", message=f"{lock.refusal}; nothing was "
                                                    "changed", **_common(plan))
    for text in lock.warnings:
        session.report("warning", text=text)
    try:
        staged = lock.staged
        if lock.state is not None and lock.state != host_state(plan.facts, current_unit):
            # Another apply changed the unit since the facts were read: decide again, under the
            # lock.
            session.report("warning", text=f"{plan.deployment.unit}.service changed on {name} "
                           "since its facts were read (another apply?); deciding again under the "
                           "lock")
            if staged is not None:
                session.unstage(plan.deployment)
                staged = None
            decided = decide(session, loaded, name, declared, options)
            if isinstance(decided, ApplyResult):
                return decided
            plan, current_unit = decided
        if plan.up_to_date:
            return ApplyResult(Exit.READY, "up_to_date", deployment_id=plan.last_good,
                               message=f"{plan.deployment.unit}.service already runs this unit "
                               f"(deployment {plan.last_good}, checked under the lock); nothing to "
                               "do (--force redeploys)",
                               **_common(plan))
        if check is not None and check.request != plan.deployment.check:
            check = None  # decided again under the lock: another launch, its own check
        check = check or start_check(
            session, plan, options.sglang_check_timeout_s, options.sglang_check
        )
        return _run_transaction(session, plan, current_unit, options, began, loaded, check, staged)
    finally:
        lock.release()


def _common(plan: Plan) -> dict[str, Any]:
    """What every result of an apply that got as far as a plan carries."""
    return {
        "host": plan.host,
        "unit": plan.deployment.unit,
        "plan": plan,
        "diagnostics": list(plan.diagnostics),
    }


def _planned(
    session: HostSession, plan: Plan, loaded: LoadedProfile, options: ApplyOptions
) -> ApplyResult:
    """`sgdeploy plan`: the plan, judged by SGLang's own check on the host too."""
    common = _common(plan)
    if (
        planned := start_check(session, plan, options.sglang_check_timeout_s, options.sglang_check)
    ) is not None:
        plan = judged_plan(plan, planned.result(), loaded)
        common = {**_common(plan), "sglang_check": check_report(plan)}
    return ApplyResult(
        Exit.READY, "planned", message=f"{len(plan.steps)} steps would run", **common
    )


def host_state(facts: HostFacts | None, unit_text: str | None) -> str:
    """What `UnitLock.state` reads under the lock, from facts read before it: last good, the
    installed unit's sha256, the unit's ActiveState."""
    sha = hashlib.sha256(unit_text.encode()).hexdigest() if unit_text is not None else ""
    active = facts.unit.active_state if facts and facts.unit else ""
    return f"{facts.last_good or '' if facts else ''} {sha} {active or ''}"


class Decided(NamedTuple):
    """What apply will do on a host, and the text of the unit file installed there now (None:
    none)."""

    plan: Plan
    current_unit: str | None


def decide(session: HostSession, loaded: LoadedProfile, name: str, declared: HostTarget | None,
           options: ApplyOptions) -> Decided | ApplyResult:
    """Facts, preflight (GPU holders included) and the plan: what apply will do, or its refusal."""
    profile = loaded.model
    assert profile is not None
    unit = profile.deploy.unit
    session.report("step", step="facts", host=name)
    installed = session.facts(*facts_key(loaded))
    facts, current_unit = installed.facts, installed.unit_text
    checked = preflight(loaded, name, facts, declared, host_check=options.sglang_check)
    diagnostics, version = checked.diagnostics, options.sglang or checked.sglang_version
    diagnostics += host_secret_diagnostics(session.remote, loaded, name, version)
    takeover: tuple[Takeover, ...] = ()
    if options.adopt and version is not None:
        takeover, found = takeovers(
            session.running_servers(), unit, server_port(profile.server), version
        )
        diagnostics = [d for d in diagnostics if not (takeover and d.rule == "SGD705")] + found
    held, strangers = gpu_holders(
        loaded,
        name,
        facts,
        gpus_for(dict(profile.server), profile.deploy.gpus),
        takeover_pids(takeover),
        options.wait_for_gpus_s,
    )
    diagnostics += held
    if version is None or any(d.is_error for d in diagnostics):
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"preflight refused the profile on {name}; nothing was changed",
                           diagnostics=diagnostics, stats=session.remote.stats.as_dict())
    try:
        deployment = build_deployment(loaded, name, version)
    except KeyError as exc:  # a release without a catalog: a flag the closest older one lacks
        return ApplyResult(Exit.REFUSED, "refused", name, unit, "cannot render the unit for SGLang "
                           f"{version} on {name}: {exc.args[0] if exc.args else exc}, and no "
                           f"catalog of {version} is bundled; nothing was "
                           "changed", diagnostics=diagnostics, stats=session.remote.stats.as_dict())
    except SecretInUnit as exc:
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{exc}; nothing was changed",
                           diagnostics=diagnostics, stats=session.remote.stats.as_dict())
    recorded = (session.read_record(deployment.state_dir, facts.last_good)
                if facts.last_good and current_unit == deployment.unit_text else None)
    # Up to date only if the installed unit is the one the last good deployment recorded: an
    # apply cut off after installing leaves the same unit text without having proved it ready.
    installed_is_last_good = recorded is not None and recorded.get("unit.service") == current_unit
    before = BeforeStop(
        force=options.force or not installed_is_last_good or bool(takeover),
        takeover=takeover,
        sglang_check=options.sglang_check,
        strangers=strangers,
        wait_for_gpus_s=options.wait_for_gpus_s,
        daemon_text=installed.daemon_text,
    )
    plan = make_plan(name, deployment, facts, current_unit, diagnostics, before)
    return Decided(plan, current_unit)


def read_ahead(
    session: HostSession, deployment: Deployment
) -> Callable[[], PageCacheWarmth | None]:
    """The new launch's weights read into the page cache on a channel of their own, while the
    old server still serves; what it returns waits for the read and says how it went (None when
    the model is not a folder on the host)."""
    model = deployment.server.get("model_path")
    if not isinstance(model, str) or not model.startswith("/"):
        return lambda: None
    read: list[PageCacheWarmth] = []
    reading = threading.Thread(
        target=lambda: read.append(session.warm_page_cache(model)), daemon=True
    )
    reading.start()

    def finished() -> PageCacheWarmth | None:
        reading.join()
        return read[0] if read else None

    return finished


def _run_transaction(
    session: HostSession,
    plan: Plan,
    current_unit: str | None,
    options: ApplyOptions,
    began: float,
    loaded: LoadedProfile,
    check: BackgroundCheck | None,
    staged: CommandResult | None,
) -> ApplyResult:
    """Start the plan's deployment under the lock; record and report how it went, rolled back on
    failure."""
    deployment = plan.deployment
    transaction = Transaction(session, plan.host, options)
    previous = previous_deployment(session, plan, current_unit)  # while SGLang's check runs
    if plan.last_good and not plan.up_to_date:
        expected = recorded_startup_s(session.read_record(deployment.state_dir, plan.last_good))
        if expected:  # what the live progress counts down from
            session.report("expected", seconds=expected, deployment=plan.last_good)
    judged = [plan]
    warmth: list[PageCacheWarmth | None] = [None]

    def gate() -> StartupResult | None:
        # beside the check's wait and --wait-for-gpus
        reading = read_ahead(session, deployment) if options.read_ahead else lambda: None
        judged[0], refused = pre_stop(session, plan, check, loaded, options.wait_for_gpus_s)
        warmth[0] = reading()
        handover = Handover(deployment, previous, running_port(current_unit, plan.previous_active))
        return refused or before_stop_gate(session, options.before_stop, handover)

    startup = transaction.start(
        deployment,
        stop_first=plan.previous_active,
        takeover=plan.takeover,
        gate=gate,
        staged=staged,
    )
    startup.read_ahead = warmth[0]
    plan = judged[0]
    checked = check_report(plan, startup.auto_adjusted if startup.ready else None)
    disagreeing = tuple(disagreements_of(plan))
    common = {**_common(plan), "diagnostics": plan.diagnostics, "sglang_check": checked,
              "disagreements": disagreeing}
    if startup.ready and (options.probe or options.min_ratio is not None):
        transaction.measure(deployment, startup, _probe_baseline(session, plan))
    stats = session.remote.stats.as_dict
    if startup.failure_kind == "stage_failed":
        return ApplyResult(Exit.REFUSED, "refused", message=f"{startup.reason}; the running server "
                                                    "was not touched",
                           stats=stats(), **common)
    if startup.failure_kind in REFUSED_BEFORE_STOP:
        transaction.record(deployment, startup, "refused", checked, disagreeing, unstage=True)
        return ApplyResult(Exit.REFUSED, "refused", deployment_id=deployment.id,
                           message=f"{startup.reason}; nothing was stopped",
                           failure=StartFailure(startup.failure_kind or "refused", startup.reason),
                           stats=stats(), **common)
    transaction.record(
        deployment, startup, "ready" if startup.ready else "failed", checked, disagreeing
    )
    for text in (checked.differences or ()) if checked else ():
        session.report("warning", text=f"SGLang's check on the host did not foresee this: {text}")
    if startup.ready:
        common["diagnostics"] = [*common["diagnostics"], *kv_cache_findings(loaded, startup.report)]
        return result_from(startup, ApplyResult(
            Exit.READY, "ready", deployment_id=deployment.id,
            message=f"{deployment.id} is ready on {plan.host} after {startup.seconds:.1f} s",
            timings=timings(startup, began), stats=stats(), **common))
    session.report("failed", reason=startup.reason, explain=startup.explain)
    installed = startup.failure_kind != "gpus_busy"
    failed = result_from(startup, ApplyResult(
        Exit.NOTHING_HEALTHY, "failed", deployment_id=deployment.id if installed else None,
        message=f"{deployment.id} failed on {plan.host}: {startup.reason}", **common))
    return restore(transaction, failed, deployment, previous, installed)


def kv_cache_findings(loaded: LoadedProfile, report: LogReport | None) -> list[Diagnostic]:
    """SGD714: a server that got ready with a KV cache smaller than one request of its context
    length (on the H200, mem_fraction_static 0.101 beside 13.5 GiB of weights left 3,951 tokens
    for a context of 8,192): SGLang starts it, and long requests cannot be served."""
    if report is None or not report.kv_cache_below_context:
        return []
    return [loaded.diagnostic(
        "SGD714", f"the KV cache holds {report.kv_cache_tokens} tokens, fewer than one request of "
        f"the context length {report.context_len}: SGLang started, but a long request cannot be "
        "served",
        dotted="server.mem_fraction_static", severity=Severity.WARNING,
        hint="raise mem_fraction_static, lower context_length, or serve the model on more or "
        "larger GPUs")]


def _probe_baseline(session: HostSession, plan: Plan) -> dict[str, Any] | None:
    """The last good deployment's probe figures, if it served the same model."""
    if not plan.last_good:
        return None
    files = session.read_record(plan.deployment.state_dir, plan.last_good)
    server = recorded_server(files) if files is not None else None
    if (
        files is None
        or server is None
        or server.get("model_path") != plan.deployment.server.get("model_path")
    ):
        return None
    return recorded_probe(files)


# --------------------------------------------------------------------------- sgdeploy probe
@dataclass(frozen=True)
class ProbeReport:
    """What `sgdeploy probe` found on one host: how it exits, the deployment measured, the
    measurement against the recorded figure (None: nothing was measured) and what it means."""

    exit_code: int
    host: str
    unit: str
    message: str
    deployment_id: str | None = None
    outcome: ProbeOutcome | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.outcome is None:
            return {"host": self.host, "unit": self.unit, "message": self.message}
        return {"host": self.host, "unit": self.unit, "deployment_id": self.deployment_id,
                "probe": self.outcome.result.as_dict(), "verdict": self.outcome.verdict.as_dict(),
                "message": self.message}


def probe_unit(name: str, entry: HostEntry, unit: str, min_ratio: float | None) -> ProbeReport:
    """`sgdeploy probe`: measure the running deployment and compare with its recorded figure."""
    try:
        remote = connect(name, entry)
    except ConnectError as exc:
        return ProbeReport(Exit.REFUSED, name, unit, str(exc))
    with remote:
        try:
            return _probe(HostSession(remote), name, unit, min_ratio)
        except ConnectionLost as exc:
            return ProbeReport(Exit.REFUSED, name, unit, f"{exc}; nothing was measured")


def _probe(session: HostSession, name: str, unit: str, min_ratio: float | None) -> ProbeReport:
    facts = session.facts(unit, "/bin/true", "/nonexistent", 1).facts
    if facts.last_good is None:
        return ProbeReport(Exit.REFUSED, name, unit, f"no deployment of {unit} is recorded on "
                                                     f"{name}")
    files = session.read_record(state_dir(unit), facts.last_good)
    deployment = None if files is None else deployment_from_files(unit, facts.last_good, files)
    if deployment is None or files is None:
        return ProbeReport(Exit.REFUSED, name, unit, f"the record of {facts.last_good} is "
                                                     "incomplete")
    settings = ProbeSettings.model_validate(deployment.probe_settings or {})
    measured = probe_remote(
        session.remote, deployment.port, settings, api_key_for(session.remote, deployment)
    )
    verdict = compare(measured, recorded_probe(files), min_ratio or 0.0)
    failed = not measured.ok or (min_ratio is not None and not verdict.ok)
    outcome = ProbeOutcome(measured, verdict)
    return ProbeReport(Exit.ROLLED_BACK if failed else Exit.READY, name, unit, outcome.text,
                       facts.last_good, outcome)
