"""SGD01x: [server] keys against the target version's flag catalog (unknown, removed, too new,
types, choices)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from sgdeploy.core.tomlfile import did_you_mean
from sgdeploy.sglang.catalog import NOT_GIVEN, Flag, flag_history, load_catalog, next_version
from sgdeploy.sglang.flags import (
    choice_problem,
    option_to_field,
    removed_switch_off,
    replacement_for,
    stored_problem,
    value_problem,
)
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import DEDICATED_VALUE_RULES, server_field
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.versions import VersionRange, parse_version


@rule("SGD010", "unknown-flag", ERROR, "A [server] key that is no flag of any bundled SGLang "
                                       "release.",
      "use the ServerArgs field name (snake_case) of an existing flag")
def unknown_flag(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if ctx.catalog.lookup(key) is not None or flag_history(key) != (None, None):
            continue
        field_name = option_to_field(ctx.catalog, key)
        if field_name:
            yield Finding(server_field(key), f"'{key}' is not a field name; SGLang's field is "
                                             f"'{field_name}'",
                          f"write '{field_name} = ...' (profiles use full field names, not CLI "
                          "spellings)")
            continue
        suggestion = _suggest(key, ctx.catalog.version)
        yield Finding(server_field(key), f"'{key}' is not a flag of SGLang {ctx.catalog.version}"
                      + (f"; did you mean '{suggestion}'?" if suggestion else ""),
                      f"rename it to '{suggestion}'" if suggestion else None)


@lru_cache(maxsize=1024)
def _suggest(key: str, version: str) -> str | None:
    return did_you_mean(key, list(load_catalog(version).flags))


@rule("SGD011", "removed-flag", ERROR, "A flag that the target SGLang version no longer accepts.",
      "replace it with what the newer SGLang uses, or validate against the version the host runs")
def removed_flag(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        if removed_switch_off(ctx.catalog, key, value):
            continue  # SGD017: it renders to nothing
        flag = ctx.catalog.lookup(key)
        if flag is not None and flag.refusal is not None and value:
            replacement = replacement_for(key, ctx.catalog)
            yield Finding(
                server_field(key),
                f"SGLang {ctx.catalog.version} refuses {flag.option} ('{flag.refusal}')",
                f"use {replacement.text}" if replacement else f"remove '{key}'",
            )
        if flag is not None:
            continue
        last_seen, _ = flag_history(key)
        if last_seen is None or parse_version(last_seen) >= ctx.version:
            continue
        replacement = replacement_for(key, ctx.catalog)
        removed_in = next_version(last_seen) or "a later release"
        yield Finding(
            server_field(key),
            f"--{key.replace('_', '-')} was removed in SGLang {removed_in} (last in {last_seen}); "
            f"SGLang {ctx.catalog.version} refuses it ('unrecognized arguments')",
            f"use {replacement.text}" if replacement else f"remove '{key}'",
        )


@rule("SGD012", "flag-too-new", ERROR, "A flag that only later SGLang releases have.",
      "upgrade SGLang on the host, or remove the flag")
def flag_too_new(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if ctx.catalog.lookup(key) is not None:
            continue
        last_seen, first_seen = flag_history(key)
        if first_seen and parse_version(first_seen) > ctx.version and (
            last_seen is None or parse_version(last_seen) >= ctx.version
        ):
            yield Finding(server_field(key), f"'{key}' first appears in SGLang {first_seen}; "
                          f"SGLang {ctx.catalog.version} refuses it")


@rule("SGD013", "invalid-flag-value", ERROR, "A value of the wrong type for its flag.",
      "give the flag a value of the type SGLang parses")
def invalid_flag_value(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        flag = ctx.catalog.lookup(key)
        problem = value_problem(flag, value) if flag else None
        if problem:
            yield Finding(server_field(key), problem)


@rule("SGD014", "invalid-choice", ERROR, "A value SGLang's argparse choices do not allow.",
      "use one of the listed values")
def invalid_choice(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        flag = ctx.catalog.lookup(key)
        if not flag or key in DEDICATED_VALUE_RULES or value_problem(flag, value):
            continue
        # An alias renders as its field's option, so the value it stores must suit that field.
        problem = choice_problem(flag, value) or (
            stored_problem(ctx.catalog, flag, value) if flag.is_alias else None
        )
        if problem:
            yield Finding(server_field(key), problem)


def _renamed(ctx: LaunchContext, flag: Flag) -> Finding:
    """A field of earlier releases that this one renamed, keeping the old spelling as an option."""
    target = ctx.catalog.flags[flag.field]
    old = "--" + flag.key.replace("_", "-")
    return Finding(server_field(flag.key), f"{flag.key} is the name of earlier SGLang releases: "
                   f"{ctx.catalog.version} names the field {flag.field} and still takes {old} as "
                   f"one of its options; the unit passes {target.option}",
                   f"rename it to '{flag.field}'")


# 0.5.3-0.5.4's DeprecatedAction raises ValueError(help) instead of warning; later ones warn.
DEPRECATED_ACTION_RAISES = VersionRange(since="0.5.3", until="0.5.4.post1")


@rule("SGD015", "deprecated-flag", WARNING, "A flag SGLang still accepts but has deprecated.",
      "move to the flag the deprecation message names")
def deprecated_flag(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        flag = ctx.catalog.lookup(key)
        if flag is not None and flag.renamed_from and not value_problem(flag, value):
            yield _renamed(ctx, flag)
        if (
            not flag
            or not flag.deprecated
            or flag.refusal is not None
            or value_problem(flag, value)
        ):
            continue
        replacement = replacement_for(key, ctx.catalog)
        fix = f"use {replacement.text}" if replacement else None
        version = ctx.catalog.version
        if flag.ignored and ctx.version in DEPRECATED_ACTION_RAISES:
            yield Finding(server_field(key), f"{flag.option} is deprecated in SGLang {version}, "
                          f"which stops with its help text when it is given ('{flag.help}'); the "
                          "unit leaves it out", f"remove '{key}'")
        elif flag.ignored:
            yield Finding(server_field(key), f"{flag.option} is deprecated in SGLang {version} and "
                          "has no effect (SGLang warns and stores nothing); the unit leaves it "
                          "out", f"remove '{key}'")
        elif flag.stored(value) is NOT_GIVEN:
            yield Finding(server_field(key), f"{key} = false renders to nothing: SGLang {version} "
                          f"never sees the deprecated {flag.option}", f"remove '{key}'")
        elif flag.is_alias:
            yield Finding(server_field(key), f"{flag.option} is a deprecated alias in SGLang "
                          f"{version}: it sets {flag.field}, and the unit passes "
                          f"{ctx.catalog.flags[flag.field].option} instead",
                          fix)
        else:
            said = f" (SGLang says: {flag.replaced_by})" if flag.replaced_by else ""
            yield Finding(server_field(key), f"{flag.option} is deprecated in SGLang "
                                             f"{version}{said}", fix)


@rule("SGD017", "removed-switch-off", WARNING,
      "A switch the target SGLang version no longer accepts, set to false: it renders to nothing.",
      "delete the key")
def removed_switch_set_false(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        last = removed_switch_off(ctx.catalog, key, value)
        if last is None:
            continue
        flag = ctx.catalog.lookup(key)
        why = (f"SGLang {ctx.catalog.version} refuses {flag.option} when it is "
               "given" if flag is not None
               else f"--{key.replace('_', '-')} was removed after SGLang {last}")
        yield Finding(server_field(key), f"{key} = false renders to nothing, so SGLang never sees "
                      f"it ({why}); the key does nothing", f"delete '{key}'")


@rule("SGD016", "model-path-required", ERROR, "No model_path: SGLang refuses to start without one.",
      "add model_path = \"/path/to/model\" to [server]")
def model_path_required(ctx: LaunchContext) -> Iterator[Finding]:
    if "model_path" not in ctx.raw_server:
        yield Finding("server", "[server] has no model_path ('the following arguments are "
                                "required: --model-path')")
    elif isinstance(path := ctx.raw_server["model_path"], str) and not path.strip():
        yield Finding(server_field("model_path"), "model_path is empty: argparse takes it, and the "
                      "server fails loading a model from "
                      "''", "set model_path to the model's folder or its hub id")


# The kernel refuses one argument or environment string longer than MAX_ARG_STRLEN (32 pages:
# 131,072 bytes with its NUL), and systemd refuses a unit-file line over LONG_LINE_MAX (1 MiB).
MAX_ARG_BYTES = 131_071
MAX_UNIT_LINE_BYTES = 1 << 20


@rule("SGD029", "value-too-long", ERROR,
      "A value longer than Linux passes as one argument, or a launch longer than a unit-file line.",
      "keep long values in a file the option reads (a --config YAML file, a chat template file)")
def value_too_long(ctx: LaunchContext) -> Iterator[Finding]:
    total = 0
    for key, value in ctx.raw_server.items():
        for word in value if isinstance(value, list) else [value]:
            size = len(str(word).encode("utf-8", "surrogatepass"))
            total += size + len(key) + 4
            if size > MAX_ARG_BYTES:
                yield Finding(server_field(key), f"'{key}' is {size:,} bytes: Linux passes at most "
                              f"{MAX_ARG_BYTES:,} bytes as one argument, so the server could never "
                              "be started")
    for key, value in ctx.env.items():
        size = len(f"{key}={value}".encode("utf-8", "surrogatepass"))
        if size > MAX_ARG_BYTES:
            yield Finding(f"env.{key}", f"{key} is {size:,} bytes: Linux passes at most "
                          f"{MAX_ARG_BYTES:,} bytes as one environment string")
    if total > MAX_UNIT_LINE_BYTES:
        yield Finding("server", f"the launch is about {total:,} bytes: systemd refuses a unit-file "
                      f"line over {MAX_UNIT_LINE_BYTES:,} bytes, so the unit would not load")
