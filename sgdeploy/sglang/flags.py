"""Checking one `[server]` value against its flag in the catalog, and what replaced removed flags."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sgdeploy.sglang.catalog import Catalog, Flag


@dataclass(frozen=True)
class Replacement:
    """What to write instead of a flag SGLang removed."""

    text: str  # shown to the user, e.g. 'cuda_graph_backend_prefill = "breakable"'
    field: str | None = None  # the new field, when there is one


# Flags removed between 0.5.1x and 0.5.2x, and what replaces them (constraints.md A.1, A.4).
REPLACEMENTS: dict[str, Replacement] = {
    "mamba_scheduler_strategy": Replacement(
        "mamba_radix_cache_strategy (same values: auto, no_buffer, extra_buffer)", "mamba_radix_cache_strategy"
    ),
    "enforce_piecewise_cuda_graph": Replacement(
        'cuda_graph_backend_prefill = "breakable" (an explicit prefill backend skips every auto-disable rule)',
        "cuda_graph_backend_prefill",
    ),
    "disable_piecewise_cuda_graph": Replacement(
        'cuda_graph_backend_prefill = "disabled" (or disable_prefill_cuda_graph = true)',
        "cuda_graph_backend_prefill",
    ),
    "enable_piecewise_cuda_graph": Replacement("nothing: the prefill CUDA graph is on by default; remove the key"),
    "piecewise_cuda_graph_max_tokens": Replacement("cuda_graph_max_bs_prefill", "cuda_graph_max_bs_prefill"),
    "piecewise_cuda_graph_tokens": Replacement("cuda_graph_bs_prefill", "cuda_graph_bs_prefill"),
    "piecewise_cuda_graph_compiler": Replacement(
        "nothing: the torch.compile prefill graph was removed; remove the key"),
    "cuda_graph_max_bs": Replacement(
        "cuda_graph_max_bs_decode (and cuda_graph_max_bs_prefill for the prefill graph)", "cuda_graph_max_bs_decode"
    ),
    "cuda_graph_bs": Replacement("cuda_graph_bs_decode (and cuda_graph_bs_prefill)", "cuda_graph_bs_decode"),
    "enable_prefill_context_parallel": Replacement("enable_prefill_cp with cp_strategy", "enable_prefill_cp"),
    "enable_nsa_prefill_context_parallel": Replacement("enable_prefill_cp with cp_strategy", "enable_prefill_cp"),
    "prefill_cp_mode": Replacement("cp_strategy", "cp_strategy"),
    "nsa_prefill_cp_mode": Replacement("cp_strategy", "cp_strategy"),
    "enable_expert_distribution_metrics": Replacement("expert_distribution_recorder_mode"),
    "stream_output": Replacement("nothing: remove the key"),
    "enable_nan_detection": Replacement("nothing: remove the key"),
    "torchao_config": Replacement("quantization with a supported method"),
    # Deprecated in 0.5.2x but still accepted (SGD015 names the replacement).
    "enable_dp_attention": Replacement("attn_dp_size = <dp_size> (and dp_size = 1)", "attn_dp_size"),
    "disable_cuda_graph": Replacement(
        'cuda_graph_backend_decode = "disabled" and cuda_graph_backend_prefill = "disabled"',
        "cuda_graph_backend_decode"),
    "enable_flashinfer_allreduce_fusion": Replacement('flashinfer_allreduce_fusion_backend = "auto"',
                                                      "flashinfer_allreduce_fusion_backend"),
}


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
            return f"invalid choice {_shown(item)} for {flag.option} (choose from {', '.join(map(str, flag.choices))})"
    return None


def _scalar_problem(flag: Flag, item: Any) -> str | None:
    kind = flag.value_kind
    if isinstance(item, dict | list):
        return f"{flag.option} takes {_kind_words(kind)}, not a {'table' if isinstance(item, dict) else 'list'}"
    if kind == "int":
        if flag.argparse_type == "human_readable_int" and isinstance(item, str) and item.strip():
            return None
        if isinstance(item, bool) or not isinstance(item, int):
            return f"{flag.option} takes an integer, not {_shown(item)}"
    elif kind == "float":
        if isinstance(item, bool) or not isinstance(item, int | float):
            return f"{flag.option} takes a number, not {_shown(item)}"
    elif not isinstance(item, str):
        return f"{flag.option} takes a string, not {_shown(item)}"
    return None


def _json_problem(flag: Flag, value: Any) -> str | None:
    if isinstance(value, dict | list):
        return None
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError as exc:
            return f"{flag.option} takes JSON; this string is not valid JSON ({exc})"
        return None
    return f"{flag.option} takes a table (rendered as JSON), not {_shown(value)}"


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


def valid_server_values(raw: Mapping[str, Any], catalog: Catalog) -> dict[str, Any]:
    """The `[server]` entries that are flags of this version and have acceptable values."""
    clean = {}
    for key, value in raw.items():
        flag = catalog.get(key)
        if flag and not value_problem(flag, value) and not choice_problem(flag, value):
            clean[key] = value
    return clean
