"""A pydantic error in words for someone editing TOML: what is wrong with the key, and the fix.

A pattern says nothing to a reader, so the models name what theirs ask for with `shaped()`. A
validator brings its own fix as the error's `hint` context (`problem()`). A string is quoted
back only where its pattern was named or the key takes one of fixed choices (a path, a unit
name, an endpoint: never a secret); numbers always.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import StringConstraints
from pydantic_core import PydanticCustomError


@dataclass(frozen=True)
class Shape:
    """What a string pattern asks for, in words, and how to write such a value."""

    what: str
    fix: str


_SHAPES: dict[str, Shape] = {}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_SHOWN_MAX = 60

# What each kind of pydantic type error asks for, as TOML says it.
_TAKES = {
    "string_type": "a string", "bool_type": "true or false", "bool_parsing": "true or false",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "list_type": "an array",
    "tuple_type": "an array", "dict_type": "a table", "model_type": "a table",
    "model_attributes_type": "a table",
}
_TAKES_HINT = {
    "a string": "put the value in double quotes", "true or false": "write true or false, unquoted",
    "an integer": "write a whole number without quotes", "a whole number": "drop the fraction",
    "a number": "write a number without quotes", "an array": "write it as [ ..., ... ]",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
    "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than"),
}


def shaped(pattern: str, what: str, fix: str, max_length: int | None = None) -> StringConstraints:
    """A string pattern, with what it asks for (`what`, after "is not") and how to meet it."""
    _SHAPES[pattern] = Shape(what, fix)
    return StringConstraints(pattern=pattern, max_length=max_length)


def problem(message: str, hint: str) -> PydanticCustomError:
    """A validator's refusal: what is wrong and the fix (raise it instead of ValueError)."""
    return PydanticCustomError("sgdeploy", message, {"hint": hint})


def toml_key(loc: Sequence[str | int]) -> str:
    """`deploy.gpus[0]`, `env."A-B"`: a location as it reads in TOML."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = part if _BARE_KEY.match(part) else _quoted(part)
        out += f".{name}" if out else name
    return out


def toml_type(value: object) -> str:
    """The TOML name of a value's type: what the file wrote, never the value itself."""
    kinds: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (bool, "true/false"), (int, "an integer"), (float, "a number"), (str, "a string"),
        (list, "an array"), (dict, "a table"), ((datetime.date, datetime.time), "a date or time"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def shown(value: object) -> str:
    """A value quoted as TOML would write it, cut to a readable length, nothing unprintable."""
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if not isinstance(value, str):
        return toml_type(value)
    return _quoted(value if len(value) <= _SHOWN_MAX else value[:_SHOWN_MAX] + "…")


def _quoted(text: str) -> str:
    """A TOML basic string of `text`, on one line: whatever is not printable, escaped."""
    quoted = json.dumps(text, ensure_ascii=False)
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in quoted)


def explain(key: str, errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(message, hint) for the errors pydantic gave one key (several: the members of a union)."""
    specific = [e for e in errors if e["type"] not in _TAKES]
    if len(errors) > 1 and not specific:
        return _union(key, errors)
    return _one(key, (specific or list(errors))[0])


def _union(key: str, errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    takes = list(dict.fromkeys(_TAKES[e["type"]] for e in errors))
    wanted = ", ".join(takes[:-1]) + f" or {takes[-1]}"
    return (f"{key} takes {wanted}, not {toml_type(errors[0].get('input'))}",
            f"write {key} as {wanted}")


def _one(key: str, error: Mapping[str, Any]) -> tuple[str, str]:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "string_pattern_mismatch":
        return _pattern(key, error, str(ctx.get("pattern", "")))
    if kind in _TAKES:
        return _wrong_type(key, _TAKES[kind], value)
    if kind in _BOUNDS:
        return _bound(key, kind, ctx, value)
    if kind in ("string_too_short", "too_short"):
        return _too_short(key, ctx, value)
    if kind in ("string_too_long", "too_long"):
        size = len(value) if isinstance(value, str | list | tuple) else "too many"
        return f"{key} is too long ({size}; at most {ctx.get('max_length')})", "shorten it"
    if kind == "literal_error":
        return (f"{key} = {shown(value)} is not one of {ctx.get('expected')}",
                f"use one of {ctx.get('expected')}")
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{key}: {message}", str(ctx.get("hint") or "fix the value")


def _pattern(key: str, error: Mapping[str, Any], pattern: str) -> tuple[str, str]:
    shape = _SHAPES.get(pattern)
    of_key = tuple(error["loc"])[-1:] == ("[key]",)  # a table's key refused, not its value
    if shape is None:  # a pattern no model named: the value may be anything, so it is not shown
        named = f"the key {key}" if of_key else key
        return f"{named} does not have the form it needs ({pattern})", "fix it"
    named = f"the key {key}" if of_key else f"{key} = {shown(error.get('input'))}"
    return f"{named} is not {shape.what}", shape.fix


def _wrong_type(key: str, takes: str, value: object) -> tuple[str, str]:
    if takes == "a table":
        return f"{key} must be a table, not {toml_type(value)}", f"write it as a [{key}] section"
    got = f"the number {shown(value)}" if takes == "a whole number" else toml_type(value)
    return f"{key} takes {takes}, not {got}", _TAKES_HINT.get(takes, "fix the value")


def _bound(key: str, kind: str, ctx: Mapping[str, Any], value: object) -> tuple[str, str]:
    name, words = _BOUNDS[kind]
    limit = ctx.get(name)
    return (f"{key} = {shown(value)} is out of range: it must be {words} {limit}",
            f"use a value {words} {limit}")


def _too_short(key: str, ctx: Mapping[str, Any], value: object) -> tuple[str, str]:
    if isinstance(value, str):
        return f"{key} is an empty string", f"give {key} a value, or remove the key"
    least = ctx.get("min_length", 1)
    return (f"{key} is an empty array" if not value else f"{key} has too few items",
            f"list at least {least} item(s) in {key}, or remove the key")
