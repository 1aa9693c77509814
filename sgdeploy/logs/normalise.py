"""Normalise: one raw line -> ParsedLine, its journal, ANSI, SGLang and uvicorn prefixes off."""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

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
