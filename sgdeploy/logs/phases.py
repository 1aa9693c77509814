"""Phases: the startup lines SGLang prints, the figures on them, and which a launch must produce."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# --------------------------------------------------------------------------------------------
# Names that are part of the JSON contract (SPEC section 4).

PHASES: Final[tuple[str, ...]] = (
    "args_parsed",
    "dist_init",
    "weights_loaded",
    "kv_cache_allocated",
    "cuda_graph_captured",
    "piecewise_graph_captured",
    "draft_graph_captured",
    "http_bound",
    "ready",
)


# --------------------------------------------------------------------------------------------
# Phases. `trigger` is a plain substring checked before the regex, to keep the per-line cost low.


@dataclass(frozen=True)
class PhaseRule:
    phase: str
    trigger: str  # the message starts with it (or, with anywhere=True, contains it)
    pattern: re.Pattern[str]
    anywhere: bool = False


_GRAPH = r"(?:cuda|CUDA|cpu|CPU|npu|NPU|xpu|XPU) graph"

PHASE_RULES: Final[tuple[PhaseRule, ...]] = (
    PhaseRule("args_parsed", "server_args=", re.compile(r"^server_args=(?:ServerArgs\(|\{)")),
    PhaseRule("dist_init", "Init ", re.compile(r"^Init (?:torch distributed|parallel) ends\b")),
    PhaseRule("weights_loaded", "Load weight end", re.compile(r"^Load weight end\b")),
    PhaseRule(
        "kv_cache_allocated",
        "allocated",
        re.compile(
            r"(?:^|\s)KV Cache is allocated\.|^Post-capture KV sizing: KV cache allocated\."
        ),
        anywhere=True,
    ),
    # 0.5.10: `Capture cuda graph end.`; 0.5.23: `Capture target decode|verify CUDA graph end.`
    PhaseRule(
        "cuda_graph_captured",
        "Capture",
        re.compile(rf"^Capture (?:target (?:decode|verify) )?{_GRAPH} end\b"),
    ),
    # 0.5.1x: `Capture piecewise CUDA graph end.`; 0.5.23: `Capture target prefill CUDA graph end.`
    PhaseRule(
        "piecewise_graph_captured",
        "Capture",
        re.compile(rf"^Capture (?:piecewise|(?:target )?prefill) {_GRAPH} end\b"),
    ),
    PhaseRule(
        "draft_graph_captured",
        "Capture",
        re.compile(rf"^Capture draft (?:(?:decode|extend|verify) )?{_GRAPH} end\b"),
    ),
    PhaseRule("http_bound", "Uvicorn running on", re.compile(r"Uvicorn running on (?P<url>\S+)")),
    PhaseRule(
        "ready", "The server is fired up", re.compile(r"The server is fired up and ready to roll!")
    ),
)

# SGLang's own account of its start, logged once before ready (0.5.17's engine.py
# `_set_startup_time`): seconds per phase, each the slowest rank's.
ENGINE_TIMINGS: Final = "Engine startup timings (s):"
_TIMING = re.compile(r"(?P<name>\w+)=(?P<value>\d+(?:\.\d+)?)")
_GRAPH_TIMINGS = re.compile(r"cuda_graph=\{(?P<inner>[^}]*)\}")

_PHASE_STARTS: Final = (
    *sorted({r.trigger for r in PHASE_RULES if not r.anywhere}),
    "max_total_num_tokens=",
    ENGINE_TIMINGS,
)
_PHASE_ANYWHERE: Final = tuple(sorted({r.trigger for r in PHASE_RULES if r.anywhere}))
# Frequent lines that never matter: skipped before any other check.
QUIET_STARTS: Final[tuple[str, ...]] = (
    "Decode batch",
    "Prefill batch",
    "Capture cuda graph bs",
    "Capture cuda graph num tokens",
    "Memory pool end",
    "Loading safetensors",
    "Loading pt checkpoint",
    "Multi-thread loading shards",
    "Capturing batches",
    "Mamba Cache is allocated",
)
# The weight shards' progress bar at its end (0.5.x `Loading safetensors checkpoint shards`,
# `Multi-thread loading shards` in later releases).
SHARDS_DONE: Final = re.compile(r"^(?:Loading \w+ checkpoint shards|Multi-thread loading shards): "
                                r"+100%")
_GRAPH_BEGIN = re.compile(rf"^Capture (?P<which>(?:[a-z]+ )*){_GRAPH} begin\b")
_GRAPH_END = re.compile(rf"^Capture (?:[a-z]+ )*{_GRAPH} end\b")
_DIST_BEGIN = re.compile(r"^Init (?:torch distributed|parallel) begin\b")
_SCHED_SUMMARY = re.compile(r"\bmax_total_num_tokens=(\d+)")
_CONTEXT_LEN = re.compile(r"\bcontext_len=(\d+)")

# Figures read off phase lines (name in the phase's JSON entry, regex with one group).
FIGURES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "elapsed_s",
        re.compile(r"(?:[Ee]lapsed[=:]\s*|Time elapsed:\s*|capture in\s+)(\d+(?:\.\d+)?)\s*s\b"),
    ),
    ("mem_usage_gb", re.compile(r"mem usage=(\d+(?:\.\d+)?)\s*GB")),
    ("avail_mem_gb", re.compile(r"avail mem=(\d+(?:\.\d+)?)\s*GB")),
    ("tokens", re.compile(r"#tokens: (\d+)")),
    ("kv_dtype", re.compile(r"\bdtype: ([\w.]+)")),
    ("k_size_gb", re.compile(r"(?<![KV])K size: (\d+(?:\.\d+)?) GB")),
    ("v_size_gb", re.compile(r"(?<!K)V size: (\d+(?:\.\d+)?) GB")),
    ("kv_size_gb", re.compile(r"KV size: (\d+(?:\.\d+)?) GB")),
    ("model_class", re.compile(r"\btype=(\w+)")),
)


def engine_timings(text: str) -> dict[str, Any]:
    """`Engine startup timings (s): load_weight=0.07, ..., cuda_graph={prefill=36.13,
    decode=3.06, ...}, tokenizer_e2e=52.81` as {"load_weight": 0.07, ..., "cuda_graph":
    {"prefill": 36.13, "decode": 3.06}}: the graph phases SGLang did not capture (0.00) left out."""
    graphs = _GRAPH_TIMINGS.search(text)
    rest = text[: graphs.start()] + text[graphs.end():] if graphs else text
    out: dict[str, Any] = {m["name"]: float(m["value"]) for m in _TIMING.finditer(rest)}
    if graphs:
        out["cuda_graph"] = {m["name"]: float(m["value"]) for m in _TIMING.finditer(graphs["inner"])
                             if float(m["value"]) > 0}
    return out


# --------------------------------------------------------------------------------------------
# Which phases a launch must produce.

# --cuda-graph-backend-* exist from 0.5.14 (catalogs)
_PER_PHASE_GRAPH_FLAGS_SINCE: Final = (0, 5, 14)


def _version(v: str | None) -> tuple[int, int, int] | None:
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def graph_config_backend(server: Mapping[str, Any], phase: str) -> Any:
    """The backend a launch's `cuda_graph_config` (a table, or its JSON) gives `phase` ("decode",
    "prefill"); None where it gives none."""
    config = server.get("cuda_graph_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    settings = config.get(phase) if isinstance(config, Mapping) else None
    return settings.get("backend") if isinstance(settings, Mapping) else None


def decode_graph_disabled(server: Mapping[str, Any], sglang_version: str | None) -> bool:
    """Whether a launch runs decode without CUDA graphs (0.5.23 precedence: JSON config >
    per-phase flags > --disable-decode-cuda-graph > --disable-cuda-graph)."""
    version = _version(sglang_version)
    if version is None or version >= _PER_PHASE_GRAPH_FLAGS_SINCE:
        backend = graph_config_backend(server, "decode")
        if backend is None:
            backend = server.get("cuda_graph_backend_decode")
        if backend is not None:
            return str(backend) == "disabled"
        if _truthy(server.get("disable_decode_cuda_graph")):
            return True
    return _truthy(server.get("disable_cuda_graph"))


def expected_phases(server: Mapping[str, Any], sglang_version: str | None) -> list[str]:
    """The readiness lines this launch must produce, in the order they appear."""
    graphs = not decode_graph_disabled(server, sglang_version)
    algorithm = str(server.get("speculative_algorithm") or "").upper()
    phases = ["kv_cache_allocated"]
    if graphs:
        phases.append("cuda_graph_captured")
        if algorithm and algorithm not in ("NONE", "NGRAM"):  # NGRAM has no draft model
            phases.append("draft_graph_captured")
    phases.append("ready")
    return phases


def _figures(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, pattern in FIGURES:
        m = pattern.search(text)
        if m is not None:
            raw = m.group(1)
            if name in ("kv_dtype", "model_class"):
                out[name] = raw
            elif name == "tokens":
                out[name] = int(raw)
            else:
                out[name] = float(raw)
    return out
