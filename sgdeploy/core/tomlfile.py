"""Reading TOML files into pydantic models, with every problem located at file:line.

Profiles and the inventory share this: read the bytes, parse TOML, locate keys, validate the
shape with pydantic, and turn pydantic's errors into diagnostics that name the dotted key, its
line and a did-you-mean suggestion. Nothing here raises for bad input.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.core.tomlpos import key_lines

M = TypeVar("M", bound=BaseModel)

RULE_TOML_SYNTAX = "SGD001"
RULE_UNKNOWN_KEY = "SGD002"
RULE_INVALID_VALUE = "SGD003"
RULE_UNREADABLE = "SGD004"
RULE_BOM = "SGD005"

_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


@dataclass
class TomlDocument(Generic[M]):
    """A parsed file: the raw data, where its keys are, the model (if valid) and findings."""

    path: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    model: M | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    _lines: dict[str, int] | None = field(default=None, repr=False)

    @property
    def lines(self) -> dict[str, int]:
        """Dotted key -> line, scanned on first use: valid files never need it."""
        if self._lines is None:
            try:
                self._lines = key_lines(self.text)
            except RecursionError:
                self._lines = {}
        return self._lines

    def line_of(self, dotted: str) -> int | None:
        """Line of the key, or of its nearest enclosing key/table that has one."""
        parts = dotted.split(".")
        while parts:
            line = self.lines.get(".".join(parts))
            if line is not None:
                return line
            parts.pop()
        return None

    def diagnostic(
        self,
        rule: str,
        message: str,
        *,
        dotted: str | None,
        hint: str = "",
        severity: Severity = Severity.ERROR,
    ) -> Diagnostic:
        return Diagnostic(
            rule=rule,
            severity=severity,
            message=message,
            hint=hint,
            field=dotted,
            line=self.line_of(dotted) if dotted else None,
            path=self.path,
        )


def read_toml(
    path: str | Path,
    model: type[M],
    context: Mapping[str, Any] | None = None,
    document: type[TomlDocument[M]] | None = None,
) -> TomlDocument[M]:
    """Read, parse and validate one file; problems end up in `.diagnostics`."""
    doc: TomlDocument[M] = (document or TomlDocument)(path=str(path))
    try:
        # Bytes, not read_text(): universal newlines would turn a lone CR into a line break, so
        # line numbers and the profile's hash would not match the file.
        doc.text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        doc.diagnostics.append(doc.diagnostic(RULE_UNREADABLE, f"file not found: {path}", dotted=None,
                                              hint="check the path"))
        return doc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        doc.diagnostics.append(doc.diagnostic(RULE_UNREADABLE, f"cannot read {path}: {reason}",
                                              dotted=None, hint="the file must be readable UTF-8 TOML"))
        return doc
    if doc.text.startswith("\ufeff"):
        # Editors on Windows save UTF-8 with a byte-order mark, which TOML does not allow; it is
        # nothing but that mark, so the file is read without it (same lines, same hash).
        doc.text = doc.text[1:]
        doc.diagnostics.append(Diagnostic(
            rule=RULE_BOM, severity=Severity.WARNING, line=1, path=doc.path,
            message="the file starts with a UTF-8 byte-order mark (BOM), which TOML does not allow; read without it",
            hint="save the file as UTF-8 without BOM (in most editors: encoding 'UTF-8', not 'UTF-8 with BOM')"))
    return parse_toml_text(doc, model, context)


def parse_toml_text(
    doc: TomlDocument[M], model: type[M], context: Mapping[str, Any] | None = None
) -> TomlDocument[M]:
    try:
        doc.data = tomllib.loads(doc.text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        position = _TOML_POSITION.search(message)
        doc.diagnostics.append(
            Diagnostic(
                rule=RULE_TOML_SYNTAX,
                severity=Severity.ERROR,
                message=f"TOML syntax error: {_TOML_POSITION.sub('', message).strip()}",
                hint="fix the TOML syntax at this line",
                line=int(position.group(1)) if position else None,
                path=doc.path,
            )
        )
        return doc
    except (ValueError, RecursionError) as exc:
        doc.diagnostics.append(doc.diagnostic(RULE_TOML_SYNTAX, f"TOML syntax error: {exc}", dotted=None,
                                              hint="fix the TOML syntax"))
        return doc
    try:
        doc.model = model.model_validate(doc.data, context=dict(context or {}))
    except ValidationError as exc:
        doc.diagnostics.extend(pydantic_diagnostics(doc, model, exc))
    return doc


def pydantic_diagnostics(doc: TomlDocument[Any], model: type[BaseModel], exc: ValidationError) -> list[Diagnostic]:
    """One located diagnostic per pydantic error."""
    found = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"] if not _is_union_tag(part)]
        dotted = ".".join(loc)
        kind = error["type"]
        if kind == "extra_forbidden":
            suggestion = did_you_mean(loc[-1], _known_keys(model, loc[:-1]))
            found.append(doc.diagnostic(
                RULE_UNKNOWN_KEY,
                f"unknown key '{dotted}'" + (f"; did you mean '{suggestion}'?" if suggestion else ""),
                dotted=dotted,
                hint=f"rename it to '{suggestion}'" if suggestion else "remove it or check the spelling",
            ))
        elif kind == "missing":
            found.append(doc.diagnostic(RULE_INVALID_VALUE, f"missing required key '{dotted}'", dotted=dotted,
                                        hint=f"add '{loc[-1]} = ...' to [{'.'.join(loc[:-1]) or 'top level'}]"))
        else:
            message = error["msg"]
            found.append(doc.diagnostic(RULE_INVALID_VALUE, f"invalid value for '{dotted}': {message}",
                                        dotted=dotted, hint=_hint_for(error)))
    return found


def _is_union_tag(part: object) -> bool:
    # pydantic adds the union member's type name to the location ("str", "int", ...).
    return isinstance(part, str) and (part in {"str", "int", "float", "bool", "list", "dict"} or "[" in part)


def _hint_for(error: Mapping[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    if "expected" in ctx:
        return f"use one of {ctx['expected']}"
    return "fix the value"


def _known_keys(model: type[BaseModel], loc: Sequence[str]) -> list[str]:
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        info = current.model_fields.get(part)
        annotation = info.annotation if info else None
        current = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return list(current.model_fields) if current else []


def did_you_mean(name: str, candidates: Sequence[str]) -> str | None:
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None
