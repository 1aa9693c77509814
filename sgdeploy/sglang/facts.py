"""Facts about SGLang that differ by release, read from the wheels (catalogs/facts.json).

`scripts/build_catalogs.py` writes the file with `scripts/sglang_facts.py`: allow-lists such
as the architectures that keep the breakable prefill CUDA graph, and what each deprecated
option does, each with the release range its value holds for. Loaded once, on first use.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from sgdeploy.sglang.catalog import CATALOG_DIR
from sgdeploy.sglang.versions import Version, parse_version

FACTS_PATH = CATALOG_DIR / "facts.json"


@cache
def _table() -> dict[str, list[tuple[Version, Version | None, Any]]]:
    raw = json.loads(FACTS_PATH.read_text(encoding="utf-8"))["facts"]
    return {
        name: [
            (
                parse_version(s["since"]),
                parse_version(s["until"]) if s["until"] else None,
                s["value"],
            )
            for s in spans
        ]
        for name, spans in raw.items()
    }


def fact(name: str, version: Version) -> Any:
    """The value of fact `name` in release `version`; None where that release has no such fact."""
    for since, until, value in _table().get(name, ()):
        if since <= version and (until is None or version < until):
            return value
    return None


def spans(name: str) -> list[tuple[Version, Version | None, Any]]:
    """Every (since, until, value) range of one fact, oldest first."""
    return list(_table().get(name, ()))


def recorded(name: str) -> bool:
    """Whether facts.json records fact `name` at all (with no range: no release has it)."""
    return name in _table()
