"""Normalise: one raw line -> ParsedLine, with the stack of prefixes around SGLang's record off.

A line as an operator pastes it may carry, outermost first: ANSI colour, a docker json-file
record (`{"log": "...", "stream": ...}`), a journal, kubectl or log-viewer timestamp, a Python
logging record of a launcher (`2025-03-07 23:50:27,531 - x - INFO - ` or
`2024-08-27 12:54:55 | ERROR | stderr | `), a docker compose service (`svc-1  | `), kubectl's
`--prefix` (`[pod/name/container] `), a Ray actor (`(SGLangEngine pid=6680) `), torchrun's
`[rank0]: `, then SGLang's own `[date time TPn]` (`[MM-DD time]` in the multimodal server, `[gpu=0]`
in 0.2) and uvicorn's level word. The outer wrappers come in any order and are stripped until none
is left; the one that names a process (compose service, pod, Ray actor, torchrun rank) is the
line's `stream`, so interleaved tracebacks of several processes can be told apart.
"""

from __future__ import annotations

import json
import re
from typing import Literal, NamedTuple

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\^\[\[[0-9;]*[A-Za-z]")
_JOURNAL = re.compile(
    r"^(?:(?P<short>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)(?:\.\d+)?"
    r"|(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?P<frac>\.\d+)?(?:[+-]\d\d:?\d\d|Z)?"
    r"|\d{9,}\.\d+)"
    r" [^\s\[]\S* [^\s\[\]:|]+(?:\[\d+\])?: ?"
)
# kubectl logs --timestamps, docker logs -t: an RFC 3339 stamp and a space.
_STAMP = re.compile(r"^(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?P<frac>\.\d+)?(?:Z|"
                    r"[+-]\d\d:?\d\d)? ")
# A launcher's Python logging record around SGLang's line: `2025-03-07 23:50:27,531 - x - INFO - `.
_PYLOG = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d)[ T](?P<tm>\d\d:\d\d:\d\d)(?:[,.]\d+)?(?:[+-]\d\d:?\d\d)?"
    r" - [\w.<>-]+ - (?:INFO|WARNING|ERROR|DEBUG|CRITICAL) - "
)
# The same record written by a launcher that uses `date | LEVEL | logger | message`.
_PIPELOG = re.compile(
    r"^(?P<d>\d{4}-\d\d-\d\d) (?P<tm>\d\d:\d\d:\d\d)(?:[,.]\d+)? \| "
    r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \| [\w.<>-]+ \| ?"
)
# A log viewer's export (Kibana and the like): `May 16, 2026 @ 20:46:57.892    `.
_VIEWER = re.compile(r"^[A-Z][a-z]{2} \d{1,2}, \d{4} @ \d\d:\d\d:\d\d(?:\.\d+)?\s+")
_COMPOSE = re.compile(r"^(?P<svc>[A-Za-z0-9][\w.-]*)\s+\| ")
_KUBECTL = re.compile(r"^\[(?P<pod>pod/[\w.-]+/[\w.-]+)\] ")
# Ray's driver prefixes a worker's output with `(Actor pid=N[, ip=...]) `, a task's with
# `(pid=N) ` and its own daemons' with `(raylet) ` or `(raylet, ip=...) `.
_RAY = re.compile(
    r"^\((?:(?P<actor>[\w.:-]+) )?pid=(?P<pid>\d+)(?:, ip=[\w.:-]+)?\)\s"
    r"|^\((?P<daemon>raylet|gcs_server|monitor|dashboard(?:_agent)?)(?:, ip=[\w.:-]+)?\)\s"
)
_TORCHRUN = re.compile(r"^\[(?P<rank>(?:rank|default)\d+)\]:\s?")
_SGLANG = re.compile(
    r"^\[(?:(?P<d>\d{4}-\d\d-\d\d) )?(?P<tm>\d\d:\d\d:\d\d)(?:[.,](?P<ms>\d{1,6}))?"
    r"(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)(?: [a-z][\w-]*)?\] ?"
)
# The multimodal server's `[12-16 14:27:08]` (no year) and 0.2's `[gpu=0]`.
_SGLANG_SHORT = re.compile(r"^\[(?:\d\d-\d\d \d\d:\d\d:\d\d|gpu=(?P<gpu>\d+))\] ?")
_SGLANG_ANYWHERE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_RANK = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_UVICORN = re.compile(r"^(?P<lvl>INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\s+")
_MAX_WRAPPERS = 6

Source = Literal["sglang", "uvicorn", "plain"]


class ParsedLine(NamedTuple):
    """One log line without its wrappers, ANSI, SGLang and uvicorn decorations."""

    text: str  # the message; leading whitespace kept (traceback frames are indented)
    t: str | None = None  # ISO timestamp, "2026-05-12T00:01:11" (".123" with SGLANG_LOG_MS=1)
    ranks: tuple[tuple[str, int], ...] = ()  # (("DP", 0), ("TP", 1)); () when unlabelled
    rank_label: str | None = None  # "DP0 TP1"; None when unlabelled
    is_primary: bool = True  # rank 0 on every axis, or no rank label (the main process)
    source: Source = "plain"
    level: str | None = None  # uvicorn's level word, when it has one
    prefixed: bool = False  # carried an SGLang `[date time ...]` prefix
    stream: str | None = None  # the process a wrapper named: compose service, Ray actor, rank


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


def _unwrap_once(line: str) -> tuple[str, str | None, str | None] | None:
    """Strip one outer wrapper: (rest, timestamp, stream), or None when the line has none."""
    c = line[:1]
    if c == "[":
        m = _TORCHRUN.match(line)
        if m is not None:
            return line[m.end() :], None, m.group("rank")
        km = _KUBECTL.match(line) if line.startswith("[pod/") else None
        return (line[km.end() :], None, km.group("pod")) if km else None
    if c == "{" and line.startswith('{"log":'):
        return _docker_json(line)
    if c == "(":
        m = _RAY.match(line)
        if m is None:
            return None
        actor, pid = m.group("actor", "pid")
        stream = m.group("daemon") or (f"{actor} pid={pid}" if actor else f"pid={pid}")
        return line[m.end() :], None, stream
    if c.isdigit():
        jm = _JOURNAL.match(line)
        if jm is not None:
            t = jm.group("iso") + (jm.group("frac") or "") if jm.group("iso") else None
            return line[jm.end() :], t, None
        sm = _STAMP.match(line)
        if sm is not None:
            return line[sm.end() :], sm.group("iso") + (sm.group("frac") or ""), None
        pm = _PYLOG.match(line) if " - " in line[:80] else None
        if pm is None and " | " in line[:40]:
            pm = _PIPELOG.match(line)
        if pm is not None:
            return line[pm.end() :], f"{pm.group('d')}T{pm.group('tm')}", None
    elif c.isalpha():
        jm = _JOURNAL.match(line) if c.isupper() else None
        if jm is None and c.isupper() and " @ " in line[:26]:
            jm = _VIEWER.match(line)
        if jm is not None:
            return line[jm.end() :], None, None
    if c.isalnum() and "|" in line[:64]:
        cm = _COMPOSE.match(line)
        if cm is not None:
            return line[cm.end() :], None, cm.group("svc")
    return None


def _docker_json(line: str) -> tuple[str, str | None, str | None] | None:
    """docker's json-file driver: one JSON object per line, the text under "log"."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    text = record.get("log") if isinstance(record, dict) else None
    if not isinstance(text, str):
        return None
    t = record.get("time")
    stamp = _STAMP.match(f"{t} ") if isinstance(t, str) else None
    return (
        text.rstrip("\r\n"),
        (stamp.group("iso") + (stamp.group("frac") or "")) if stamp else None,
        None,
    )


# SGLang's own lines of a server at work: batch records and uvicorn's access lines. A long log is
# mostly these; they are recognised in one match, without the full parse.
_QUIET_RECORD = re.compile(
    r"\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?(?: [A-Z][A-Z_]*\d+)*\] "
    r"(?=(?:Decode batch|Prefill batch)[.,]|INFO: +[\d.:\[\]a-f]+ - \")"
)


def quiet_record(raw: str) -> tuple[str, str] | None:
    """(timestamp, message) of a batch or access line with SGLang's bare prefix; None otherwise."""
    m = _QUIET_RECORD.match(raw)
    if m is None:
        return None
    d, tm, ms = m.groups()
    return (f"{d}T{tm}.{ms}" if ms else f"{d}T{tm}"), raw[m.end() :].rstrip("\r\n")


def strip_line(raw: str) -> ParsedLine:
    """Parse one raw line: outer wrappers, then SGLang's prefix, then uvicorn's level word."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line or "^[[" in line:
        line = _ANSI.sub("", line)
    t: str | None = None
    stream: str | None = None
    bare = line[:1] == "[" and line[1:2].isdigit()  # SGLang's own prefix first: nothing to unwrap
    for _ in range(0 if bare else _MAX_WRAPPERS):
        un = _unwrap_once(line)
        if un is None:
            break
        line, wt, ws = un
        if "\x1b" in line:  # colour inside a docker json record
            line = _ANSI.sub("", line)
        t = t or wt
        stream = stream or ws
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
        d, tm, ms, ranks = m.group("d", "tm", "ms", "ranks")
        if d:
            t = f"{d}T{tm}.{ms}" if ms else f"{d}T{tm}"
        if ranks:
            info = _ranks(ranks)
        line = line[m.end() :]
        source, prefixed = "sglang", True
    elif line[:1] == "[":
        short = _SGLANG_SHORT.match(line)
        if short is not None:
            if short.group("gpu") is not None:
                info = _ranks(f" GPU{short.group('gpu')}")
            line = line[short.end() :]
            source, prefixed = "sglang", True
    level: str | None = None
    um = _UVICORN.match(line) if line[:1] in "IWEDCT" and ":" in line[4:9] else None
    if um is not None:
        level, source = um.group("lvl"), "uvicorn"
        line = line[um.end() :]
    return ParsedLine(line, t, info[0], info[1], info[2], source, level, prefixed, stream)
