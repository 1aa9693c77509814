"""Incidents: which error stopped the server, its kind and the line that states the cause."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

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
