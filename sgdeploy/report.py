"""Formatting findings and results: text, JSON and GitHub workflow commands. Pure: returns strings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sgdeploy.diagnostics import Diagnostic
from sgdeploy.validate import ValidationResult


def finding_line(d: Diagnostic) -> str:
    """`profiles/x.toml:12: SGD301 error: message (hint: ...)`."""
    where = d.path or "-"
    if d.line is not None:
        where += f":{d.line}"
    text = f"{where}: {d.rule} {d.severity.value}: {d.message}"
    return text + (f" (hint: {d.hint})" if d.hint else "")


def validation_text(results: Sequence[ValidationResult]) -> str:
    lines = []
    for result in results:
        lines.extend(finding_line(d) for d in result.diagnostics)
    failed = [r for r in results if not r.ok]
    warnings = sum(1 for r in results for d in r.diagnostics if d.severity.value == "warning")
    lines.append(
        f"{len(results)} profile(s) checked: {len(results) - len(failed)} valid, {len(failed)} with errors, "
        f"{warnings} warning(s)"
    )
    return "\n".join(lines) + "\n"


def validation_json(results: Sequence[ValidationResult]) -> str:
    return json.dumps({"profiles": [r.as_dict() for r in results]}, indent=2) + "\n"


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
    message = d.message + (f" (hint: {d.hint})" if d.hint else "")
    return f"::{level} {','.join(props)}::{_escape_data(message)}"


def validation_github(results: Sequence[ValidationResult]) -> str:
    return "".join(github_command(d) + "\n" for r in results for d in r.diagnostics)


# --------------------------------------------------------------------------- apply / plan
def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def apply_text(result: Any) -> str:
    """The end-of-apply summary: outcome, phase times, what SGLang changed, why it failed."""
    lines = [f"{result.status.upper()}: {result.message}"]
    for d in result.diagnostics:
        lines.append("  " + finding_line(d))
    if result.phase_times:
        times = result.phase_times
        lines.append("startup phases: " + ", ".join(f"{name} {_seconds(value)}" for name, value in times.items()))
    if result.kv_cache_tokens:
        lines.append(f"KV cache: {result.kv_cache_tokens} tokens")
    if result.timings:
        lines.append("apply: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.timings.items()))
    if result.auto_adjusted:
        lines.append("settings SGLang changed on its own:")
        lines.extend(f"  {a['field']} = {json.dumps(a['value'])}  ({a['reason']})" for a in result.auto_adjusted)
    if result.explain:
        lines.append("the log lines that explain it:")
        lines.extend(f"  | {text}" for text in result.explain)
    if result.rollback:
        rb = result.rollback
        lines.append(f"rollback to {rb['restored']}: {'ready' if rb['ready'] else 'FAILED: ' + rb['reason']}")
    return "\n".join(lines) + "\n"


def plan_text(plan: Any) -> str:
    lines = [f"plan for {plan.deployment.unit}.service on {plan.host} "
             f"(SGLang {plan.deployment.sglang_version}, deployment {plan.deployment.id}):"]
    for d in (*plan.refusals, *plan.notes):
        lines.append("  " + finding_line(d))
    if plan.refused:
        lines.append("REFUSED: the profile cannot run on this host; nothing would change")
        return "\n".join(lines) + "\n"
    if plan.up_to_date:
        lines.append("up to date: the unit on the host is this one and it is active; nothing to do")
    for number, step in enumerate(plan.steps, 1):
        lines.append(f"  {number}. {step.kind.value:<15} {step.why}")
    lines.append("unit diff:" if plan.unit_diff else "unit diff: none")
    if plan.unit_diff:
        lines.append(plan.unit_diff.rstrip("\n"))
    return "\n".join(lines) + "\n"
