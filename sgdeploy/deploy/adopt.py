"""`sgdeploy import`: a profile that reproduces a launch that already runs.

Input is what was observed of one server (`Observed`: argv, environment, working directory,
user, SGLang version, owning unit) or a command line given locally. `split_launch` finds where
SGLang's own flags start (after `-m sglang.launch_server`, `launch_server.py` or `sglang serve`),
`sglang.argv` reads them the way that version's parser does, and `profile_text` writes the
profile with a comment for everything inferred. Pure: no I/O; the host side is in `running.py`.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sgdeploy.core.diagnostics import Diagnostic, Severity, finding_line
from sgdeploy.deploy.plan import Takeover
from sgdeploy.deploy.render import launch_argv, unit_environment
from sgdeploy.deploy.secret_args import creation_steps, default_file
from sgdeploy.host.remote import RemoteHost
from sgdeploy.host.running import HostServers, Server, read_servers
from sgdeploy.host.systemd import stop_sh
from sgdeploy.host.unitfile import UnitFileError, parse_service
from sgdeploy.profile.inventory import HostEntry
from sgdeploy.profile.model import ENV_NAME, UNIT_NAME, LoadedProfile, profile_from_text
from sgdeploy.profile.validate import InventoryContext, ValidationResult, validate_loaded
from sgdeploy.sglang.argv import (
    LAUNCH_MODULE,
    ArgvFinding,
    ParsedArgv,
    launch_entry,
    parse_server_argv,
)
from sgdeploy.sglang.catalog import Catalog, UnknownVersionError, load_catalog, newest_version
from sgdeploy.sglang.gpus import gpu_model_for
from sgdeploy.sglang.secrets import (
    ENV_LOOKALIKE,
    REDACTED,
    SECRET_FIELDS,
    launch_secrets,
    redact,
    shown,
)

# Environment variables SGLang and the libraries under it read; nothing else is imported.
# The variables a server's libraries read, kept by import: SGLang, CUDA and NCCL, NVSHMEM (DeepEP;
# NVSHMEM_DISABLE_NVLS keeps NVLink multicast off, and a real import once dropped it), gloo's and
# UCX's interfaces between nodes, the hub and tokenizers, torch, Triton's, TorchInductor's,
# FlashInfer's and DeepGEMM's JIT caches, OpenMP's threads, mooncake
ENV_PREFIXES = (
    "SGLANG_",
    "SGL_",
    "CUDA_",
    "NCCL_",
    "NVSHMEM_",
    "GLOO_",
    "UCX_",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "FLASHINFER_",
    "DG_",
    "OMP_",
    "MOONCAKE_",
    "MC_",
)
_PYTHON = re.compile(r"^python[0-9.]*$")
# Interpreter options that take the next word as their value.
_PYTHON_OPTIONS_WITH_VALUE = {"-X", "-W", "-c", "--check-hash-based-pycs"}
_GPU_UUID = re.compile(r"^GPU-[0-9a-fA-F-]+$")


class LaunchError(ValueError):
    """A command line that is no SGLang server launch."""


@dataclass(frozen=True)
class Launch:
    """A command line split into the program that runs SGLang and SGLang's own flags."""

    interpreter: str | None  # argv[0] when it is a Python interpreter
    launcher: tuple[str, ...]  # the words before SGLang's flags
    entry: str  # "launch_server" or "serve"
    flags: tuple[str, ...]  # SGLang's flags, as written
    wrapper: str | None = None  # a launcher between the interpreter and SGLang (torchrun, ...)


def split_launch(argv: Sequence[str]) -> Launch:
    """Where SGLang's flags start in `argv`; LaunchError when it is no SGLang launch."""
    words = list(argv)
    for i, word in enumerate(words):
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in word) or "\x00" in word:
            raise LaunchError(f"argument {i} ({redact(word[:40])!r}) holds a NUL byte or bytes "
                              "that are not UTF-8: a profile cannot hold it")
    found = launch_entry(words)
    if found is not None:
        return _launch(words, found.entry_at, found.flags_at, found.entry)
    raise LaunchError("no SGLang server in this command line (expected `-m sglang.launch_server` "
                      "or `sglang serve`)")


def _launch(words: list[str], entry_at: int, flags_at: int, entry: str) -> Launch:
    first = words[0] if words else ""
    interpreter = first if _PYTHON.match(posixpath.basename(first)) else None
    if interpreter is None and entry == "serve" and entry_at == 0 and posixpath.isabs(first):
        # `sglang serve` run as a console script: its interpreter sits beside it in the venv.
        interpreter = posixpath.join(posixpath.dirname(first), "python3")
    wrapper = None
    between = words[1:entry_at] if interpreter == first else words[:entry_at]
    skip = False
    for word in between:
        if skip:
            skip = False
            continue
        if word in _PYTHON_OPTIONS_WITH_VALUE:
            skip = True
            continue
        if not word.startswith("-"):
            wrapper = posixpath.basename(word)
            break
    return Launch(interpreter, tuple(words[:flags_at]), entry, tuple(words[flags_at:]), wrapper)


@dataclass(frozen=True)
class Observed:
    """One running server as seen on its host (or a command line given locally)."""

    argv: tuple[str, ...]
    environ: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None
    pid: int | None = None
    unit: str | None = None  # the systemd service that owns the process
    interpreter: str | None = None  # argv[0] resolved on the host
    sglang_version: str | None = None
    gpus: tuple[int, ...] = ()  # GPU indices its processes hold memory on
    # argv word -> that folder's config.json
    model_configs: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Imported:
    """The profile written for one server, and what the import found on the way."""

    text: str
    server: dict[str, Any]
    parsed: ParsedArgv
    launch: Launch
    notes: list[str] = field(default_factory=list)
    withheld_env: list[str] = field(default_factory=list)
    secret_flags: list[str] = field(default_factory=list)  # ServerArgs fields moved to [secrets]
    # [server] values written with <redacted> in place of the secret they held: field -> what it was
    placeholders: dict[str, str] = field(default_factory=dict)

    @property
    def findings(self) -> list[ArgvFinding]:
        return self.parsed.findings


def sglang_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of a process's environment that SGLang (and CUDA, NCCL, torch, HF) read."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if k.startswith(ENV_PREFIXES) and re.match(ENV_NAME, k)
    }


def gpus_from(value: str) -> list[int | str] | None:
    """CUDA_VISIBLE_DEVICES as deploy.gpus, when every entry is an index or a GPU UUID."""
    items = [item.strip() for item in value.split(",")]
    if not items or any(not (item.isdigit() or _GPU_UUID.match(item)) for item in items):
        return None
    return [int(item) if item.isdigit() else item for item in items]


@dataclass(frozen=True)
class Target:
    """Where the profile deploys: inventory host, unit name, and secrets to keep out."""

    host: str
    unit: str = "sglang"
    secrets: frozenset[str] = frozenset()  # `env.X` / `server.x` keys that must not be written
    env_file: str | None = None


def import_launch(observed: Observed, catalog: Catalog, target: Target) -> Imported:
    """The profile for `observed`, its flags read with `catalog`; raises LaunchError. No secret
    value is written: a secret argument goes to `[secrets]`, a secret variable to deploy.env_file,
    and a value that holds one (a URL's password) is written with `<redacted>` in its place."""
    launch = split_launch(observed.argv)
    parsed = parse_server_argv(list(launch.flags), catalog)
    notes = [redact(note) for note in _launch_notes(launch, observed)]
    if isinstance(parsed.server.get("config"), str):
        notes.append(f"--config {parsed.server['config']}: SGLang reads more flags from that file "
                     "on the host; they are not imported (the profile keeps --config, so the unit "
                     "reads them too; a secret in it stays on the host)")
    env = sglang_env(observed.environ)
    gpus = gpus_from(env.pop("CUDA_VISIBLE_DEVICES")) if "CUDA_VISIBLE_DEVICES" in env else None
    if gpus is None and "CUDA_VISIBLE_DEVICES" in sglang_env(observed.environ):
        env["CUDA_VISIBLE_DEVICES"] = sglang_env(observed.environ)["CUDA_VISIBLE_DEVICES"]
    kept = _kept_out(parsed.server, env, catalog, target)
    server = {k: kept.placeholders.get(k, v) for k, v in parsed.server.items()
              if k not in kept.flags}
    notes += _secret_notes(observed, catalog, target, kept)
    env = {k: v for k, v in env.items() if k not in kept.env}
    text = _render(observed, launch, parsed, catalog, target, env, gpus, server, kept)
    return Imported(redact(text), server, parsed, launch, notes, kept.env, kept.flags,
                    {k: kept.what[k] for k in kept.placeholders})


@dataclass(frozen=True)
class _KeptOut:
    """What import keeps out of the profile, and where it puts each instead."""

    flags: list[str]  # ServerArgs fields whose values go to the [secrets] file
    env: list[str]  # variables whose values go to deploy.env_file
    placeholders: dict[str, Any]  # [server] values written with <redacted> in place of their secret
    what: dict[str, str]  # field -> the secret it held, in words


def _kept_out(server: dict[str, Any], env: dict[str, str], catalog: Catalog,
              target: Target) -> _KeptOut:
    """Every secret of the launch, recognised by what it is (sgdeploy.sglang.secrets)."""
    flags, placeholders, what = [], {}, {}
    spots = {spot.dotted: spot for spot in launch_secrets(server, env)}
    for key, value in server.items():
        spot = spots.get(f"server.{key}")
        if spot is None and f"server.{key}" not in target.secrets:
            continue
        if _from_file(catalog, key):
            flags.append(key)
        else:
            placeholders[key] = shown(key, value)
            what[key] = spot.what if spot else "is a secret"
    withheld = sorted({k for k in env if f"env.{k}" in spots or f"env.{k}" in target.secrets})
    return _KeptOut(flags, withheld, placeholders, what)


def _from_file(catalog: Catalog, key: str) -> bool:
    """Whether SGLang can take `key` from the [secrets] file (SGD022); model_path stays in
    [server], where SGD016 and the host's checks read it."""
    flag = catalog.get(key)
    return (flag is not None and not flag.is_switch and not flag.is_list
            and key not in ("config", "model_path"))


def _secret_notes(observed: Observed, catalog: Catalog, target: Target,
                  kept: _KeptOut) -> list[str]:
    """What to do about the secrets the launch carried: the files to create, the values written
    as placeholders, and variables SGLang ignores."""
    secret_flags = kept.flags
    notes = [f"{name} is set in the server's environment, but SGLang reads no {name}: the server "
             f"runs without {match.group(1).lower()} (list it in [secrets] to set one)"
             for name in sorted(observed.environ)
             if (match := ENV_LOOKALIKE.match(name)) and match.group(1).lower() not in secret_flags]
    if secret_flags:
        flags = " and ".join(f"--{k.replace('_', '-')}" for k in secret_flags)
        path = default_file(_unit_name(target), catalog)
        notes.append(
            f"{flags} {'holds a secret' if len(secret_flags) == 1 else 'hold secrets'}: "
            f"not written into the profile; its [secrets] names {path}. Before `sgdeploy "
            "apply --adopt`, "
            + creation_steps(secret_flags, catalog, path, observed.user or "root", target.host)
        )
    notes += [f"server.{key} {kept.what[key]}: written with {REDACTED} in its place, so the "
              f"profile does not run the same launch until you fix it: {_CREDENTIAL_TO_ENV}"
              for key in kept.placeholders]
    if kept.env:
        path = target.env_file or f"/etc/sgdeploy/{_unit_name(target)}.env"
        notes.append(f"{', '.join(kept.env)}: secrets, not written into the profile; its "
                     f"deploy.env_file names {path}. Before `sgdeploy apply --adopt`, create it on "
                     f"{target.host} as root with mode 0600 (`install -D -m 600 /dev/null "
                     f"{path}`), with one `NAME=<the value>` line for each")
    return notes


_CREDENTIAL_TO_ENV = ("take the secret out of the value and give it to the server in its "
                      "environment from deploy.env_file (a root-only file of NAME=value lines on "
                      "the host, e.g. HF_TOKEN for the Hugging Face hub)")


# Secret options by their full spelling, also where this release does not know them (a refused
# --admin-api-key before 0.5.8 still carries a key).
_SECRET_OPTIONS = tuple("--" + name.replace("_", "-") for name in (*SECRET_FIELDS, "hf_token"))


def shown_flags(flags: Sequence[str], parsed: ParsedArgv) -> list[str]:
    """SGLang's flags as they may be shown: the value of a secret option is `<redacted>`."""
    shown = list(flags)
    values = {
        use.index: len(use.written) - 1
        for use in parsed.uses
        if use.field in (*SECRET_FIELDS, "hf_token")
    }
    parsed_at = {use.index for use in parsed.uses}
    for i, word in enumerate(flags):
        name, eq, _ = word.partition("=")
        if i not in values and (i in parsed_at or len(name) < 5
                                or not any(option.startswith(name) for option in _SECRET_OPTIONS)):
            continue
        if eq:
            shown[i] = f"{name}=<redacted>"
        for k in range(i + 1, min(len(flags), i + 1 + values.get(i, 0 if eq else 1))):
            shown[k] = "<redacted>"
    return shown


def _without(text: str, hidden: list[str]) -> str:
    """`text` with the hidden words' values taken out (a short one only where it is quoted)."""
    for word in hidden:
        value = word.partition("=")[2] if word.startswith("--") else word
        if value:
            text = text.replace(
                value if len(value) >= 4 else f"'{value}'",
                "'<redacted>'" if len(value) < 4 else "<redacted>",
            )
    return text


def _unit_name(target: Target) -> str:
    return target.unit if re.match(UNIT_NAME, target.unit) else "sglang"


def _launch_notes(launch: Launch, observed: Observed) -> list[str]:
    notes = []
    if launch.entry == "serve":
        notes.append("started with `sglang serve`: the unit runs `python -m sglang.launch_server` "
                     "with the same flags (the same parser reads them)")
    if launch.wrapper:
        notes.append(f"started through {launch.wrapper}: the unit starts SGLang directly; "
                     f"{launch.wrapper}'s own options are not kept")
    options = [
        w
        for w in launch.launcher[1:]
        if w.startswith("-") and w not in ("-m", f"-m{LAUNCH_MODULE}")
    ]
    if options and not launch.wrapper:
        notes.append(f"interpreter options {' '.join(options)} are not kept (the unit sets "
                     "PYTHONUNBUFFERED=1)")
    if (
        observed.interpreter is None
        and launch.interpreter
        and not posixpath.isabs(launch.interpreter)
    ):
        notes.append(f"the launch ran '{launch.interpreter}' from its shell's PATH, which a unit "
                     "does not have: write that interpreter's full path in deploy.python (on the "
                     f"host: `command -v {launch.interpreter}` in the shell that started it, or "
                     "the venv's bin/python3); until then validation refuses the profile (SGD003)")
    return notes


# --------------------------------------------------------------------------- writing TOML
def toml_value(value: Any) -> str:
    """One TOML value (strings as basic strings, with every control character escaped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    text = json.dumps(str(value), ensure_ascii=False)
    return text.replace("\x7f", "\\u007f")


def _comment(text: str) -> str:
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def _render(observed: Observed, launch: Launch, parsed: ParsedArgv, catalog: Catalog,
            target: Target, env: dict[str, str], gpus: list[int | str] | None,
            server: dict[str, Any], kept: _KeptOut) -> str:
    withheld, secret_flags = kept.env, kept.flags
    source = f"pid {observed.pid}" if observed.pid else "a command line"
    if observed.unit:
        source = (
            f"{source} of {observed.unit}" if observed.pid else f"the unit file of {observed.unit}"
        )
    lines = [f"# Imported by `sgdeploy import` from {source} on {target.host}, read with SGLang "
             f"{catalog.version}'s flags.",
             "# Check it, then `sgdeploy apply --adopt` takes the running server over without "
             "changing its launch.",
             "", "[deploy]", f"host = {toml_value(target.host)}"]
    unit = _unit_name(target)
    lines.append(f"unit = {toml_value(unit)}")
    python = observed.interpreter or launch.interpreter or "python3"
    inferred = (
        " # inferred: the console script's interpreter"
        if (
            observed.interpreter is None
            and launch.entry == "serve"
            and launch.interpreter != launch.launcher[0]
        )
        else ""
    )
    lines.append(f"python = {toml_value(python)}{inferred}")
    if observed.user and observed.user != "root":
        lines.append(f"user = {toml_value(observed.user)}")
    if observed.cwd and observed.cwd != "/":
        lines.append(f"working_directory = {toml_value(observed.cwd)} # relative paths in the "
                     "launch start here")
    if gpus:
        lines.append(f"gpus = {toml_value(gpus)} # from CUDA_VISIBLE_DEVICES")
    architecture = _architecture(observed, server.get("model_path"))
    if architecture:
        lines.append(f"model_architecture = {toml_value(architecture)} # from the model's "
                     "config.json")
    if withheld:
        env_file = target.env_file or f"/etc/sgdeploy/{unit}.env"
        lines.append(f"env_file = {toml_value(env_file)} # move {', '.join(withheld)} here "
                     "(KEY=value lines); the values were not copied")
    elif target.env_file:
        lines.append(f"env_file = {toml_value(target.env_file)} # the unit's EnvironmentFile=")
    lines += ["", "[env]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in env.items()]
    lines += ["", "[server]"]
    written = {use.field: use for use in parsed.uses}
    for key, value in server.items():
        flag = catalog.get(key)
        notes = []
        use = written.get(key)
        if use is not None and use.abbreviated:
            notes.append(f"written as {use.written[0].split('=', 1)[0]}")
        if flag is not None and flag.default is not None and _same(value, flag.default):
            notes.append("= SGLang's default")
        if key in kept.placeholders:
            notes.append(f"{REDACTED} stands for a secret that was not copied (see the notes)")
        tail = f" # {_comment('; '.join(notes))}" if notes else ""
        lines.append(f"{key} = {toml_value(value)}{tail}")
    refused = sorted(
        {f.index for f in parsed.findings if f.severity == "error" and f.index is not None}
    )
    if refused:
        shown = shown_flags(launch.flags, parsed)
        words = " ".join(shlex.quote(shown[i]) for i in refused if i < len(shown))
        lines.append(f"# not imported, SGLang {catalog.version} refuses them (see the import's "
                     "report): "
                     + _comment(redact(words)))
    if secret_flags:
        lines += ["", "[secrets]",
                  f"file = {toml_value(default_file(unit, catalog))} # create it on the host (the "
                  "import's notes say how); the values were not copied",
                  f"keys = {toml_value(secret_flags)}"]
    return "\n".join(lines) + "\n"


def _architecture(observed: Observed, model_path: Any) -> str | None:
    """architectures[0] of the model's config.json, when the host sent it."""
    config = observed.model_configs.get(model_path) if isinstance(model_path, str) else None
    try:
        architectures = json.loads(config).get("architectures") if config else None
    except (ValueError, AttributeError):
        return None
    first = architectures[0] if isinstance(architectures, list) and architectures else None
    return first if isinstance(first, str) and first.isprintable() and len(first) < 200 else None


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(value, str) and not isinstance(default, str):
        return False
    return bool(value == default)


# --------------------------------------------------------------------------- checking the result
@dataclass
class ImportResult:
    """An imported profile, its validation, and whether it renders back to the same launch."""

    imported: Imported
    validation: ValidationResult
    # differences between the rendered launch and the observed one (empty: none)
    roundtrip: list[str]
    version: str


def finish_import(observed: Observed, catalog: Catalog, target: Target, inventory: InventoryContext,
                  path: str = "imported.toml") -> ImportResult:
    """Import, validate against `catalog`'s version, and check the round trip. Secrets are kept
    out while the profile is written (`import_launch`), whether or not validation can run."""
    imported = import_launch(observed, catalog, target)
    loaded = profile_from_text(path, imported.text)
    validation = validate_loaded(loaded, inventory, catalog.version)
    validation.diagnostics += [_placeholder_finding(loaded, key, what)
                               for key, what in imported.placeholders.items()]
    return ImportResult(
        imported,
        validation,
        roundtrip_differences(loaded, imported, observed, catalog),
        catalog.version,
    )


def _placeholder_finding(loaded: LoadedProfile, key: str, what: str) -> Diagnostic:
    dotted = f"server.{key}"
    return Diagnostic("SGD021", Severity.ERROR,
                      f"{dotted} {what}: the import wrote {REDACTED} in its place",
                      f"{_CREDENTIAL_TO_ENV}, then write the value without it", dotted,
                      loaded.line_of(dotted), loaded.path)


def roundtrip_differences(
    loaded: LoadedProfile, imported: Imported, observed: Observed, catalog: Catalog
) -> list[str]:
    """What differs between the launch the profile renders and the one observed, after SGLang's
    parsing."""
    profile = loaded.model
    if profile is None:
        return ["the profile does not load, so it renders nothing"]
    try:
        rendered = launch_argv(profile, catalog)
    except KeyError as exc:
        return [str(exc)]
    again = parse_server_argv(rendered[3:], catalog)
    ran, renders = imported.parsed.server, again.server
    differences = [f"server.{key}: ran with {_text(shown(key, ran.get(key)))}, renders "
                   f"{_text(shown(key, renders.get(key)))}"
                   for key in dict.fromkeys([*imported.parsed.server, *again.server])
                   if not _equal(imported.parsed.server.get(key), again.server.get(key))
                   and key in imported.server and key not in imported.placeholders]
    unit_env = dict(unit_environment(profile))
    for key, value in sglang_env(observed.environ).items():
        if key not in imported.withheld_env and unit_env.get(key) != value:
            differences.append(f"env.{key}: ran with {shown(key, value)!r}, the unit sets "
                               f"{shown(key, unit_env.get(key))!r}")
    return differences


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    try:
        return bool(json.dumps(a) == json.dumps(b)) or (a == b and type(a) is type(b))
    except (TypeError, ValueError):
        return bool(a == b)


def _text(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value, ensure_ascii=False)


# --------------------------------------------------------------------- a command line given locally
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_REDIRECT = re.compile(r"^\d*[<>]")
_PREFIX_COMMANDS = {"nohup", "exec", "env", "setsid", "stdbuf", "nice", "sudo"}
_SEPARATORS = {"&", "&&", ";", "|", "||"}


def observed_from_command(text: str) -> Observed:
    """A shell command line (or a script holding one) as an `Observed` with no host.

    Words are split the way a POSIX shell quotes them (no expansion: `$x` stays as written);
    `NAME=value` words before the command become its environment; `nohup`, `exec`, `env`,
    redirections and a trailing `&` are left out. Raises LaunchError when no line launches SGLang.
    """
    joined = re.sub(r"\\\r?\n", "", text)
    problems: list[str] = []
    cwd: str | None = None
    for number, words in _shell_lines(joined, problems):
        for segment in _segments(words):
            environ, argv = _command_words(segment)
            if argv[:1] == ["cd"] and len(argv) == 2 and argv[1].startswith("/"):
                cwd = argv[1]
                continue
            try:
                split_launch(argv)
            except LaunchError as exc:
                if "cannot hold" in str(exc):
                    raise LaunchError(f"line {number}: {exc}") from None
                continue
            return Observed(tuple(argv), environ, cwd=cwd)
    if problems:  # a line the shell cannot split is the likelier cause: say it first
        raise LaunchError(f"the command does not split as a shell line: {'; '.join(problems)} "
                          "(close the quote, or escape it with a backslash); no SGLang server in "
                          "the lines that do")
    raise LaunchError("no SGLang server in this command (expected `-m sglang.launch_server` or "
                      "`sglang serve`)")


def _shell_lines(text: str, problems: list[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number, words) per command line; a quoted newline (or CR, U+2028) stays in its word."""
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        start, pending = number + 1, lines[number]
        number += 1
        while True:
            try:
                yield start, shlex.split(pending, comments=True)
                break
            except ValueError as exc:
                if number < len(lines) and "quotation" in str(exc):
                    pending += "\n" + lines[number]
                    number += 1
                    continue
                problems.append(f"line {start}: {exc}")
                break


def _segments(words: list[str]) -> list[list[str]]:
    """Simple commands of a line, split at `&&`, `;`, `|`, `&`, `||`."""
    segments: list[list[str]] = [[]]
    for word in words:
        if word in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(word)
    return [segment for segment in segments if segment]


def _command_words(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(leading NAME=value assignments, the command) of one simple command, redirections left
    out."""
    environ: dict[str, str] = {}
    argv: list[str] = []
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
            continue
        if _REDIRECT.match(word):
            skip_next = word.lstrip("0123456789&") in (">", ">>", "<")
            continue
        if not argv:
            match = _ASSIGNMENT.match(word)
            if match:
                environ[match[1]] = match[2]
                continue
            if word in _PREFIX_COMMANDS:
                continue
        argv.append(word)
    return environ, argv


# --------------------------------------------------------------------------- report
def import_text(result: ImportResult, profile_path: str) -> str:
    """What `sgdeploy import` prints on stderr beside the profile."""
    imported = result.imported
    shown = shown_flags(imported.launch.flags, imported.parsed)
    hidden = [word for word, seen in zip(imported.launch.flags, shown, strict=True) if word != seen]
    lines = [f"read with SGLang {result.version}'s flags: {len(imported.parsed.uses)} flag(s)"]
    for finding in imported.findings:
        where = (f"argument {finding.index + 1} of SGLang's "
                 "flags") if finding.index is not None else "command line"
        word = (
            f" ({shown[finding.index]!r})"
            if finding.index is not None and finding.index < len(shown)
            else ""
        )
        hint = f" (hint: {_without(finding.hint, hidden)})" if finding.hint else ""
        message = _without(finding.message, hidden)
        lines.append(redact(f"{where}{word}: {finding.severity}: {message}{hint}"))
    lines += [f"note: {note}" for note in imported.notes]
    lines += [redact(finding_line(d)) for d in result.validation.diagnostics]
    errors = sum(1 for d in result.validation.diagnostics if d.is_error)
    lines.append(f"validate: {errors} error(s), "
                 f"{sum(1 for d in result.validation.diagnostics if not d.is_error)} other "
                 "finding(s)")
    if result.roundtrip:
        lines.append("round trip: the rendered launch differs from the one that ran:")
        lines += [f"  {difference}" for difference in result.roundtrip]
    else:
        apart = "" if imported.parsed.ok else (f", apart from the words SGLang {result.version} "
                                               "refuses (above)")
        lines.append(f"round trip: {profile_path} renders the same flags, values and environment "
                     "as the launch"
                     + apart)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the command
@dataclass
class ImportOutcome:
    """What `sgdeploy import` produced: the result and what to say about the host's inventory."""

    result: ImportResult
    inventory_note: str = ""
    others: list[str] = field(default_factory=list)  # other servers on the host, not imported


def import_from_command(text: str, host: str | None, unit: str | None, version: str | None,
                        inventory: InventoryContext, path: str = "imported.toml") -> ImportOutcome:
    """`sgdeploy import --command`: no host is contacted. Raises LaunchError."""
    observed = observed_from_command(text)
    entry = _inventory_entry(inventory, host)
    catalog = load_catalog(
        version or (entry.sglang_version if entry and entry.sglang_version else newest_version())
    )
    target = Target(host or "HOST", unit or "sglang")
    return ImportOutcome(finish_import(observed, catalog, target, inventory, path))


def import_from_host(
    name: str,
    pid: int | None,
    unit: str | None,
    new_unit: str | None,
    version: str | None,
    inventory: InventoryContext,
    path: str = "imported.toml",
) -> ImportOutcome:
    """`sgdeploy import HOST`: read the running servers over SSH and import one. Raises LaunchError,
    and RemoteError when the host cannot be reached."""
    assert inventory.inventory is not None  # the CLI checks that `name` is one of its hosts
    entry = inventory.inventory.hosts[name]
    with RemoteHost(name, entry).connect() as remote:
        found = read_servers(remote, pid, unit)
    if unit and not found.unit_pid and found.unit_file:
        return _import_unit_file(
            found.unit_file, name, unit, new_unit, version, entry, inventory, path
        )
    server = choose_server(found, name, pid, unit)
    observed = observed_from_server(server)
    catalog, version_note = _catalog_for(observed.sglang_version, version, entry.sglang_version)
    target = Target(name, new_unit or server.process.unit or unit or "sglang")
    result = finish_import(observed, catalog, target, inventory, path)
    if version_note:
        result.imported.notes.insert(0, version_note)
    if server.wrapper:
        result.imported.notes.append(f"started by '{server.wrapper}' (pid {server.process.ppid}): "
                                     "the unit replaces it")
    others = [describe(s) for s in found.servers if s is not server]
    return ImportOutcome(
        result, inventory_note(name, entry, found, observed.sglang_version), others
    )


def _import_unit_file(
    text: str,
    name: str,
    unit: str,
    new_unit: str | None,
    version: str | None,
    entry: HostEntry,
    inventory: InventoryContext,
    path: str,
) -> ImportOutcome:
    """A unit that does not run: its ExecStart=, Environment=, WorkingDirectory= and User=."""
    try:
        service = parse_service(text)
    except UnitFileError as exc:
        raise LaunchError(f"{unit} on {name}: {exc}") from None
    observed = Observed(
        argv=tuple(service.exec_start),
        environ=service.environment,
        cwd=service.working_directory,
        user=service.user,
        unit=unit.removesuffix(".service"),
    )
    catalog, version_note = _catalog_for(None, version, entry.sglang_version)
    env_file = service.environment_files[0] if len(service.environment_files) == 1 else None
    target = Target(name, new_unit or unit.removesuffix(".service"), env_file=env_file)
    result = finish_import(observed, catalog, target, inventory, path)
    notes = [f"{unit} does not run: read from its unit file, so SGLang's version is not the "
             "interpreter's"
             + (f" ({version_note})" if version_note else ""), *map(redact, service.notes)]
    if service.environment_files:
        notes.append(
            f"EnvironmentFile= {', '.join(service.environment_files)}: its variables stay in that "
            "file (not read)"
            + ("" if env_file else "; the profile can name only one: set deploy.env_file")
        )
    result.imported.notes[:0] = notes
    return ImportOutcome(result)


def choose_server(found: HostServers, name: str, pid: int | None, unit: str | None) -> Server:
    """The one server to import; LaunchError with what was found otherwise."""
    if unit and not found.unit_pid:
        raise LaunchError(f"{unit} is not running on {name}: import it while it runs, or give its "
                          "ExecStart= with --command")
    servers = [s for s in found.servers if pid or unit or _launches(s)]
    if pid or unit:
        wanted = pid or found.unit_pid
        servers = [
            s for s in servers if (s.process.pid == wanted or wanted in s.children) and _launches(s)
        ]
        if not servers:
            raise LaunchError(f"pid {wanted} on {name} is no SGLang server (or it exited during "
                              "the import)")
    if not servers:
        raise LaunchError(f"no SGLang server runs on {name}" + ("" if found.complete else
                                                                " (the host's answer was cut off)"))
    if len(servers) > 1:
        raise LaunchError(f"{len(servers)} SGLang servers run on {name}; choose one with --pid:\n"
                          + "\n".join(f"  {describe(s)}" for s in servers))
    return servers[0]


def _launches(server: Server) -> bool:
    try:
        split_launch(server.process.argv)
    except LaunchError:
        return False
    return True


def describe(server: Server) -> str:
    """`pid 123 (unit sglang, GPUs 0,1): python -m sglang.launch_server --model-path ...`
    (shortened)."""
    process = server.process
    where = ", ".join(x for x in (f"unit {process.unit}" if process.unit else "",
                                  "GPUs "
                                  f"{','.join(map(str, server.gpus))}" if server.gpus else "") if x)
    words = list(process.argv)
    if words[1:2] == ["-c"] and words[3:5] == ["-m", LAUNCH_MODULE]:
        words[2] = "..."  # a unit's log launcher (sgdeploy.deploy.secret_args.redacting_launcher)
    command = redact(" ".join(shlex.quote(w) for w in words))
    return f"pid {process.pid}{f' ({where})' if where else ''}: {command[:160]}"


def observed_from_server(server: Server) -> Observed:
    process = server.process
    if not process.argv:
        raise LaunchError(f"pid {process.pid} exited during the import")
    return Observed(
        argv=process.argv,
        environ=process.environ,
        cwd=process.cwd,
        user=process.user,
        pid=process.pid,
        unit=process.unit,
        interpreter=process.python,
        sglang_version=process.sglang_version,
        gpus=server.gpus,
        model_configs=process.model_configs,
    )


def _catalog_for(seen: str | None, wanted: str | None, declared: str | None) -> tuple[Catalog, str]:
    for version, note in ((wanted, ""), (seen, ""), (declared, "the interpreter's SGLang version "
                                                    "could not be read; used the inventory's, "
                                                    f"{declared}")):
        if version:
            try:
                return load_catalog(version), note
            except (UnknownVersionError, ValueError):
                if version == wanted:
                    raise LaunchError(f"no flag catalog is bundled for SGLang {version}") from None
                continue
    newest = newest_version()
    return load_catalog(newest), ("no SGLang version known for this server: read with the newest "
                                  f"catalog, {newest}")


def _inventory_entry(inventory: InventoryContext | None, host: str | None) -> HostEntry | None:
    model = inventory.inventory if inventory is not None else None
    return model.hosts.get(host) if model is not None and host else None


def _same_fact(key: str, declared: Any, seen: Any) -> bool:
    if declared is None:
        return False
    if key == "gpu":
        model = gpu_model_for(str(declared))
        return model is not None and model == gpu_model_for(str(seen))
    if key == "gpu_memory_gib":
        return abs(float(declared) - float(seen)) <= 1
    return str(declared) == str(seen)


def inventory_note(name: str, entry: HostEntry, found: HostServers, version: str | None) -> str:
    """The host as observed, against its inventory entry: what to change, or nothing."""
    seen: dict[str, Any] = {}
    if found.gpus:
        gpu = found.gpus[0]
        seen["gpu"] = gpu.name
        if gpu.compute_capability:
            seen["compute_capability"] = gpu.compute_capability
        seen["gpu_count"] = len(found.gpus)
        if gpu.memory_total_mib:
            seen["gpu_memory_gib"] = round(gpu.memory_total_mib / 1024)
    if version:
        seen["sglang_version"] = version
    changes = [f"{key} = {toml_value(value)}" + ("  # inventory says "
                                                 f"{toml_value(getattr(entry, key))}"
                                                  if getattr(entry, key) is not None else "")
               for key, value in seen.items() if not _same_fact(key, getattr(entry, key), value)]
    if not changes:
        return f"inventory: [hosts.{name}] matches what the host has"
    return f"inventory: the host has, in [hosts.{name}]:\n" + "\n".join(
        f"  {line}" for line in changes
    )


# --------------------------------------------------------------------------- apply --adopt
class Takeovers(NamedTuple):
    """What `apply --adopt` takes over, and the finding when there is nothing (SGD708)."""

    takeover: tuple[Takeover, ...]
    diagnostics: list[Diagnostic]


def takeovers(found: HostServers, unit: str, port: int, version: str) -> Takeovers:
    """The servers `apply --adopt` stops: those serving `port` outside `unit` (read with `version`'s
    flags)."""
    catalog = load_catalog(version)
    chosen = []
    for server in found.servers:
        process = server.process
        if process.unit == unit:
            continue  # the unit's own server: apply stops it as the unit
        try:
            launch = split_launch(process.argv)
        except LaunchError:
            continue
        served = parse_server_argv(list(launch.flags), catalog).server.get(
            "port", catalog.default("port")
        )
        if served == port:
            chosen.append(Takeover(process.pid, port, process.unit, server.children))
    if chosen:
        return Takeovers(tuple(chosen), [])
    return Takeovers((), [Diagnostic("SGD708", Severity.INFO, "--adopt: no SGLang server outside "
                                     f"{unit} serves port {port}; nothing to take "
                                     "over", field="server.port")])


def takeover_command(takeover: Sequence[Takeover]) -> str:
    """Stop each server: `systemctl disable --now` for another unit; SIGTERM for a process run by
    hand, SIGKILL to it and its children if they outlive the stop timeout (as systemd would)."""
    parts = []
    for other in takeover:
        if other.unit:
            parts.append(stop_sh(other.unit, disable=True))
            continue
        pids = " ".join(str(p) for p in (other.pid, *other.family))
        parts.append(
            f"if grep -q sglang /proc/{other.pid}/cmdline 2>/dev/null; then kill -TERM "
            f"{other.pid}; sgd_i=0; while kill -0 {other.pid} 2>/dev/null && [ $sgd_i -lt "
            f"{int(TAKEOVER_STOP_S * 10)} ]; do sleep 0.1; sgd_i=$((sgd_i + 1)); done; kill -KILL "
            f"{pids} 2>/dev/null; fi")
    return "; ".join(parts) + "; true"


TAKEOVER_STOP_S = 120
