"""Shell completion: `sgdeploy completion bash|zsh` prints a script; `sgdeploy __complete` feeds it.

The script is generated from the argument parser, so commands, options and their fixed values
(formats, bundled SGLang versions) are in it and complete without running sgdeploy. Inventory
names change with the inventory, so the script asks `sgdeploy __complete hosts|targets` for them
at completion time; that reads the TOML files directly (no validation, no pydantic), prints one
name a line and says nothing on bad input: a completion never shows an error.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What a value completes to, by the argparse dest that holds it.
_OPTION_KINDS = {"inventory": "file", "command_file": "file", "output": "file",
                 "profile": "profile", "host": "host", "sglang": "version"}
_POSITIONAL_KINDS = {"profile": "profile", "profiles": "profile", "logfile": "file",
                     "revisions": "rev", "host": "target"}


@dataclass(frozen=True)
class Option:
    names: tuple[str, ...]
    help: str
    kind: str | None  # None: a switch (takes no value)
    choices: tuple[str, ...] = ()
    repeats: bool = False  # may be given more than once (apply --host H --host H2)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: list[Option] = field(default_factory=list)
    positional: str | None = None  # the kind of the command's positional arguments
    repeats: bool = False  # several positional arguments (validate PROFILE..., diff REV REV)
    choices: tuple[str, ...] = ()  # the positional's fixed values (completion bash|zsh)


def commands(parser: argparse.ArgumentParser) -> list[Command]:
    """The visible commands of `parser`, with what each option and argument completes to."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return [_command(name, helps[name], child) for name, child in sub.choices.items()
            if name in helps]


def _command(name: str, help_text: str, parser: argparse.ArgumentParser) -> Command:
    options: list[Option] = []
    positional, repeats, choices = None, False, tuple[str, ...]()
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if not action.option_strings:
            choices = tuple(str(c) for c in action.choices or ())
            positional = "choices" if choices else _POSITIONAL_KINDS.get(action.dest)
            repeats = action.nargs in ("*", "+")
            continue
        takes_value = action.nargs != 0
        kind = (("choices" if action.choices else _OPTION_KINDS.get(action.dest, "value"))
                if takes_value else None)
        options.append(Option(tuple(action.option_strings), _one_line(action.help or ""), kind,
                              tuple(str(c) for c in action.choices or ()),
                              isinstance(action, argparse._AppendAction)))
    return Command(name, _one_line(help_text), options, positional, repeats, choices)


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("%%", "%")


# ------------------------------------------------------------------- names at completion time
def names(kind: str, inventory: str | None, profile: str | None) -> list[str]:
    """Inventory names for `--host` (kind "hosts": the hosts of the profile's target when a
    profile is given, else every host) or for a deploy target ("targets": hosts and groups)."""
    # the inventory as inventory_path() finds it, without importing pydantic with
    # sgdeploy.profile.inventory
    document = _read(Path(inventory or os.environ.get("SGDEPLOY_INVENTORY") or "inventory.toml"))
    hosts = [str(h) for h in _table(document.get("hosts"))]
    groups = _table(document.get("groups"))
    if kind == "targets":
        return hosts + [str(g) for g in groups]
    target = _table(_read(Path(profile)).get("deploy")).get("host") if profile else None
    if isinstance(target, str) and target in groups and isinstance(groups[target], list):
        return [str(h) for h in groups[target]]
    if isinstance(target, str) and target in hosts:
        return [target]
    return hosts


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------- bash
def bash_script(parser: argparse.ArgumentParser, versions: list[str]) -> str:
    cmds = commands(parser)
    top = " ".join([c.name for c in cmds] + ["--version", "-h", "--help"])
    option_lists = "\n".join(f'        {c.name}) opts="{" ".join(_option_names(c))}" ;;'
                             for c in cmds)
    value_cases = "\n".join(_bash_value_case(c, versions) for c in cmds)
    positional_cases = "\n".join(f'        {c.name}) kind="{_bash_kind(c.positional, c.choices)}" '
                                 f"repeats={int(c.repeats)} ;;" for c in cmds)
    return (_BASH.replace("@TOP@", top).replace("@OPTIONS@", option_lists)
            .replace("@VALUES@", value_cases).replace("@POSITIONALS@", positional_cases))


def _option_names(command: Command) -> list[str]:
    return [name for option in command.options for name in option.names]


def _bash_value_case(command: Command, versions: list[str]) -> str:
    lines = []
    for option in command.options:
        if option.kind is None:
            continue
        words = option.choices if option.kind == "choices" else tuple(versions)
        kind = _bash_kind(option.kind, words)
        patterns = "|".join(f'"{command.name} {n}"' for n in option.names)
        lines.append(f'        {patterns}) echo "{kind}" ;;')
    return "\n".join(lines)


def _bash_kind(kind: str | None, words: tuple[str, ...]) -> str:
    if kind in ("choices", "version"):
        return "words " + " ".join(words)
    return kind or "none"


_BASH = r"""# bash completion for sgdeploy: eval "$(sgdeploy completion bash)" (in ~/.bashrc), or save it
# as ~/.local/share/bash-completion/completions/sgdeploy.

_sgdeploy_value_kind() {  # COMMAND OPTION: what the option's value completes to, or nothing
    case "$1 $2" in
@VALUES@
    esac
}

_sgdeploy() {
    # readline splits `--inventory=FILE` at the `=`: join it back into one word
    local -a words=()
    local cword=0 j
    for ((j = 0; j < ${#COMP_WORDS[@]}; j++)); do
        if ((j > 1)) && [[ ${COMP_WORDS[j]} == = || ${COMP_WORDS[j - 1]} == = ]] && [[ ${words[-1]} == --* ]]; then
            words[-1]+=${COMP_WORDS[j]}
        else
            words+=("${COMP_WORDS[j]}")
        fi
        ((j == COMP_CWORD)) && cword=$((${#words[@]} - 1))
    done
    local cur=${words[cword]} prog=${words[0]}
    local cmd="" inventory="" profile="" opts kind repeats i word value positionals=0
    COMPREPLY=()
    for ((i = 1; i < cword; i++)); do
        word=${words[i]}
        if [[ -z $cmd ]]; then
            [[ $word != -* ]] && cmd=$word
            continue
        fi
        if [[ $word == --*=* ]]; then
            [[ ${word%%=*} == --inventory ]] && inventory=${word#*=}
            [[ ${word%%=*} == --profile ]] && profile=${word#*=}
        elif [[ $word == -* ]]; then
            if [[ -n $(_sgdeploy_value_kind "$cmd" "$word") ]]; then
                value=${words[i + 1]}
                [[ $word == --inventory ]] && inventory=$value
                [[ $word == --profile ]] && profile=$value
                ((i++))
            fi
        else
            ((positionals++))
            [[ -z $profile && $word == *.toml ]] && profile=$word
        fi
    done
    if [[ -z $cmd ]]; then
        mapfile -t COMPREPLY < <(compgen -W "@TOP@" -- "$cur")
        return
    fi
    case $cmd in
@OPTIONS@
        *) return ;;
    esac
    kind=""
    if [[ $cur == --*=* ]]; then
        kind=$(_sgdeploy_value_kind "$cmd" "${cur%%=*}")
        cur=${cur#*=}
    elif ((cword > 1)) && [[ ${words[cword - 1]} == -* ]]; then
        kind=$(_sgdeploy_value_kind "$cmd" "${words[cword - 1]}")
    fi
    if [[ -z $kind && $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
        return
    fi
    if [[ -z $kind ]]; then
        case $cmd in
@POSITIONALS@
        esac
        ((positionals > 0 && repeats == 0)) && kind=none
    fi
    local -a inv=()
    [[ -n $inventory ]] && inv=(--inventory "$inventory")
    case $kind in
        none) mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur") ;;
        words\ *) mapfile -t COMPREPLY < <(compgen -W "${kind#words }" -- "$cur") ;;
        file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
        profile) compopt -o filenames 2>/dev/null  # not .git and the like, not the inventory
                 mapfile -t COMPREPLY < <(compgen -d -X '.*' -- "$cur"
                     compgen -f -X '!*.toml' -- "$cur" | grep -v -e '^inventory\.toml$' -e '/inventory\.toml$') ;;
        host) mapfile -t COMPREPLY < <(compgen -W "$("$prog" __complete hosts "${inv[@]}" \
                  ${profile:+--profile "$profile"} 2>/dev/null)" -- "$cur") ;;
        target) mapfile -t COMPREPLY < <(compgen -W "$("$prog" __complete targets "${inv[@]}" 2>/dev/null)" \
                    -- "$cur") ;;
        rev) compopt -o filenames 2>/dev/null
             mapfile -t COMPREPLY < <(compgen -W "HEAD $(git for-each-ref --format='%(refname:short)' \
                 2>/dev/null)" -- "$cur"; compgen -f -X '!*.toml' -- "$cur"; compgen -d -- "$cur") ;;
    esac
}

complete -F _sgdeploy sgdeploy
"""  # noqa: E501 (shell lines kept as they run)


# --------------------------------------------------------------------------- zsh
def zsh_script(parser: argparse.ArgumentParser, versions: list[str]) -> str:
    cmds = commands(parser)
    described = "\n".join(f"    {_zsh_quote(c.name + ':' + c.help)}" for c in cmds)
    cases = "\n".join(_zsh_case(c, versions) for c in cmds)
    return _ZSH.replace("@COMMANDS@", described).replace("@CASES@", cases)


_ZSH_ACTIONS = {"file": "_files", "profile": "_sgdeploy_profiles", "host": "_sgdeploy_hosts",
                "target": "_sgdeploy_targets", "rev": "_sgdeploy_revs", "value": " "}


def _zsh_case(command: Command, versions: list[str]) -> str:
    specs = []
    for option in command.options:
        help_text = option.help.replace("[", "(").replace("]", ")").replace(":", " ")
        names = option.names[0] if len(option.names) == 1 else "{" + ",".join(option.names) + "}"
        exclusive = "(" + " ".join(option.names) + ")" if len(option.names) > 1 else ""
        exclusive = "*" if option.repeats else exclusive
        described = f"[{help_text}]" if help_text else ""
        if option.kind is None:
            spec = f"{exclusive}{names}{described}"
        else:
            words = (option.choices if option.kind == "choices"
                     else versions if option.kind == "version" else ())
            action = f"({' '.join(words)})" if words else _ZSH_ACTIONS.get(option.kind, " ")
            spec = f"{exclusive}{names}{described}:{option.kind}:{action}"
        specs.append(_zsh_quote(spec) if len(option.names) == 1 else _zsh_brace(spec))
    if command.positional:
        action = (f"({' '.join(command.choices)})" if command.choices
                  else _ZSH_ACTIONS[command.positional])
        specs.append(_zsh_quote(f"{'*' if command.repeats else '1'}:{command.positional}:{action}"))
    body = " \\\n                ".join(specs)
    return f"            {command.name})\n                _arguments -s {body} ;;"


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_brace(spec: str) -> str:
    """`(-v --verbose){-v,--verbose}[help]`: the brace list must stay outside the quotes to
    expand."""
    exclusive, rest = spec.split("{", 1)
    braces, tail = rest.split("}", 1)
    return _zsh_quote(exclusive) + "{" + braces + "}" + _zsh_quote(tail)


_ZSH = r"""#compdef sgdeploy
# zsh completion for sgdeploy: eval "$(sgdeploy completion zsh)" after compinit (in ~/.zshrc), or
# save it as _sgdeploy in a folder of $fpath.

_sgdeploy_inventory() {  # the --inventory given on the line, as arguments for __complete
    local i
    for ((i = 1; i < ${#words}; i++)); do
        [[ ${words[i]} == --inventory ]] && { print -r -- --inventory "${words[i+1]}"; return; }
        [[ ${words[i]} == --inventory=* ]] && { print -r -- --inventory "${words[i]#*=}"; return; }
    done
}

_sgdeploy_profile() {  # the profile named on the line, if any
    local i
    for ((i = 2; i < ${#words}; i++)); do
        [[ ${words[i-1]} == --inventory ]] && continue
        [[ ${words[i]} == --profile=* ]] && { print -r -- "${words[i]#*=}"; return; }
        [[ ${words[i]} == *.toml ]] && { print -r -- "${words[i]}"; return; }
    done
}

_sgdeploy_names() {
    local -a names args
    args=(${=$(_sgdeploy_inventory)})
    [[ $1 == hosts && -n $(_sgdeploy_profile) ]] && args+=(--profile "$(_sgdeploy_profile)")
    names=(${(f)"$($_sgdeploy_prog __complete $1 $args 2>/dev/null)"})
    _wanted $1 expl $1 compadd -a names
}

_sgdeploy_hosts() { _sgdeploy_names hosts }
_sgdeploy_targets() { _sgdeploy_names targets }
_sgdeploy_profiles() { _files -g '*.toml(-.)' -F '(inventory.toml */inventory.toml .git)' }
_sgdeploy_revs() {
    local -a refs
    refs=(HEAD ${(f)"$(git for-each-ref --format='%(refname:short)' 2>/dev/null)"})
    _alternative 'refs:git revision:compadd -a refs' 'files:profile:_sgdeploy_profiles'
}

_sgdeploy() {
    local curcontext=$curcontext state line _sgdeploy_prog=${words[1]}
    local -a commands
    commands=(
@COMMANDS@
    )
    _arguments -C '--version[show the version]' '(- :)'{-h,--help}'[show help]' \
        '1:command:->command' '*::argument:->argument'
    case $state in
        command) _describe -t commands 'sgdeploy command' commands ;;
        argument)
            curcontext=${curcontext%:*:*}:sgdeploy-${words[1]}:
            case ${words[1]} in
@CASES@
            esac ;;
    esac
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _sgdeploy "$@"
else
    compdef _sgdeploy sgdeploy
fi
"""


# --------------------------------------------------------------------------- fish
_FISH_HEAD = """\
# fish completion for sgdeploy: sgdeploy completion fish > ~/.config/fish/completions/sgdeploy.fish
complete -c sgdeploy -f
complete -c sgdeploy -n __fish_use_subcommand -l version -d 'print the version'
"""
# What a value or argument completes to, as fish's `complete` takes it.
_FISH_VALUES = {
    "file": "-F",
    "profile": "-a '(__fish_complete_suffix .toml)'",
    "host": "-a '(sgdeploy __complete hosts 2>/dev/null)'",
    "target": "-a '(sgdeploy __complete targets 2>/dev/null)'",
    "rev": "-a '(git for-each-ref --format=\"%(refname:short)\" 2>/dev/null) HEAD'",
}


def fish_script(parser: argparse.ArgumentParser, versions: list[str]) -> str:
    lines = [_FISH_HEAD.rstrip("\n")]
    for command in commands(parser):
        lines.append(f"complete -c sgdeploy -n __fish_use_subcommand -a {command.name} "
                     f"-d {_fish_quote(command.help)}")
        when = _fish_quote(f"__fish_seen_subcommand_from {command.name}")
        for option in command.options:
            names = " ".join(f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}"
                             for n in option.names)
            value = "" if option.kind is None else (
                # -x: the value alone, no file names beside it; -F: file names
                " -r -F" if option.kind == "file"
                else " -x " + _fish_value(option.kind, option.choices, versions))
            lines.append(f"complete -c sgdeploy -n {when} {names}{value} "
                         f"-d {_fish_quote(option.help)}".replace("  ", " "))
        if command.positional:  # not where the word before is an option that takes a value
            valued = " ".join(n for o in command.options if o.kind is not None for n in o.names)
            free = _fish_quote(f"__fish_seen_subcommand_from {command.name}"
                               + (f"; and not __fish_prev_arg_in {valued}" if valued else ""))
            lines.append(f"complete -c sgdeploy -n {free} "
                         + _fish_value(command.positional, command.choices, versions))
    return "\n".join(lines) + "\n"


def _fish_value(kind: str, choices: tuple[str, ...], versions: list[str]) -> str:
    if kind in ("choices", "version"):
        return "-a " + _fish_quote(" ".join(choices if kind == "choices" else versions))
    return _FISH_VALUES.get(kind, "")


def _fish_quote(text: str) -> str:
    """A fish single-quoted string: only backslash and the quote itself are escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
