"""The reader: feeds each line through the stages and keeps the verdict."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from sgdeploy.logs.incidents import IncidentBook
from sgdeploy.logs.normalise import ParsedLine, quiet_record, strip_line
from sgdeploy.logs.phases import (
    _CONTEXT_LEN,
    _DIST_BEGIN,
    _GRAPH_BEGIN,
    _GRAPH_END,
    _PHASE_ANYWHERE,
    _PHASE_STARTS,
    _SCHED_SUMMARY,
    ENGINE_TIMINGS,
    PHASE_RULES,
    QUIET_STARTS,
    SHARDS_DONE,
    _figures,
    engine_timings,
)
from sgdeploy.logs.report import Adjustment, Failure, LogEvent, LogReport, Phase
from sgdeploy.logs.segment import CONTEXT_FRAMES, Segmenter, clip
from sgdeploy.logs.settings import (
    _ADJUST_HINT,
    _MISSING,
    ADJUST_RULES,
    FIELD_ALIASES,
    FROM_GROUP,
    _literal,
    launch_asks_for,
    parse_server_args,
    requests_in_dump,
    settings_changed,
)

# Steps a hang can stop in: (begun key, the phase that ends it, how to say it).
_STEPS: tuple[tuple[str, str, str], ...] = (
    ("dist_init", "dist_init", "distributed init, begun at line {line} (a peer or node that never "
                               "joined?)"),
    ("weights", "weights_loaded", "weight loading, begun at line {line}"),
    ("shards_read", "weights_loaded", "the model's set-up after its weight shards were read (line "
                                      "{line})"),
)


# systemd's line for a (re)start of the unit, as `journalctl -u` shows it in every output format
_UNIT_START = re.compile(r"^Start(?:ing|ed) \S+\.service\b")


class LogReader:
    """Incremental SGLang log reader. Feed lines in order; ask for report() at any time."""

    def __init__(
        self, server: Mapping[str, Any] | None = None, sglang_version: str | None = None
    ) -> None:
        self.server: Mapping[str, Any] | None = server
        self.sglang_version = sglang_version
        self._n = 0
        self._finished = False
        self._starts: list[str] = []  # the first timestamp of each start of the server
        self._new_start = True
        self._earlier: list[Failure] = []  # how earlier starts in the same log failed
        self._last_t: str | None = None
        self._tail: deque[tuple[int, str]] = deque(maxlen=CONTEXT_FRAMES)
        self._begin_start()

    def _begin_start(self) -> None:
        """What one start of the server has shown; a log with several starts reports the last."""
        self._primary: dict[str, Phase] = {}
        self._any: dict[str, Phase] = {}
        self._per_rank: dict[str, dict[str, int]] = {}
        self._kv_tokens: int | None = None
        self._sched_tokens: int | None = None
        self._context_len: int | None = None
        self._engine_timings: dict[str, Any] | None = None
        self._dump: dict[str, Any] | None = None
        self._dump_line: int | None = None
        self._dump_requests: dict[str, Any] = {}  # the graph switches the dump shows the launch set
        self._adjust_lines: dict[str, Adjustment] = {}
        self._capturing: dict[tuple[str | None, str], int] = {}  # (stream, rank) -> capture begin
        # first line any rank began dist init / weights / read all shards
        self._begun: dict[str, int] = {}
        self._segmenter = Segmenter()
        self._book = IncidentBook()
        self._book.settings = self.server
        self._ready_line: int | None = None
        self._last_failure: tuple[str, int] | None = None
        self._emitted_adjust: set[str] = set()
        self._progressed: set[str] = set()

    def _next_start(self) -> None:
        """The server starts again in the same log (the unit's Started line, a second server_args
        dump): the report is about the new start; a failure of the one before is kept beside it."""
        if not (self._any or self._dump is not None or self._book.incidents):
            return
        for tb in self._segmenter.close():
            self._book.unterminated(tb, self._is_capturing(tb.stream, tb.rank))
        failure = self._book.failure(self._ready_line or 0)
        if failure is not None:
            self._earlier.append(failure)
        self._begin_start()

    # -- public ---------------------------------------------------------------------------

    def feed(self, line: str) -> list[LogEvent]:
        """Read the next line; return the events it caused (usually none)."""
        self._n += 1
        events: list[LogEvent] = []
        if self._finished:
            return events
        if self._segmenter.idle and line[:2] == "[2":
            quiet = quiet_record(line)
            if quiet is not None:  # a long run of request lines: nothing to read in them
                self._last_t = quiet[0]
                self._stamp(quiet[0])
                self._tail.append((self._n, quiet[1]))
                return events
        p = strip_line(line)
        text = p.text
        if text:
            self._tail.append((self._n, text))
        if p.t is not None:
            self._last_t = p.t
            self._stamp(p.t)
        # a window of the journal that began with the last server's lines
        elif _UNIT_START.match(text):
            self._next_start()
            self._new_start = True
        # started again by hand: a second dump once the first start got ready or failed (two servers
        # writing into one file start side by side, neither done)
        if text.startswith("server_args=") and self._dump is not None and (
                self._ready_line is not None or self._book.has_error(0)):
            self._next_start()
            self._new_start = p.t is None
            if p.t is not None:
                self._starts.append(p.t)
        if self._segmenter.idle and text.startswith(QUIET_STARTS):  # a long run of request lines
            if "100%" in text and SHARDS_DONE.match(text):
                self._begun.setdefault("shards_read", self._n)
            return events
        if self._traceback(p, events) or text.startswith(QUIET_STARTS):
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
        for tb in self._segmenter.close():
            self._book.unterminated(tb, self._is_capturing(tb.stream, tb.rank))
        self._emit_failure(events)
        return events

    def report(self) -> LogReport:
        chosen = self._chosen_phases()
        phases = tuple(sorted(chosen.values(), key=lambda ph: ph.line))
        return LogReport(
            ready=self._ready_line is not None,
            failure=self._failure(),
            phases=phases,
            kv_cache_tokens=self._kv_tokens if self._kv_tokens is not None else self._sched_tokens,
            auto_adjusted=tuple(self._auto_adjusted()),
            lines=self._n,
            finished=self._finished,
            started=self._started(chosen.get("ready")),
            server_args=dict(self._dump) if self._dump is not None else None,
            context_len=self._context_len,
            earlier_failures=tuple(self._earlier),
            engine_timings=self._engine_timings,
        )

    def _stamp(self, t: str) -> None:
        if self._new_start:
            self._starts.append(t)
            self._new_start = False

    def _started(self, ready: Phase | None) -> str | None:
        """When the server that reached ready began logging (the last start before its ready line);
        the log's first timestamp when it never got ready."""
        if ready is not None and ready.t is not None:
            before = [t for t in self._starts if t <= ready.t]
            if before:
                return before[-1]
        return self._starts[0] if self._starts else None

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
        if text.startswith(ENGINE_TIMINGS):
            if p.is_primary:
                self._engine_timings = engine_timings(text)
            return True
        if text.startswith("max_total_num_tokens="):
            if self._sched_tokens is None:
                sm = _SCHED_SUMMARY.search(text)
                self._sched_tokens = int(sm.group(1)) if sm else None
                context = _CONTEXT_LEN.search(text)
                self._context_len = int(context.group(1)) if context else None
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
                self._capturing.setdefault((p.stream, p.rank_label or ""), self._n)
                which = bm.group("which").strip() or "decode"
                if p.is_primary:
                    data = {"graph": which}
                    events.append(LogEvent("progress", "graph_capture_begin", self._n, p.t, data))
                return True
            if _GRAPH_END.match(text):
                self._capturing.pop((p.stream, p.rank_label or ""), None)
                return True
            return False
        if text.startswith("Load weight begin"):
            self._begun.setdefault("weights", self._n)
            self._progress_once("weights_begin", p, events, _figures(text))
            return True
        if text.startswith("Init ") and _DIST_BEGIN.match(text):
            self._begun.setdefault("dist_init", self._n)
            self._progress_once("dist_init_begin", p, events, {})
            return True
        if text.startswith("[Gloo] Rank") or " NCCL INFO " in text:  # a rendezvous under way
            self._begun.setdefault("dist_init", self._n)
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
        self._dump_requests = requests_in_dump(p.text, self._dump or {})
        if self._dump is not None:
            self._book.settings = self._dump  # what SGLang resolved, rather than the profile
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
                adj = Adjustment(name, value, clip(text.strip()), self._n)
                self._adjust_lines[name] = adj
                self._announce(self._resolved(adj), events)
            return

    def _announce(self, adj: Adjustment, events: list[LogEvent]) -> None:
        if adj.field in self._emitted_adjust or self._profile_agrees(adj):
            return
        self._emitted_adjust.add(adj.field)
        events.append(LogEvent("adjusted", adj.field, self._n, None, adj.as_dict()))

    def _profile_agrees(self, adj: Adjustment) -> bool:
        """The launch asked for it: in its profile, or (read without one) in the dump's requests."""
        if self.server is not None:
            return launch_asks_for(self.server, adj.field, adj.value)
        return launch_asks_for(self._dump_requests, adj.field, adj.value)

    def _resolved(self, adj: Adjustment) -> Adjustment:
        """A line's adjustment with the value the dump shows, when the dump has the field set (a
        None there is the flag left alone, not what SGLang resolved)."""
        if self._dump is not None and self._dump.get(adj.field) is not None:
            return Adjustment(adj.field, self._dump[adj.field], adj.reason, adj.line)
        return adj

    def _dump_adjustments(self) -> list[Adjustment]:
        return settings_changed(self.server, self._dump or {}, "server_args dump", self._dump_line,
                                self._dump_requests)

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
        """Follow tracebacks; True when the line belonged to one (header, frame, exception)."""
        step = self._segmenter.feed(self._n, p, self._last_t)
        book = self._book
        if self._segmenter.cut:
            for tb in self._segmenter.cut:
                book.unterminated(tb, self._is_capturing(tb.stream, tb.rank))
            self._segmenter.cut.clear()
            self._emit_failure(events)
        role = step.role
        if not role:
            return False
        if role == "header" and step.tb is not None:
            book.header(self._n, step.tb)
            return not p.prefixed  # a prefixed header line may still carry other news
        if role == "frame" and step.tb is not None and step.module is not None:
            book.frame(step.tb, step.module)
        elif role == "chain":
            book.chain(self._n, p.stream)
        elif role == "message":
            book.message(self._n, p.text, p.stream)
        elif role == "exception" and step.exc is not None:
            tb = step.exc.tb
            book.exception(step.exc, self._is_capturing(tb.stream, tb.rank))
            self._emit_failure(events)
        return True

    def _is_capturing(self, stream: str | None, rank: str | None) -> bool:
        """Whether that process was inside a graph capture; a line without a rank label counts
        for any rank of its stream."""
        if rank is not None:
            return (stream, rank) in self._capturing
        return any(s == stream for s, _ in self._capturing)

    def _signatures(self, p: ParsedLine, events: list[LogEvent]) -> None:
        if self._book.line(
            self._n, p, p.t or self._last_t, self._is_capturing(p.stream, p.rank_label)
        ):
            self._emit_failure(events)

    def _failure(self) -> Failure | None:
        failure = self._book.failure(self._ready_line or 0)  # errors before ready did not stop it
        if failure is not None:
            return failure
        if self._finished and self._ready_line is None and not self._tail:
            said = "the log is empty" if not self._n else f"the log's {self._n} line(s) are blank"
            return Failure("incomplete", self._n, f"{said} (SGLang wrote nothing)")
        if self._finished and self._ready_line is None:
            chosen = self._chosen_phases().values()  # a log of non-zero ranks reaches phases too
            reached = [ph.name for ph in sorted(chosen, key=lambda ph: ph.line)]
            last = f"last phase reached: {reached[-1]}" if reached else "no startup phase reached"
            under_way = self._under_way(set(reached))
            message = f"the log ends before the server was ready ({last}{under_way})"
            return Failure("incomplete", self._n, message, tuple(self._tail))
        return None

    def _under_way(self, reached: set[str]) -> str:
        """For a log that stops (a hang, or a cut copy): the step that began and never ended,
        the latest one; '' when every step that began also ended."""
        open_steps = [
            (line, f"a graph capture, begun at line {line}")
            for line in sorted(self._capturing.values())[:1]
        ]
        for step, end, what in _STEPS:
            line = self._begun.get(step)
            if line is not None and end not in reached:
                open_steps.append((line, what.format(line=line)))
        if "http_bound" in reached and not open_steps:
            return "; under way: the warm-up request (HTTP is bound, no ready line)"
        return f"; under way: {max(open_steps)[1]}" if open_steps else ""

    def _emit_failure(self, events: list[LogEvent]) -> None:
        if not self._finished and not self._book.has_error(self._ready_line or 0):
            return  # a native line or a consequence alone: the verdict waits for more
        failure = self._failure()
        if failure is None:
            return
        key = (failure.kind, failure.line)
        if key != self._last_failure:
            self._last_failure = key
            data = {**failure.as_dict(), "context": [list(c) for c in failure.context]}
            events.append(LogEvent("failure", failure.kind, failure.line, None, data))


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
