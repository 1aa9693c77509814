"""Formatting findings and results: text, JSON and GitHub workflow commands. Pure: returns strings."""

from __future__ import annotations

import json
from collections.abc import Sequence

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
