"""SGLang's launch_server flags, one catalog per release, bundled as data.

Catalogs are generated from the released wheels by `scripts/build_catalogs.py`
(see docs/catalogs.md) and loaded lazily: validating a profile reads one catalog.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Any, NamedTuple

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
    const: Any = None  # what a Deprecated*Action switch stores into its dest when given
    # SGLang's `new_flag`, e.g. "--cuda-graph-backend-prefill=breakable"
    replaced_by: str | None = None
    refusal: str | None = None  # the parser error SGLang stops with when the option is given
    ignored: bool = False  # accepted with a warning and stored nowhere (a bare DeprecatedAction)
    # a field of earlier releases that this one takes as an option of `field`
    renamed_from: str | None = None

    @property
    def key(self) -> str:
        """The profile key this option answers to: the field, or for an alias its own name."""
        return self.renamed_from or _row_key(self.field, self.options, self.deprecated)

    @property
    def is_alias(self) -> bool:
        """A deprecated option that feeds another field (`--stream-output` ->
        incremental_streaming_output)."""
        return self.key != self.field

    def stored(self, value: Any) -> Any:
        """What SGLang stores into `field` for a profile value of this option; NOT_GIVEN when a
        switch is off (the option is then not rendered, SGLang never sees it)."""
        if self.ignored or self.refusal is not None:
            return NOT_GIVEN
        if self.is_switch:
            if self.store_false:
                return NOT_GIVEN if value else False
            if not value:
                return False if self.boolean_optional else NOT_GIVEN
            return True if self.const is None else self.const
        return value if self.const is None else self.const

    @property
    def option(self) -> str:
        """The spelling sgdeploy renders: `--<field-in-kebab-case>` when SGLang has it."""
        return _main_option(self.field, self.options)

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
            const=raw.get("const"),
            replaced_by=raw.get("new_flag"),
            refusal=raw.get("error_message"),
            ignored=action.endswith("deprecatedaction") and not raw.get("error_message"),
        )


def _main_option(field_name: str, options: tuple[str, ...] | list[str]) -> str:
    kebab = "--" + field_name.replace("_", "-")
    if kebab in options:
        return kebab
    long_options = [o for o in options if o.startswith("--") and not o.startswith("--no-")]
    return (long_options or list(options))[0]


def _row_key(field_name: str, options: tuple[str, ...] | list[str], deprecated: bool) -> str:
    """A deprecated option spelt for another field answers to its own name (an alias)."""
    if not deprecated:
        return field_name
    own = _main_option(field_name, options).lstrip("-").replace("-", "_")
    return own


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()


@dataclass(frozen=True)
class Catalog:
    """Every flag of one SGLang release.

    `flags` holds one registration per ServerArgs field (the one SGLang documents under the
    field's own name); `aliases` the deprecated options that feed another field, by the profile
    key they answer to (`stream_output` -> the `--stream-output` action, whose field is
    `incremental_streaming_output`). `by_option` covers every option string of both.
    """

    version: str
    flags: dict[str, Flag] = field(repr=False)
    aliases: dict[str, Flag] = field(default_factory=dict, repr=False)

    @cached_property
    def by_option(self) -> dict[str, Flag]:
        rows = [*self.flags.values(), *self.aliases.values()]
        return {option: flag for flag in rows for option in flag.options}

    def lookup(self, key: str) -> Flag | None:
        """The option a profile key stands for in this release: a field's flag, an alias, or a
        field of an earlier release that SGLang still takes as an option of its new field."""
        return self.flags.get(key) or self.aliases.get(key) or self._former_field(key)

    def _former_field(self, key: str) -> Flag | None:
        """`grpc_http_sidecar_port` in a release that renamed the field smg_http_sidecar_port and
        kept `--grpc-http-sidecar-port` among its options: an alias of the new field."""
        flag = self.by_option.get("--" + key.replace("_", "-"))
        if flag is None or flag.deprecated or flag.is_alias or key not in _former_fields():
            return None
        return replace(flag, renamed_from=key)

    def accepts(self, key: str) -> bool:
        """SGLang's parser takes this key's option without an error (refused aliases excluded)."""
        flag = self.lookup(key)
        return flag is not None and flag.refusal is None

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
    names = {
        p.name.split(".json")[0]
        for d in _catalog_dirs()
        for p in d.glob("*.json*")
        if p.name != "index.json"
    }
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


def nearest_version(version: str) -> str:
    """The bundled catalog to render a launch for `version` with: its own, else the newest
    release before it (a dev build or a release newer than sgdeploy), else the oldest."""
    versions = available_versions()
    if not versions:
        raise UnknownVersionError("no SGLang flag catalog is bundled")
    wanted = parse_version(version)
    older = [v for v in versions if parse_version(v) <= wanted]
    return older[-1] if older else versions[0]


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
    raw = _read_catalog(path)
    flags: dict[str, Flag] = {}
    aliases: dict[str, Flag] = {}
    for item in raw["flags"]:
        flag = Flag.from_json(item)
        if flag.deprecated and flag.is_alias:  # only a deprecated row can be an alias
            aliases[flag.key] = flag
        elif flag.field not in flags or flags[flag.field].deprecated:
            flags[flag.field] = flag
    return Catalog(version=normalised, flags=flags, aliases=aliases)


def _read_catalog(path: Path) -> Any:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


class FlagHistory(NamedTuple):
    """The bundled releases that know a flag: the last that accepts it, the first that has it
    (both None: none does)."""

    last: str | None
    first: str | None


def flag_history(field_name: str) -> FlagHistory:
    """(last version that had the flag, first version that has it) across bundled catalogs.

    Used to explain a flag that is unknown to the target version: removed earlier, or added
    later. Loads every catalog, so call it only on the error path.
    """
    return _flag_index().get(field_name, FlagHistory(None, None))


@cache
def _flag_index() -> dict[str, FlagHistory]:
    """key -> (last version that accepts it, first version with it), over every bundled catalog."""
    index: dict[str, FlagHistory] = {}
    for version in available_versions():
        path = _catalog_path(version)
        # raw rows: no Flag objects on this path
        rows = _read_catalog(path)["flags"] if path else []
        accepted = {_row_key(r["field"], r.get("flags") or (), bool(r.get("deprecated")))
                    for r in rows if not r.get("error_message")}
        for name in accepted:
            first = index[name].first if name in index else version
            index[name] = FlagHistory(version, first)
    return index


@cache
def _former_fields() -> frozenset[str]:
    """Every field name a bundled catalog registers (raw rows: no Flag objects on this path)."""
    names: set[str] = set()
    for version in available_versions():
        path = _catalog_path(version)
        rows = _read_catalog(path)["flags"] if path else []
        names.update(r["field"] for r in rows if not r.get("deprecated"))
    return frozenset(names)


def next_version(version: str) -> str | None:
    versions = available_versions()
    try:
        index = versions.index(version)
    except ValueError:
        return None
    return versions[index + 1] if index + 1 < len(versions) else None
