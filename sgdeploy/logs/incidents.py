"""Incidents: which error stopped the server, its kind, and the line that states the cause.

One incident per exception chain and stream. Its root is the first exception of the chain;
a native library's line printed just before it (NCCL WARN, NVSHMEM, gloo, `invalid device
ordinal`) becomes the root when it is more specific than the Python error it caused. The kind
comes from the message (FAILURE_RULES), then from the module that raised it (MODULE_RULES:
server arguments, distributed init, memory pool, CUDA graph runner, transformers' config and
the hub, the warm-up request), then from the type. Lines a dying server prints because
something else failed first (FOLLOW_ON: `Rank 0 scheduler is dead`, the launcher's EOFError,
uvicorn's lifespan error, sigquit) are consequences, used only when nothing else was found.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from sgdeploy.logs.normalise import ParsedLine
from sgdeploy.logs.remedies import remedy
from sgdeploy.logs.report import Failure
from sgdeploy.logs.segment import MESSAGE_MAX, RawException, Traceback, clip

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

# Checked in this order against an error's text; the first match names the kind.
FAILURE_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "graph_capture_failed",
        re.compile(
            r"(?:^|: )(?:Capture [\w ]{0,40}?graph failed|Piecewise CUDA Graph failed)|"
            r"operation not permitted when stream is capturing|cudaErrorStreamCapture|"
            r"during (?:CUDA|cuda) graph capture|cudaStreamCaptureStatusActive"
        ),
    ),
    (
        "kv_cache_oom",
        re.compile(
            r"Not enough memory\. Please try to increase --mem-fraction-static|"
            r"Not enough memory to allocate KV cache|"
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
            r"\[Errno 98\]|[Aa]ddress already in use|Port is already in use|EADDRINUSE|"
            r"errno: 98|is not available in \d+ seconds|is already in use\. When running multiple"
        ),
    ),
    (
        "model_not_found",
        re.compile(
            r"is not a local folder and is not a valid model identifier|"
            r"Repo id must be in the form|HFValidationError|RepositoryNotFoundError|"
            r"GatedRepoError|does not appear to have a file named|Incorrect path_or_model_id|"
            r"Can't load (?:the )?(?:config|tokenizer)|"
            r"Unrecognized model in|couldn't connect to 'https://huggingface\.co"
        ),
    ),
    (
        "bad_argument",
        # more GPUs asked for (tp x pp per node, base_gpu_id) than the host has
        re.compile(r"invalid device ordinal"),
    ),
    (
        "nccl_error",
        re.compile(
            r"NCCL error|ProcessGroupNCCL|DistBackendError|DistNetworkError|DistStoreError|"
            r"nccl(?:Internal|System|UnhandledCuda|InvalidUsage|Remote)Error|NCCL WARN|"
            r"NVSHMEM|nvshmem|gloo/transport|\[Gloo\].*(?:closed|reset|fail)"
        ),
    ),
)

# The step under way, from any frame of the traceback: an error anywhere inside CUDA graph
# capture is a capture failure, an OOM while the KV pool is allocated a KV cache sizing problem,
# a refusal while the arguments are resolved a bad argument.
MODULE_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "graph_capture_failed",
        re.compile(r"cuda_graph_runner\.py|:capture_one_batch_size|:init_cuda_graphs|"
                   r"graph_runner\.py:capture"),
    ),
    ("kv_cache_oom", re.compile(r"memory_pool(?:_host)?\.py|:init_memory_pool|"
                                r":profile_max_num_token")),
    ("bad_argument", re.compile(r"server_args\.py|/argparse\.py|:prepare_server_args")),
)
# The layer that raised, from the innermost frame only: a layer's name further out says which
# step called it, not what failed (an ImportError or a bad environment value raised on the way
# through distributed init is not a network failure).
RAISER_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "nccl_error",
        re.compile(
            r"parallel_state\.py|torch/distributed/|:init_distributed_environment|pynccl|"
            r"rendezvous\.py|/deep_ep/|nvshmem|device_communicators/"
        ),
    ),
    (
        "model_not_found",
        re.compile(r"tokenization_auto\.py|huggingface_hub/|transformers/utils/hub\.py"),
    ),
)
# Errors of the code itself, not of the layer it sits in: never a network failure.
_PROGRAMMING_TYPES: Final = frozenset(
    {"TypeError", "AttributeError", "NameError", "KeyError", "IndexError", "NotImplementedError",
     "ImportError", "ModuleNotFoundError", "SyntaxError", "UnboundLocalError"}
)
_WARMUP = re.compile(r":_wait_and_warmup|:_execute_server_warmup|warmup")
_LIFESPAN = re.compile(r"starlette/routing\.py|:lifespan")

# Errors that are a consequence of another failure, not a cause.
FOLLOW_ON: Final = re.compile(
    r"scheduler (?:is dead|died during initialization)|terminated with (?:exit code )?-?\d+|"
    r"Application startup failed|Received sigquit from a child proces|"
    r"Child process unexpectedly failed|exited with (?:exit )?code|^Killed$|"
    r"Initialization failed|server launch failed|^Exit code: -?\d+|"
    r"could finish the model loading, but there are other ranks"
)
_REFUSALS: Final = frozenset({"ValueError", "AssertionError", "ArgumentError", "ArgumentTypeError"})
_FOLLOW_ON_TYPES: Final = frozenset({"EOFError", "BrokenPipeError", "ConnectionResetError"})

_KIND_PRIORITY: Final[Mapping[str, int]] = {
    "graph_capture_failed": 0,
    "kv_cache_oom": 1,
    "cuda_oom": 2,
    "port_in_use": 3,
    "model_not_found": 4,
    "bad_argument": 5,
    "nccl_error": 6,
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
)
_ARGPARSE = re.compile(
    r"^(?P<prog>sglang(?: serve)?|[\w.-]+\.py|python[\d.]* -m [\w.]+): error: (?P<msg>.+)$"
)
_FAILURE_HINT = re.compile(
    "|".join(re.escape(t) for t in (*_SIGNATURE_TRIGGERS, ": error: ", "usage: "))
    + "|"
    + FOLLOW_ON.pattern
)
# argparse's usage banner: printed before its `error:` line, which a paste may have lost.
_USAGE = re.compile(r"^usage: (?:sglang(?: serve)?|[\w.-]+\.py|python[\d.]* -m [\w.]+) ")

# Native libraries' own error lines, printed before the Python exception they cause.
_NATIVE = re.compile(
    r"NCCL WARN|non-zero status: \d+|socket(?:Poll|Start)Connect|gloo/transport/tcp/pair\.cc|"
    r"\bibv_\w+ failed|NVSHMEM API called before|invalid device ordinal|"
    r"\[Gloo\].*(?:Connection closed|Connection reset|failed)|"
    r"^\[E\d{3,4} [\d:.]+ ProcessGroup\w*\.cpp:\d+\]"  # c10d's own error records, not its W/I ones
)
_NATIVE_TRIGGERS: Final = (
    "NCCL WARN",
    "non-zero status",
    "socket",
    "gloo",
    "ibv_",
    "NVSHMEM",
    "ordinal",
    "Gloo",
    "ProcessGroup",
)
# Native lines that look alarming and are not: NCCL's INFO chatter, c10d's IPv6 fallback.
_BENIGN = re.compile(
    r"NCCL INFO|IPv6|errno: 97|Address family not supported|NET/Plugin|"
    r"retrying|Setup Custom allreduce failed"
)
_PRECURSOR_WINDOW = 3000  # lines: how far back a native line may explain an exception

_MAX_INCIDENTS = 64
_MAX_EVIDENCE = 8
_MAX_NOTES = 16
CONTEXT_KEEP: Final = 8


@dataclass
class Incident:
    """One failure: an exception chain, a native library's error, or a line that states a cause."""

    line: int  # the root line
    kind: str
    message: str
    context: list[tuple[int, str]]
    t: str | None = None
    strength: int = 2  # 2: an error; 1: a native library's line alone; 0: a consequence
    evidence: list[tuple[int, str]] = field(default_factory=list)
    absorbed: bool = False  # a native line another incident took as its root
    native: bool = False  # a native library's line, not yet explained by a Python error
    notes: list[tuple[int, str]] = field(default_factory=list)  # more lines of its messages
    pinned: bool = False  # its kind comes from what the user must do: no chain sharpens it


class Verdict(NamedTuple):
    kind: str
    strength: int  # 2: an error; 0: a consequence of another failure
    hint: str = ""  # what to do, when the error's own words do not say it
    pinned: bool = False  # the cause is the error itself: a chain does not sharpen its kind


def kind_of(
    etype: str,
    msg: str,
    tb: Traceback | None,
    capturing: bool,
    settings: Mapping[str, Any] | None = None,
) -> Verdict:
    """The kind of an exception, from what the user must do next (a package, a setting, the
    model: `remedy`), then its text, then the step under way (any frame), then the layer that
    raised it (the innermost frame), then its type."""
    text = f"{etype}: {msg}" if etype else msg
    short = etype.rsplit(".", 1)[-1]
    modules = tb.modules if tb is not None else []
    where = " ".join(modules)
    if short in _FOLLOW_ON_TYPES or FOLLOW_ON.search(text) or _LIFESPAN.search(where):
        return Verdict("crash", 0)
    if etype or tb is not None:
        fix = remedy(etype, msg, tb, settings)
        if fix is not None:
            return Verdict(fix.kind, 2, fix.hint, pinned=True)
    by_text = next((kind for kind, pattern in FAILURE_RULES if pattern.search(text)), None)
    by_step = next((kind for kind, pattern in MODULE_RULES if pattern.search(where)), None)
    if capturing or by_step == "graph_capture_failed":
        return Verdict("graph_capture_failed", 2)
    if by_text == "cuda_oom" and by_step == "kv_cache_oom":
        return Verdict("kv_cache_oom", 2)
    if by_text is not None:
        return Verdict(by_text, 2)
    if _WARMUP.search(where):
        return Verdict("crash", 2)  # the server was up; its warm-up request failed
    if by_step == "bad_argument" and (not short or short in _REFUSALS):
        return Verdict("bad_argument", 2)  # a TypeError in argument handling is SGLang's bug
    raiser = tb.raiser if tb is not None else ""
    by_raiser = next((kind for kind, pattern in RAISER_RULES if pattern.search(raiser)), None)
    if by_raiser is not None and short not in _PROGRAMMING_TYPES:
        return Verdict(by_raiser, 2)
    if short == "OSError" and not msg.startswith("[Errno"):
        return Verdict("model_not_found", 2)  # transformers' "can't find/load this model" errors
    return Verdict("crash", 2)


def with_hint(line: str, hint: str) -> str:
    """The root line's text and, when it has one, what to do, within the message's length."""
    if not hint:
        return clip(line)
    suffix = f" (fix: {hint})"
    return clip(line, max(MESSAGE_MAX - len(suffix), 80)) + suffix


class IncidentBook:
    """Collects incidents from exceptions, cause lines and native lines; picks the failure."""

    def __init__(self) -> None:
        self.settings: Mapping[str, Any] | None = None  # the server's resolved arguments, once read
        self.incidents: list[Incident] = []
        self._last: dict[str | None, Incident] = {}  # per stream: its latest exception incident
        self._chain_until: dict[str | None, int] = {}
        self._native: deque[tuple[int, str, str]] = deque(maxlen=16)  # (line, text, kind)
        self._adopted: set[int] = set()  # native lines already named as some incident's root

    # -- input ------------------------------------------------------------------------------

    def header(self, n: int, tb: Traceback) -> None:
        if n <= self._chain_until.get(tb.stream, 0):
            tb.continues = self._last.get(tb.stream)

    def chain(self, n: int, stream: str | None) -> None:
        if stream in self._last:
            self._chain_until[stream] = n + 4

    def message(self, n: int, text: str, stream: str | None) -> None:
        """A further line of the latest exception's message (SGLang's "Possible solutions:" and
        its list, NCCL's "Last error:"): kept with the incident, whatever the context keeps."""
        incident = self._last.get(stream)
        if incident is not None and len(incident.notes) < _MAX_NOTES:
            incident.notes.append((n, clip(text.rstrip())))

    def frame(self, tb: Traceback, module: str) -> None:
        """A frame of a chained traceback can sharpen the kind before its exception line."""
        incident = tb.continues
        if isinstance(incident, Incident) and incident.strength == 2:
            for kind, pattern in MODULE_RULES:
                if kind == "graph_capture_failed" and pattern.search(module):
                    self._sharpen(incident, kind)

    def exception(self, exc: RawException, capturing: bool) -> Incident:
        tb = exc.tb
        verdict = kind_of(exc.etype, exc.message, tb, capturing, self.settings)
        entry = (exc.line, clip(exc.text))
        incident = tb.continues
        if isinstance(incident, Incident):  # a chained traceback: same root, maybe a sharper kind
            if verdict.pinned and not incident.pinned:  # a later error says what to do
                incident.kind, incident.pinned = verdict.kind, True
                incident.message = with_hint(incident.message, verdict.hint)
            elif verdict.strength == 2:
                self._sharpen(incident, verdict.kind)
            incident.context.append(entry)
            return incident
        incident = Incident(
            exc.line,
            verdict.kind,
            with_hint(exc.text, verdict.hint),
            [*tb.shown_frames(), entry],
            tb.t,
            verdict.strength,
            pinned=verdict.pinned,
        )
        if verdict.strength == 2:
            self._adopt_native(incident)
        self._add(incident)
        self._last[tb.stream] = incident
        return incident

    def line(self, n: int, p: ParsedLine, t: str | None, capturing: bool) -> bool:
        """A line outside any traceback; True when it stated a cause or a native error."""
        text = p.text
        if any(trigger in text for trigger in _NATIVE_TRIGGERS) and self._native_line(n, text, t):
            return True
        if not _FAILURE_HINT.search(text):
            return False
        line = clip(text.strip())
        if ": error: " in text:
            am = _ARGPARSE.match(text.strip())
            if am is not None:
                message = clip(f"{am.group('prog')}: error: {am.group('msg')}")
                self._add(Incident(n, "bad_argument", message, [(n, line)], t))
                return True
        if text.startswith("usage: ") and _USAGE.match(text):
            self._add(Incident(n, "bad_argument", line, [(n, line)], t, strength=1))
            return True
        if FOLLOW_ON.search(text):
            self._add(Incident(n, "crash", line, [(n, line)], t, strength=0))
            return True
        if any(trigger in text for trigger in _SIGNATURE_TRIGGERS):
            kind, strength, _, _ = kind_of("", text, None, capturing)
            if kind != "crash":
                incident = Incident(n, kind, line, [(n, line)], t, strength)
                self._adopt_native(incident)
                self._add(incident)
                return True
        return False

    def unterminated(self, tb: Traceback, capturing: bool) -> None:
        """A traceback cut before its exception line: still an error, named by where it was.

        The main process's own traceback after a scheduler was reported dead is the launcher
        giving up, a consequence like the report itself."""
        if isinstance(tb.continues, Incident):
            return  # the rest of a chain whose root is known
        kind, strength, _, _ = kind_of("", "", tb, capturing)
        after_death = any(i.strength == 0 and i.line < tb.header for i in self.incidents)
        if tb.rank is None and after_death:
            strength = 0
        entry = (tb.header, clip(tb.text))
        context = [entry, *(f for f in tb.shown_frames() if f[0] != tb.header)]
        incident = Incident(tb.header, kind, entry[1], context, tb.t, strength)
        if strength == 2:
            self._adopt_native(incident)
        self._add(incident)

    # -- verdict ----------------------------------------------------------------------------

    def has_error(self, after: int) -> bool:
        """An error (not only a native line or a consequence) after line `after`: the server is
        failing, whatever else it prints; the weaker signs wait for the end of input."""
        return any(i.strength == 2 and i.line > after and not i.absorbed for i in self.incidents)

    def failure(self, after: int) -> Failure | None:
        """The failure the incidents after line `after` (the ready line, or 0) point at."""
        found = [i for i in self.incidents if i.line > after and not i.absorbed]
        if not found:
            return None
        best = max(i.strength for i in found)
        candidates = sorted((i for i in found if i.strength == best), key=lambda i: i.line)
        if best == 2 and all(i.t for i in candidates):
            candidates.sort(key=lambda i: (i.t or "", i.line))  # the first rank to fail, by time
        pick = candidates[0]
        if best == 2:
            # A specific cause wins over a generic crash; an NCCL error only when it came first
            # (ranks whose peer died report NCCL errors as a consequence).
            specific = [i for i in candidates if i.kind not in ("crash", "nccl_error")]
            if pick.kind != "nccl_error" and specific:
                pick = specific[0]
        others = sorted((i for i in found if i is not pick), key=lambda i: i.line)
        consequences = tuple((i.line, i.message) for i in others[:_MAX_EVIDENCE])
        return Failure(
            pick.kind,
            pick.line,
            pick.message,
            tuple(sorted([*pick.context[-CONTEXT_KEEP:], *pick.notes])),
            evidence=tuple(pick.evidence[:_MAX_EVIDENCE]),
            consequences=consequences,
            confidence=_confidence(pick, candidates),
        )

    # -- helpers ----------------------------------------------------------------------------

    def _native_line(self, n: int, text: str, t: str | None) -> bool:
        if _BENIGN.search(text) or not _NATIVE.search(text):
            return False
        line = clip(text.strip())
        kind = "bad_argument" if "invalid device ordinal" in text else "nccl_error"
        self._native.append((n, line, kind))
        lone = next((i for i in reversed(self.incidents) if i.native), None)
        if lone is not None and n - lone.line <= _PRECURSOR_WINDOW:
            if len(lone.evidence) < _MAX_EVIDENCE:
                lone.evidence.append((n, line))
        else:
            evidence = [(n, line)]
            self._add(Incident(n, kind, line, [(n, line)], t, 1, evidence, native=True))
        return True

    def _adopt_native(self, incident: Incident) -> None:
        """Name a native line printed just before as the root, when it is more specific. A line
        already named by another rank's error stays that one's: this rank keeps its own root."""
        near = [nat for nat in self._native if incident.line - nat[0] <= _PRECURSOR_WINDOW]
        if not near:
            return
        incident.evidence = [(ln, text) for ln, text, _ in near][:_MAX_EVIDENCE]
        free = [nat for nat in near if nat[0] not in self._adopted]
        if incident.kind not in ("nccl_error", "crash") or incident.pinned or not free:
            return
        first_line, first_text, first_kind = free[0]
        self._adopted.add(first_line)
        incident.evidence.append((incident.line, incident.message))
        incident.context.insert(0, (first_line, first_text))
        incident.line, incident.message, incident.kind = first_line, first_text, first_kind
        for other in self.incidents:
            if other.native and other.line >= first_line:
                other.absorbed = True

    def _sharpen(self, incident: Incident, kind: str) -> None:
        if not incident.pinned and _KIND_PRIORITY[kind] < _KIND_PRIORITY[incident.kind]:
            incident.kind = kind

    def _add(self, incident: Incident) -> None:
        if len(self.incidents) < _MAX_INCIDENTS:
            self.incidents.append(incident)


def _confidence(pick: Incident, rivals: list[Incident]) -> str:
    """high: a specific cause stated once; medium: a generic crash, a native line alone, or
    several specific causes that disagree; low: only consequences were seen."""
    if pick.strength == 0:
        return "low"
    if pick.strength == 1 or pick.kind == "crash":
        return "medium"
    kinds = {i.kind for i in rivals if i.kind not in ("crash", "nccl_error")}
    return "high" if len(kinds) <= 1 else "medium"
