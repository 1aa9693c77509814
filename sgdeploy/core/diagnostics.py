"""Findings about a profile or inventory: one format for every output."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Diagnostic:
    """One finding, located in a file: `path:line: RULE message (hint: ...)`."""

    rule: str
    severity: Severity
    message: str
    hint: str = ""
    field: str | None = None  # dotted TOML path, e.g. "server.language_only"
    line: int | None = None  # 1-based line of the key in the file
    path: str | None = None
    # the members of a group target it holds for, each with its release: "old (SGLang 0.5.11)"
    hosts: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    @property
    def described(self) -> str:
        """The message, with the hosts of a group it holds for."""
        return self.message + (f" [on {', '.join(self.hosts)}]" if self.hosts else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "field": self.field,
            "line": self.line,
            "message": self.message,
            "hint": self.hint,
            **({"hosts": list(self.hosts)} if self.hosts else {}),
        }


def finding_line(d: Diagnostic) -> str:
    """`profiles/x.toml:12: SGD301 error: message (hint: ...)`."""
    where = d.path or "-"
    if d.line is not None:
        where += f":{d.line}"
    text = f"{where}: {d.rule} {d.severity.value}: {d.described}"
    return text + (f" (hint: {d.hint})" if d.hint else "")
