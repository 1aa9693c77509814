"""Settings SGLang changed on its own: its own log lines and the server_args dump."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sgdeploy.logs.phases import _truthy, graph_config_backend
from sgdeploy.logs.report import Adjustment

_MESSAGE_MAX = 400

# --------------------------------------------------------------------------------------------
# Settings SGLang changed on its own, from its own log lines. `field`: fixed field name, or None
# to take the regex's `field` group (mapped through FIELD_ALIASES). `value`: fixed value, or
# FROM_GROUP to take the `value` group (a literal when it parses as one, else the text).

FROM_GROUP: Final = object()


@dataclass(frozen=True)
class AdjustRule:
    trigger: str
    pattern: re.Pattern[str]
    field: str | None
    value: Any


ADJUST_RULES: Final[tuple[AdjustRule, ...]] = (
    AdjustRule(
        " is adjusted to ",
        re.compile(r"^(?P<field>[a-z_][a-z0-9_]*) is adjusted to (?P<value>.+?)(?: when .*)?\.?$"),
        None,
        FROM_GROUP,
    ),
    AdjustRule(
        " is adjusted from ",
        re.compile(
            r"(?P<field>chunked prefill size|expert parallel size|[a-z_][a-z0-9_]*) is adjusted "
            r"from \S+ to (?:the tensor parallel size )?\[?(?P<value>-?\d+)"
        ),
        None,
        FROM_GROUP,
    ),
    AdjustRule(
        "Max running requests is reset to",
        re.compile(r"Max running requests is reset to (?P<value>\d+)"),
        "max_running_requests",
        FROM_GROUP,
    ),
    AdjustRule(
        " by default",
        re.compile(r"^(?P<field>[a-z_][a-z0-9_]*) is set to (?P<value>[^\s,;]+?) by default"),
        None,
        FROM_GROUP,
    ),
    AdjustRule(
        "verlap schedul",
        re.compile(
            r"Disabling overlap schedule|Overlap scheduler is disabled|"
            r"incompatible with overlap schedule|overlap schedule is disabled"
        ),
        "disable_overlap_schedule",
        True,
    ),
    AdjustRule(
        "Disable piecewise CUDA graph",
        re.compile(r"^Disable piecewise CUDA graph because"),
        "disable_piecewise_cuda_graph",
        True,
    ),
    AdjustRule(
        "prefill CUDA graph",
        re.compile(
            r"disabling prefill CUDA graph|^Disabling (?:breakable )?prefill CUDA graph|"
            r"^Disable prefill CUDA graph because"
        ),
        "cuda_graph_backend_prefill",
        "disabled",
    ),
    AdjustRule(
        "raph is disabled",
        re.compile(r"^Cuda graph is disabled (?:because|for)"),
        "disable_cuda_graph",
        True,
    ),
    AdjustRule(
        "Radix cache is disabled",
        re.compile(r"Radix cache is disabled"),
        "disable_radix_cache",
        True,
    ),
    AdjustRule(
        "Sampling backend is set to",
        re.compile(r"Sampling backend is set to (?P<value>\w+)"),
        "sampling_backend",
        FROM_GROUP,
    ),
    AdjustRule(
        "Automatically reduce --mem-fraction-static",
        re.compile(r"Automatically reduce --mem-fraction-static to (?P<value>\d+(?:\.\d+)?)"),
        "mem_fraction_static",
        FROM_GROUP,
    ),
    AdjustRule(
        "Automatically turn off --chunked-prefill-size",
        re.compile(r"Automatically turn off --chunked-prefill-size"),
        "chunked_prefill_size",
        -1,
    ),
    AdjustRule(
        "is larger than the profiled value",
        re.compile(r"max_total_tokens=\d+ is larger than the profiled value (?P<value>-?\d+)"),
        "max_total_tokens",
        FROM_GROUP,
    ),
    AdjustRule(
        "Auto-enabling FlashInfer AllReduce Fusion",
        re.compile(r"Auto-enabling FlashInfer AllReduce Fusion \((?P<value>\w+)\)"),
        "flashinfer_allreduce_fusion_backend",
        FROM_GROUP,
    ),
    AdjustRule(
        "ixed chunk",
        re.compile(
            r"(?i)mixed chunk(?:ed prefill)? (?:is )?(?:disabled|turned off)|disabling mixed chunk"
        ),
        "enable_mixed_chunk",
        False,
    ),
    AdjustRule(
        "DFLASH only supports speculative_num_steps",
        re.compile(r"DFLASH only supports speculative_num_steps == 1"),
        "speculative_num_steps",
        1,
    ),
)

_ADJUST_HINT = re.compile("|".join(re.escape(rule.trigger) for rule in ADJUST_RULES))

FIELD_ALIASES: Final[Mapping[str, str]] = {
    "chunked prefill size": "chunked_prefill_size",
    "expert parallel size": "ep_size",
}

# Fields a profile did not set whose resolved value (in the server_args dump) changes behaviour.
BEHAVIOUR_FIELDS: Final[Mapping[str, tuple[Any, str]]] = {
    "disable_piecewise_cuda_graph": (True, "SGLang turned the piecewise (prefill) CUDA graph off"),
    "disable_cuda_graph": (True, "SGLang turned CUDA graphs off"),
    "disable_decode_cuda_graph": (True, "SGLang turned the decode CUDA graph off"),
    "disable_prefill_cuda_graph": (True, "SGLang turned the prefill CUDA graph off"),
    "cuda_graph_backend_decode": ("disabled", "SGLang turned the decode CUDA graph off"),
    "cuda_graph_backend_prefill": ("disabled", "SGLang turned the prefill CUDA graph off"),
    "disable_overlap_schedule": (True, "SGLang turned the overlap scheduler off"),
    "disable_radix_cache": (True, "SGLang turned the radix (prefix) cache off"),
}

# Settings a launch can ask for in more than one way, where SGLang's line or dump names another
# of them: 0.5.14+ logs "Disable prefill CUDA graph because cuda_graph_config resolved
# prefill.backend='disabled'" for --disable-prefill-cuda-graph too (seen on a GPU). Each request,
# and the launch settings that make it.
_PREFILL_OFF = (("cuda_graph_backend_prefill", "disabled"), ("disable_prefill_cuda_graph", True))
_DECODE_OFF = (("cuda_graph_backend_decode", "disabled"), ("disable_decode_cuda_graph", True))
_ALL_GRAPHS_OFF = ("disable_cuda_graph", True)
IMPLIED_BY: Final[Mapping[tuple[str, Any], tuple[tuple[str, Any], ...]]] = {
    request: (*phase, _ALL_GRAPHS_OFF) for phase in (_PREFILL_OFF, _DECODE_OFF) for request in phase
}
_CONFIG_PHASES: Final[Mapping[str, str]] = {
    "cuda_graph_backend_prefill": "prefill", "disable_prefill_cuda_graph": "prefill",
    "cuda_graph_backend_decode": "decode", "disable_decode_cuda_graph": "decode",
}


# 0.5.14+ resolves CUDA graphs into cuda_graph_config and leaves these flags as the launch gave
# them (server_args.py, _parse_cuda_graph_config; SGLang itself writes only a prefill backend of
# "full" for one architecture), and its `ServerArgs(...)` repr dumps them so: they are the
# launch's own requests there. The dict dump of later releases (`resolved_dict()`) shows them
# resolved instead.
_GRAPH_REQUESTS: Final = tuple(_CONFIG_PHASES)


def requests_in_dump(text: str, dump: Mapping[str, Any]) -> dict[str, Any]:
    """The CUDA graph switches the launch set itself, read from its server_args dump line (for a
    log read without its profile); none where the dump shows them resolved, or the release
    writes them itself (before 0.5.14, whose dump has no `cuda_graph_backend_prefill`)."""
    repr_dump = text.lstrip().startswith("server_args=ServerArgs(")
    if not repr_dump or "cuda_graph_backend_prefill" not in dump:
        return {}
    return {name: dump[name] for name in _GRAPH_REQUESTS if dump.get(name) not in (None, False)}


def launch_asks_for(server: Mapping[str, Any], name: str, value: Any) -> bool:
    """Whether the launch itself sets `name` to `value`, in any of the ways SGLang accepts: the
    field, an equivalent flag, or the phase's backend in `cuda_graph_config`'s JSON."""
    if name in server and _same(server[name], value):
        return True
    if any(other in server and _same(server[other], wanted)
           for other, wanted in IMPLIED_BY.get((name, value), ())):
        return True
    phase = _CONFIG_PHASES.get(name)
    return (phase is not None and (name, value) in IMPLIED_BY
            and graph_config_backend(server, phase) == "disabled")


# --------------------------------------------------------------------------------------------
# The server_args dump.


def _split_top_level(s: str) -> list[str]:
    """Split on commas outside quotes and brackets."""
    items: list[str] = []
    depth, quote, escaped, start = 0, "", False, 0
    for i, ch in enumerate(s):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(s[start:i])
            start = i + 1
    items.append(s[start:])
    return [item.strip() for item in items if item.strip()]


_MISSING: Final = object()


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, set | frozenset):
        items = [_jsonable(x) for x in v]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return _MISSING


def _literal(text: str) -> Any:
    """The Python literal `text` spells, made JSON-friendly; _MISSING if it is not one."""
    try:
        value = ast.literal_eval(text.strip())
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError on garbage
        return _MISSING
    return _jsonable(value)


_DICT_KEY = re.compile(r"^\s*(['\"])(?P<key>[^'\"]*)\1\s*:\s*(?P<value>.*)$", re.S)


def parse_server_args(text: str) -> dict[str, Any] | None:
    """`server_args=ServerArgs(a=1, ...)` (0.5.1x) or `server_args={'a': 1, ...}` (0.5.23) as a
    dict. Values that are not Python literals are left out."""
    body = text.strip()
    if body.startswith("server_args="):
        body = body[len("server_args=") :]
    if body.startswith("ServerArgs("):
        inner, keyword = body[len("ServerArgs(") :], True
        inner = inner[:-1] if inner.endswith(")") else inner
    elif body.startswith("{"):
        inner, keyword = body[1:], False
        inner = inner[:-1] if inner.endswith("}") else inner
    else:
        return None
    out: dict[str, Any] = {}
    for item in _split_top_level(inner):
        if keyword:
            name, sep, raw = item.partition("=")
            name = name.strip()
            if not sep or not name.isidentifier():
                continue
        else:
            km = _DICT_KEY.match(item)
            if km is None:
                continue
            name, raw = km.group("key"), km.group("value")
        value = _literal(raw)
        if value is not _MISSING:
            out[name] = value
    return out


def _same(a: Any, b: Any) -> bool:
    """Profile value vs dumped value, tolerant of int/float, tuple/list and JSON strings."""
    if isinstance(a, bool) or isinstance(b, bool):
        return _truthy(a) == _truthy(b) if isinstance(a, bool) and isinstance(b, bool) else a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, str):
        try:
            return _same(a, json.loads(b))
        except ValueError:
            return False
    if isinstance(a, str) and isinstance(b, Mapping):
        return _same(b, a)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, str | int | float) and isinstance(b, str | int | float):
        return str(a) == str(b)
    return bool(a == b)


def settings_changed(
    server: Mapping[str, Any] | None,
    resolved: Mapping[str, Any],
    source: str = "server_args dump",
    line: int | None = None,
    requests: Mapping[str, Any] | None = None,
) -> list[Adjustment]:
    """What SGLang resolved differently from the profile, given its resolved arguments.

    `resolved` is the server_args dump of a log, or `/server_info` of a running server. Fields
    the profile set and SGLang changed are reported, and fields the profile left alone whose
    resolved value changes behaviour (BEHAVIOUR_FIELDS: a graph or cache turned off, ...).
    Without a profile, `requests` are what the launch is known to have asked for itself.
    """
    out: list[Adjustment] = []
    if server is not None:
        for name, wanted in server.items():
            if name in resolved and not _same(wanted, resolved[name]):
                reason = (
                    f"the profile sets {name}={_show(wanted)}; "
                    f"SGLang resolved it to {_show(resolved[name])} ({source})"
                )
                out.append(Adjustment(name, resolved[name], reason, line))
    asked = server if server is not None else requests or {}
    for name, (value, why) in BEHAVIOUR_FIELDS.items():
        if (server is not None and name in server) or launch_asks_for(asked, name, value):
            continue
        if name in resolved and _same(value, resolved[name]):
            how = "the profile does not set it" if server is not None else "no profile given"
            reason = f"{why} ({source}: {name}={_show(resolved[name])}; {how})"
            out.append(Adjustment(name, resolved[name], reason, line))
    return out


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)
