"""Results: phases, the failure, settings changed, and the report that holds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

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
    """Why the server did not come up (or went down): the root line and what surrounds it."""

    kind: str
    line: int  # the root line: the line that states the cause
    message: str  # its text
    context: tuple[tuple[int, str], ...] = ()  # (line, text): the lines that explain it
    evidence: tuple[tuple[int, str], ...] = ()  # native lines behind it (NCCL WARN, NVSHMEM...)
    consequences: tuple[tuple[int, str], ...] = ()  # later errors it caused, demoted
    confidence: str = "low"  # high | medium | low

    @property
    def headline(self) -> str:
        """`crash at line 12: message`; an empty log has no line to name."""
        if not self.line:
            return f"{self.kind}: {self.message}"
        return f"{self.kind} at line {self.line}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "line": self.line,
            "message": self.message,
            "confidence": self.confidence,
            "evidence": [[n, text] for n, text in self.evidence],
            "consequences": [[n, text] for n, text in self.consequences],
        }


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
    started: str | None = None  # first timestamp of the start that reached ready
    server_args: Mapping[str, Any] | None = None  # the parsed server_args dump
    context_len: int | None = None  # the longest request, as the scheduler's summary line says
    earlier_failures: tuple[Failure, ...] = ()  # how earlier starts in the same log ended
    engine_timings: Mapping[str, Any] | None = None  # SGLang's own seconds per phase (0.5.17+)

    @property
    def kv_cache_below_context(self) -> bool:
        """The KV cache holds fewer tokens than one request of the context length (SGD714)."""
        return bool(
            self.kv_cache_tokens and self.context_len and self.kv_cache_tokens < self.context_len
        )

    @property
    def verdict(self) -> str:
        """READY, FAILED, or NOT READY and why, in one line."""
        if self.ready:
            return "READY: the server reached ready"
        if self.failure is None or self.failure.kind != "incomplete":
            return "FAILED"
        if not self.failure.context:  # not one line with text in it
            return "NOT READY: the log is empty"
        return "NOT READY: the log ends before ready without an error"

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
            **(
                {"earlier_failures": [f.as_dict() for f in self.earlier_failures]}
                if self.earlier_failures
                else {}
            ),
            **({"engine_timings": dict(self.engine_timings)} if self.engine_timings else {}),
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
