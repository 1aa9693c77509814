"""Reading TOML files into pydantic models, with every problem located at file:line.

Profiles and the inventory share this: read the bytes, parse TOML, locate keys, validate the
shape with pydantic, and turn pydantic's errors into diagnostics that name the dotted key, its
line and a did-you-mean suggestion. Nothing here raises for bad input.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Any, Generic, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.core.explain import explain, toml_key
from sgdeploy.core.files import FileProblem, decode_problem, not_text, path_problem
from sgdeploy.core.tomlpos import deep_key_line, key_lines, nesting_line

M = TypeVar("M", bound=BaseModel)

RULE_TOML_SYNTAX = "SGD001"
RULE_UNKNOWN_KEY = "SGD002"
RULE_INVALID_VALUE = "SGD003"
RULE_UNREADABLE = "SGD004"
RULE_BOM = "SGD005"

_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "[key]"})
_TAG = re.compile(r"^[a-z][a-z-]*\[.*\]$")
NESTING_SHOWN = 100


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
    what: str = "file",
) -> TomlDocument[M]:
    """Read, parse and validate one file (`what`: "profile", "inventory", for the messages);
    problems end up in `.diagnostics`."""
    doc: TomlDocument[M] = (document or TomlDocument)(path=str(path))
    problem = path_problem(path, what, "*.toml")
    if problem is None:
        try:
            # Bytes, not read_text(): universal newlines would turn a lone CR into a line break,
            # so line numbers and the profile's hash would not match the file.
            data = Path(path).read_bytes()
            doc.text = data.decode("utf-8")
        except OSError as exc:
            problem = path_problem(path, what) or FileProblem(
                f"cannot read {path}: {exc.strerror or exc}", "check the file")
        except UnicodeDecodeError as exc:
            problem = decode_problem(data, exc)
    if problem is not None:
        doc.diagnostics.append(Diagnostic(RULE_UNREADABLE, Severity.ERROR, problem.message,
                                          problem.hint, line=problem.line, path=doc.path))
        return doc
    if doc.text.startswith("\ufeff"):
        # Editors on Windows save UTF-8 with a byte-order mark, which TOML does not allow; it is
        # nothing but that mark, so the file is read without it (same lines, same hash).
        doc.text = doc.text[1:]
        doc.diagnostics.append(Diagnostic(
            rule=RULE_BOM, severity=Severity.WARNING, line=1, path=doc.path,
            message="the file starts with a UTF-8 byte-order mark (BOM), which TOML does not "
                    "allow; read without it",
            hint="save the file as UTF-8 without BOM (in most editors: encoding 'UTF-8', not "
                 "'UTF-8 with BOM')"))
    return parse_toml_text(doc, model, context)


def parse_toml_text(
    doc: TomlDocument[M], model: type[M], context: Mapping[str, Any] | None = None
) -> TomlDocument[M]:
    try:
        doc.data = tomllib.loads(doc.text)
    except tomllib.TOMLDecodeError as exc:
        doc.diagnostics.append(_syntax_error(doc, str(exc), not_text(doc.text[:8192].encode())))
        return doc
    except RecursionError:
        doc.diagnostics.append(_too_deep(doc))
        return doc
    if _deeper_than(doc.data, NESTING_SHOWN):  # whatever walks it later would recurse as deep
        doc.diagnostics.append(_too_deep(doc))
        return doc
    if not doc.data and _required(model):
        doc.diagnostics.append(_empty(doc, model))
        return doc
    try:
        doc.model = model.model_validate(doc.data, context=dict(context or {}))
    except ValidationError as exc:
        doc.diagnostics.extend(pydantic_diagnostics(doc, model, exc))
    return doc


def _syntax_error(doc: TomlDocument[Any], message: str, text: FileProblem | None) -> Diagnostic:
    """tomllib's complaint at its line; UTF-16 or binary bytes that happened to decode, said so."""
    if text is not None:
        return Diagnostic(RULE_TOML_SYNTAX, Severity.ERROR, text.message, text.hint, path=doc.path)
    position = _TOML_POSITION.search(message)
    return Diagnostic(
        rule=RULE_TOML_SYNTAX,
        severity=Severity.ERROR,
        message=f"TOML syntax error: {_TOML_POSITION.sub('', message).strip()}",
        hint="fix the TOML syntax at this line",
        line=int(position.group(1)) if position else None,
        path=doc.path,
    )


def _too_deep(doc: TomlDocument[Any]) -> Diagnostic:
    """Tables or arrays nested deeper than anything sgdeploy reads (tomllib itself recurses once
    per level of arrays and inline tables, and gives up)."""
    deep = NESTING_SHOWN // 2  # where it gets deep, since headers and brackets add up
    line = nesting_line(doc.text, deep) or deep_key_line(doc.text, deep)
    return Diagnostic(
        RULE_TOML_SYNTAX, Severity.ERROR,
        f"tables or arrays nest more than {NESTING_SHOWN} levels deep (from this line on)",
        "flatten the value: nothing sgdeploy reads nests this deep", line=line, path=doc.path)


def _deeper_than(data: object, limit: int) -> bool:
    """Whether tables and arrays nest more than `limit` levels, found without recursion."""
    level: list[tuple[object, int]] = [(data, 0)]
    while level:
        value, depth = level.pop()
        if not isinstance(value, dict | list):
            continue
        if depth > limit:
            return True
        items = value.values() if isinstance(value, dict) else value
        level.extend((item, depth + 1) for item in items)
    return False


def _empty(doc: TomlDocument[Any], model: type[BaseModel]) -> Diagnostic:
    """A file with nothing in it (or comments only) where the model needs something."""
    what = "empty" if not doc.text.strip() else "only comments"
    required = _required(model)
    needed = " and ".join(_wanted(model, name) for name in required)
    hints = [_table_hint(model, (name,)) if _table_model(model, [name]) else
             f"add {_wanted(model, name)}" for name in required]
    return doc.diagnostic(RULE_INVALID_VALUE, f"the file is {what}: it needs {needed}",
                          dotted=None, hint="; ".join(hints))


def pydantic_diagnostics(doc: TomlDocument[Any], model: type[BaseModel], exc: ValidationError
                         ) -> list[Diagnostic]:
    """One located diagnostic per key pydantic refused (the errors of a union's members as one)."""
    by_key: dict[tuple[str | int, ...], list[Any]] = {}
    for error in exc.errors(include_url=False):
        by_key.setdefault(_location(error), []).append(error)
    found = []
    for loc, errors in by_key.items():
        names = [str(part) for part in loc]
        if errors[0]["type"] == "extra_forbidden":
            found.append(_unknown_key(doc, model, names))
        elif errors[0]["type"] == "missing":
            found.append(_missing(doc, model, names))
        else:
            message, hint = explain(toml_key(loc) or "the file", errors)
            found.append(doc.diagnostic(RULE_INVALID_VALUE, message, dotted=".".join(names) or None,
                                        hint=hint))
    return found


def _unknown_key(doc: TomlDocument[Any], model: type[BaseModel], loc: list[str]) -> Diagnostic:
    dotted = ".".join(loc)
    suggestion = did_you_mean(loc[-1], _known_keys(model, loc[:-1]))
    near = f"; did you mean '{suggestion}'?" if suggestion else ""
    return doc.diagnostic(
        RULE_UNKNOWN_KEY,
        f"unknown key '{toml_key(loc)}'{near}",
        dotted=dotted,
        hint=f"rename it to '{suggestion}'" if suggestion else "remove it or check the spelling",
    )


def _missing(doc: TomlDocument[Any], model: type[BaseModel], loc: list[str]) -> Diagnostic:
    dotted, table = ".".join(loc), ".".join(loc[:-1])
    if _table_model(model, loc) is not None:
        return doc.diagnostic(RULE_INVALID_VALUE, f"missing required table [{dotted}]",
                              dotted=dotted, hint=_table_hint(model, tuple(loc)))
    parent = _table_model(model, loc[:-1])
    info = _fields(parent).get(loc[-1]) if parent else None
    about = f" ({info.description.rstrip('.')})" if info and info.description else ""
    written = _wanted(parent, loc[-1]) if parent else f"{loc[-1]} = ..."
    where = f"under [{table}]" if table else "at the top of the file"
    return doc.diagnostic(RULE_INVALID_VALUE, f"missing required key '{dotted}'{about}",
                          dotted=dotted, hint=f"add {written} {where}")


def _table_hint(model: type[BaseModel], loc: tuple[str, ...]) -> str:
    table = _table_model(model, list(loc))
    keys = " and ".join(_wanted(table, name) for name in _required(table)) if table else ""
    return f"add a [{'.'.join(loc)}] table" + (f" with {keys}" if keys else "")


def _wanted(model: type[BaseModel], name: str) -> str:
    """How a required key is written: `python = "/opt/sglang/bin/python3"`, `[deploy]`."""
    if _table_model(model, [name]) is not None:
        return f"[{name}]"
    info = _fields(model).get(name)
    examples = info.examples if info else None
    return f"{name} = {json.dumps(examples[0]) if examples else '...'}"


def _required(model: type[BaseModel] | None) -> list[str]:
    return [name for name, info in _fields(model).items() if info.is_required()] if model else []


def _fields(model: type[BaseModel] | None) -> dict[str, FieldInfo]:
    """A model's fields by the key a file writes (the alias, where there is one)."""
    return {info.alias or name: info for name, info in model.model_fields.items()} if model else {}


def _table_model(model: type[BaseModel], loc: Sequence[str]) -> type[BaseModel] | None:
    """The model of the table at `loc`: through optional tables and tables of tables."""
    current: Any = model
    for part in loc:
        if _is_model(current):
            info = _fields(current).get(part)
            current = info.annotation if info else None
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
        current = _unoptional(current)
    return current if _is_model(current) else None


def _unoptional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _location(error: Mapping[str, Any]) -> tuple[str | int, ...]:
    """The key an error is about: pydantic's location without the union members' type names it
    adds ("str", "constrained-int", "function-after[...]"); an unknown or missing key is the
    file's own name, whatever it looks like."""
    loc = tuple(error["loc"])
    own = loc[-1:] if error["type"] in ("extra_forbidden", "missing") else ()
    return (*(part for part in loc[: len(loc) - len(own)] if not _is_union_tag(part)), *own)


def _is_union_tag(part: object) -> bool:
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith("constrained-")
                                      or _TAG.match(part) is not None)


def _known_keys(model: type[BaseModel], loc: Sequence[str]) -> list[str]:
    return list(_fields(_table_model(model, loc)))


def did_you_mean(name: str, candidates: Sequence[str]) -> str | None:
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None
