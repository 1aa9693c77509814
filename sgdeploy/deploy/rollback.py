"""Rollback: what a failed deployment restores, restoring it, and `sgdeploy rollback`.

The restore target is the last good record, else the unit found running on the host
(`previous_deployment`); it is started again with the same steps as any deployment
(`Transaction.start`), never into GPUs that are not free, and never when its `[secrets]` file
is not usable on the host (`unrestorable`, asked before anything stops).
"""

from __future__ import annotations

import dataclasses
import time

from sgdeploy.deploy.journal import Reporter, StartupResult
from sgdeploy.deploy.plan import Deployment, Plan, new_deployment_id
from sgdeploy.deploy.prestop import REFUSED_BEFORE_STOP, Handover, before_stop_gate, strangers_left
from sgdeploy.deploy.records import deployment_from_files, exec_port, running_port
from sgdeploy.deploy.secret_args import recorded_secret_diagnostics
from sgdeploy.deploy.session import HostSession, quiet
from sgdeploy.deploy.transaction import (
    ApplyOptions,
    ApplyResult,
    Exit,
    RollbackOutcome,
    Transaction,
    on_host,
    result_from,
    timings,
)
from sgdeploy.deploy.weight_daemon import deployment_strangers
from sgdeploy.host.facts import HostFacts, state_dir
from sgdeploy.profile.inventory import HostEntry


def previous_deployment(
    session: HostSession, plan: Plan, current_unit_text: str | None
) -> Deployment | None:
    """What to restore if the new deployment fails: the last good record, else the unit as it
    was."""
    deployment = plan.deployment
    if plan.last_good:
        restored = deployment_from_record(session, deployment.unit, plan.last_good)
        if restored is not None:
            return restored
        session.report("warning", text=f"the last good record {plan.last_good} is missing or "
                       "corrupt; the rollback target is the unit found on the "
                       "host" if current_unit_text else
                       f"the last good record {plan.last_good} is missing or corrupt; nothing to "
                       "roll back to")
    if current_unit_text is not None and plan.previous_active:
        port = exec_port(current_unit_text)
        return Deployment(
            id=new_deployment_id("0" * 8), unit=deployment.unit, unit_text=current_unit_text,
            profile_name="(unit found on the host)", profile_sha256="", profile_text="",
            sglang_version=deployment.sglang_version, server={"port": port} if port else {},
            gpus=deployment.gpus, ready_timeout_s=deployment.ready_timeout_s,
            rollback_of=plan.last_good or "unit-on-host", expect=("ready",))
    return None


def deployment_from_record(
    session: HostSession, unit: str, deployment_id: str
) -> Deployment | None:
    """Rebuild a recorded deployment (for rollback) from its folder on the host."""
    files = session.read_record(state_dir(unit), deployment_id)
    return None if files is None else deployment_from_files(unit, deployment_id, files)


def unrestorable(session: HostSession, previous: Deployment, host: str) -> str | None:
    """Why a recorded deployment cannot be started again (its [secrets] file is not usable on
    the host), asked before it is; None when it can."""
    problems = [
        d.message for d in recorded_secret_diagnostics(session.remote, previous, host) if d.is_error
    ]
    return f"its secrets file is not usable: {'; '.join(problems)}" if problems else None


def restore(
    transaction: Transaction,
    failed: ApplyResult,
    deployment: Deployment,
    previous: Deployment | None,
    installed: bool,
) -> ApplyResult:
    """`failed`, after `deployment` failed to start: `previous` restored (exit 1) unless
    --no-rollback was given or there is none; else the unit is stopped (exit 3)."""
    session, host = transaction.session, transaction.host
    if not transaction.options.rollback or previous is None:
        if installed:
            session.stop(deployment.unit)
        why = ("--no-rollback was given" if not transaction.options.rollback
               else "there is no previous deployment to restore")
        return dataclasses.replace(failed, message=f"{failed.message}; {why}, so nothing healthy "
                                           "is running",
                                   stats=session.remote.stats.as_dict())
    session.report("step", step="rollback", to=previous.rollback_of)
    unusable = unrestorable(session, previous, host)
    if unusable is not None:
        session.stop(deployment.unit)  # stopped, not left restarting into the same failure
        return dataclasses.replace(
            failed, rollback=RollbackOutcome(previous.rollback_of, False, unusable, startup_s=0.0),
            message=f"{failed.message}; the rollback to {previous.rollback_of} was not started: "
            f"{unusable}; the unit is stopped", stats=session.remote.stats.as_dict())
    restored = transaction.start(previous, stop_first=True, best_effort_idle=True)
    transaction.record(previous, restored, "ready" if restored.ready else "failed")
    failed = dataclasses.replace(
        failed,
        rollback=RollbackOutcome(
            previous.rollback_of,
            restored.ready,
            restored.reason,
            previous.id,
            round(restored.seconds, 2),
        ),
        stats=session.remote.stats.as_dict(),
    )
    if restored.ready:
        return dataclasses.replace(
            failed, exit_code=Exit.ROLLED_BACK, status="rolled_back",
            message=f"{failed.message}; rolled back to {previous.rollback_of} (now {previous.id}), "
            "which is ready")
    if restored.failure_kind == "gpus_busy":
        return dataclasses.replace(
            failed, message=f"{failed.message}; the rollback to {previous.rollback_of} was not "
            f"started: {restored.reason}; run `sgdeploy rollback` once they are free")
    session.stop(previous.unit)  # stopped, not left restarting into the same failure
    return dataclasses.replace(failed, message=f"{failed.message}; the rollback to "
                               f"{previous.rollback_of} failed too: {restored.reason}; the unit is "
                               "stopped")


def rollback_unit(
    name: str,
    entry: HostEntry,
    unit: str,
    to: str | None,
    options: ApplyOptions,
    report: Reporter = quiet,
) -> ApplyResult:
    """`sgdeploy rollback`: redeploy the last good (or the given) recorded deployment."""
    began = time.monotonic()
    return on_host(name, entry, unit, report, "the rollback",
                   lambda session: _rollback(session, name, unit, to, options, report, began),
                   after=options.after_host)


def _rollback(
    session: HostSession,
    name: str,
    unit: str,
    to: str | None,
    options: ApplyOptions,
    report: Reporter,
    began: float,
) -> ApplyResult:
    report("step", step="facts", host=name)
    read = session.facts(unit, "/bin/true", "/nonexistent", 1)
    facts, current_unit = read.facts, read.unit_text
    target = to or facts.last_good
    chosen = _target(session, facts, name, unit, target, options)
    if isinstance(chosen, ApplyResult):
        return chosen
    deployment, strangers = chosen
    lock = session.lock(deployment.state_dir)
    if lock.holder is None:
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{lock.refusal}; nothing was "
                                                                "changed")
    for text in lock.warnings:
        report("warning", text=text)
    try:
        transaction = Transaction(session, name, options)
        own = (facts.unit.main_pid,) if facts.unit and facts.unit.main_pid else ()
        running = running_port(current_unit, bool(facts.unit and facts.unit.active))

        def gate() -> StartupResult | None:
            refused = (
                strangers_left(session, deployment, own, options.wait_for_gpus_s)
                if strangers
                else None
            )
            return refused or before_stop_gate(
                session, options.before_stop, Handover(deployment, None, running)
            )

        startup = transaction.start(deployment, stop_first=bool(facts.unit and facts.unit.exists),
                                    best_effort_idle=True, gate=gate)
        held = startup.failure_kind in REFUSED_BEFORE_STOP
        transaction.record(
            deployment,
            startup,
            "refused" if held else "ready" if startup.ready else "failed",
            unstage=held,
        )
    finally:
        lock.release()
    return _rolled_back(session, startup, deployment, name, unit, target or "", began)


def _target(session: HostSession, facts: HostFacts, name: str, unit: str, target: str | None,
            options: ApplyOptions) -> tuple[Deployment, bool] | ApplyResult:
    """The recorded deployment to restore and whether strangers hold its GPUs, or the refusal."""
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
                           f"the record of {target} on {name} is incomplete or corrupt; choose "
                           "another with --to")
    # its [secrets] file, before the stop
    secrets = recorded_secret_diagnostics(session.remote, deployment, name)
    if any(d.is_error for d in secrets):
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"the secrets file of {target} is "
                           f"not usable on {name}; nothing was "
                           "stopped", diagnostics=secrets, stats=session.remote.stats.as_dict())
    # Never start the previous deployment into GPUs others hold: decided before the stop.
    own = (facts.unit.main_pid,) if facts.unit and facts.unit.main_pid else ()
    strangers, _ = deployment_strangers(
        facts.gpus, facts.gpu_processes, deployment.gpus, unit, own,
        bool(facts.unit and facts.unit.active),
    )
    if strangers and options.wait_for_gpus_s is None:
        return ApplyResult(Exit.REFUSED, "refused", name, unit,
                           f"processes outside {unit}.service hold the GPUs {target} needs: "
                           + "; ".join(h.describe() for h in strangers)
                           + "; nothing was stopped (--wait-for-gpus SECONDS waits for them to "
                             "leave)")
    return deployment, bool(strangers)


def _rolled_back(
    session: HostSession,
    startup: StartupResult,
    deployment: Deployment,
    name: str,
    unit: str,
    target: str,
    began: float,
) -> ApplyResult:
    """The result of a rollback's start; a failed one leaves the unit stopped."""
    stats = session.remote.stats.as_dict()
    if startup.failure_kind in REFUSED_BEFORE_STOP:
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{startup.reason}; nothing was "
                                                                "stopped", stats=stats)
    # nothing was stopped: the running server is as it was
    if startup.failure_kind == "stage_failed":
        return ApplyResult(Exit.REFUSED, "refused", name, unit, f"{startup.reason}; the running "
                           "server was not touched", stats=stats)
    if startup.ready:
        return result_from(startup, ApplyResult(
            Exit.READY, "ready", name, unit, f"rolled back to {target} (recorded as "
            f"{deployment.id}); ready after {startup.seconds:.1f} "
            "s", deployment_id=deployment.id, timings=timings(startup, began), stats=stats))
    session.stop(unit)
    again = "; run it again once they are free" if startup.failure_kind == "gpus_busy" else ""
    return result_from(startup, ApplyResult(
        Exit.NOTHING_HEALTHY, "failed", name, unit,
        f"the rollback to {target} failed: {startup.reason}; nothing healthy is running{again}",
        deployment_id=deployment.id, stats=session.remote.stats.as_dict()))
