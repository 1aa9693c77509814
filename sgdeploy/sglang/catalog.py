"""SGLang's launch_server flags, one catalog per release, bundled as data.

Catalogs are generated from the released wheels by `scripts/build_catalogs.py`
(see docs/catalogs.md) and loaded lazily: validating a profile reads one catalog.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from sgdeploy.sglang.versions import Version, format_version, parse_version

CATALOG_DIR = Path(__file__).parent / "catalogs"
# Extra folders with catalogs (e.g. for an SGLang build newer than this release), searched first.
CATALOG_PATH_ENV = "SGDEPLOY_CATALOG_PATH"

# argparse `type=` callables SGLang uses, by the kind of value they accept.
_JSON_TYPES = {"json.loads", "json_list_type", "parse_cuda_graph_config_arg"}
_INT_TYPES = {"int", "human_readable_int"}
_FLOAT_TYPES = {"float"}


class UnknownVersionError(LookupError):
    """No catalog is bundled for the requested SGLang version."""


@dataclass(frozen=True)
class Flag:
    """One `sglang serve` option, keyed by its ServerArgs field name."""

    field: str
    options: tuple[str, ...]
    argparse_type: str | None
    python_type: str | None
    default: Any
    choices: tuple[Any, ...] | None
    nargs: str | int | None
    store_true: bool
    store_false: bool
    boolean_optional: bool
    takes_value: bool
    deprecated: bool
    help: str

    @property
    def option(self) -> str:
        """The spelling sgdeploy renders: `--<field-in-kebab-case>` when SGLang has it."""
        kebab = "--" + self.field.replace("_", "-")
        if kebab in self.options:
            return kebab
        long_options = [o for o in self.options if o.startswith("--") and not o.startswith("--no-")]
        return (long_options or list(self.options))[0]

    @property
    def negative_option(self) -> str | None:
        """`--no-<name>` for BooleanOptionalAction flags."""
        if not self.boolean_optional:
            return None
        return next((o for o in self.options if o.startswith("--no-")), None)

    @property
    def is_switch(self) -> bool:
        return not self.takes_value

    @property
    def is_list(self) -> bool:
        return self.nargs in ("+", "*") or (isinstance(self.nargs, int) and self.nargs > 1)

    @property
    def value_kind(self) -> str:
        """'bool', 'int', 'float', 'json' or 'str': what one value must be."""
        if self.is_switch:
            return "bool"
        if self.argparse_type in _JSON_TYPES:
            return "json"
        if self.argparse_type in _INT_TYPES:
            return "int"
        if self.argparse_type in _FLOAT_TYPES:
            return "float"
        return "str"

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Flag:
        action = str(raw.get("action") or "").lower()
        choices = raw.get("choices")
        boolean_optional = bool(raw.get("boolean_optional") or raw.get("negatable_no_flag")
                                or "booleanoptional" in action)
        store_true = bool(raw.get("store_true")) or "storetrue" in action.replace("_", "")
        store_false = "storefalse" in action.replace("_", "")
        switch = store_true or store_false or boolean_optional or raw.get("nargs") == 0
        return cls(
            field=raw["field"],
            options=tuple(raw.get("flags") or ()),
            argparse_type=raw.get("argparse_type"),
            python_type=raw.get("python_type"),
            default=raw.get("default"),
            choices=tuple(choices) if isinstance(choices, list) else None,
            nargs=None if switch else raw.get("nargs"),
            store_true=store_true,
            store_false=store_false,
            boolean_optional=boolean_optional,
            takes_value=bool(raw.get("takes_value", True)) and not switch,
            deprecated=bool(raw.get("deprecated")),
            help=str(raw.get("help_first_sentence") or raw.get("help") or ""),
        )


@dataclass(frozen=True)
class Catalog:
    """Every flag of one SGLang release."""

    version: str
    flags: dict[str, Flag] = field(repr=False)

    @cached_property
    def by_option(self) -> dict[str, Flag]:
        return {option: flag for flag in self.flags.values() for option in flag.options}

    @cached_property
    def parsed_version(self) -> Version:
        return parse_version(self.version)

    def get(self, name: str) -> Flag | None:
        return self.flags.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.flags

    def default(self, name: str) -> Any:
        flag = self.flags.get(name)
        return flag.default if flag else None


def _catalog_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(CATALOG_PATH_ENV, "").split(os.pathsep) if p]
    return [*extra, CATALOG_DIR]


@cache
def available_versions() -> list[str]:
    """Bundled catalog versions, oldest first."""
    names = {p.name.split(".json")[0] for d in _catalog_dirs() for p in d.glob("*.json*") if p.name != "index.json"}
    versions = []
    for name in names:
        try:
            versions.append(parse_version(name))
        except ValueError:
            continue
    return [format_version(v) for v in sorted(versions)]


def newest_version() -> str:
    versions = available_versions()
    if not versions:
        raise UnknownVersionError("no SGLang flag catalog is bundled")
    return versions[-1]


def _catalog_path(version: str) -> Path | None:
    for folder in _catalog_dirs():
        for suffix in (".json.gz", ".json"):
            path = folder / f"{version}{suffix}"
            if path.exists():
                return path
    return None


@cache
def load_catalog(version: str) -> Catalog:
    """The catalog of exactly `version`; raises UnknownVersionError when none is bundled."""
    normalised = format_version(parse_version(version))
    path = _catalog_path(normalised)
    if path is None:
        known = available_versions()
        raise UnknownVersionError(
            f"no flag catalog is bundled for SGLang {version}"
            + (f" (bundled: {known[0]} … {known[-1]})" if known else "")
        )
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    flags = {item["field"]: Flag.from_json(item) for item in raw["flags"]}
    return Catalog(version=normalised, flags=flags)


def flag_history(field_name: str) -> tuple[str | None, str | None]:
    """(last version that had the flag, first version that has it) across bundled catalogs.

    Used to explain a flag that is unknown to the target version: removed earlier, or added
    later. Loads every catalog, so call it only on the error path.
    """
    return _flag_index().get(field_name, (None, None))


@cache
def _flag_index() -> dict[str, tuple[str, str]]:
    """field -> (last version with it, first version with it), over every bundled catalog."""
    index: dict[str, tuple[str, str]] = {}
    for version in available_versions():
        for name in load_catalog(version).flags:
            first = index[name][1] if name in index else version
            index[name] = (version, first)
    return index


def next_version(version: str) -> str | None:
    versions = available_versions()
    try:
        index = versions.index(version)
    except ValueError:
        return None
    return versions[index + 1] if index + 1 < len(versions) else None
