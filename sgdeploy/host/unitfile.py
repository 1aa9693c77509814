"""Reading a systemd service file someone wrote by hand (what `systemctl cat` prints).

Only what `sgdeploy import --unit` needs: the `[Service]` settings ExecStart=, Environment=,
EnvironmentFile=, WorkingDirectory= and User=, with systemd's own rules (systemd.syntax(7),
systemd.service(5)): a line ending in a backslash continues, a later assignment adds to a list
and an empty one resets it, ExecStart= words are quoted with "..." or '...' and C escapes,
`%%` is a `%` and `$$` a `$`. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
            '"': '"', "'": "'", "s": " "}
_VARIABLE = re.compile(r"\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


class UnitFileError(ValueError):
    """A unit file whose ExecStart= cannot be read."""


@dataclass
class ServiceSettings:
    """The settings of a `[Service]` section that describe one launch."""

    exec_start: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[str] = field(default_factory=list)
    working_directory: str | None = None
    user: str | None = None
    notes: list[str] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped[0] in "#;"):
            continue
        if pending and stripped[:1] in ("#", ";"):
            continue  # a comment inside a continued line is dropped (systemd.syntax(7))
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append((start, pending + stripped))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def split_words(value: str, line: int = 0, dollars: bool = True) -> list[str]:
    """systemd's word splitting: quotes, C escapes, `%%` unescaped (and `$$`, in ExecStart=)."""
    words: list[str] = []
    i, n = 0, len(value)
    while i < n:
        while i < n and value[i] in " \t":
            i += 1
        if i >= n:
            break
        word: list[str] = []
        quote = value[i] if value[i] in "\"'" else None
        if quote:
            i += 1
        while i < n:
            ch = value[i]
            if quote and ch == quote:
                i += 1
                if i < n and value[i] not in " \t":
                    raise UnitFileError(f"line {line}: a quote must end its word (at column "
                                        f"{i + 1})")
                break
            if not quote and ch in " \t":
                break
            if ch == "\\" and i + 1 < n:
                nxt = value[i + 1]
                if nxt == "x" and re.match(r"[0-9a-fA-F]{2}", value[i + 2:i + 4]):
                    word.append(chr(int(value[i + 2:i + 4], 16)))
                    i += 4
                    continue
                word.append(_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            if (ch == "%" or (ch == "$" and dollars)) and i + 1 < n and value[i + 1] == ch:
                word.append(ch)
                i += 2
                continue
            word.append(ch)
            i += 1
        else:
            if quote:
                raise UnitFileError(f"line {line}: unterminated {quote} quote")
        words.append("".join(word))
    return words


def parse_service(text: str) -> ServiceSettings:
    """The launch a unit file describes (drop-ins included, in the order `systemctl cat` prints)."""
    settings = ServiceSettings()
    section = ""
    for line, content in _logical_lines(text):
        if content.startswith("[") and content.endswith("]"):
            section = content[1:-1]
            continue
        key, sep, value = content.partition("=")
        if section != "Service" or not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "ExecStart":
            settings.exec_start = _exec_words(value, line, settings) if value else []
        elif key == "Environment":
            if not value:
                settings.environment.clear()
            for item in split_words(value, line, dollars=False):
                name, equals, setting = item.partition("=")
                if equals:
                    settings.environment[name] = setting
        elif key == "EnvironmentFile":
            if not value:
                settings.environment_files.clear()
            else:
                settings.environment_files.append(value.removeprefix("-"))
        elif key == "WorkingDirectory":
            settings.working_directory = value.removeprefix("-") or None
        elif key == "User":
            settings.user = value or None
    if not settings.exec_start:
        raise UnitFileError("the unit has no ExecStart=")
    return settings


def _exec_words(value: str, line: int, settings: ServiceSettings) -> list[str]:
    prefix = re.match(r"^[-@:+!]*", value)
    flags = prefix.group(0) if prefix else ""
    if "@" in flags:
        raise UnitFileError(f"line {line}: ExecStart= with '@' sets argv[0] apart from the "
                            "program; import the running server instead")
    words = split_words(value[len(flags):], line)
    expanded = [w for w in words if _VARIABLE.search(w)]
    if expanded:
        names = sorted({m for w in expanded for m in _VARIABLE.findall(w)})
        settings.notes.append(f"ExecStart= expands {', '.join(names)} from the environment; the "
                              "profile keeps them as written: check them")
    return words
