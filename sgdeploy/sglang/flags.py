"""Checking one `[server]` value against its flag in the catalog, and what replaced removed
flags."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, NamedTuple

from sgdeploy.sglang.catalog import NOT_GIVEN, Catalog, Flag, flag_history, load_catalog
from sgdeploy.sglang.versions import ALL_VERSIONS, VersionRange, parse_version


@dataclass(frozen=True)
class Replacement:
    """What to write instead of a flag SGLang removed or deprecated, for the releases in
    `versions`."""

    text: str  # shown to the user, e.g. 'cuda_graph_backend_prefill = "breakable"'
    field: str | None = None  # the field the old value moves to
    # how old values map onto the new field (None: unchanged)
    values: Mapping[Any, Any] | None = None
    # fixed entries a switch turns into
    sets: Mapping[str, Any] = dataclass_field(default_factory=dict)
    versions: VersionRange = ALL_VERSIONS

    def entries(self, value: Any) -> dict[str, Any]:
        """The [server] entries that replace `key = value` (empty: delete the key)."""
        if self.field is not None:
            moved = (
                self.values.get(value, value)
                if self.values and not isinstance(value, list)
                else value
            )
            return {self.field: moved, **self.sets}
        return dict(self.sets) if value else {}


# _handle_legacy_cp_arguments
_PREFILL_CP_STRATEGY = {"in-seq-split": "zigzag", "round-robin-split": "interleave"}
# per-phase CUDA graph backends, enable_prefill_cp / cp_strategy
_SINCE_V2 = VersionRange(since="0.5.14")

# What replaces flags SGLang removed or deprecated, per release range, checked against the
# wheels (tests/test_sglang_facts.py applies each to every catalog of its range). Where a
# release still accepts the old key as a deprecated alias, the catalog's own mapping is used
# instead (`alias_replacement`).
REPLACEMENTS: dict[str, tuple[Replacement, ...]] = {
    "mamba_scheduler_strategy": (
        Replacement(
            "mamba_radix_cache_strategy (the same values)",
            "mamba_radix_cache_strategy",
            versions=_SINCE_V2,
        ),
    ),
    "enforce_piecewise_cuda_graph": (
        Replacement(
            'cuda_graph_backend_prefill = "tc_piecewise" (what the flag set in '
            "0.5.14-0.5.19; an "
            "explicit prefill backend skips SGLang's auto-disable checks)",
            sets={"cuda_graph_backend_prefill": "tc_piecewise"},
            versions=VersionRange(since="0.5.14", until="0.5.22"),
        ),
        Replacement(
            'cuda_graph_backend_prefill = "breakable" (0.5.22 removed tc_piecewise; an '
            "explicit prefill "
            "backend skips SGLang's auto-disable checks, so leave it out for a model "
            "SGLang turns the graph off for, see SGD603)",
            sets={"cuda_graph_backend_prefill": "breakable"},
            versions=VersionRange(since="0.5.22"),
        ),
    ),
    "disable_piecewise_cuda_graph": (
        Replacement(
            'cuda_graph_backend_prefill = "disabled"',
            sets={"cuda_graph_backend_prefill": "disabled"},
            versions=_SINCE_V2,
        ),
    ),
    "enable_piecewise_cuda_graph": (
        Replacement(
            "nothing: it had no effect since 0.5.10 (the piecewise graph is on by default); remove "
            "the key"
        ),
    ),
    "piecewise_cuda_graph_max_tokens": (
        Replacement(
            "cuda_graph_max_bs_prefill (the same value)",
            "cuda_graph_max_bs_prefill",
            versions=_SINCE_V2,
        ),
    ),
    "piecewise_cuda_graph_tokens": (
        Replacement(
            "cuda_graph_bs_prefill (the same values)", "cuda_graph_bs_prefill", versions=_SINCE_V2
        ),
    ),
    "piecewise_cuda_graph_compiler": (
        Replacement(
            "cuda_graph_tc_compiler (the same values: eager, inductor)",
            "cuda_graph_tc_compiler",
            versions=VersionRange(since="0.5.14", until="0.5.22"),
        ),
        Replacement(
            "nothing: 0.5.22 removed the torch.compile prefill graph and its compiler; "
            "remove the key",
            versions=VersionRange(since="0.5.22"),
        ),
    ),
    "cuda_graph_max_bs": (
        Replacement(
            "cuda_graph_max_bs_decode (the same value; the prefill graph has its own "
            "cuda_graph_max_bs_prefill)",
            "cuda_graph_max_bs_decode",
            versions=_SINCE_V2,
        ),
    ),
    "cuda_graph_bs": (
        Replacement(
            "cuda_graph_bs_decode (the same values; the prefill graph has its own "
            "cuda_graph_bs_prefill)",
            "cuda_graph_bs_decode",
            versions=_SINCE_V2,
        ),
    ),
    "enable_prefill_context_parallel": (
        Replacement(
            'enable_prefill_cp = true and cp_strategy = "zigzag" (SGLang maps prefill_cp_mode '
            "in-seq-split to zigzag)",
            sets={"enable_prefill_cp": True, "cp_strategy": "zigzag"},
            versions=_SINCE_V2,
        ),
    ),
    "enable_dsa_prefill_context_parallel": (
        Replacement(
            'enable_prefill_cp = true and cp_strategy = "interleave" (SGLang maps the default '
            "dsa_prefill_cp_mode "
            "round-robin-split to interleave)",
            sets={"enable_prefill_cp": True, "cp_strategy": "interleave"},
            versions=_SINCE_V2,
        ),
    ),
    "enable_nsa_prefill_context_parallel": (
        Replacement(
            'enable_prefill_cp = true and cp_strategy = "interleave" (SGLang maps the default '
            "nsa/dsa_prefill_cp_mode "
            "round-robin-split to interleave)",
            sets={"enable_prefill_cp": True, "cp_strategy": "interleave"},
            versions=_SINCE_V2,
        ),
    ),
    "prefill_cp_mode": (
        Replacement(
            'cp_strategy (in-seq-split becomes "zigzag")',
            "cp_strategy",
            _PREFILL_CP_STRATEGY,
            versions=_SINCE_V2,
        ),
    ),
    "dsa_prefill_cp_mode": (
        Replacement(
            'cp_strategy (in-seq-split becomes "zigzag", round-robin-split "interleave")',
            "cp_strategy",
            _PREFILL_CP_STRATEGY,
            versions=_SINCE_V2,
        ),
    ),
    "nsa_prefill_cp_mode": (
        Replacement(
            'cp_strategy (in-seq-split becomes "zigzag", round-robin-split "interleave")',
            "cp_strategy",
            _PREFILL_CP_STRATEGY,
            versions=_SINCE_V2,
        ),
    ),
    "enable_expert_distribution_metrics": (
        Replacement(
            'expert_balancedness_report_mode = "both" (SGLang\'s message: one of off, server_log, '
            "prometheus, both; "
            "the old flag logged the balancedness and exported it as metrics)",
            sets={"expert_balancedness_report_mode": "both"},
            versions=VersionRange(since="0.5.18"),
        ),
    ),
    "stream_output": (
        Replacement(
            "incremental_streaming_output (the same value: --stream-output set it from 0.5.10 on)",
            "incremental_streaming_output",
            versions=VersionRange(since="0.5.10"),
        ),
    ),
    "enable_nan_detection": (
        Replacement(
            "nothing: 0.5.13 removed NaN detection (and the SGLANG_SPEC_NAN_DETECTION variable its "
            "help named); remove the key"
        ),
    ),
    "torchao_config": (
        Replacement("nothing: 0.5.18 removed the torchao optimisation; remove the key"),
    ),
    # Deprecated, still accepted (SGD015 names the replacement).
    "enable_dp_attention": (
        Replacement(
            "attn_dp_size = <dp_size> and dp_size = 1 (SGLang: --attn-dp-size <dp-size>)",
            versions=VersionRange(since="0.5.22"),
        ),
    ),
    "disable_cuda_graph": (
        Replacement(
            'cuda_graph_backend_decode = "disabled" and cuda_graph_backend_prefill = "disabled"',
            sets={
                "cuda_graph_backend_decode": "disabled",
                "cuda_graph_backend_prefill": "disabled",
            },
            versions=_SINCE_V2,
        ),
    ),
    "enable_flashinfer_allreduce_fusion": (
        Replacement(
            'flashinfer_allreduce_fusion_backend = "auto" (what SGLang sets for it)',
            sets={"flashinfer_allreduce_fusion_backend": "auto"},
            versions=_SINCE_V2,
        ),
    ),
}


def replacement_for(key: str, catalog: Catalog) -> Replacement | None:
    """What replaces `key` in this catalog's release: an alias's own mapping, else the table."""
    flag = catalog.lookup(key)
    listed = next(
        (r for r in REPLACEMENTS.get(key, ()) if catalog.parsed_version in r.versions), None
    )
    if flag is not None and flag.is_alias:
        target = catalog.flags.get(flag.field)
        # An alias of a field that is deprecated itself (nsa_* -> dsa_* in 0.5.14-0.5.19): the
        # table names where both end up.
        return (
            listed
            if listed is not None and target is not None and target.deprecated
            else alias_replacement(flag)
        )
    return listed


def alias_replacement(alias: Flag) -> Replacement:
    """The entry a deprecated alias stands for, as SGLang stores it."""
    if alias.takes_value and alias.const is None:
        return Replacement(f"{alias.field} (the same value; SGLang stores it there)", alias.field)
    stored = alias.stored(True)
    return Replacement(f"{alias.field} = {_toml(stored)}", sets={alias.field: stored})


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)


def value_problem(flag: Flag, value: Any) -> str | None:
    """Why `value` cannot be given to this flag, or None if it can."""
    if flag.is_switch:
        if not isinstance(value, bool):
            return f"{flag.option} is a switch: use true or false, not {_shown(value)}"
        return None
    if flag.value_kind == "json":
        return _json_problem(flag, value)
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not flag.is_list:
        return f"{flag.option} takes one value, not a list"
    if flag.is_list and flag.nargs == "+" and not values:
        return f"{flag.option} needs at least one value"
    for item in values:
        problem = _scalar_problem(flag, item)
        if problem:
            return problem
    return None


def choice_problem(flag: Flag, value: Any) -> str | None:
    if not flag.choices or flag.is_switch:
        return None
    allowed = {str(c) for c in flag.choices}
    for item in value if isinstance(value, list) else [value]:
        if str(item) not in allowed:
            return (f"invalid choice {_shown(item)} for {flag.option} (choose from "
                    f"{', '.join(map(str, flag.choices))})")
    return None


def _scalar_problem(flag: Flag, item: Any) -> str | None:
    kind = flag.value_kind
    if isinstance(item, dict | list):
        return (f"{flag.option} takes {_kind_words(kind)}, not a "
                f"{'table' if isinstance(item, dict) else 'list'}")
    if kind == "int":
        if flag.argparse_type == "human_readable_int" and isinstance(item, str):
            return _human_readable_int_problem(flag, item)
        if isinstance(item, bool) or not isinstance(item, int):
            return f"{flag.option} takes an integer, not {_shown(item)}"
    elif kind == "float":
        if isinstance(item, bool) or not isinstance(item, int | float):
            return f"{flag.option} takes a number, not {_shown(item)}"
    elif not isinstance(item, str):
        return f"{flag.option} takes a string, not {_shown(item)}"
    elif flag.field == "log_level" and item.upper() not in _LOG_LEVELS:
        # launch_server calls logging.basicConfig(level=getattr(logging, log_level.upper())) while
        # it parses.
        return (f"{flag.option} {_shown(item)} is no Python logging level "
                f"({', '.join(sorted(_LOG_LEVELS)).lower()})")
    return None


_LOG_LEVELS = {"CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET"}
_HUMAN_READABLE = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def _human_readable_int_problem(flag: Flag, item: str) -> str | None:
    """SGLang's human_readable_int: a plain integer, SI (k, M, G, T; decimals allowed) or IEC
    (Ki...) suffix."""
    text = item.strip()
    match = _HUMAN_READABLE.fullmatch(text)
    if match:
        if "." in match.group(1) and match.group(2).endswith("i"):
            return (f"{flag.option} {_shown(item)}: decimals are not allowed with IEC suffixes "
                    f"like '{match.group(2)}'")
        return None
    try:
        int(text)
    except ValueError:
        return (f"{flag.option} takes an integer: SGLang's 'Invalid integer value: {_shown(text)}. "
                "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes "
                "are case-sensitive.'")
    return None


def _json_problem(flag: Flag, value: Any) -> str | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            return f"{flag.option} takes JSON; this string is not valid JSON ({exc})"
    elif not isinstance(value, dict | list):
        return f"{flag.option} takes a table (rendered as JSON), not {_shown(value)}"
    if flag.argparse_type == "parse_cuda_graph_config_arg":
        return _cuda_graph_config_problem(flag, value)
    return None


# What parse_cuda_graph_config_arg (0.5.14+) takes: a table of phases, each a table of these keys
# (the union over releases: 0.5.22 dropped tc_compiler, later releases added prefill keys).
_GRAPH_PHASE_KEYS = (
    "backend",
    "max_bs",
    "bs",
    "tc_compiler",
    "max_context_size",
    "full_prefill_max_req",
    "full_prefill_prefix_chunk_tokens",
    "max_seq_len",
)


def _cuda_graph_config_problem(flag: Flag, value: Any) -> str | None:
    if not isinstance(value, dict):
        return (f"{flag.option} must be a JSON object (SGLang's parser refuses "
                f"{type(value).__name__})")
    for phase, settings in value.items():
        if phase not in ("decode", "prefill"):
            return f"{flag.option}: unknown phase '{phase}', expected one of ('decode', 'prefill')"
        if not isinstance(settings, dict):
            return f"{flag.option}['{phase}'] must be a JSON object, got {type(settings).__name__}"
        unknown = [key for key in settings if key not in _GRAPH_PHASE_KEYS]
        if unknown:
            return f"{flag.option}['{phase}']: unknown key '{unknown[0]}'"
    return None


def _kind_words(kind: str) -> str:
    return {"int": "an integer", "float": "a number", "str": "a string"}.get(kind, "a value")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def option_to_field(catalog: Catalog, key: str) -> str | None:
    """The field a CLI-style spelling (`tp-size`, `--tp`, `tp`) stands for, if any."""
    spelled = "--" + key.lstrip("-").replace("_", "-")
    flag = catalog.by_option.get(spelled)
    return flag.field if flag else None


def stored_problem(catalog: Catalog, alias: Flag, value: Any) -> str | None:
    """Why the value an alias stores is one its field refuses (the unit renders the field's
    option)."""
    target = catalog.flags.get(alias.field)
    stored = alias.stored(value)
    if target is None or stored is NOT_GIVEN:
        return None
    return value_problem(target, stored) or choice_problem(target, stored)


class Stored(NamedTuple):
    """The field SGLang stores a `[server]` entry in, and the value it stores."""

    field: str
    value: Any


def as_sglang_sees_it(catalog: Catalog, key: str, value: Any) -> Stored | None:
    """(field, value) that SGLang stores for one `[server]` entry, following its own aliases;
    None when SGLang never stores it (a switch left off, an option it accepts and ignores)."""
    flag = catalog.lookup(key)
    if flag is None or flag.ignored or (flag.refusal is not None and value):
        return None
    if not flag.is_alias:
        return Stored(key, value) if flag.refusal is None else None
    stored = flag.stored(value)
    return None if stored is NOT_GIVEN else Stored(flag.field, stored)


def removed_switch_off(catalog: Catalog, key: str, value: Any) -> str | None:
    """The last release that had `key` when it is a plain switch set to false that this release
    no longer accepts (removed, or an alias it refuses): such an entry renders to nothing, so
    SGLang never sees it. None otherwise."""
    if value is not False:
        return None
    flag = catalog.lookup(key)
    if flag is not None:
        return (
            catalog.version
            if flag.refusal is not None and flag.is_switch and not flag.store_false
            else None
        )
    last_seen, _ = flag_history(key)
    if last_seen is None or parse_version(last_seen) >= catalog.parsed_version:
        return None
    old = load_catalog(last_seen).lookup(key)
    plain_switch = (
        old is not None and old.is_switch and not old.store_false and not old.boolean_optional
    )
    return last_seen if plain_switch else None


def valid_server_values(raw: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """The `[server]` values SGLang would start from, by field: flags of this version with
    acceptable values, aliases translated into the field they feed."""
    clean = {}
    for key, value in raw.items():
        flag = catalog.lookup(key)
        if flag is None or value_problem(flag, value) or choice_problem(flag, value):
            continue
        if flag.is_alias and stored_problem(catalog, flag, value):
            continue
        seen = as_sglang_sees_it(catalog, key, value)
        if seen is not None:
            clean[seen.field] = seen.value
    return clean
