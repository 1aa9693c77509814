"""Reading SGLang server logs: startup phases, readiness, failures, settings SGLang changed.

Shared by ``sgdeploy logcheck`` (a whole file) and ``apply`` (live journal lines).

    strip_line(raw)            one raw line -> ParsedLine (journal/ANSI/SGLang/uvicorn prefixes off)
    LogReader.feed(line)       incremental: returns the LogEvents that line caused
    LogReader.finish()         marks the end of input (a log without ready or error is `incomplete`)
    LogReader.report()         LogReport at any time; LogReport.as_json() is SPEC section 4's shape
    read_log(lines, ...)       feed + finish + report in one call
    expected_phases(server, v) the readiness phases a launch must produce

Pure: no printing, no I/O. The patterns SGLang's wording is matched with are data at the top of
this module (PHASE_RULES, ADJUST_RULES, FAILURE_RULES, BEHAVIOUR_FIELDS); docs/logcheck.md says
how to add one.
"""

from __future__ import annotations

import ast
import json
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, NamedTuple

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

FAILURE_KINDS: Final[tuple[str, ...]] = (
    "cuda_oom",
    "kv_cache_oom",
    "graph_capture_failed",
    "port_in_use",
    "bad_argument",
    "model_not_found",
    "nccl_error",
    "crash",
    "incomplete",
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

_PHASE_STARTS: Final = (
    *sorted({r.trigger for r in PHASE_RULES if not r.anywhere}),
    "max_total_num_tokens=",
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
    "Capturing batches",
    "Mamba Cache is allocated",
)
_GRAPH_BEGIN = re.compile(rf"^Capture (?P<which>(?:[a-z]+ )*){_GRAPH} begin\b")
_GRAPH_END = re.compile(rf"^Capture (?:[a-z]+ )*{_GRAPH} end\b")
_DIST_BEGIN = re.compile(r"^Init (?:torch distributed|parallel) begin\b")
_SCHED_SUMMARY = re.compile(r"\bmax_total_num_tokens=(\d+)")

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

# --------------------------------------------------------------------------------------------
# Failures. Checked in this order against an error's text; the first match names the kind.
# Priority when several errors belong to one incident (a chained traceback): earlier wins.

FAILURE_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "graph_capture_failed",
        re.compile(r"(?:^|: )(?:Capture [\w ]{0,40}?graph failed|Piecewise CUDA Graph failed)"),
    ),
    (
        "kv_cache_oom",
        re.compile(
            r"Not enough memory\. Please try to increase --mem-fraction-static|"
            r"Loaded weights leave no GPU memory for the KV cache"
        ),
    ),
    (
        "cuda_oom",
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
            r"cudaErrorMemoryAllocation"
        ),
    ),
    (
        "port_in_use",
        re.compile(
            r"\[Errno 98\]|[Aa]ddress already in use|Port is already in use|"
            r"is not available in \d+ seconds|is already in use\. When running multiple"
        ),
    ),
    (
        "model_not_found",
        re.compile(
            r"is not a local folder and is not a valid model identifier|"
            r"Repo id must be in the form|HFValidationError|RepositoryNotFoundError|"
            r"GatedRepoError|does not appear to have a file named|Incorrect path_or_model_id|"
            r"Can't load (?:the )?(?:config|tokenizer)"
        ),
    ),
    (
        "nccl_error",
        re.compile(
            r"NCCL error|ProcessGroupNCCL|DistBackendError|DistNetworkError|DistStoreError|"
            r"nccl(?:Internal|System|UnhandledCuda|InvalidUsage|Remote)Error"
        ),
    ),
)

_KIND_PRIORITY: Final[Mapping[str, int]] = {
    "graph_capture_failed": 0,
    "kv_cache_oom": 1,
    "cuda_oom": 2,
    "port_in_use": 3,
    "model_not_found": 4,
    "nccl_error": 5,
    "bad_argument": 6,
    "crash": 7,
}

# Lines outside a traceback that state a cause on their own (checked only when one matches).
_SIGNATURE_TRIGGERS: Final[tuple[str, ...]] = (
    "Errno 98",
    "already in use",
    "is not available in",
    "out of memory",
    "OutOfMemoryError",
    "Not enough memory",
    "Loaded weights leave no GPU memory",
    "graph failed",
    "Graph failed",
    "NCCL error",
    "scheduler died during initialization",
)
_SCHED_DIED = re.compile(r"scheduler died during initialization")
_ARGPARSE = re.compile(
    r"^(?P<prog>sglang(?: serve)?|[\w.-]+\.py|python[\d.]* -m [\w.]+): error: (?P<msg>.+)$"
)
# Lines that say the server is going down without saying why; used only when nothing better.
_WEAK = re.compile(
    r"Received sigquit from a child proces|Initialization failed|^Killed$|"
    r"Child process unexpectedly failed|exited with (?:exit )?code"
)
_BAD_ARG_TYPES: Final[frozenset[str]] = frozenset({"ValueError", "AssertionError"})

_FAILURE_HINT = re.compile(
    "|".join(re.escape(t) for t in (*_SIGNATURE_TRIGGERS, ": error: ")) + "|" + _WEAK.pattern
)
_TB_HEADER = "Traceback (most recent call last):"
_CHAIN = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)"
)
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:: (?P<msg>.*))?$")
_EXC_NAME = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning|Failure|Timeout)$")

_TB_MAX_IDLE = 40  # non-frame lines after which a traceback without an exception line is dropped
_CONTEXT_FRAMES = 4  # traceback lines kept before the exception line, for display
_MAX_INCIDENTS = 64
_MESSAGE_MAX = 400

# --------------------------------------------------------------------------------------------
# Line prefixes.

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\^\[\[[0-9;]*[A-Za-z]")
_JOURNAL = re.compile(
    r"^(?:(?P<short>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)(?:\.\d+)?"
    r"|(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?P<frac>\.\d+)?(?:[+-]\d\d:?\d\d|Z)?"
    r"|\d{9,}\.\d+)"
    r" \S+ [^\s\[\]:]+(?:\[\d+\])?: ?"
)
_SGLANG = re.compile(
    r"^\[(?P<d>\d{4}-\d\d-\d\d) (?P<tm>\d\d:\d\d:\d\d)(?:[.,](?P<ms>\d{1,6}))?"
    r"(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)(?: [a-z][\w-]*)?\] ?"
)
_SGLANG_ANYWHERE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_UVICORN = re.compile(r"^(?P<lvl>INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\s+")

Source = Literal["sglang", "uvicorn", "plain"]


class ParsedLine(NamedTuple):
    """One log line without its journal, ANSI, SGLang and uvicorn decorations."""

    text: str  # the message; leading whitespace kept (traceback frames are indented)
    t: str | None = None  # ISO timestamp, "2026-05-12T00:01:11" (".123" with SGLANG_LOG_MS=1)
    ranks: tuple[tuple[str, int], ...] = ()  # (("DP", 0), ("TP", 1)); () when unlabelled
    rank_label: str | None = None  # "DP0 TP1"; None when unlabelled
    is_primary: bool = True  # rank 0 on every axis, or no rank label (the main process)
    source: Source = "plain"
    level: str | None = None  # uvicorn's level word, when it has one
    prefixed: bool = False  # carried an SGLang `[date time ...]` prefix


_Ranks = tuple[tuple[tuple[str, int], ...], str | None, bool]
_RANK_CACHE: dict[str, _Ranks] = {}


def _ranks(label: str) -> _Ranks:
    info = _RANK_CACHE.get(label)
    if info is None:
        ranks = tuple((k, int(v)) for k, v in _RANK.findall(label))
        text = " ".join(f"{k}{v}" for k, v in ranks) or None
        info = (ranks, text, all(v == 0 for _, v in ranks))
        if len(_RANK_CACHE) < 1024:  # a real log has a handful of labels
            _RANK_CACHE[label] = info
    return info


def strip_line(raw: str) -> ParsedLine:
    """Parse one raw line (journal `short`, `short-iso`, `short-precise`, `cat`, or plain)."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line or "^[[" in line:
        line = _ANSI.sub("", line)
    t: str | None = None
    jm = _JOURNAL.match(line) if line[:1].isalnum() else None
    if jm is not None:
        if jm.group("iso"):
            t = jm.group("iso") + (jm.group("frac") or "")
        line = line[jm.end() :]
    if "\r" in line:  # tqdm redraws: keep what was on screen last
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if line[:1] != "[" and ("%|" in line or "it/s]" in line):
        sm = _SGLANG_ANYWHERE.search(line)  # a progress bar without its newline, then a record
        if sm is not None:
            line = line[sm.start() :]
    info: _Ranks = ((), None, True)
    source: Source = "plain"
    prefixed = False
    m = _SGLANG.match(line) if line[:1] == "[" else None
    if m is not None:
        t = line[1:11] + "T" + line[12:20]
        if m.group("ms"):
            t += "." + m.group("ms")
        if m.group("ranks"):
            info = _ranks(m.group("ranks"))
        line = line[m.end() :]
        source, prefixed = "sglang", True
    level: str | None = None
    um = _UVICORN.match(line) if line[:1] in "IWEDCT" and ":" in line[4:9] else None
    if um is not None:
        level, source = um.group("lvl"), "uvicorn"
        line = line[um.end() :]
    return ParsedLine(line, t, info[0], info[1], info[2], source, level, prefixed)


# --------------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True)
class LogEvent:
    """Something the reader noticed on one line.

    kind: "phase" (name = a PHASES entry), "failure" (name = a FAILURE_KINDS entry; emitted
    again whenever the reported failure changes), "progress" (dist_init_begin, weights_begin,
    graph_capture_begin) or "adjusted" (name = the ServerArgs field SGLang changed).
    """

    kind: Literal["phase", "failure", "progress", "adjusted"]
    name: str
    line: int
    t: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Phase:
    name: str
    line: int
    t: str | None
    rank: str | None = None  # "TP0", "DP0 TP0", ...; None for unlabelled lines
    figures: Mapping[str, Any] = field(default_factory=dict)  # elapsed_s, mem_usage_gb, ...
    ranks: Mapping[str, int] = field(default_factory=dict)  # rank label -> first line

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "line": self.line, "t": self.t}
        if self.rank is not None:
            out["rank"] = self.rank
        out.update(self.figures)
        return out


@dataclass(frozen=True)
class Failure:
    kind: str
    line: int
    message: str
    context: tuple[tuple[int, str], ...] = ()  # (line, text): the lines that explain it

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "line": self.line, "message": self.message}


@dataclass(frozen=True)
class Adjustment:
    field: str
    value: Any
    reason: str
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "value": self.value, "reason": self.reason}


@dataclass(frozen=True)
class LogReport:
    ready: bool
    failure: Failure | None
    phases: tuple[Phase, ...]
    kv_cache_tokens: int | None
    auto_adjusted: tuple[Adjustment, ...]
    lines: int = 0
    finished: bool = False
    started: str | None = None  # first timestamp in the log
    server_args: Mapping[str, Any] | None = None  # the parsed server_args dump

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def missing(self, expected: Iterable[str]) -> list[str]:
        """The expected phases that have not appeared yet, in the given order."""
        seen = {p.name for p in self.phases}
        return [name for name in expected if name not in seen]

    def phase_times(self) -> dict[str, float | None]:
        """Seconds spent loading weights, sizing the KV cache, capturing graphs, and in total."""
        weights = self.phase("weights_loaded")
        kv = self.phase("kv_cache_allocated")
        graphs = [
            p
            for p in self.phases
            if p.name in ("cuda_graph_captured", "piecewise_graph_captured", "draft_graph_captured")
        ]
        before = self.phase("dist_init") or self.phase("args_parsed")
        w: float | None = None
        if weights is not None:
            elapsed = weights.figures.get("elapsed_s")
            w = float(elapsed) if elapsed is not None else _seconds(before, weights)
        g: float | None = None
        if graphs:
            g = _seconds(kv, max(graphs, key=lambda p: p.line))
            if g is None:
                parts = [p.figures.get("elapsed_s") for p in graphs]
                g = sum(float(x) for x in parts if x is not None) if any(parts) else None
        ready = self.phase("ready")
        total = None
        if ready is not None and ready.t is not None and self.started is not None:
            total = _diff(self.started, ready.t)
        return {
            "weights": w,
            "kv_cache": _seconds(weights, kv),
            "graph_capture": g,
            "total": total,
        }

    def as_json(self) -> dict[str, Any]:
        """SPEC section 4's `logcheck --json` document."""
        return {
            "ready": self.ready,
            "failure": self.failure.as_dict() if self.failure else None,
            "phases": [p.as_dict() for p in self.phases],
            "kv_cache_tokens": self.kv_cache_tokens,
            "auto_adjusted": [a.as_dict() for a in self.auto_adjusted],
        }


def _diff(a: str, b: str) -> float | None:
    try:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
    except ValueError:
        return None


def _seconds(a: Phase | None, b: Phase | None) -> float | None:
    if a is None or b is None or a.t is None or b.t is None:
        return None
    return _diff(a.t, b.t)


# --------------------------------------------------------------------------------------------
# Which phases a launch must produce.

_PER_PHASE_GRAPH_FLAGS_SINCE: Final = (0, 5, 14)  # --cuda-graph-backend-* exist from 0.5.14 (catalogs)


def _version(v: str | None) -> tuple[int, int, int] | None:
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def decode_graph_disabled(server: Mapping[str, Any], sglang_version: str | None) -> bool:
    """Whether a launch runs decode without CUDA graphs (0.5.23 precedence: JSON config >
    per-phase flags > --disable-decode-cuda-graph > --disable-cuda-graph)."""
    version = _version(sglang_version)
    if version is None or version >= _PER_PHASE_GRAPH_FLAGS_SINCE:
        backend: Any = None
        config = server.get("cuda_graph_config")
        if isinstance(config, str):
            try:
                config = json.loads(config)
            except ValueError:
                config = None
        if isinstance(config, Mapping) and isinstance(config.get("decode"), Mapping):
            backend = config["decode"].get("backend")
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
) -> list[Adjustment]:
    """What SGLang resolved differently from the profile, given its resolved arguments.

    `resolved` is the server_args dump of a log, or `/server_info` of a running server. Fields
    the profile set and SGLang changed are reported, and fields the profile left alone whose
    resolved value changes behaviour (BEHAVIOUR_FIELDS: a graph or cache turned off, ...).
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
    for name, (value, why) in BEHAVIOUR_FIELDS.items():
        if server is not None and name in server:
            continue
        if name in resolved and _same(value, resolved[name]):
            how = "the profile does not set it" if server is not None else "no profile given"
            reason = f"{why} ({source}: {name}={_show(resolved[name])}; {how})"
            out.append(Adjustment(name, resolved[name], reason, line))
    return out


# --------------------------------------------------------------------------------------------
# The reader.


@dataclass
class _Incident:
    """One error: a traceback (chained ones merged) or a line that states a cause."""

    line: int  # the root-cause line
    kind: str
    message: str
    context: list[tuple[int, str]]
    weak: bool = False


@dataclass
class _Traceback:
    incident: _Incident | None  # set when this traceback continues a chained one
    frames: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=_CONTEXT_FRAMES))
    idle: int = 0


class LogReader:
    """Incremental SGLang log reader. Feed lines in order; ask for report() at any time."""

    def __init__(
        self, server: Mapping[str, Any] | None = None, sglang_version: str | None = None
    ) -> None:
        self.server: Mapping[str, Any] | None = server
        self.sglang_version = sglang_version
        self._n = 0
        self._finished = False
        self._first_t: str | None = None
        self._primary: dict[str, Phase] = {}
        self._any: dict[str, Phase] = {}
        self._per_rank: dict[str, dict[str, int]] = {}
        self._kv_tokens: int | None = None
        self._sched_tokens: int | None = None
        self._dump: dict[str, Any] | None = None
        self._dump_line: int | None = None
        self._adjust_lines: dict[str, Adjustment] = {}
        self._capturing: set[str] = set()
        self._weights_begun = False
        self._tb: _Traceback | None = None
        self._chain_until = 0  # a Traceback header up to this line continues the last incident
        self._incidents: list[_Incident] = []
        self._ready_line: int | None = None
        self._last_failure: tuple[str, int] | None = None
        self._emitted_adjust: set[str] = set()
        self._progressed: set[str] = set()
        self._tail: deque[tuple[int, str]] = deque(maxlen=_CONTEXT_FRAMES)

    # -- public ---------------------------------------------------------------------------

    def feed(self, line: str) -> list[LogEvent]:
        """Read the next line; return the events it caused (usually none)."""
        self._n += 1
        events: list[LogEvent] = []
        if self._finished:
            return events
        p = strip_line(line)
        if p.text:
            self._tail.append((self._n, p.text))
        if p.t is not None and self._first_t is None:
            self._first_t = p.t
        if self._traceback(p, events) or p.text.startswith(QUIET_STARTS):
            return events
        # A graph "end" line is both a phase and the end of a capture window.
        if self._progress(p, events) | self._phases(p, events):
            return events
        if p.level != "INFO":
            self._adjustments(p, events)
            self._signatures(p, events)
        return events

    def finish(self) -> list[LogEvent]:
        """Mark the end of input; a log that never got ready nor failed becomes `incomplete`."""
        if self._finished:
            return []
        self._finished = True
        events: list[LogEvent] = []
        self._emit_failure(events)
        return events

    def report(self) -> LogReport:
        phases = tuple(sorted(self._chosen_phases().values(), key=lambda ph: ph.line))
        return LogReport(
            ready=self._ready_line is not None,
            failure=self._failure(),
            phases=phases,
            kv_cache_tokens=self._kv_tokens if self._kv_tokens is not None else self._sched_tokens,
            auto_adjusted=tuple(self._auto_adjusted()),
            lines=self._n,
            finished=self._finished,
            started=self._first_t,
            server_args=dict(self._dump) if self._dump is not None else None,
        )

    # -- phases and progress ----------------------------------------------------------------

    def _chosen_phases(self) -> dict[str, Phase]:
        chosen = dict(self._any)  # a phase only non-zero ranks reported (e.g. node_rank 1)
        chosen.update(self._primary)
        return {
            name: Phase(ph.name, ph.line, ph.t, ph.rank, ph.figures, self._per_rank.get(name, {}))
            for name, ph in chosen.items()
        }

    def _phases(self, p: ParsedLine, events: list[LogEvent]) -> bool:
        text = p.text
        if not text.startswith(_PHASE_STARTS):
            for trigger in _PHASE_ANYWHERE:
                if trigger in text:
                    break
            else:
                return False
        for rule in PHASE_RULES:
            hit = rule.trigger in text if rule.anywhere else text.startswith(rule.trigger)
            if hit and rule.pattern.search(text):
                self._reach(rule.phase, p, events)
                return True
        if text.startswith("max_total_num_tokens="):
            if self._sched_tokens is None:
                sm = _SCHED_SUMMARY.search(text)
                self._sched_tokens = int(sm.group(1)) if sm else None
            return True
        return False

    def _reach(self, name: str, p: ParsedLine, events: list[LogEvent]) -> None:
        rank = p.rank_label or ""
        per_rank = self._per_rank.setdefault(name, {})
        if rank in per_rank:
            return
        per_rank[rank] = self._n
        if name == "args_parsed" and self._dump is None:
            self._read_dump(p, events)
        if name in self._primary or (not p.is_primary and name in self._any):
            return
        figures = _figures(p.text)
        if name == "http_bound":
            um = PHASE_RULES[7].pattern.search(p.text)
            if um is not None:
                figures["url"] = um.group("url")
        phase = Phase(name, self._n, p.t, p.rank_label, figures)
        if name not in self._any:
            self._any[name] = phase
        if not p.is_primary:
            return
        self._primary[name] = phase
        if name == "kv_cache_allocated" and self._kv_tokens is None and "tokens" in figures:
            self._kv_tokens = int(figures["tokens"])
        if name == "ready":
            self._ready_line = self._n
        events.append(LogEvent("phase", name, self._n, p.t, phase.as_dict()))

    def _progress(self, p: ParsedLine, events: list[LogEvent]) -> bool:
        text = p.text
        if text.startswith("Capture "):
            bm = _GRAPH_BEGIN.match(text)
            if bm is not None:
                self._capturing.add(p.rank_label or "")
                which = bm.group("which").strip() or "decode"
                if p.is_primary:
                    data = {"graph": which}
                    events.append(LogEvent("progress", "graph_capture_begin", self._n, p.t, data))
                return True
            if _GRAPH_END.match(text):
                self._capturing.discard(p.rank_label or "")
                return True
            return False
        if text.startswith("Load weight begin"):
            self._weights_begun = True
            self._progress_once("weights_begin", p, events, _figures(text))
            return True
        if text.startswith("Init ") and _DIST_BEGIN.match(text):
            self._progress_once("dist_init_begin", p, events, {})
            return True
        return False

    def _progress_once(
        self, name: str, p: ParsedLine, events: list[LogEvent], data: dict[str, Any]
    ) -> None:
        if p.is_primary and name not in self._progressed:
            self._progressed.add(name)
            events.append(LogEvent("progress", name, self._n, p.t, data))

    # -- settings SGLang changed --------------------------------------------------------------

    def _read_dump(self, p: ParsedLine, events: list[LogEvent]) -> None:
        self._dump = parse_server_args(p.text)
        self._dump_line = self._n
        if self._dump is None:
            return
        for adj in self._dump_adjustments():
            self._announce(adj, events)

    def _adjustments(self, p: ParsedLine, events: list[LogEvent]) -> None:
        text = p.text
        if not _ADJUST_HINT.search(text):
            return
        for rule in ADJUST_RULES:
            if rule.trigger not in text:
                continue
            m = rule.pattern.search(text)
            if m is None:
                continue
            name = rule.field or FIELD_ALIASES.get(m.group("field"), m.group("field"))
            if rule.value is FROM_GROUP:
                raw = m.group("value")
                value = _literal(raw)
                value = raw if value is _MISSING else value
            else:
                value = rule.value
            if name not in self._adjust_lines:
                adj = Adjustment(name, value, text.strip()[:_MESSAGE_MAX], self._n)
                self._adjust_lines[name] = adj
                self._announce(self._resolved(adj), events)
            return

    def _announce(self, adj: Adjustment, events: list[LogEvent]) -> None:
        if adj.field in self._emitted_adjust or self._profile_agrees(adj):
            return
        self._emitted_adjust.add(adj.field)
        events.append(LogEvent("adjusted", adj.field, self._n, None, adj.as_dict()))

    def _profile_agrees(self, adj: Adjustment) -> bool:
        server = self.server or {}
        return adj.field in server and _same(server[adj.field], adj.value)

    def _resolved(self, adj: Adjustment) -> Adjustment:
        """A line's adjustment with the value the dump shows, when the dump has the field."""
        if self._dump is not None and adj.field in self._dump:
            return Adjustment(adj.field, self._dump[adj.field], adj.reason, adj.line)
        return adj

    def _dump_adjustments(self) -> list[Adjustment]:
        return settings_changed(self.server, self._dump or {}, "server_args dump", self._dump_line)

    def _auto_adjusted(self) -> list[Adjustment]:
        merged: dict[str, Adjustment] = {}
        for adj in self._adjust_lines.values():
            merged[adj.field] = self._resolved(adj)
        if self._dump is not None:
            for adj in self._dump_adjustments():
                if adj.field not in merged:
                    merged[adj.field] = adj
        kept = [a for a in merged.values() if not self._profile_agrees(a)]
        return sorted(kept, key=lambda a: a.line or 0)

    # -- failures -----------------------------------------------------------------------------

    def _traceback(self, p: ParsedLine, events: list[LogEvent]) -> bool:
        """Follow tracebacks; True when the line belonged to one (frame or exception line)."""
        text = p.text
        if _TB_HEADER in text:
            continued = self._incidents[-1] if self._n <= self._chain_until else None
            self._tb = _Traceback(continued)
            self._tb.frames.append((self._n, text.strip()))
            return not p.prefixed  # a prefixed header line may still carry other news
        tb = self._tb
        if tb is None:
            if _CHAIN.match(text) and self._incidents:
                self._chain_until = self._n + 4
                return True
            return False
        if text[:1] in (" ", "\t"):
            tb.frames.append((self._n, text.rstrip()))
            tb.idle = 0
            return True
        if p.prefixed or not text.strip():
            return False  # another process's record, or a blank line, in between
        m = _EXC_LINE.match(text)
        if m is not None and _EXC_NAME.search(m.group("type").rsplit(".", 1)[-1]):
            self._tb = None
            self._exception(m.group("type"), (m.group("msg") or "").strip(), text, tb, events)
            return True
        tb.idle += 1
        if tb.idle > _TB_MAX_IDLE:
            self._tb = None
        return False

    def _exception(
        self, etype: str, msg: str, text: str, tb: _Traceback, events: list[LogEvent]
    ) -> None:
        kind = self._classify(f"{etype}: {msg}", etype, msg)
        entry = (self._n, text.strip()[:_MESSAGE_MAX])
        incident = tb.incident
        if incident is not None:  # a chained traceback: same root line, maybe a sharper kind
            if _KIND_PRIORITY[kind] < _KIND_PRIORITY[incident.kind]:
                incident.kind = kind
            incident.context.append(entry)
        else:
            context = [*tb.frames, entry]
            self._add(_Incident(self._n, kind, entry[1], context), events)
        self._emit_failure(events)

    def _classify(self, text: str, etype: str, msg: str) -> str:
        if self._capturing:
            return "graph_capture_failed"
        for kind, pattern in FAILURE_RULES:
            if pattern.search(text):
                return kind
        short = etype.rsplit(".", 1)[-1]
        if short in _BAD_ARG_TYPES and not self._weights_begun:
            return "bad_argument"
        if short == "OSError" and not msg.startswith("[Errno"):
            return "model_not_found"  # transformers' "can't find/load this model" errors
        return "crash"

    def _signatures(self, p: ParsedLine, events: list[LogEvent]) -> None:
        text = p.text
        if not _FAILURE_HINT.search(text):
            return
        if ": error: " in text:
            am = _ARGPARSE.match(text)
            if am is not None:
                message = f"{am.group('prog')}: error: {am.group('msg')}"[:_MESSAGE_MAX]
                self._add(_Incident(self._n, "bad_argument", message, [(self._n, text)]), events)
                self._emit_failure(events)
                return
        if any(trigger in text for trigger in _SIGNATURE_TRIGGERS):
            kind = self._classify(text, "", text)
            if kind == "crash" and not _SCHED_DIED.search(text):
                return
            line = text.strip()[:_MESSAGE_MAX]
            self._add(_Incident(self._n, kind, line, [(self._n, line)]), events)
            self._emit_failure(events)
            return
        if _WEAK.search(text):
            line = text.strip()[:_MESSAGE_MAX]
            self._add(_Incident(self._n, "crash", line, [(self._n, line)], weak=True), events)
            self._emit_failure(events)

    def _add(self, incident: _Incident, events: list[LogEvent]) -> None:
        if len(self._incidents) < _MAX_INCIDENTS:
            self._incidents.append(incident)

    def _failure(self) -> Failure | None:
        after = self._ready_line or 0  # errors before ready did not stop the server
        found = [i for i in self._incidents if i.line > after]
        strong = [i for i in found if not i.weak]
        pick: _Incident | None = None
        if strong:
            # A specific cause wins over a generic crash; an NCCL error only when it came first
            # (ranks whose peer died report NCCL errors as a consequence).
            specific = [i for i in strong if i.kind not in ("crash", "nccl_error")]
            pick = strong[0] if strong[0].kind == "nccl_error" or not specific else specific[0]
        elif found:
            pick = found[0]
        if pick is not None:
            return Failure(pick.kind, pick.line, pick.message, tuple(pick.context[-8:]))
        if self._finished and self._ready_line is None:
            reached = [ph.name for ph in sorted(self._primary.values(), key=lambda ph: ph.line)]
            last = f"last phase reached: {reached[-1]}" if reached else "no startup phase reached"
            message = f"the log ends before the server was ready ({last})"
            return Failure("incomplete", self._n, message, tuple(self._tail))
        return None

    def _emit_failure(self, events: list[LogEvent]) -> None:
        failure = self._failure()
        if failure is None:
            return
        key = (failure.kind, failure.line)
        if key != self._last_failure:
            self._last_failure = key
            data = {**failure.as_dict(), "context": [list(c) for c in failure.context]}
            events.append(LogEvent("failure", failure.kind, failure.line, None, data))


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


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)


def read_log(
    lines: Iterable[str],
    server: Mapping[str, Any] | None = None,
    sglang_version: str | None = None,
) -> LogReport:
    """Read a whole log (file lines, or journal lines) and report on it."""
    reader = LogReader(server, sglang_version)
    for line in lines:
        reader.feed(line)
    reader.finish()
    return reader.report()
