"""SGLang's own check sites per release, and what in sgdeploy decides each one.

`catalogs/checks/<version>.json.gz` lists, per bundled release, every `raise` and `assert` that
`ServerArgs` reaches, the warnings it logs and the fields it overrides (built by
`scripts/build_catalogs.py`, see docs/catalogs.md). `data/check_sites.toml` maps each refusal
site, by its key (function name and normalised message), to the rule that decides it before
start, or says why no offline rule can.
"""

from __future__ import annotations

import gzip
import json
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from sgdeploy.sglang.catalog import CATALOG_DIR, available_versions
from sgdeploy.sglang.versions import format_version, parse_version

CHECKS_DIR = CATALOG_DIR / "checks"
MAPPING_PATH = Path(__file__).parent / "data" / "check_sites.toml"
REFUSAL_KINDS = ("raise", "assert")
WILDCARD = "*"

# What a mapping value can say, besides naming rule ids ("SGD101" or "SGD101 SGD102").
HOST = "host"  # decided on the host: needs config.json, installed packages or live GPU facts
UNDECIDABLE = "undecidable"  # cannot be decided before start
INTERNAL = "internal"  # not a refusal of a launch: an internal invariant or a plugin API misuse
TODO = "todo"  # not yet reviewed
CATEGORIES = (HOST, UNDECIDABLE, INTERNAL, TODO)
OFFLINE = "offline"  # the category of a site a rule decides


@dataclass(frozen=True)
class Decision:
    """What decides one check site: rule ids, or a category and its one-line reason."""

    category: str  # OFFLINE or one of CATEGORIES
    rules: tuple[str, ...] = ()
    reason: str = ""

    @classmethod
    def parse(cls, value: str) -> Decision:
        head, _, reason = value.partition(":")
        head = head.strip()
        if head in CATEGORIES:
            return cls(head, reason=reason.strip())
        return cls(OFFLINE, rules=tuple(value.split()))


@cache
def load_sites(version: str) -> list[dict[str, Any]]:
    """Every site of one release, as built (refusals, warnings and overrides)."""
    path = CHECKS_DIR / f"{format_version(parse_version(version))}.json.gz"
    data: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    sites: list[dict[str, Any]] = data["sites"]
    return sites


def refusal_sites(version: str) -> list[dict[str, Any]]:
    return [site for site in load_sites(version) if site["kind"] in REFUSAL_KINDS]


def inventoried_versions() -> list[str]:
    return [v for v in available_versions() if (CHECKS_DIR / f"{v}.json.gz").is_file()]


@cache
def load_mapping(path: Path = MAPPING_PATH) -> dict[str, dict[str, Decision]]:
    """function key -> message key (or `*` for the whole function) -> decision."""
    with path.open("rb") as fh:
        raw = tomllib.load(fh)
    return {
        function: {message: Decision.parse(value) for message, value in entries.items()}
        for function, entries in raw.items()
    }


def split_key(key: str) -> tuple[str, str]:
    function, _, message = key.partition(": ")
    return function, message


def decide(key: str, mapping: dict[str, dict[str, Decision]] | None = None) -> Decision | None:
    """The decision for one site key: its own entry, else its function's `*` entry."""
    function, message = split_key(key)
    entries = (load_mapping() if mapping is None else mapping).get(function, {})
    return entries.get(message) or entries.get(WILDCARD)


def coverage(version: str) -> Counter[str]:
    """Refusal sites of one release by category; sites that map to nothing count as 'unmapped'."""
    counts: Counter[str] = Counter()
    for site in refusal_sites(version):
        decision = decide(site["key"])
        counts[decision.category if decision else "unmapped"] += 1
    counts["sites"] = sum(counts.values())
    for site in load_sites(version):
        if site["kind"] not in REFUSAL_KINDS:
            counts[site["kind"]] += 1
    return counts


TABLE_COLUMNS = (
    ("sites", "check sites"),
    (OFFLINE, "decided offline"),
    (HOST, "decided on the host"),
    (UNDECIDABLE, "undecidable"),
    (INTERNAL, "internal"),
    (TODO, "not yet reviewed"),
    ("warning", "warnings"),
    ("override", "overrides"),
)


def coverage_table() -> str:
    """The per-version table in docs/catalogs.md (Markdown)."""
    header = "| SGLang | " + " | ".join(title for _, title in TABLE_COLUMNS) + " |"
    lines = [header, "| --- |" + " ---: |" * len(TABLE_COLUMNS)]
    for version in inventoried_versions():
        counts = coverage(version)
        lines.append(
            f"| {version} | " + " | ".join(str(counts[c]) for c, _ in TABLE_COLUMNS) + " |"
        )
    return "\n".join(lines) + "\n"
