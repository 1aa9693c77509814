"""Formatting findings and results: text, JSON and GitHub workflow commands. Pure: returns strings.

Every text and document leaves through `sgdeploy.sglang.secrets` (`redact`, `redact_data`): a
secret that reached a finding, a log line or a unit diff is shown as `<redacted>`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sgdeploy.core.diagnostics import Diagnostic, finding_line
from sgdeploy.deploy.downtime import DOWNTIME_SPANS
from sgdeploy.profile.validate import ValidationResult
from sgdeploy.sglang.secrets import redact, redact_data

if TYPE_CHECKING:  # for the annotations only: validate's output path loads none of these
    from sgdeploy.deploy.drained import RolloutPlan
    from sgdeploy.deploy.fleet import FleetResult
    from sgdeploy.deploy.gateway import RotationResult
    from sgdeploy.deploy.operate import History, Status
    from sgdeploy.deploy.plan import Plan, Step
    from sgdeploy.deploy.transaction import ApplyResult
    from sgdeploy.host.sshconfig import SshTarget
    from sgdeploy.logs import LogReport


def validation_text(results: Sequence[ValidationResult]) -> str:
    lines: list[str] = []
    for result in results:
        lines.extend(finding_line(d) for d in result.diagnostics)
    failed = [r for r in results if not r.ok]
    warnings = sum(1 for r in results for d in r.diagnostics if d.severity.value == "warning")
    lines.append(
        f"{len(results)} profile(s) checked: {len(results) - len(failed)} valid, {len(failed)} "
        f"with errors, {warnings} warning(s)"
    )
    return redact("\n".join(lines) + "\n")


def validation_json(results: Sequence[ValidationResult]) -> str:
    return json.dumps(redact_data({"profiles": [r.as_dict() for r in results]}), indent=2) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_command(d: Diagnostic) -> str:
    """A GitHub Actions workflow command: `::error file=F,line=N,title=SGD301::message`."""
    level = {"error": "error", "warning": "warning"}.get(d.severity.value, "notice")
    props = [f"file={_escape_property(d.path or '')}"]
    if d.line is not None:
        props.append(f"line={d.line}")
    props.append(f"title={_escape_property(d.rule)}")
    message = redact(d.described + (f" (hint: {d.hint})" if d.hint else ""))
    return f"::{level} {','.join(props)}::{_escape_data(message)}"


def validation_github(results: Sequence[ValidationResult]) -> str:
    return "".join(github_command(d) + "\n" for r in results for d in r.diagnostics)


# --------------------------------------------------------------------------- apply / plan
def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def downtime_text(spans: dict[str, float]) -> str:
    """`downtime 39.7 s: old server's stop 5.4 s, GPUs released 0.1 s, ...` (the host's clock)."""
    parts = ", ".join(f"{label} {spans[key]:.1f} s" for key, _, _, label in DOWNTIME_SPANS
                      if key in spans)
    total = spans.get("downtime_s")
    return (f"downtime {total:.1f} s: " if total is not None else "downtime: ") + parts


def engine_timings_text(timings: Mapping[str, Any]) -> str:
    """SGLang's own account of its start, in its own names (`Engine startup timings`)."""
    parts = [f"{name} {value:.2f} s" for name, value in timings.items() if name != "cuda_graph"]
    graphs = timings.get("cuda_graph") or {}
    if graphs:
        parts.insert(2, "cuda_graph " + " + ".join(f"{phase} {value:.2f} s"
                                                   for phase, value in graphs.items()))
    return "SGLang's own timings: " + ", ".join(parts)


def apply_text(result: ApplyResult) -> str:
    """The end-of-apply summary: outcome, phase times, what SGLang changed, why it failed."""
    lines = [f"{result.status.upper()}: {result.message}"]
    for d in result.diagnostics:
        lines.append("  " + finding_line(d))
    if result.phase_times:
        times = result.phase_times
        lines.append(
            "startup phases: "
            + ", ".join(f"{name} {_seconds(value)}" for name, value in times.items())
        )
    if result.kv_cache_tokens:
        lines.append(f"KV cache: {result.kv_cache_tokens} tokens")
    if result.timings:
        lines.append("apply: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.timings.items()))
    if result.read_ahead:
        lines.append(f"before the stop: {result.read_ahead.describe()}")
    if result.downtime:
        lines.append(downtime_text(result.downtime))
    if result.engine_timings:
        lines.append(engine_timings_text(result.engine_timings))
    if result.probe:
        lines.append(f"throughput: {result.probe.text}")
    if result.auto_adjusted:
        lines.append("settings SGLang changed on its own:")
        lines.extend(f"  {a.field} = {json.dumps(a.value, default=str)}  "
                     f"({a.reason})" for a in result.auto_adjusted)
    check = result.sglang_check
    if check and not check.verdict.refused:
        lines.append(f"SGLang's own check: {check.summary}")
        lines.extend(f"  not foreseen: {text}" for text in check.differences or ())
    for disagreement in result.disagreements:
        offline = disagreement.offline
        lines.append(f"recorded in {result.deployment_id} as a disagreement: SGLang says "
                     f"{disagreement.host}, the offline rules said "
                     f"{offline if isinstance(offline, str) else ', '.join(offline)}")
    if result.explain:
        lines.append("the log lines that explain it:")
        lines.extend(f"  | {text}" for text in result.explain)
    if result.rollback:
        rb = result.rollback
        lines.append(f"rollback to {rb.restored}: "
                     f"{'ready' if rb.ready else 'FAILED: ' + str(rb.reason)}")
    return redact("\n".join(lines) + "\n")


def plan_text(plan: Plan) -> str:
    lines = [f"plan for {plan.deployment.unit}.service on {plan.host} "
             f"(SGLang {plan.deployment.sglang_version}, deployment {plan.deployment.id}):"]
    for d in (*plan.refusals, *plan.notes):
        lines.append("  " + finding_line(d))
    check = plan.sglang_check
    if plan.refused:
        if check is not None and check.refused:
            lines.append(f"REFUSED by SGLang {check.sglang_version or ''} on {plan.host} itself; "
                         "nothing would change")
        else:
            lines.append("REFUSED: the profile cannot run on this host; nothing would change")
        return redact("\n".join(lines) + "\n")
    if plan.up_to_date:
        lines.append("up to date: the unit on the host is this one and it is active; nothing to do")
    lines.extend(_step_lines(plan.steps))
    lines.append("unit diff:" if plan.unit_diff else "unit diff: none")
    if plan.unit_diff:
        lines.append(plan.unit_diff.rstrip("\n"))
    if check is not None:
        # imported here: validate's output path stays without the log reader
        from sgdeploy.sglang.check.verdict import summary

        lines.append("SGLang's own check: " + summary(check, plan.host, plan.deployment.server))
    return redact("\n".join(lines) + "\n")


# ---------------------------------------------------------------------- logcheck / history / status
def _since(start: str | None, t: str | None) -> str:

    if not start or not t:
        return ""
    try:
        seconds = (datetime.fromisoformat(t) - datetime.fromisoformat(start)).total_seconds()
        return f" (+{seconds:.1f} s)"
    except ValueError:
        return ""


def logcheck_text(report: LogReport, source: str, profile_given: bool = True) -> str:
    """`sgdeploy logcheck`: verdict, phases with times, KV cache, the failure and its lines,
    changes (read without the launch's profile, a flag it set itself can look like one)."""
    lines = [f"{source}: {report.verdict}"]
    lines.extend("an earlier start in this log failed: "
                 f"{f.headline}" for f in report.earlier_failures)
    if report.earlier_failures:
        lines.append("what follows is the last start:")
    if report.phases:
        lines.append("phases:")
        for p in report.phases:
            offset = _since(report.started, p.t)
            rank = f" [{p.rank}]" if p.rank else ""
            lines.append(f"  {p.name:<25} line {p.line:<6} {p.t or '-'}{offset}{rank}")
        times = {k: v for k, v in report.phase_times().items() if v is not None}
        if times:
            lines.append("startup times: " + ", ".join(f"{k} "
                                                       f"{_seconds(v)}" for k, v in times.items()))
    else:
        lines.append("phases: none recognised")
    if report.engine_timings:
        lines.append(engine_timings_text(report.engine_timings))
    if report.kv_cache_tokens is not None:
        lines.append(f"KV cache: {report.kv_cache_tokens} tokens" + (
            f", fewer than one request of the context length {report.context_len} (SGD714)"
            if report.kv_cache_below_context else ""))
    f = report.failure
    if f is not None:
        lines.append(f"failure: {f.headline}")
        if f.context:
            lines.append("the log lines that explain it:")
            lines.extend(f"  {number:>6} | {text}" for number, text in f.context)
    if report.auto_adjusted:
        lines.append("settings SGLang changed on its own" + (
            ":" if profile_given else ", or the launch set (--profile tells them apart):"))
        lines.extend(f"  {a.field} = {json.dumps(a.value, default=str)}  ({a.reason})"
                     for a in report.auto_adjusted)
    return redact("\n".join(lines) + "\n")


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def history_text(history: History) -> str:
    """`sgdeploy history`: one line per deployment, newest first; `*` marks the last good one."""
    head = f"{history.unit}.service on {history.host}"
    if not history.state_present or not history.records:
        return f"{head}: no deployments recorded\n"
    lines = [f"{head}: {len(history.records)} deployment(s), newest first; * = last good "
             f"({history.last_good or 'none'})"]
    rows = [
        ("", "ID", "TIME", "PROFILE", "SGLANG", "OUTCOME", "STARTUP", "DOWNTIME", "TOK/S", "BY",
         "ROLLBACK OF")
    ]
    for r in history.records:
        d = r.as_dict()
        profile = (
            f"{d['profile']} {r.short_hash}" if d["profile"] and r.short_hash else d["profile"]
        )
        outcome = r.outcome + (f" ({r.failure_kind})" if r.failure_kind else "")
        startup = f"{d['startup_s']:.1f} s" if isinstance(d["startup_s"], int | float) else None
        down = d["downtime"].get("downtime_s") if isinstance(d["downtime"], dict) else None
        downtime = f"{down:.1f} s" if isinstance(down, int | float) else None
        tps = f"{r.tokens_per_s:.1f}" if r.tokens_per_s is not None else None
        rows.append(
            (
                "*" if r.last_good else "",
                r.id,
                _cell(d["time"]),
                _cell(profile),
                _cell(d["sglang_version"]),
                outcome,
                _cell(startup),
                _cell(downtime),
                _cell(tps),
                _cell(d["deployed_by"]),
                _cell(d["rollback_of"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for r in history.records:
        if r.problem:
            lines.append(f"{r.id}: corrupt record: {r.problem}")
    return redact("\n".join(lines) + "\n")


def status_text(status: Status) -> str:
    """`sgdeploy status`: verdict, unit, deployment, drift, GPUs, health."""
    d = status.as_dict()
    verdict = "HEALTHY" if status.healthy else "NOT HEALTHY"
    lines = [f"{status.unit}.service on {status.host}: {verdict}"]
    lines.extend(f"  problem: {p}" for p in status.problems)
    u = d["unit_state"]
    if u is not None:
        lines.append(f"unit: {_unit_state_text(u)}")
    daemon = d["weight_daemon"]
    if daemon is not None:
        state = daemon["unit_state"]
        lines.append(f"weight-cache daemon: {daemon['unit']}, "
                     + (_unit_state_text(state) if state else "state unknown"))
    dep = d["deployment"]
    record = status.installed_record
    if dep["installed"]:
        what = f"{dep['installed']}"
        if record is not None:
            meta = record.as_dict()
            what += (f" ({meta['profile']} {record.short_hash or ''}, "
                     f"SGLang {_cell(meta['sglang_version'])}, {record.outcome})")
        last = ", the last good one" if dep["installed_is_last_good"] else \
            f"; last good: {dep['last_good'] or 'none'}"
        lines.append(f"deployment: {what}{last}")
    else:
        missing = status.unit_state is None or not status.unit_state.exists
        found = "no unit file is installed" if missing else "the unit file matches no record"
        lines.append(f"deployment: {found}; last good: {dep['last_good'] or 'none'}")
    if status.drift:
        lines.append("drift:")
        for drift in status.drift:
            lines.append(f"  {drift.kind}: {drift.message}")
            lines.extend(f"    {line}" for line in drift.diff.rstrip("\n").splitlines())
    else:
        lines.append("drift: none")
    for g in d["gpus"]:
        procs = [p for p in d["gpu_processes"] if p["gpu_uuid"] == g["uuid"]]
        held = ", ".join(f"pid {p['pid']} {p['process_name']} {_cell(p['used_memory_mib'])} MiB"
                         for p in procs)
        memory = f"{_cell(g['memory_used_mib'])} / {_cell(g['memory_total_mib'])} MiB"
        lines.append(f"GPU {g['index']} {g['name']}: {memory}; {held or 'no processes'}")
    h = status.health
    if h is None:
        lines.append("health: not checked (the unit is not running)")
    else:
        answer = f"HTTP {h.status}" if h.status else (h.detail or "no answer")
        lines.append(f"health: GET {h.path} on port {h.port}: {answer}")
    lines.append(f"SGLang on the host: {status.sglang_version or 'unknown'}")
    worker = status.gateway
    if worker is not None:
        load = "" if worker.view.load is None else f", {worker.view.load} in flight"
        lines.append(f"gateway '{worker.gateway}': {worker.view.url} {worker.view.state}{load}"
                     + (f" ({worker.problem})" if worker.problem else ""))
    lines.extend(f"note: {n}" for n in status.notes)
    return redact("\n".join(lines) + "\n")


def _unit_state_text(u: dict[str, Any]) -> str:
    return (f"{u['load_state']}, {u['active_state']}/{u['sub_state']}, "
            f"main pid {_cell(u['main_pid'])}, restarts {_cell(u['n_restarts'])}")


def rollout_text(fleet: FleetResult) -> str:
    """One line per host of a rollout, in rollout order, then what stopped it."""
    rows = fleet.rows()
    width = max([len(r["host"]) for r in rows] + [4])
    lines = [f"{'host':<{width}}  {'outcome':<13} {'startup':>8}  {'sglang':<8} deployment"]
    for r in rows:
        startup = "-" if r["startup_s"] is None else f"{r['startup_s']:.1f} s"
        lines.append(f"{r['host']:<{width}}  {r['status']:<13} {startup:>8}  "
                     f"{r['sglang_version'] or '-':<8} {r['deployment_id'] or '-'}")
    if fleet.stopped_at:
        failed = fleet.results[fleet.stopped_at]
        lines.append(f"rollout stopped at {fleet.stopped_at}: {failed.message}")
        lines.extend(f"  | {text}" for text in failed.explain)
    else:
        lines.append(f"all {len(rows)} hosts done")
    if fleet.gateway:
        lines.extend(rotation_lines(fleet.gateway))
    return redact("\n".join(lines) + "\n")


def rotation_lines(gateway: dict[str, RotationResult]) -> list[str]:
    """Each host's worker at its gateway after a rollout: in rotation or not, and why."""
    lines = ["workers at the gateway now:"]
    for host, r in gateway.items():
        state = r.after or r.before
        where = "in rotation" if state == "ready" else f"NOT in rotation ({state})"
        drained = f", drained in {r.drained_s:.1f} s" if r.drained_s is not None else ""
        moved = f" (moved from {r.removed_url})" if r.removed_url and state == "ready" else ""
        lines.append(f"  {host}: {r.worker_url} at '{r.gateway}': {where}{drained}{moved}")
        if r.restored:
            kept = ", ".join(
                f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in r.restored.items()
            )
            lines.append(f"    registered again with {kept}"
                         + (" and its server's API key" if r.worker_api_key else ""))
        if r.problem:
            lines.append(f"    {r.problem}; re-run apply to put it back (it converges)"
                         if state != "ready" else f"    {r.problem}")
    return lines


def _step_lines(steps: Sequence[Step]) -> list[str]:
    return [f"  {number}. {step.kind.value:<15} {step.why}" for number, step in enumerate(steps, 1)]


def drained_plan_text(plan: RolloutPlan, results: Sequence[ApplyResult]) -> str:
    """`sgdeploy plan` of a rollout behind a gateway: the order, each host's gateway steps, its
    plan."""
    lines = [f"rollout behind a gateway, at most {plan.max_unavailable} worker(s) out of rotation "
             "at once: "
             + " -> ".join("+".join(batch) for batch in plan.batches)]
    by_host = {r.host: r for r in results}
    for host in plan.order:
        rotation = plan.rotations.get(host)
        lines.append(f"{host}: no gateway" if rotation is None else f"{host}: "
                     f"{rotation.before.url} at gateway '{rotation.gateway}' is "
                     f"{rotation.before.describe()}")
        lines.extend(_step_lines(plan.steps_of(host)))
        result = by_host.get(host)
        if result is not None and result.plan is not None:
            lines.extend("  " + line for line in plan_text(result.plan).rstrip("\n").splitlines())
        elif result is not None:
            lines.append(f"  {result.status.upper()}: {result.message}")
    return redact("\n".join(lines) + "\n")


def connection_text(name: str, chain: Sequence[SshTarget]) -> str:
    """`--verbose`: how a host is reached, each setting with where it came from
    (sshconfig.SshTarget)."""
    final = chain[-1]
    files = ", ".join(final.config_files) or "none"
    lines = [f"{name}: connection (SSH configuration read: {files})"]
    for hop in chain:
        role = "target" if hop is final else "through"
        lines.append(f"  {role} {hop.alias}: {hop.user}@{hop.hostname}:{hop.port}")
        for setting, value in hop.shown().items():
            if value in (None, [], ""):
                continue
            shown = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
            lines.append(f"    {setting + ':':<26} {shown}  "
                         f"({hop.sources.get(setting, 'default')})")
    lines += ["  note: "
              f"{note}" for note in dict.fromkeys(note for hop in chain for note in hop.notes)]
    return "\n".join(lines) + "\n"
