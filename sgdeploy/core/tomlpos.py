"""Locate keys in TOML text: dotted path -> 1-based line.

tomllib gives values but no positions. Diagnostics must point at the line of the key, so this
module scans the text once and records where every key is defined. It understands table
headers, arrays of tables, dotted and quoted keys, inline tables and multi-line strings and
arrays; it does not validate TOML (tomllib does that first).
"""

from __future__ import annotations

import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_WS = " \t"


def key_lines(text: str) -> dict[str, int]:
    """Map each dotted key path (`server.tp_size`, `hosts.ct129.gpu`) to the line defining it.

    Tables map to their header line; elements of arrays of tables are indexed
    (`hosts.0.name`). Values inside arrays are given the line of the array's key.
    """
    return _Scanner(text).scan()


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.lines: dict[str, int] = {}
        self.array_counts: dict[str, int] = {}

    # -- low level -----------------------------------------------------------------------
    def _peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def _advance(self, n: int = 1) -> None:
        chunk = self.text[self.pos : self.pos + n]
        self.line += chunk.count("\n")
        self.pos += n

    def _skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WS:
            self.pos += 1

    def _skip_ws_comments_newlines(self) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in _WS or ch in "\r\n":
                self._advance()
            elif ch == "#":
                self._skip_to_eol()
            else:
                break

    def _skip_to_eol(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    # -- keys ------------------------------------------------------------------------------
    def _read_key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self._skip_ws()
            ch = self._peek()
            if ch == '"':
                parts.append(self._read_basic_string())
            elif ch == "'":
                parts.append(self._read_literal_string())
            else:
                m = _BARE_KEY.match(self.text, self.pos)
                if not m:
                    return parts
                parts.append(m.group(0))
                self.pos = m.end()
            self._skip_ws()
            if self._peek() != ".":
                return parts
            self._advance()

    def _read_basic_string(self) -> str:
        if self._peek(3) == '"""':
            return self._read_multiline('"""')
        self._advance()
        out = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\":
                out.append(self.text[self.pos : self.pos + 2])
                self._advance(2)
                continue
            self._advance()
            if ch == '"' or ch == "\n":
                break
            out.append(ch)
        raw = "".join(out)
        try:
            decoded: str = raw.encode("latin-1", "backslashreplace").decode("unicode_escape")
            return decoded
        except UnicodeDecodeError:
            return raw

    def _read_literal_string(self) -> str:
        if self._peek(3) == "'''":
            return self._read_multiline("'''")
        self._advance()
        end = self.text.find("'", self.pos)
        end = len(self.text) if end < 0 else end
        value = self.text[self.pos : end]
        self._advance(end - self.pos + 1)
        return value

    def _read_multiline(self, quote: str) -> str:
        self._advance(3)
        end = self.text.find(quote, self.pos)
        end = len(self.text) if end < 0 else end
        # A multi-line string may end with up to two extra quote characters.
        while self.text[end + 3 : end + 4] == quote[0]:
            end += 1
        value = self.text[self.pos : end]
        self._advance(end - self.pos + 3)
        return value

    # -- values ----------------------------------------------------------------------------
    def _skip_value(self, path: list[str]) -> None:
        self._skip_ws()
        ch = self._peek()
        if ch == '"':
            self._read_basic_string()
        elif ch == "'":
            self._read_literal_string()
        elif ch == "[":
            self._skip_array(path)
        elif ch == "{":
            self._read_inline_table(path)
        else:
            while self.pos < len(self.text) and self.text[self.pos] not in ",]}\n#":
                self.pos += 1

    def _skip_array(self, path: list[str]) -> None:
        self._advance()
        index = 0
        while self.pos < len(self.text):
            self._skip_ws_comments_newlines()
            ch = self._peek()
            if ch == "]":
                self._advance()
                return
            if ch == ",":
                self._advance()
                index += 1
                continue
            if not ch:
                return
            start = self.pos
            self._skip_value([*path, str(index)])
            if self.pos == start:
                self._advance()

    def _read_inline_table(self, path: list[str]) -> None:
        self._advance()
        while self.pos < len(self.text):
            self._skip_ws_comments_newlines()
            ch = self._peek()
            if ch == "}":
                self._advance()
                return
            if ch == ",":
                self._advance()
                continue
            if not ch:
                return
            key_line = self.line
            key = self._read_key()
            if not key:
                self._advance()
                continue
            self._record([*path, *key], key_line)
            self._skip_ws()
            if self._peek() == "=":
                self._advance()
                self._skip_value([*path, *key])

    def _record(self, path: list[str], line: int) -> None:
        self.lines.setdefault(".".join(path), line)

    # -- document --------------------------------------------------------------------------
    def scan(self) -> dict[str, int]:
        table: list[str] = []
        while self.pos < len(self.text):
            self._skip_ws_comments_newlines()
            if self.pos >= len(self.text):
                break
            line = self.line
            if self._peek(2) == "[[":
                self._advance(2)
                name = self._read_key()
                key = ".".join(name)
                index = self.array_counts.get(key, 0)
                self.array_counts[key] = index + 1
                table = [*name, str(index)]
                self._record(name, line)
                self._record(table, line)
                self._skip_to_eol()
            elif self._peek() == "[":
                self._advance()
                table = self._read_key()
                self._record(table, line)
                self._skip_to_eol()
            else:
                parts = self._read_key()
                if not parts:
                    self._skip_to_eol()
                    continue
                self._record([*table, *parts], line)
                self._skip_ws()
                if self._peek() == "=":
                    self._advance()
                    self._skip_value([*table, *parts])
                self._skip_to_eol()
        return self.lines


def nesting_line(text: str, depth: int) -> int | None:
    """The line where arrays and inline tables first nest more than `depth` deep (strings and
    comments skipped); None when they never do."""
    level, line, i = 0, 1, 0
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "#":
            i = _line_end(text, i) - 1
        elif ch in "\"'":
            end = _string_end(text, i)
            line += text.count("\n", i, end)
            i = end - 1
        elif ch in "[{":
            level += 1
            if level > depth:
                return line
        elif ch in "]}":
            level = max(level - 1, 0)
        i += 1
    return None


def deep_key_line(text: str, depth: int) -> int | None:
    """The first line whose table header or dotted key has more than `depth` parts (a dot in a
    quoted part counts too: this only finds where to look)."""
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        key = line.strip("[]") if line.startswith("[") else line.partition("=")[0]
        if key.count(".") >= depth:
            return number
    return None


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _string_end(text: str, i: int) -> int:
    """The index just past the string that starts at `i` (basic or literal, one or three quotes)."""
    quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
    j = i + len(quote)
    while j < len(text):
        if text[j] == "\\" and quote[0] == '"':
            j += 2
            continue
        if text.startswith(quote, j):
            return j + len(quote)
        if text[j] == "\n" and len(quote) == 1:
            return j
        j += 1
    return len(text)
