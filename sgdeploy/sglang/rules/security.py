"""SGD02x: values that cannot pass through a unit, and secrets that must not be written into one
(sgdeploy.deploy.secret_args says how they reach SGLang instead)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sgdeploy.core.tomlfile import did_you_mean
from sgdeploy.sglang.hostfiles import host_files
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import server_field
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.sandbox import read_paths, under_home, written_paths
from sgdeploy.sglang.secrets import (
    ENV_LOOKALIKE,
    YAML_SUFFIXES,
    file_key,
    launch_secrets,
    mechanism,
)


@rule("SGD020", "unsafe-characters", ERROR,
      "A value with a newline, NUL or a Unicode noncharacter cannot be passed through a unit.",
      "remove the newline, NUL or noncharacter from the value")
def unsafe_characters(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        if _has_control(value):
            yield Finding(server_field(key), f"the value of '{key}' contains a newline, NUL or "
                          "noncharacter (systemd would drop the line)")
    for key, value in ctx.env.items():
        if _has_control(value):
            yield Finding(f"env.{key}", f"the value of {key} contains a newline, NUL or "
                                        "noncharacter")


def _is_noncharacter(ch: str) -> bool:
    code = ord(ch)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def _has_control(value: Any) -> bool:
    if isinstance(value, str):
        return (
            "\n" in value or "\r" in value or "\x00" in value or any(map(_is_noncharacter, value))
        )
    if isinstance(value, list):
        return any(_has_control(v) for v in value)
    if isinstance(value, dict):
        return any(_has_control(k) or _has_control(v) for k, v in value.items())
    return False


_READABLE = "it would be written into the unit, which every user of the host can read"


@rule("SGD021", "secret-in-profile", ERROR,
      "A secret written into the profile (an API key, a token, a password or key in a URL) "
      "would land in the unit, which every user of the host can read.",
      "keep the value on the host: [secrets] for an SGLang argument, deploy.env_file for an "
      "environment variable")
def secret_in_profile(ctx: LaunchContext) -> Iterator[Finding]:
    for spot in launch_secrets(ctx.raw_server, ctx.env):
        if spot.table == "env":
            yield Finding(spot.dotted, f"{spot.key} {spot.what}: {_READABLE}", _env_hint(spot.key))
        elif spot.by_name:
            yield Finding(spot.dotted, f"'{spot.key}' is a secret; profiles and units are not "
                          "secret", _secret_hint(ctx, spot.key))
        else:
            yield Finding(spot.dotted, f"the value of '{spot.key}' {spot.what}: {_READABLE}",
                          _value_hint(ctx, spot.key))


def _env_hint(name: str) -> str:
    return (f"remove {name} from [env]; write `{name}=VALUE` into a file on the host that only "
            "root reads (mode 0600) and name it in deploy.env_file: the unit reads it as "
            "EnvironmentFile= and never holds the value")


_TO_ENVIRONMENT = ("take the credential out of the value and give it to the server in its "
                   "environment from deploy.env_file (NAME=value lines in a root-only file on the "
                   "host, e.g. HF_TOKEN for the Hugging Face hub)")


def _value_hint(ctx: LaunchContext, key: str) -> str:
    """Where a value that holds a credential goes: the credential alone to the environment, or
    the whole value to [secrets] (not model_path: SGD016 and the host's checks read it in
    [server])."""
    flag = ctx.catalog.get(key)
    if key in ("model_path", "config") or flag is None or flag.is_switch or flag.is_list:
        return _TO_ENVIRONMENT
    if mechanism(ctx.catalog) == "config":
        where = (f"`{file_key(flag)}: VALUE` in that root-only YAML file on the host (SGLang "
                 "reads it through --config)")
    else:
        where = (f"`{key}=VALUE` in that root-only file on the host (systemd expands it into the "
                 "command line, where the process list shows it)")
    return f'{_TO_ENVIRONMENT}; or remove it, list "{key}" in [secrets] keys and write {where}'


def _secret_hint(ctx: LaunchContext, key: str) -> str:
    """Where an SGLang argument's secret value goes: SGLang reads it from its command line only."""
    flag = ctx.catalog.get(key)
    listed = f'remove it; list "{key}" in [secrets] keys'
    if flag is None:
        return f"remove it: SGLang {ctx.catalog.version} has no {key} flag"
    if mechanism(ctx.catalog) == "config":
        return (f"{listed} and write `{file_key(flag)}: VALUE` in that root-only YAML file on the "
                f"host (SGLang reads it through --config; it reads no {key.upper()} environment "
                "variable)")
    return (f"{listed} and write `{key}=VALUE` in that root-only file on the host (SGLang "
            f"{ctx.catalog.version} has no --config: systemd expands it into the command line, "
            "where the process list shows it)")


@rule("SGD022", "secret-keys", ERROR,
      "[secrets] names an argument SGLang cannot take from the file, or a file SGLang refuses.",
      "list value-taking SGLang flags of this release in secrets.keys, none of them also in "
      "[server]")
def secret_keys(ctx: LaunchContext) -> Iterator[Finding]:
    for index, key in enumerate(ctx.secret_keys):
        flag = ctx.catalog.get(key)
        if flag is None:
            near = did_you_mean(key, list(ctx.catalog.flags))
            # the entry may be a value written by mistake: name it only when it is close to a flag
            yield Finding("secrets.keys", (f"'{key}' is not a flag of SGLang "
                                           f"{ctx.catalog.version}; did you mean "
                                           f"'{near}'?") if near else
                          f"entry {index + 1} of secrets.keys is not a flag of SGLang "
                          f"{ctx.catalog.version}",
                          f"use '{near}'" if near else "list ServerArgs field names, e.g. "
                                                       "\"api_key\"")
        elif key == "config" or flag.is_switch or flag.is_list:
            yield Finding("secrets.keys", f"'{key}' takes no single value, so it cannot come from "
                                          "a secrets file",
                          f"remove '{key}' from secrets.keys")
        elif key in ctx.raw_server:
            yield Finding("secrets.keys", f"'{key}' is in secrets.keys and in [server]; the "
                          "command line would win over the file", f"remove {key} from [server]")
    if (ctx.secret_file and mechanism(ctx.catalog) == "config"
            and not ctx.secret_file.lower().endswith(YAML_SUFFIXES)):
        yield Finding("secrets.file", f"SGLang {ctx.catalog.version} reads --config only from a "
                      ".yaml or .yml file (it refuses any other "
                      "name)", "name the secrets file *.yaml")


@rule("SGD023", "env-not-read", WARNING,
      "An environment variable named like an SGLang secret argument, which SGLang does not read.",
      "list the argument in [secrets] keys; SGLang takes its key from the command line or --config "
      "only")
def env_not_read(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.env:
        match = ENV_LOOKALIKE.match(key)
        if match:
            name = match.group(1).lower()
            yield Finding(f"env.{key}", f"SGLang reads no {key} environment variable: the server "
                          f"would start without {name} "
                          f"({'no API key is enforced' if 'api_key' in name else 'it is ignored'})",
                          f'list "{name}" in [secrets] keys, with its value in the secrets file on '
                          'the host')


@rule("SGD024", "relative-host-file", ERROR,
      "A relative path for an option that is always a file on the host, without "
      "deploy.working_directory: the unit starts in /, so it names a file under /.",
      "write the absolute path, or set deploy.working_directory to the folder it is relative to")
def relative_host_file(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.working_directory:
        return
    for found in host_files(ctx.raw_server, None):
        if found.relative:
            yield Finding(server_field(found.key), f"{found.key} = {found.value!r} is a relative "
                          "path: the unit runs in / (no deploy.working_directory), so SGLang opens "
                          f"{found.path}")


# ------------------------------------------------------------------ deploy.hardening = "strict"
def _strict(ctx: LaunchContext) -> bool:
    return ctx.hardening == "strict"


@rule("SGD025", "hardened-as-root", ERROR,
      "deploy.hardening = \"strict\" with deploy.user = \"root\": the sandbox is built around an "
      "unprivileged user, and root owns every file it would protect.",
      "remove deploy.user (a strict unit runs as the system user 'sglang') or name another account")
def hardened_as_root(ctx: LaunchContext) -> Iterator[Finding]:
    if _strict(ctx) and ctx.service_user == "root":
        yield Finding("deploy.user", "a strict unit runs SGLang as an unprivileged user; "
                      "deploy.user = \"root\" gives the server every file on the host back")


@rule("SGD026", "hardened-path-under-root", ERROR,
      "A strict unit's server reads or writes a path under /root, which only root can open.",
      "move it (for example under /opt or /srv) and make it readable by the unit's user, or set "
      "deploy.hardening = \"none\"")
def hardened_path_under_root(ctx: LaunchContext) -> Iterator[Finding]:
    if not _strict(ctx) or ctx.python is None or ctx.service_user == "root":
        return  # root: SGD025
    reads = read_paths(
        ctx.raw_server, ctx.python, ctx.working_directory, (ctx.env_file, ctx.secret_file)
    )
    writes = [w.path for w in written_paths(ctx.raw_server, ctx.env)]
    for path in dict.fromkeys([*reads, *writes]):
        if under_home(path) == "/root":
            yield Finding(_field_of(ctx, path), f"{path} is under /root, which user "
                          f"{ctx.service_user or 'sglang'} cannot open (mode 0700, and "
                          "ProtectHome= hides it)")


@rule("SGD027", "hardened-hub-download", WARNING,
      "A strict unit whose model_path is a hub id, with no HF_HOME in [env]: the model is "
      "downloaded into the unit's own cache folder, not into the Hugging Face cache other users "
      "share.",
      "give model_path as the model's folder on the host, or set HF_HOME in [env] to a cache the "
      "unit's user can read (and write, to download)")
def hardened_hub_download(ctx: LaunchContext) -> Iterator[Finding]:
    model = ctx.raw_server.get("model_path")
    if (
        not _strict(ctx)
        or not isinstance(model, str)
        or model.startswith("/")
        or "HF_HOME" in ctx.env
    ):
        return
    yield Finding("server.model_path", f"model_path {model!r} is a hub id: a strict unit looks for "
                  "it in its own cache folder (/var/cache/sgdeploy/UNIT/huggingface), not in "
                  "root's ~/.cache, and downloads it there when it is not found")


def _field_of(ctx: LaunchContext, path: str) -> str:
    """The dotted key that names `path` (the first that does)."""
    for key, value in ctx.raw_server.items():
        if value == path:
            return server_field(key)
    named = {"deploy.python": ctx.python, "deploy.working_directory": ctx.working_directory,
             "deploy.env_file": ctx.env_file, "secrets.file": ctx.secret_file,
             **{f"env.{k}": v for k, v in ctx.env.items()}}
    return next((key for key, value in named.items() if value == path), "deploy.hardening")
