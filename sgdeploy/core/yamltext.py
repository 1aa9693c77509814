"""YAML text of JSON-like data (dicts, lists, strings, numbers, booleans, None), without a YAML
library: block mappings and sequences, and a string plain only where every YAML reader (1.1 and
1.2, as `kubectl` reads it) takes it back as the same string; anything else double-quoted as JSON
writes it, which YAML reads as the same string. Keys keep their order."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

# A plain scalar: starts with a letter, '/' or '_', then no ': ', ' #', quotes or flow characters.
_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./=-]*$")
# Words YAML 1.1 reads as booleans or null (kubectl's reader is 1.1-like): always quoted.
_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def scalar(value: Any) -> str:
    """One scalar as YAML text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if not isinstance(value, str):
        raise TypeError(f"no YAML for {type(value).__name__}")
    if _PLAIN.fullmatch(value) and value.lower() not in _SPECIAL:
        return value
    quoted = json.dumps(value, ensure_ascii=False)
    # YAML reads some characters JSON leaves as they are as line breaks (NEL, LS, PS) or drops them
    # (BOM)
    return "".join(
        ch
        if ch.isprintable()
        else f"\\u{ord(ch):04x}"
        if ord(ch) <= 0xFFFF
        else f"\\U{ord(ch):08x}"
        for ch in quoted
    )


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return [pad + "{}"]
        out = []
        for key, item in value.items():
            head = f"{pad}{scalar(str(key))}:"
            if _is_block(item):
                # a sequence under a key sits at the key's indentation, as kubectl writes it
                out += [head, *_lines(item, indent if isinstance(item, Sequence) else indent + 2)]
            else:
                out.append(f"{head} {_inline(item)}")
        return out
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if _is_block(item):
                inner = _lines(item, indent + 2)
                out.append(f"{pad}- {inner[0][indent + 2:]}")
                out += inner[1:]
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [pad + scalar(value)]


def _is_block(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple) and len(value) > 0


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return scalar(value)


def dump(document: Any) -> str:
    """One YAML document (no `---`), ending in a newline."""
    return "\n".join(_lines(document, 0)) + "\n"


def dump_all(documents: Sequence[Any]) -> str:
    """Several documents, each after a `---` line (what `kubectl apply -f` reads as a stream)."""
    return "".join(f"---\n{dump(document)}" for document in documents)
