"""`sgdeploy diff` as text, JSON and GitHub-flavoured Markdown (a PR comment or job summary). Pure.

Every format opens with the removed flags, then the new errors, before any detail.
"""

from __future__ import annotations

import json
from typing import Any

from sgdeploy.core.diagnostics import Diagnostic, finding_line
from sgdeploy.deploy.render import value_word
from sgdeploy.review.diff import Change, DiffResult, Launch, ProfileDiff, TargetDiff
from sgdeploy.sglang.secrets import redact, redact_data

_value = value_word


def _flag_words(change: Change, value: Any) -> str:
    return f"{change.option} {_value(value)}" if value is not True else str(change.option)


def _removal_text(p: ProfileDiff, t: TargetDiff, c: Change) -> str:
    if t.after is None:
        return f"{p.path} on {t.host}: {_flag_words(c, c.before)} (not deployed there any more)"
    version = t.after.facts.get("sglang_version")
    fallback = f"SGLang {version} falls back to its default: {_value(c.default)}"
    return f"{p.path} on {t.host}: {_flag_words(c, c.before)} ({fallback})"


def _where(d: Diagnostic) -> str:
    return f"line {d.line}" if d.line is not None else "file"


def _host_line(launch: Launch | None) -> str:
    if launch is None:
        return "not deployed"
    f = launch.facts
    parts = [f"SGLang {f.get('sglang_version') or '?'}"]
    if f.get("gpu"):
        gpus = f"{f['gpu_count']}x {f['gpu']}" if f.get("gpu_count") else str(f["gpu"])
        extra = [f"sm {f['compute_capability']}"] if f.get("compute_capability") else []
        extra += [f"{f['gpu_memory_gib']:g} GiB"] if f.get("gpu_memory_gib") else []
        parts.append(gpus + (f" ({', '.join(extra)})" if extra else ""))
    return ", ".join(parts)


def summary_counts(result: DiffResult) -> str:
    return (f"{len(result.profiles)} profile(s) affected: {len(result.removals())} flag(s) "
            f"removed, {len(result.new_errors())} new error(s)")


# --------------------------------------------------------------------------- text
def _change_text(label: str, c: Change, flag: bool) -> str:
    def shown(value: Any) -> str:
        return _flag_words(c, value) if flag else f"{c.name}={_value(value)}"

    if c.kind == "removed":
        tail = f"   (SGLang default: {_value(c.default)})" if flag else ""
        return f"REMOVED {label}  {shown(c.before)}{tail}"
    if c.kind == "added":
        return f"added   {label}  {shown(c.after)}"
    if flag:
        return f"changed {label}  {c.option} {_value(c.before)} -> {_value(c.after)}"
    return f"changed {label}  {c.name}: {_value(c.before)} -> {_value(c.after)}"


def _target_text(t: TargetDiff) -> list[str]:
    before, after = _host_line(t.before), _host_line(t.after)
    lines = [f"  {t.host}: {after}" if before == after else f"  {t.host}: {before} -> {after}"]
    lines += ["    " + _change_text("flag", c, flag=True) for c in t.flags]
    lines += ["    " + _change_text("env ", c, flag=False) for c in t.environment]
    lines += ["    " + _change_text("deploy", c, flag=False) for c in t.deploy]
    lines += ["    " + _change_text("host", c, flag=False) for c in t.facts]
    lines += ["    new     " + finding_line(d) for d in t.new_findings]
    lines += ["    cleared " + finding_line(d) for d in t.cleared_findings]
    if t.unit_note:
        lines.append(f"    unit    {t.unit_note}")
    if t.unit_diff:
        lines.append("    unit diff:")
        lines += ["      " + line for line in t.unit_diff.splitlines()]
    return lines


def diff_text(result: DiffResult) -> str:
    lines = [f"sgdeploy diff: {result.before} -> {result.after}"]
    lines += ["FLAG REMOVED: " + _removal_text(p, t, c) for p, t, c in result.removals()]
    lines += [f"NEW ERROR: {p.path}" + (f" on {host}" if host else "") + f": {d.rule} {d.message}"
              for p, host, d in result.new_errors()]
    for p in result.profiles:
        lines += ["", f"{p.path} ({p.status})"]
        lines += ["  new     " + finding_line(d) for d in p.new_findings]
        lines += ["  cleared " + finding_line(d) for d in p.cleared_findings]
        for t in p.targets:
            lines += _target_text(t)
    lines += ["", summary_counts(result) if result.profiles else "no profile or host changed"]
    return redact("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- JSON
def _finding(d: Diagnostic) -> dict[str, object]:
    return d.as_dict() | {"path": d.path}


def _target_json(t: TargetDiff) -> dict[str, Any]:
    return {
        "host": t.host,
        "deployed": {"before": t.before is not None, "after": t.after is not None},
        "facts": {
            "before": t.before.facts if t.before else None,
            "after": t.after.facts if t.after else None,
        },
        "flags": [c.as_dict() for c in t.flags],
        "environment": [c.as_dict() for c in t.environment],
        "deploy": [c.as_dict() for c in t.deploy],
        "facts_changed": [c.as_dict() for c in t.facts],
        "findings": {
            "new": [_finding(d) for d in t.new_findings],
            "cleared": [_finding(d) for d in t.cleared_findings],
        },
        "unit_diff": t.unit_diff,
        "unit_note": t.unit_note,
    }


def diff_json(result: DiffResult) -> str:
    document = {
        "before": result.before,
        "after": result.after,
        "removed_flags": [
            {
                "profile": p.path,
                "host": t.host,
                "flag": c.name,
                "option": c.option,
                "before": c.before,
                "default": c.default,
            }
            for p, t, c in result.removals()
        ],
        "new_errors": [
            {"profile": p.path, "host": host} | _finding(d) for p, host, d in result.new_errors()
        ],
        "profiles": [
            {
                "path": p.path,
                "status": p.status,
                "findings": {
                    "new": [_finding(d) for d in p.new_findings],
                    "cleared": [_finding(d) for d in p.cleared_findings],
                },
                "targets": [_target_json(t) for t in p.targets],
            }
            for p in result.profiles
        ],
    }
    return json.dumps(redact_data(document), indent=2, default=str) + "\n"


# --------------------------------------------------------------------------- Markdown
def _code(value: Any) -> str:
    text = _value(value).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if text else ""


def _md_finding(d: Diagnostic) -> str:
    hint = f" (hint: {d.hint})" if d.hint else ""
    return f"- **{d.severity.value}** `{d.rule}` ({_where(d)}): {d.message}{hint}"


def _md_row(label: str, c: Change, flag: bool) -> str:
    name = _code(c.option if flag else c.name)
    after = _code(c.after) if c.kind != "removed" else ("*SGLang default:* "
                                                        f"{_code(c.default)}" if flag else "")
    kind = f"**{c.kind.upper()}**" if c.kind == "removed" else c.kind
    return f"| {kind} {label} | {name} | {_code(c.before) if c.kind != 'added' else ''} | {after} |"


def _target_md(t: TargetDiff) -> list[str]:
    before, after = _host_line(t.before), _host_line(t.after)
    lines = [
        "",
        f"#### {t.host}: {after}" if before == after else f"#### {t.host}: {before} → {after}",
    ]
    rows = [_md_row("flag", c, True) for c in t.flags] + [
        _md_row("env", c, False) for c in t.environment
    ]
    rows += [_md_row("deploy", c, False) for c in t.deploy] + [
        _md_row("host", c, False) for c in t.facts
    ]
    if rows:
        lines += ["", "| change | setting | before | after |", "| --- | --- | --- | --- |", *rows]
    if t.new_findings:
        lines += ["", "New findings:", "", *map(_md_finding, t.new_findings)]
    if t.cleared_findings:
        lines += ["", "Cleared findings:", "", *map(_md_finding, t.cleared_findings)]
    if t.unit_note:
        lines += ["", f"Unit: {t.unit_note}."]
    if t.unit_diff:
        lines += [
            "",
            "<details><summary>unit diff</summary>",
            "",
            "```diff",
            t.unit_diff.rstrip("\n"),
            "```",
            "",
            "</details>",
        ]
    return lines


def diff_markdown(result: DiffResult) -> str:
    lines = [f"## sgdeploy diff: `{result.before}` → `{result.after}`", ""]
    removals, errors = result.removals(), result.new_errors()
    if removals:
        lines += ["> [!CAUTION]", "> **Flags removed** (the server will run without them):"]
        lines += [
            f"> - `{p.path}` on **{t.host}**: {_code(_flag_words(c, c.before))}"
            + (
                f" (SGLang default: {_code(c.default)})"
                if t.after
                else " (no longer deployed there)"
            )
            for p, t, c in removals
        ]
        lines.append("")
    if errors:
        lines += ["> [!WARNING]", "> **New errors:**"]
        lines += [
            f"> - `{p.path}`" + (f" on **{host}**" if host else "") + f": `{d.rule}` {d.message}"
            for p, host, d in errors
        ]
        lines.append("")
    lines.append(summary_counts(result) + "." if result.profiles else "No profile or host changed.")
    for p in result.profiles:
        lines += ["", f"### `{p.path}` ({p.status})"]
        if p.new_findings:
            lines += ["", "New findings:", "", *map(_md_finding, p.new_findings)]
        if p.cleared_findings:
            lines += ["", "Cleared findings:", "", *map(_md_finding, p.cleared_findings)]
        for t in p.targets:
            lines += _target_md(t)
    return redact("\n".join(lines) + "\n")


FORMATTERS = {"text": diff_text, "json": diff_json, "markdown": diff_markdown}
