"""The pre-stop gate: what must hold before a running server is stopped for a new one.

Strangers gone from the unit's GPUs (`--wait-for-gpus`), SGLang's own verdict on the launch
(asked of the host's SGLang on a thread of its own, beside the lock and the staging), and the
`before_stop` hook (a gateway drains the worker). A refusal here is a `StartupResult` whose
`failure_kind` is in `REFUSED_BEFORE_STOP`: nothing was stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.deploy.journal import StartupResult
from sgdeploy.deploy.plan import Deployment, Plan, Takeover
from sgdeploy.deploy.session import BackgroundCheck, HostSession
from sgdeploy.logs.report import Adjustment
from sgdeploy.profile.model import LoadedProfile
from sgdeploy.sglang.check.verdict import (
    CheckReport,
    Disagreement,
    HostVerdict,
    covering_text,
    disagreements,
    site_for,
)

REFUSED_BEFORE_STOP = frozenset({"sglang_refused", "gpus_held", "drain_refused"})


@dataclass(frozen=True)
class Handover:
    """What a `before_stop` hook is told: the deployment about to start, the one a failure
    restores, and the port of the server running now (None: nothing runs)."""

    deployment: Deployment
    previous: Deployment | None
    running_port: int | None


BeforeStop = Callable[[HostSession, Handover], str | None]


def start_check(
    session: HostSession, plan: Plan, timeout_s: float, enabled: bool = True
) -> BackgroundCheck | None:
    """SGLang's own check of the plan's launch, running on its own channel (the one begun
    already for the same launch, `EarlyCheck`); None when skipped."""
    request = plan.deployment.check
    if plan.up_to_date or not enabled or request is None:
        return None
    begun = next((c for c in session.checks_ahead if c.request == request), None)
    return begun or BackgroundCheck(session, request, timeout_s)


class Judged(NamedTuple):
    """The plan with SGLang's own verdict, and the refusal before the stop (None: go on)."""

    plan: Plan
    refusal: StartupResult | None


def pre_stop(session: HostSession, plan: Plan, check: BackgroundCheck | None, loaded: LoadedProfile,
             wait_for_gpus_s: float | None) -> Judged:
    """What must hold before the stop: strangers gone from the GPUs (--wait-for-gpus) and
    SGLang's own verdict. The plan with that verdict, and the refusal (None: go on)."""
    deployment = plan.deployment
    held = None
    if plan.strangers:
        unit_state = plan.facts.unit if plan.facts else None
        own = takeover_pids(plan.takeover) + (
            (unit_state.main_pid,) if unit_state and unit_state.main_pid else ()
        )
        held = strangers_left(session, deployment, own, wait_for_gpus_s)
    judged = judged_plan(plan, check.result(), loaded) if check is not None else plan
    verdict = judged.sglang_check
    if judged.refused and verdict is not None:
        why = (
            f"SGLang {verdict.sglang_version or deployment.sglang_version} on {plan.host} refuses "
            f"the launch ({verdict.stage})"
            if verdict.refused
            else "SGLang's own check did not answer in time"
        )
        return Judged(judged, StartupResult(False, reason=why, failure_kind="sglang_refused"))
    return Judged(judged, held)


def before_stop_gate(
    session: HostSession, hook: BeforeStop | None, handover: Handover
) -> StartupResult | None:
    """The `before_stop` hook (a gateway drains the worker) as a refusal, or None to go on."""
    refusal = hook(session, handover) if hook is not None else None
    return StartupResult(False, reason=refusal, failure_kind="drain_refused") if refusal else None


def takeover_pids(takeover: tuple[Takeover, ...]) -> tuple[int, ...]:
    """The processes `apply --adopt` stops itself: not strangers on the GPUs."""
    return tuple(pid for t in takeover for pid in (t.pid, *t.family))


def strangers_left(session: HostSession, deployment: Deployment, own: tuple[int, ...],
                   wait_for_gpus_s: float | None) -> StartupResult | None:
    """--wait-for-gpus, before the stop: None once no process outside the unit holds its GPUs."""
    held = session.wait_gpus_free(deployment.gpus, deployment.unit, own, wait_for_gpus_s or 0.0)
    if not held:
        return None
    return StartupResult(False, failure_kind="gpus_held", reason="processes outside "
                         f"{deployment.unit}.service still hold its GPUs after "
                         f"{wait_for_gpus_s or 0:.0f} s: "
                         + "; ".join(h.describe() for h in held))


def judged_plan(plan: Plan, verdict: HostVerdict, loaded: LoadedProfile) -> Plan:
    """The plan with SGLang's own verdict: a refusal (SGD711) or a note that it could not run
    (SGD712; an error when no catalog judged the launch either)."""
    deployment = plan.deployment
    found: list[Diagnostic] = []
    where = f"SGLang {verdict.sglang_version or deployment.sglang_version} on {plan.host}"
    if verdict.refused:
        covering = site_for(deployment.sglang_version, verdict.error or "")
        found.append(loaded.diagnostic("SGD711", f"{where} refuses the launch at {verdict.stage}: "
                                       f"{verdict.message}; "
                                       f"{covering_text(covering)}", dotted="server",
                                       hint="change the profile as SGLang's message says"))
    elif verdict.status == "unavailable":
        uncatalogued = any(d.rule == "SGD703" for d in plan.notes)
        # SGLang hangs resolving this launch: so would the server, after the stop
        if verdict.timed_out:
            then = "refusing: a launch whose arguments SGLang cannot resolve in time is not started"
        elif uncatalogued:
            then = "no catalog checked this version either, so nothing has judged the launch"
        else:
            then = "the offline (catalog) verdict stands"
        found.append(loaded.diagnostic(
            "SGD712", f"SGLang's own check could not run on {plan.host}: {verdict.reason}; {then}",
            dotted="deploy.python", hint="check deploy.python and the SGLang install on the host, "
            "raise --sglang-check-timeout, or skip the check with --no-sglang-check",
            severity=Severity.ERROR if uncatalogued or verdict.timed_out else Severity.WARNING))
    refusals = plan.refusals + tuple(d for d in found if d.is_error)
    notes = plan.notes + tuple(d for d in found if not d.is_error)
    return dataclasses.replace(plan, sglang_check=verdict, refusals=refusals, notes=notes)


def check_report(plan: Plan, seen: list[Adjustment] | None = None) -> CheckReport | None:
    """`sglang_check` of a result or record: the verdict, its prediction, what the start showed."""
    verdict = plan.sglang_check
    if verdict is None:
        return None
    return CheckReport.of(verdict, plan.host, plan.deployment.server, seen)


def disagreements_of(plan: Plan) -> list[Disagreement]:
    """Where SGLang's own verdict and the offline rules disagree (recorded, shown by history)."""
    verdict = plan.sglang_check
    if verdict is None:
        return []
    checked = not any(d.rule == "SGD703" for d in plan.notes)
    offline = [d.rule for d in plan.refusals if d.rule not in ("SGD711", "SGD712")]
    return disagreements(
        verdict, offline, checked, site_for(plan.deployment.sglang_version, verdict.error or "")
    )
