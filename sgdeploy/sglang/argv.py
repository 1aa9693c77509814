"""Reading an SGLang command line the way that version's own parser reads it.

SGLang builds its parser with `argparse.ArgumentParser()` (so `allow_abbrev=True`, see
../shared/sglang/constraints.md rows 3-4) from `ServerArgs.add_cli_args`: a unique prefix of a
flag is accepted (`--mem-frac 0.8`), `--flag=value` works, the last of a repeated flag wins,
`--no-x` turns a BooleanOptionalAction off. `parse_server_argv` repeats those rules against the
flag catalog of one version and turns the words into `[server]` values; every word it cannot
place is a finding at its position, never dropped. Pure: no I/O.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sgdeploy.sglang.catalog import Catalog, Flag, flag_history
from sgdeploy.sglang.flags import replacement_for
from sgdeploy.sglang.versions import parse_version

LAUNCH_MODULE = "sglang.launch_server"


@dataclass(frozen=True)
class LaunchEntry:
    """Where SGLang's entry point sits in a command line: the word that names it (`entry_at`),
    the first of SGLang's flags (`flags_at`), and which entry it is (launch_server or serve)."""

    entry_at: int
    flags_at: int
    entry: str


def launch_entry(argv: Sequence[str]) -> LaunchEntry | None:
    """The SGLang entry point among the words of `argv`, or None when the command itself starts no
    server: a shell's `-c` string that mentions one is a single word and matches nothing."""
    words = list(argv)
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words) and words[i + 1] == LAUNCH_MODULE:
            return LaunchEntry(i, i + 2, "launch_server")
        if word == f"-m{LAUNCH_MODULE}":
            return LaunchEntry(i, i + 1, "launch_server")
        if (
            posixpath.basename(word) == "launch_server.py"
            and posixpath.basename(posixpath.dirname(word)) == "sglang"
        ):
            return LaunchEntry(i, i + 1, "launch_server")
        if posixpath.basename(word) == "sglang" and i + 1 < len(words) and words[i + 1] == "serve":
            return LaunchEntry(i, i + 2, "serve")
    return None


# argparse adds -h/--help to every parser: they take part in prefix matching.
_HELP_OPTIONS = ("-h", "--help")
# What argparse takes for a negative number rather than an option (SGLang has no such option).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_INT = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class ArgvFinding:
    """Something about one word of the command line: `index` counts from the first SGLang flag."""

    index: int | None
    severity: str  # "error" (SGLang would refuse it), "warning", "info"
    message: str
    hint: str = ""


@dataclass(frozen=True)
class FlagUse:
    """One flag as written, and what it stands for."""

    index: int
    written: tuple[str, ...]  # the words as they were, e.g. ("--mem-frac=0.88",)
    field: str
    option: str  # the full option SGLang matched, e.g. "--mem-fraction-static"
    value: Any

    @property
    def abbreviated(self) -> bool:
        return self.written[0].split("=", 1)[0] != self.option


@dataclass
class ParsedArgv:
    """`[server]` values in order of first appearance, the uses behind them, and findings."""

    server: dict[str, Any] = field(default_factory=dict)
    uses: list[FlagUse] = field(default_factory=list)
    findings: list[ArgvFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def unknown(self) -> list[str]:
        return [
            f.message.split("'")[1]
            for f in self.findings
            if f.message.startswith("unrecognized argument '")
        ]


class _Parser:
    def __init__(self, words: list[str], catalog: Catalog) -> None:
        self.words = words
        self.catalog = catalog
        self.options = catalog.by_option
        self.result = ParsedArgv()
        self.i = 0

    def find(self, index: int | None, severity: str, message: str, hint: str = "") -> None:
        self.result.findings.append(ArgvFinding(index, severity, message, hint))

    # -- argparse's _parse_optional -----------------------------------------------------
    def is_option(self, word: str) -> bool:
        """argparse's 'O' versus 'A': whether a word is taken as an option rather than a value."""
        if not word or word[0] != "-" or word == "-":
            return False
        if word in self.options or word in _HELP_OPTIONS:
            return True
        if "=" in word and word.split("=", 1)[0] in self.options:
            return True
        if len(self.matches(word)) > 0:
            return True
        if _NEGATIVE_NUMBER.match(word):
            return False
        return " " not in word

    def matches(self, word: str) -> list[str]:
        """Option strings `word` abbreviates (argparse's _get_option_tuples for `--` words)."""
        if not word.startswith("--"):
            return []
        prefix = word.split("=", 1)[0]
        return [
            o
            for o in (*self.options, *_HELP_OPTIONS)
            if o.startswith("--") and o.startswith(prefix)
        ]

    def resolve(self, word: str) -> tuple[str, str | None] | None:
        """(full option, explicit `=value`) for an option word; a finding and None otherwise."""
        if word in self.options or word in _HELP_OPTIONS:
            return word, None
        head, equals, value = word.partition("=")
        explicit = value if equals else None
        if equals and head in self.options:
            return head, explicit
        found = self.matches(word)
        # argparse matches a prefix per action: an alias and its field's own option are two
        actions = {id(self.options[o]) if o in self.options else o for o in found}
        if len(actions) == 1:
            flag = self.options.get(found[0])
            if len(found) > 1 and flag is not None:
                self.find(self.i, "warning", f"'{word.split('=', 1)[0]}' abbreviates "
                          f"{', '.join(sorted(found))}, all {flag.option}; the argparse of Python "
                          "3.11 and older calls that ambiguous",
                          f"write {flag.option} in full")
            return (flag.option if flag else found[0]), explicit
        if found:
            self.find(self.i, "error", f"ambiguous option '{word.split('=', 1)[0]}' could match "
                      + ", ".join(sorted(found)), "write the flag in full")
            return None
        self.find(self.i, "error", f"unrecognized argument '{word}' for SGLang "
                                   f"{self.catalog.version}",
                  _unknown_hint(head, self.catalog))
        return None

    # -- values ---------------------------------------------------------------------------
    def take_values(self, flag: Flag) -> list[str] | None:
        """The value words after the option, as argparse counts them for the flag's nargs."""
        start = self.i + 1
        end = start
        while (
            end < len(self.words)
            and self.words[end] != "--"
            and not self.is_option(self.words[end])
        ):
            end += 1
        available = self.words[start:end]
        nargs = flag.nargs
        if nargs is None or nargs == "?":
            wanted = 1 if nargs is None else min(1, len(available))
            if len(available) < wanted:
                self.find(self.i, "error", f"{flag.option} expected one argument")
                return None
            taken = available[:wanted]
        elif nargs == "+":
            if not available:
                self.find(self.i, "error", f"{flag.option} expected at least one argument")
                return None
            taken = available
        elif nargs == "*":
            taken = available
        else:
            count = int(nargs)
            if len(available) < count:
                self.find(self.i, "error", f"{flag.option} expected {count} arguments")
                return None
            taken = available[:count]
        self.i += len(taken)
        return taken

    def convert(self, flag: Flag, word: str) -> Any:
        """A value word as a TOML value that renders back to an equivalent word."""
        kind = flag.value_kind
        if kind == "json":
            json.loads(word)
            return word  # kept as written: the unit passes it through unchanged
        if kind == "int":
            if _INT.match(word.strip()):
                return int(word)
            if flag.argparse_type == "human_readable_int" and word.strip():
                return word
            raise ValueError(f"invalid int value: {word!r}")
        if kind == "float":
            if _INT.match(word.strip()):
                return int(word)
            number = float(word)
            if number != number or number in (float("inf"), float("-inf")):
                raise ValueError(f"{word!r} is not a finite number")
            return number
        return word

    def value_of(self, flag: Flag, option: str, explicit: str | None, start: int) -> Any:
        if flag.is_switch:
            if explicit is not None:
                self.find(start, "error", f"{option}: ignored explicit argument '{explicit}'",
                          f"write {option} alone")
                return None
            if (
                flag.boolean_optional
                and option.startswith("--no-")
                and "--" + option[5:] in flag.options
            ):
                return False
            return flag.const if flag.const is not None else not flag.store_false
        words = [explicit] if explicit is not None else self.take_values(flag)
        if words is None:
            return None
        if not words and flag.nargs == "?":
            self.find(start, "warning", f"{option} is given without a value: SGLang uses its "
                      "constant, which a profile cannot write", f"give {option} a value")
            return None
        try:
            values = [self.convert(flag, w) for w in words]
        except ValueError as exc:
            self.find(start, "error", f"argument {option}: {exc}")
            return None
        for value in values:
            if flag.choices and str(value) not in {str(c) for c in flag.choices}:
                self.find(
                    start,
                    "error",
                    f"argument {option}: invalid choice {value!r} for SGLang "
                    f"{self.catalog.version}",
                    "choose from " + ", ".join(map(str, flag.choices)),
                )
        if flag.const is not None:
            # a deprecated option that stores one fixed value whatever it is given
            return flag.const
        return values if flag.is_list or flag.nargs == "*" else (values[0] if values else None)

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> ParsedArgv:
        # the last option SGLang would refuse: the words after it are its values
        refused_option = ""
        while self.i < len(self.words):
            word = self.words[self.i]
            start = self.i
            if word == "--":
                self.find(start, "error", "unrecognized argument '--' (SGLang takes no positional "
                                          "arguments)")
                for rest in range(self.i + 1, len(self.words)):
                    self.find(rest, "error", f"unrecognized argument '{self.words[rest]}' (after "
                                             "'--')")
                break
            if not self.is_option(word):
                if refused_option:
                    self.find(start, "error", f"unrecognized argument '{word}' (a value of the "
                              f"refused '{refused_option}' before it)")
                else:
                    self.find(start, "error", f"unrecognized argument '{word}' (a value with no "
                                              "flag before it)",
                              "an empty or stray word in the command line; SGLang would refuse it")
                self.i += 1
                continue
            refused_option = ""
            resolved = self.resolve(word)
            if resolved is None:
                refused_option = word.split("=", 1)[0]
                self.i += 1
                continue
            option, explicit = resolved
            if option in _HELP_OPTIONS:
                self.find(start, "error", f"'{word}' asks SGLang for its help text; it starts no "
                                          "server")
                self.i += 1
                continue
            flag = self.options[option]
            if flag.refusal is not None or flag.ignored:
                self.deprecated_action(flag, option, start)
                refused_option = option if flag.refusal is not None else ""
                self.i += 1
                continue
            value = self.value_of(flag, option, explicit, start)
            written = tuple(self.words[start:self.i + 1])
            self.i += 1
            if value is None and not flag.is_switch:
                continue
            self.record(FlagUse(start, written, flag.field, option, value), flag)
        return self.result

    def deprecated_action(self, flag: Flag, option: str, start: int) -> None:
        """A bare DeprecatedAction: SGLang stops with its message, or warns and stores nothing."""
        if flag.refusal is not None:
            self.find(start, "error", f"{option}: SGLang {self.catalog.version} stops with "
                                      f"'{flag.refusal}'",
                      "remove it and use what the message names")
        else:
            self.find(start, "warning", f"{option} is deprecated in SGLang {self.catalog.version} "
                      "and has no effect: not imported")

    def record(self, use: FlagUse, flag: Flag) -> None:
        earlier = self.result.server.get(use.field, _MISSING)
        if earlier is not _MISSING:
            self.find(use.index, "warning", f"{flag.option} is given more than once; SGLang keeps "
                      f"the last ({_shown(earlier)} -> {_shown(use.value)})", "write it once")
        if flag.is_alias:
            self.find(use.index, "warning", f"{use.option} is deprecated in SGLang "
                      f"{self.catalog.version}: it sets {use.field}, imported as {use.field} = "
                      f"{_shown(use.value)}")
        elif flag.deprecated:
            self.find(use.index, "warning", f"{use.option} is deprecated in SGLang "
                                            f"{self.catalog.version}")
        self.result.server[use.field] = use.value
        self.result.uses.append(use)


_MISSING = object()


def _unknown_hint(option: str, catalog: Catalog) -> str:
    """What became of a flag this version does not have: removed (and its replacement), or newer."""
    field_name = option.lstrip("-").replace("-", "_")
    last, first = flag_history(field_name)
    if last is None or first is None:
        return "SGLang would stop with 'unrecognized arguments'; check the spelling and the version"
    replacement = replacement_for(field_name, catalog)
    if catalog.parsed_version > parse_version(last):
        return f"SGLang had it up to {last}" + (
            f"; use {replacement.text}" if replacement else "; remove it"
        )
    return (f"SGLang has it from {first} on: the server runs a newer SGLang than assumed (check "
            "--sglang)")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_server_argv(words: list[str], catalog: Catalog) -> ParsedArgv:
    """Parse SGLang's flags (the words after `-m sglang.launch_server` or `sglang serve`)."""
    return _Parser(list(words), catalog).run()
