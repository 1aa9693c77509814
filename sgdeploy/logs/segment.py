"""Segment: follow Python tracebacks through a stream of normalised lines.

Any `File "...", line N` line is a frame, whatever its indentation; a frame with no traceback
open opens one (a log that starts mid-traceback, or whose header line was lost). The line right
after a frame is the echoed source (`raise RuntimeError(f"NCCL error: ...")`) and is never taken
for an error; caret lines (`^^^^`) neither. The first line that looks like `dotted.Name: message`
closes the traceback. Tracebacks are kept per stream (the process a wrapper named), so ranks
that print at once through docker compose or Ray do not mix; lines of other SGLang records in
between do not end a traceback.

An exception line with no traceback before it (a paste of the error alone, or the first half of a
chain cut off) is an exception all the same; a traceback whose exception line never comes (the
paste or the log was cut, or the next traceback of that stream began) is handed on in `cut`, so
the incident stage can still name it.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from sgdeploy.logs.normalise import ParsedLine

TB_HEADER: Final = "Traceback (most recent call last):"
CHAIN: Final = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)"
)
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line \d+(?:, in (?P<func>[\w<>.]+))?')
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:: (?P<msg>.*))?$")
_EXC_NAME = re.compile(r"(?:Error|Exception|Exit|Interrupt|Warning|Failure|Timeout)$")
_CARETS = re.compile(r"^\s*[~^]+\s*$")
_TB_MAX_IDLE = 40  # non-frame lines after which a traceback without an exception line is dropped
CONTEXT_FRAMES: Final = 4  # traceback lines kept before the exception line, for display
_MAX_MODULES = 48
MESSAGE_MAX: Final = 400
_WORD_BACK = 40  # how far back from the limit a cut may go to end on a whole word


def clip(text: str, limit: int = MESSAGE_MAX) -> str:
    """`text` cut to `limit` characters at a word's end, with an ellipsis when cut at all."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ", limit - 1 - _WORD_BACK)
    return (cut[:space] if space > 0 else cut).rstrip(" ,;:") + "…"


@dataclass
class Traceback:
    """A traceback being read."""

    header: int  # the line that opened it (a header, or the first frame of an implicit one)
    t: str | None
    rank: str | None
    stream: str | None
    frames: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=3 * CONTEXT_FRAMES))
    modules: list[str] = field(default_factory=list)  # "path:function" of every frame
    raiser: str = ""  # "path:function" of the innermost frame: where the exception was raised
    raiser_source: str = ""  # that frame's echoed source line
    # innermost last
    sources: deque[str] = field(default_factory=lambda: deque(maxlen=2 * CONTEXT_FRAMES))
    continues: object | None = None  # set by the incident stage: the incident this chains onto
    expect_source: bool = False
    idle: int = 0
    text: str = ""  # the opening line, for a traceback cut before its exception line


    def shown_frames(self) -> list[tuple[int, str]]:
        """The last CONTEXT_FRAMES lines to show before the exception line: the standard library's
        frames between (concurrent.futures re-raising a worker's error, threading) say nothing of
        the cause, so only the innermost frame is kept when it is one of them."""
        *outer, innermost = self.frames or [(0, "")]
        kept = [f for f in outer if not _STDLIB_FRAME.search(f[1])]
        return [*kept, innermost][-CONTEXT_FRAMES:] if self.frames else []


class RawException(NamedTuple):
    """The exception line that closed a traceback."""

    line: int
    etype: str
    message: str
    text: str
    tb: Traceback


Role = Literal["", "header", "frame", "source", "chain", "exception", "message"]


class Step(NamedTuple):
    role: Role
    tb: Traceback | None = None
    exc: RawException | None = None
    module: str | None = None  # for a frame: its "path:function"


_NOTHING: Final = Step("")
# a frame of Python's own library (not of a package installed into it)
_STDLIB_FRAME: Final = re.compile(r'File "[^"]*/lib/python3\.\d+/(?!site-packages/|dist-packages/)')
_LONE_TYPES: Final = ("Error", "Exception", "Failure", "Timeout")
_MESSAGE_LINES = 8  # unprefixed lines right after an exception that may still be its message


def exception_line(text: str) -> tuple[str, str] | None:
    """(type, message) when `text` is an exception line such as `torch.OutOfMemoryError: ...`."""
    m = _EXC_LINE.match(text)
    if m is None or not _EXC_NAME.search(m.group("type").rsplit(".", 1)[-1]):
        return None
    return m.group("type"), (m.group("msg") or "").strip()


class Segmenter:
    """Per-stream traceback state; feed() says what role a line plays."""

    def __init__(self) -> None:
        self._open: dict[str | None, Traceback] = {}
        # stream -> (last line, lines since)
        self._closed_at: dict[str | None, tuple[int, int]] = {}
        self.cut: list[Traceback] = []  # tracebacks that ended without an exception line

    @property
    def idle(self) -> bool:
        """No traceback is open: a line that is not an error needs no look here."""
        return not self._open

    def close(self) -> list[Traceback]:
        """End of input: every traceback still open was cut."""
        self.cut.extend(self._open.values())
        self._open.clear()
        cut, self.cut = self.cut, []
        return cut

    def feed(self, n: int, p: ParsedLine, last_t: str | None) -> Step:
        text = p.text
        if TB_HEADER in text:
            tb = Traceback(n, p.t or last_t, p.rank_label, p.stream, text=text.strip())
            tb.frames.append((n, text.strip()))
            previous = self._open.get(p.stream)
            if previous is not None:
                self.cut.append(previous)
            self._open[p.stream] = tb
            return Step("header", tb)
        fm = _FRAME.match(text) if 'File "' in text[:40] else None
        open_tb = self._open.get(p.stream)
        if fm is not None:
            if open_tb is None:  # frames without a header: an implicit traceback
                open_tb = Traceback(n, p.t or last_t, p.rank_label, p.stream, text=text.strip())
                self._open[p.stream] = open_tb
            tb = open_tb
            module = f"{fm.group('path')}:{fm.group('func') or ''}"
            tb.frames.append((n, text.rstrip()))
            if len(tb.modules) < _MAX_MODULES:
                tb.modules.append(module)
            tb.raiser, tb.raiser_source = module, ""
            tb.expect_source, tb.idle = True, 0
            return Step("frame", tb, module=module)
        if open_tb is None:
            if text[:1] in "DT" and CHAIN.match(text):
                return Step("chain")
            if self._continues(n, p):
                return Step("message")
            return self._lone(n, p, last_t)
        return self._inside(n, p, open_tb)

    def _continues(self, n: int, p: ParsedLine) -> bool:
        """A further line of the exception message just above (`ncclSystemError: ...`, `Last
        error:`, torch's CUDA hints): unprefixed, not blank, on the very next line."""
        last = self._closed_at.get(p.stream)
        if last is None or last[0] != n - 1 or last[1] >= _MESSAGE_LINES:
            return False
        if p.prefixed or p.source != "plain" or not p.text.strip():
            return False
        self._closed_at[p.stream] = (n, last[1] + 1)
        return True

    def _lone(self, n: int, p: ParsedLine, last_t: str | None) -> Step:
        """An exception line outside any traceback (`ValueError: ...` pasted alone)."""
        text = p.text
        if p.prefixed or not text[:1].isalpha():
            return _NOTHING
        colon = text.find(": ", 0, 120)
        etype = text[:colon] if colon > 0 else ""
        if not etype.endswith(_LONE_TYPES) or etype == "Error" or " " in etype:
            return _NOTHING
        found = exception_line(text.strip())
        if found is None:
            return _NOTHING
        tb = Traceback(n, p.t or last_t, p.rank_label, p.stream, text=text.strip())
        self._closed_at[p.stream] = (n, 0)
        return Step("exception", tb, RawException(n, found[0], found[1], text.strip(), tb))

    @staticmethod
    def _source(tb: Traceback, stripped: str) -> Step:
        """A frame's echoed source line: kept, for the innermost frame, as what raised."""
        if tb.expect_source:
            tb.raiser_source = stripped
            tb.sources.append(stripped)
        tb.expect_source = False
        return Step("source", tb)

    def _inside(self, n: int, p: ParsedLine, tb: Traceback) -> Step:
        text = p.text
        stripped = text.strip()
        if not stripped or _CARETS.match(text):
            return _NOTHING if not stripped else Step("source", tb)
        if text[:1] in (" ", "\t"):
            return self._source(tb, stripped)
        found = exception_line(stripped) if not p.prefixed else None
        if found is not None:
            del self._open[p.stream]
            self._closed_at[p.stream] = (n, 0)
            return Step("exception", tb, RawException(n, found[0], found[1], stripped, tb))
        if tb.expect_source and not p.prefixed:  # frames that lost their indentation
            return self._source(tb, stripped)
        tb.idle += 1
        if tb.idle > _TB_MAX_IDLE:
            del self._open[p.stream]
            self.cut.append(tb)
        return _NOTHING
