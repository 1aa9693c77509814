"""Every validation rule sgdeploy applies to a launch, in one list (`RULES`).

Ids are stable once published; docs/rules.md documents each with a bad and a good example.
Severity: an error is what makes SGLang refuse to start or a deployment that cannot work; a
warning is what SGLang will silently change or ignore.

Ranges of ids: SGD00x files and profile shape (sgdeploy.tomlfile), SGD01x flags against the
catalog, SGD02x values and secrets, SGD03x inventory, SGD1xx parallelism, SGD2xx speculative
decoding, SGD3xx encoder disaggregation, SGD4xx GPU generation, SGD5xx memory, scheduling and
serving, SGD6xx CUDA graphs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sgdeploy.diagnostics import Severity
from sgdeploy.sglang import models
from sgdeploy.sglang.catalog import flag_history, load_catalog, next_version
from sgdeploy.sglang.flags import REPLACEMENTS, choice_problem, option_to_field, value_problem
from sgdeploy.sglang.rule import Finding, LaunchContext, RuleRegistry
from sgdeploy.sglang.versions import ALL_VERSIONS, VersionRange, parse_version
from sgdeploy.tomlfile import did_you_mean

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

RULES = RuleRegistry()
rule = RULES.rule

# Where SGLang's behaviour changed, read from the released wheels (docs/catalogs.md). 0.5.14
# removed the piecewise CUDA graph flags, --mamba-scheduler-strategy and SGLANG_ENABLE_SPEC_V2
# and introduced per-phase graph backends; V1X/V2X are the two sides of that line.
V1X = VersionRange(until="0.5.14")
V2X = VersionRange(since="0.5.14")
PIECEWISE_DEFAULT_ON = VersionRange(since="0.5.10", until="0.5.14")  # --enforce-piecewise-cuda-graph era
LANGUAGE_ONLY_REFUSED = VersionRange(until="0.5.13")  # 'requires at least one encoder urls'
TBO_NEEDS_A2A = VersionRange(until="0.5.15")  # "moe_a2a_backend cannot be 'none'"
TRTLLM_MHA_PREFILL_BLACKWELL_ONLY = VersionRange(until="0.5.19")

# Checks made outside the rule list (reading files, resolving the target host), documented with
# the others: id -> (name, summary).
STRUCTURAL_RULES = {
    "SGD001": ("toml-syntax", "The file is not valid TOML."),
    "SGD002": ("unknown-key", "A key the profile or inventory format does not have."),
    "SGD003": ("invalid-value", "A value of the wrong type or out of range, or a required key missing."),
    "SGD004": ("unreadable-file", "The file is missing or not readable UTF-8."),
    "SGD030": ("unknown-host", "deploy.host names no host or group of the inventory."),
    "SGD031": ("no-host-version", "The host's SGLang version is unknown: validated against the newest catalog."),
    "SGD032": ("no-catalog-for-version", "No flag catalog is bundled for the host's SGLang version."),
    "SGD033": ("invalid-inventory", "The inventory file has errors."),
    "SGD034": ("no-inventory", "No inventory file: validated without host facts."),
    # Preflight checks against the live host (sgdeploy.preflight), before anything changes.
    "SGD701": ("python-missing", "deploy.python does not exist or does not run on the host."),
    "SGD702": ("sglang-missing", "SGLang is not installed for deploy.python."),
    "SGD703": ("no-catalog-for-host-version", "The host runs an SGLang version with no bundled catalog."),
    "SGD704": ("model-path-missing", "server.model_path has no config.json on the host."),
    "SGD705": ("port-in-use", "Another process already listens on the server's port."),
    "SGD706": ("no-gpus", "nvidia-smi is missing or lists no GPU."),
    "SGD707": ("inventory-mismatch", "The host's GPUs or SGLang differ from what the inventory says."),
}
HOST_RULES = tuple(rule_id for rule_id in STRUCTURAL_RULES if rule_id.startswith("SGD7"))


def _server(name: str) -> str:
    return f"server.{name}"


# --------------------------------------------------------------------------- SGD01x flags
@rule("SGD010", "unknown-flag", ERROR, "A [server] key that is no flag of any bundled SGLang release.",
      "use the ServerArgs field name (snake_case) of an existing flag")
def unknown_flag(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if key in ctx.catalog or flag_history(key) != (None, None):
            continue
        field_name = option_to_field(ctx.catalog, key)
        if field_name:
            yield Finding(_server(key), f"'{key}' is not a field name; SGLang's field is '{field_name}'",
                          f"write '{field_name} = ...' (profiles use full field names, not CLI spellings)")
            continue
        suggestion = _suggest(key, ctx.catalog.version)
        yield Finding(_server(key), f"'{key}' is not a flag of SGLang {ctx.catalog.version}"
                      + (f"; did you mean '{suggestion}'?" if suggestion else ""),
                      f"rename it to '{suggestion}'" if suggestion else None)


@lru_cache(maxsize=1024)
def _suggest(key: str, version: str) -> str | None:
    return did_you_mean(key, list(load_catalog(version).flags))


@rule("SGD011", "removed-flag", ERROR, "A flag that the target SGLang version no longer has.",
      "replace it with what the newer SGLang uses, or validate against the version the host runs")
def removed_flag(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if key in ctx.catalog:
            continue
        last_seen, _ = flag_history(key)
        if last_seen is None or parse_version(last_seen) >= ctx.version:
            continue
        replacement = REPLACEMENTS.get(key)
        removed_in = next_version(last_seen) or "a later release"
        yield Finding(
            _server(key),
            f"--{key.replace('_', '-')} was removed in SGLang {removed_in} (last in {last_seen}); "
            f"SGLang {ctx.catalog.version} refuses it ('unrecognized arguments')",
            f"use {replacement.text}" if replacement else f"remove '{key}'",
        )


@rule("SGD012", "flag-too-new", ERROR, "A flag that only later SGLang releases have.",
      "upgrade SGLang on the host, or remove the flag")
def flag_too_new(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if key in ctx.catalog:
            continue
        last_seen, first_seen = flag_history(key)
        if first_seen and parse_version(first_seen) > ctx.version and (
            last_seen is None or parse_version(last_seen) >= ctx.version
        ):
            yield Finding(_server(key), f"'{key}' first appears in SGLang {first_seen}; the target runs "
                          f"{ctx.catalog.version}, which refuses it")


@rule("SGD013", "invalid-flag-value", ERROR, "A value of the wrong type for its flag.",
      "give the flag a value of the type SGLang parses")
def invalid_flag_value(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        flag = ctx.catalog.get(key)
        problem = value_problem(flag, value) if flag else None
        if problem:
            yield Finding(_server(key), problem)


@rule("SGD014", "invalid-choice", ERROR, "A value SGLang's argparse choices do not allow.",
      "use one of the listed values")
def invalid_choice(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        flag = ctx.catalog.get(key)
        if not flag or key in _DEDICATED_VALUE_RULES or value_problem(flag, value):
            continue
        problem = choice_problem(flag, value)
        if problem:
            yield Finding(_server(key), problem)


@rule("SGD015", "deprecated-flag", WARNING, "A flag SGLang still accepts but has deprecated.",
      "move to the flag the deprecation message names")
def deprecated_flag(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.server:
        flag = ctx.catalog.get(key)
        if flag and flag.deprecated:
            replacement = REPLACEMENTS.get(key)
            yield Finding(_server(key), f"{flag.option} is deprecated in SGLang {ctx.catalog.version}"
                          + (f"; use {replacement.text}" if replacement else ""))


@rule("SGD016", "model-path-required", ERROR, "No model_path: SGLang refuses to start without one.",
      "add model_path = \"/path/to/model\" to [server]")
def model_path_required(ctx: LaunchContext) -> Iterator[Finding]:
    if "model_path" not in ctx.raw_server:
        yield Finding("server", "[server] has no model_path ('the following arguments are required: --model-path')")


# --------------------------------------------------------------------------- SGD02x values
_SECRET_FLAGS = {"api_key", "admin_api_key", "hf_token", "ssl_keyfile_password"}
_SECRET_ENV = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)($|_)", re.I)
# Values that are credentials whatever they are called: Hugging Face, OpenAI-style, GitHub, AWS.
_SECRET_VALUE = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b")


@rule("SGD020", "unsafe-characters", ERROR,
      "A value with a newline, NUL or a Unicode noncharacter cannot be passed through a unit.",
      "remove the newline, NUL or noncharacter from the value")
def unsafe_characters(ctx: LaunchContext) -> Iterator[Finding]:
    for key, value in ctx.raw_server.items():
        if _has_control(value):
            yield Finding(_server(key), f"the value of '{key}' contains a newline, NUL or noncharacter "
                          "(systemd would drop the line)")
    for key, value in ctx.env.items():
        if _has_control(value):
            yield Finding(f"env.{key}", f"the value of {key} contains a newline, NUL or noncharacter")


def _is_noncharacter(ch: str) -> bool:
    code = ord(ch)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def _has_control(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" in value or "\r" in value or "\x00" in value or any(map(_is_noncharacter, value))
    if isinstance(value, list):
        return any(_has_control(v) for v in value)
    if isinstance(value, dict):
        return any(_has_control(k) or _has_control(v) for k, v in value.items())
    return False


@rule("SGD021", "secret-in-profile", ERROR, "An API key or token written into the profile would land in the unit.",
      "put it in the host's env file (deploy.env_file) and remove it from the profile")
def secret_in_profile(ctx: LaunchContext) -> Iterator[Finding]:
    for key in ctx.raw_server:
        if key in _SECRET_FLAGS:
            yield Finding(_server(key), f"'{key}' is a secret; profiles and units are not secret",
                          f"remove it and set it on the host: deploy.env_file with {key.upper()}=... "
                          "(SGLang reads the env var) — never in the unit or the repository")
    for key, value in ctx.env.items():
        if _SECRET_ENV.search(key) or _SECRET_VALUE.search(value):
            yield Finding(f"env.{key}", f"{key} looks like a secret; it would be written into the unit")
    for key, value in ctx.raw_server.items():
        if key not in _SECRET_FLAGS and isinstance(value, str) and _SECRET_VALUE.search(value):
            yield Finding(_server(key), f"the value of '{key}' looks like a credential; it would be written "
                          "into the unit")


# --------------------------------------------------------------------------- SGD1xx parallelism
def _attention_dp(ctx: LaunchContext) -> bool:
    """DP attention is on: 0.5.2x's attn_dp_size, or the deprecated enable_dp_attention + dp_size."""
    return ctx.int("attn_dp_size", 1) > 1 or (ctx.on("enable_dp_attention") and ctx.int("dp_size", 1) > 1)


def gpus_per_node(server: Mapping[str, Any]) -> int:
    """GPUs one node of a launch occupies: tp x pp (x dp for plain DP replicas) / nnodes."""
    def count(name: str) -> int:
        value = server.get(name, 1)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    attention_dp = bool(server.get("enable_dp_attention")) or count("attn_dp_size") > 1
    # Attention DP splits the TP group; plain DP runs dp_size full replicas.
    world = count("tp_size") * count("pp_size") * (1 if attention_dp else count("dp_size"))
    return max(world // count("nnodes"), 1)


@rule("SGD101", "not-enough-gpus", ERROR, "tp x pp (x dp) needs more GPUs per node than the host has.",
      "lower tp_size/pp_size/dp_size or deploy to a host with more GPUs")
def not_enough_gpus(ctx: LaunchContext) -> Iterator[Finding]:
    needed = gpus_per_node(ctx.server)
    available = len(ctx.gpus) if ctx.gpus else (ctx.host.gpu_count if ctx.host else None)
    if available is not None and needed > available:
        where = "deploy.gpus lists" if ctx.gpus else f"host {ctx.host.name if ctx.host else '?'} has"
        field_name = "server.tp_size" if ctx.given("tp_size") else "server"
        yield Finding(field_name, f"the launch needs {needed} GPUs per node (tp x pp x dp / nnodes) "
                      f"but {where} {available}")


@rule("SGD102", "gpus-unused", WARNING, "deploy.gpus lists more GPUs than the launch uses.",
      "list exactly the GPUs the launch uses, or raise tp_size")
def gpus_unused(ctx: LaunchContext) -> Iterator[Finding]:
    used = gpus_per_node(ctx.server)
    if ctx.gpus and len(ctx.gpus) > used:
        yield Finding("deploy.gpus", f"deploy.gpus lists {len(ctx.gpus)} GPUs; the launch uses {used}")


@rule("SGD103", "gpu-index-out-of-range", ERROR, "deploy.gpus names a GPU index the host does not have.",
      "use indices from 0 to gpu_count - 1")
def gpu_index_out_of_range(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.gpus and ctx.host and ctx.host.gpu_count:
        bad = [g for g in ctx.gpus if isinstance(g, int) and g >= ctx.host.gpu_count]
        if bad:
            yield Finding("deploy.gpus", f"GPU index {bad[0]} does not exist on {ctx.host.name} "
                          f"({ctx.host.gpu_count} GPUs)")


@rule("SGD104", "tp-not-divisible-by-nnodes", ERROR, "(tp_size x pp_size) must divide evenly over nnodes.",
      "make tp_size x pp_size a multiple of nnodes")
def tp_not_divisible(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes = max(ctx.int("nnodes", 1), 1)
    if (ctx.int("tp_size", 1) * ctx.int("pp_size", 1)) % nnodes:
        yield Finding("server.nnodes", f"tp_size x pp_size = {ctx.int('tp_size', 1) * ctx.int('pp_size', 1)} "
                      f"is not divisible by nnodes = {nnodes} ('tp_size must be divisible by number of nodes')")


@rule("SGD105", "multinode-without-dist-init-addr", ERROR,
      "nnodes > 1 without dist_init_addr: every node waits on its own loopback and the launch hangs.",
      "set dist_init_addr = \"<rank-0 address>:<port>\"")
def multinode_without_addr(ctx: LaunchContext) -> Iterator[Finding]:
    # Deployed to as many hosts as nodes, sgdeploy sets dist_init_addr to rank 0's address.
    spans_hosts = ctx.node_count is not None and ctx.node_count == ctx.int("nnodes", 1)
    if ctx.int("nnodes", 1) > 1 and not ctx.get("dist_init_addr") and not spans_hosts:
        yield Finding("server.nnodes", f"nnodes = {ctx.int('nnodes', 1)} but dist_init_addr is not set; "
                      "SGLang would hang waiting for the other nodes")


@rule("SGD106", "node-rank-out-of-range", ERROR, "node_rank must be in 0 .. nnodes - 1.",
      "set node_rank below nnodes")
def node_rank_out_of_range(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes, rank = max(ctx.int("nnodes", 1), 1), ctx.int("node_rank", 0)
    if rank >= nnodes or rank < 0:
        yield Finding("server.node_rank", f"node_rank = {rank} with nnodes = {nnodes}")


@rule("SGD107", "multinode-dp-replicas", ERROR, "Data-parallel replicas cannot span nodes.",
      "use attention DP (enable_dp_attention / attn_dp_size) across nodes, or one node per replica")
def multinode_dp(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("dp_size", 1) > 1 and ctx.int("nnodes", 1) > 1 and not _attention_dp(ctx):
        yield Finding("server.dp_size", "dp_size > 1 with nnodes > 1 needs attention DP "
                      "('multi-node data parallel is not supported unless dp attention')")


@rule("SGD109", "nnodes-vs-hosts", ERROR,
      "A multi-node launch (nnodes > 1) runs one node per host of its target: the counts must match.",
      "point deploy.host at a group with nnodes hosts (node_rank follows the group's order)")
def nnodes_vs_hosts(ctx: LaunchContext) -> Iterator[Finding]:
    nnodes = ctx.int("nnodes", 1)
    # A single host is one node of a launch managed node by node (node_rank in each profile).
    if nnodes > 1 and ctx.node_count is not None and ctx.node_count > 1 and ctx.node_count != nnodes:
        yield Finding("server.nnodes", f"nnodes = {nnodes} but deploy.host names {ctx.node_count} host(s)")


@rule("SGD110", "node-rank-set-by-sgdeploy", ERROR,
      "In a multi-node profile node_rank differs per host; sgdeploy sets it from the group's order.",
      "remove node_rank from the profile")
def node_rank_in_profile(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("nnodes", 1) > 1 and ctx.given("node_rank") and (ctx.node_count or 0) > 1:
        yield Finding("server.node_rank", "node_rank is set in a profile deployed to several nodes; every "
                      "node would claim the same rank")


@rule("SGD108", "dp-lm-head-without-dp-attention", ERROR, "enable_dp_lm_head requires DP attention.",
      "set enable_dp_attention = true or drop enable_dp_lm_head", versions=V1X)
def dp_lm_head(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_dp_lm_head") and not ctx.on("enable_dp_attention"):
        yield Finding("server.enable_dp_lm_head", "enable_dp_lm_head is set without enable_dp_attention")


# --------------------------------------------------------------------------- SGD2xx speculative
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
_EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
_DEDICATED_VALUE_RULES = {"speculative_algorithm"}


def _algorithm(ctx: LaunchContext) -> str | None:
    value = ctx.get("speculative_algorithm")
    return value.upper() if isinstance(value, str) and value else None


@rule("SGD201", "unknown-speculative-algorithm", ERROR, "speculative_algorithm must be a name SGLang knows.",
      "use NEXTN for a model's built-in MTP head, or EAGLE / EAGLE3 / STANDALONE / NGRAM")
def unknown_speculative_algorithm(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.raw_server.get("speculative_algorithm")
    if not isinstance(value, str):
        return
    flag = ctx.catalog.get("speculative_algorithm")
    known = [str(c) for c in flag.choices] if flag and flag.choices else list(SPECULATIVE_ALGORITHMS)
    # 0.5.1x checks choices at argparse (exact case); 0.5.2x upper-cases first.
    accepted = value in known if flag and flag.choices else value.upper() in known
    if not accepted:
        hint = "MTP is not an algorithm name: use NEXTN" if value.upper() == "MTP" else None
        yield Finding("server.speculative_algorithm",
                      f"unknown speculative algorithm '{value}' (SGLang {ctx.catalog.version} knows "
                      f"{', '.join(known)})", hint)


@rule("SGD202", "speculative-params-together", ERROR,
      "speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens go together.",
      "give speculative_num_steps and speculative_eagle_topk (and draft tokens), or none of them")
def speculative_params_together(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) not in _EAGLE_FAMILY or ctx.on("speculative_adaptive"):
        return
    steps, topk, draft = (ctx.given(n) for n in ("speculative_num_steps", "speculative_eagle_topk",
                                                  "speculative_num_draft_tokens"))
    if (topk or draft) and not steps:
        given = "speculative_eagle_topk" if topk else "speculative_num_draft_tokens"
        yield Finding(_server(given), f"{given} is set without speculative_num_steps "
                      "(SGLang fails with a bare AssertionError)")
    elif steps and not topk:
        yield Finding("server.speculative_num_steps", "speculative_num_steps is set without "
                      "speculative_eagle_topk (SGLang crashes with a TypeError)")


@rule("SGD203", "draft-tokens-adjusted", WARNING,
      "With speculative_eagle_topk = 1 SGLang forces draft tokens to steps + 1.",
      "set speculative_num_draft_tokens = speculative_num_steps + 1")
def draft_tokens_adjusted(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) not in _EAGLE_FAMILY:
        return
    steps, topk = ctx.get("speculative_num_steps"), ctx.get("speculative_eagle_topk")
    draft = ctx.get("speculative_num_draft_tokens")
    if topk == 1 and isinstance(steps, int) and isinstance(draft, int) and draft != steps + 1:
        yield Finding("server.speculative_num_draft_tokens", f"speculative_num_draft_tokens = {draft} will be "
                      f"silently changed to {steps + 1} (steps + 1, because topk is 1)",
                      f"set speculative_num_draft_tokens = {steps + 1}")


@rule("SGD204", "spec-v2-env-ignored", WARNING, "SGLANG_ENABLE_SPEC_V2 is not read by this SGLang version.",
      "remove SGLANG_ENABLE_SPEC_V2; spec v2 is the only EAGLE path now", versions=V2X)
def spec_v2_ignored(ctx: LaunchContext) -> Iterator[Finding]:
    if "SGLANG_ENABLE_SPEC_V2" in ctx.env:
        yield Finding("env.SGLANG_ENABLE_SPEC_V2", f"SGLANG_ENABLE_SPEC_V2 has no effect in SGLang "
                      f"{ctx.catalog.version}: it is not read anywhere and gives no warning")


@rule("SGD205", "spec-v1-overlap-off", WARNING,
      "SGLANG_ENABLE_SPEC_V2=0 with EAGLE-family decoding turns the overlap scheduler off (spec v1).",
      "set SGLANG_ENABLE_SPEC_V2 = \"1\" (or leave it unset) to keep the overlap scheduler", versions=V1X)
def spec_v1_overlap_off(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) in _EAGLE_FAMILY and ctx.env_true("SGLANG_ENABLE_SPEC_V2") is False:
        yield Finding("env.SGLANG_ENABLE_SPEC_V2", "SGLANG_ENABLE_SPEC_V2 is false: SGLang will silently "
                      "set disable_overlap_schedule = true (spec v1)")


@rule("SGD206", "speculative-with-pp", ERROR, "Speculative decoding does not run with pipeline parallelism.",
      "use pp_size = 1 with speculative decoding")
def speculative_with_pp(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) and ctx.int("pp_size", 1) > 1 and ctx.get("disaggregation_mode") != "prefill":
        yield Finding("server.pp_size", "pp_size > 1 with speculative decoding is refused "
                      "('PP + speculative decoding is only supported on prefill nodes')")


@rule("SGD207", "trtllm-mha-topk", ERROR, "The trtllm_mha attention backend supports only topk 1.",
      "use speculative_eagle_topk = 1 or another attention backend")
def trtllm_mha_topk(ctx: LaunchContext) -> Iterator[Finding]:
    backends = {ctx.get(n) for n in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")}
    topk = ctx.get("speculative_eagle_topk")
    if _algorithm(ctx) in _EAGLE_FAMILY and "trtllm_mha" in backends and isinstance(topk, int) and topk > 1:
        yield Finding("server.speculative_eagle_topk",
                      "trtllm_mha backend only supports topk = 1 for speculative decoding")


@rule("SGD208", "dflash-needs-draft-model", ERROR, "DFLASH needs speculative_draft_model_path.",
      "set speculative_draft_model_path")
def dflash_draft(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) == "DFLASH" and not ctx.get("speculative_draft_model_path"):
        yield Finding("server.speculative_algorithm", "DFLASH speculative decoding requires setting "
                      "speculative_draft_model_path")


@rule("SGD209", "standalone-with-dp-attention", ERROR, "STANDALONE speculative decoding does not support DP attention.",
      "turn DP attention off or use another algorithm")
def standalone_dp(ctx: LaunchContext) -> Iterator[Finding]:
    # Up to 0.5.21 SGLang checks the enable_dp_attention flag itself; from 0.5.22 the resolved
    # attention-DP size, so enable_dp_attention with dp_size 1 passes there.
    attention_dp = _attention_dp(ctx) if ctx.has_flag("attn_dp_size") else ctx.on("enable_dp_attention")
    if _algorithm(ctx) in {"STANDALONE", "NGRAM"} and attention_dp:
        yield Finding("server.speculative_algorithm", f"{_algorithm(ctx)} speculative decoding does not "
                      "support dp attention")


@rule("SGD210", "topk-page-size-backend", ERROR,
      "speculative_eagle_topk > 1 with page_size > 1 needs a backend that supports it.",
      "use page_size = 1, topk = 1, or attention_backend flashinfer")
def topk_page_size(ctx: LaunchContext) -> Iterator[Finding]:
    topk, page = ctx.get("speculative_eagle_topk"), ctx.int("page_size", 1)
    backend = ctx.get("attention_backend")
    allowed = {"flashinfer", "fa3", "triton"} if ctx.version in V2X else {"flashinfer", "fa3"}
    if (_algorithm(ctx) in _EAGLE_FAMILY and isinstance(topk, int) and topk > 1 and page > 1
            and backend is not None and backend not in allowed):
        yield Finding("server.page_size", f"speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                      f"{', '.join(sorted(allowed))}; got attention_backend = {backend}")


@rule("SGD211", "mixed-chunk-off-with-speculative", WARNING,
      "SGLang turns enable_mixed_chunk off for EAGLE-family speculative decoding.",
      "remove enable_mixed_chunk")
def mixed_chunk_off(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) in _EAGLE_FAMILY and ctx.raw_server.get("enable_mixed_chunk") is True:
        yield Finding("server.enable_mixed_chunk", "enable_mixed_chunk will be silently turned off for "
                      "speculative decoding")


@rule("SGD212", "max-running-requests-reset", WARNING,
      "Without max_running_requests, speculative decoding caps it at 48.",
      "set max_running_requests explicitly")
def max_running_reset(ctx: LaunchContext) -> Iterator[Finding]:
    if _algorithm(ctx) and not ctx.given("max_running_requests"):
        yield Finding("server.speculative_algorithm", "max_running_requests is unset: SGLang will set it to 48 "
                      "for speculative decoding")


# --------------------------------------------------------------------------- SGD3xx encoder disagg
@rule("SGD301", "language-only-without-encoders", ERROR,
      "language_only without encoder_urls: no encoder ever serves this language model.",
      "add encoder_urls = [\"http://encoder-host:port\"] or remove language_only")
def language_only_without_encoders(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("language_only") and not ctx.get("encoder_urls"):
        if ctx.version in LANGUAGE_ONLY_REFUSED:
            why = "SGLang refuses to start ('requires at least one encoder urls to be set via --encoder-urls')"
        else:
            why = "SGLang starts and waits for encoders to register, so a standalone server never serves images"
        yield Finding("server.language_only", f"language_only is set without encoder_urls: {why}")


@rule("SGD302", "encoder-and-language-only", ERROR, "encoder_only and language_only exclude each other.",
      "keep one of them")
def encoder_and_language_only(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("encoder_only") and ctx.on("language_only"):
        yield Finding("server.encoder_only", "Cannot set encoder_only and language_only together")


@rule("SGD303", "encoder-disagg-architecture", ERROR,
      "Encoder disaggregation works only for the architectures SGLang lists.",
      "remove encoder_only/language_only for this model")
def encoder_disagg_architecture(ctx: LaunchContext) -> Iterator[Finding]:
    if not (ctx.on("encoder_only") or ctx.on("language_only")) or not ctx.architecture:
        return
    allowed = (models.ENCODER_DISAGG_ARCHITECTURES_0_5_1X if ctx.version in V1X
               else models.ENCODER_DISAGG_ARCHITECTURES_0_5_2X)
    if ctx.architecture not in allowed:
        which = "encoder_only" if ctx.on("encoder_only") else "language_only"
        yield Finding(_server(which), f"Model type {ctx.architecture} is not supported for encoder "
                      "disaggregation")


@rule("SGD304", "prefix-mm-cache-needs-encoder-only", ERROR, "enable_prefix_mm_cache requires encoder_only.",
      "set encoder_only = true or remove enable_prefix_mm_cache")
def prefix_mm_cache(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_prefix_mm_cache") and not ctx.on("encoder_only"):
        yield Finding("server.enable_prefix_mm_cache", "enable_prefix_mm_cache requires encoder_only")


@rule("SGD305", "encoder-only-with-pd", ERROR, "encoder_only cannot be combined with PD disaggregation.",
      "remove disaggregation_mode or encoder_only")
def encoder_only_pd(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("encoder_only") and ctx.get("disaggregation_mode") in {"prefill", "decode"}:
        yield Finding("server.encoder_only", "Cannot set encoder_only and disaggregation_mode prefill/decode together")


# --------------------------------------------------------------------------- SGD4xx GPU generation
@dataclass(frozen=True)
class SmGate:
    fields: tuple[str, ...]
    value: Any  # the value that needs the GPU generation (True for switches)
    min_sm: int
    need: str
    versions: VersionRange = ALL_VERSIONS


SM_GATES: tuple[SmGate, ...] = (
    SmGate(("attention_backend", "prefill_attention_backend"), "trtllm_mha", 100, "Blackwell (SM100)",
           TRTLLM_MHA_PREFILL_BLACKWELL_ONLY),
    SmGate(("attention_backend", "prefill_attention_backend"), "trtllm_mha", 90, "Hopper (SM90) or newer",
           VersionRange(since="0.5.19")),
    SmGate(("decode_attention_backend",), "trtllm_mha", 90, "Hopper (SM90) or newer"),
    SmGate(("attention_backend", "decode_attention_backend", "prefill_attention_backend"), "trtllm_mla", 100,
           "Blackwell (SM100/SM12x)"),
    SmGate(("attention_backend", "decode_attention_backend"), "cutedsl_mla", 100, "Blackwell (SM100)"),
    SmGate(("attention_backend", "decode_attention_backend"), "tokenspeed_mla", 100, "Blackwell (SM100)"),
    SmGate(("kv_cache_dtype",), "nvfp4", 100, "Blackwell SM100 or SM120"),
    SmGate(("kv_cache_dtype",), "mxfp8", 100, "an SM100+ (Blackwell) GPU"),
    SmGate(("kv_cache_dtype",), "fp4_mx_block16", 100, "an SM100+ (Blackwell) GPU"),
    SmGate(("quantization",), "nvfp4_online", 100, "an SM100+ (Blackwell) GPU"),
    SmGate(("enable_deepseek_v4_fp4_indexer",), True, 100, "SM100/SM120"),
    SmGate(("moe_a2a_backend", "moe_runner_backend"), "megamoe", 90, "SM90 or SM100"),
)


def _below(ctx: LaunchContext, min_sm: int) -> bool:
    return ctx.host is not None and ctx.host.sm is not None and ctx.host.sm < min_sm


def _gpu_words(ctx: LaunchContext) -> str:
    assert ctx.host is not None
    return f"{ctx.host.name} has {ctx.host.gpu or 'GPUs'} (SM{ctx.host.sm})"


@rule("SGD401", "nccl-nvls-needs-sm90", ERROR,
      "NCCL NVLS (enable_nccl_nvls) needs NVSwitch multicast, which only SM90+ systems have.",
      "remove enable_nccl_nvls on this host")
def nccl_nvls(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_nccl_nvls") and _below(ctx, 90):
        yield Finding("server.enable_nccl_nvls", f"enable_nccl_nvls needs an SM90+ GPU with NVSwitch; "
                      f"{_gpu_words(ctx)}")


@rule("SGD402", "allreduce-fusion-needs-sm90", ERROR,
      "FlashInfer all-reduce fusion requires SM90 or SM10x GPUs; SGLang raises when the model runner starts.",
      "remove flashinfer_allreduce_fusion_backend / enable_flashinfer_allreduce_fusion on this host",
      versions=V2X)
def allreduce_fusion_v2(ctx: LaunchContext) -> Iterator[Finding]:
    for name in ("flashinfer_allreduce_fusion_backend", "enable_flashinfer_allreduce_fusion"):
        if ctx.given(name) and ctx.server[name] not in (None, False) and _below(ctx, 90):
            yield Finding(_server(name), f"FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs; "
                          f"{_gpu_words(ctx)}")


@rule("SGD403", "allreduce-fusion-ignored", WARNING,
      "On GPUs below SM90, SGLang 0.5.1x accepts enable_flashinfer_allreduce_fusion but never uses it.",
      "remove enable_flashinfer_allreduce_fusion on this host", versions=V1X)
def allreduce_fusion_v1(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_flashinfer_allreduce_fusion") and _below(ctx, 90):
        yield Finding("server.enable_flashinfer_allreduce_fusion", "enable_flashinfer_allreduce_fusion has no "
                      f"effect: the fused path needs SM90/SM100 and {_gpu_words(ctx)}")


@rule("SGD404", "needs-newer-gpu", ERROR, "An option SGLang accepts only on a newer GPU generation.",
      "choose another backend or dtype for this GPU")
def needs_newer_gpu(ctx: LaunchContext) -> Iterator[Finding]:
    for gate in SM_GATES:
        if ctx.version not in gate.versions or not _below(ctx, gate.min_sm):
            continue
        for name in gate.fields:
            if ctx.given(name) and ctx.server[name] == gate.value:
                shown = f"{name} = {gate.value!r}" if gate.value is not True else name
                yield Finding(_server(name), f"{shown} requires {gate.need}; {_gpu_words(ctx)}")


@rule("SGD405", "mis-needs-flashinfer", ERROR,
      "enable_mis needs the flashinfer attention backend, which is the default only below SM90.",
      "set attention_backend = \"flashinfer\"")
def mis_needs_flashinfer(ctx: LaunchContext) -> Iterator[Finding]:
    backend = ctx.get("attention_backend")
    sm = ctx.host.sm if ctx.host else None
    if ctx.on("enable_mis") and (backend not in (None, "flashinfer") or (backend is None and sm and sm >= 90)):
        yield Finding("server.enable_mis", "Multi-item scoring requires the flashinfer attention backend")


# --------------------------------------------------------------------------- SGD5xx memory & serving
@rule("SGD501", "mem-fraction-range", ERROR, "mem_fraction_static must be between 0 and 1.",
      "use a fraction such as 0.85")
def mem_fraction_range(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.server.get("mem_fraction_static")
    if isinstance(value, int | float) and not 0 < value < 1:
        yield Finding("server.mem_fraction_static", f"mem_fraction_static = {value} is outside (0, 1); SGLang "
                      "accepts it and fails when it sizes the KV cache")


@rule("SGD502", "chunked-prefill-page-size", ERROR, "chunked_prefill_size must be a multiple of page_size.",
      "make chunked_prefill_size a multiple of page_size")
def chunked_prefill_page(ctx: LaunchContext) -> Iterator[Finding]:
    chunk, page = ctx.int("chunked_prefill_size", 0), ctx.int("page_size", 1) or 1
    if chunk > 0 and page > 0 and chunk % page and ctx.get("disaggregation_mode") != "decode":
        yield Finding("server.chunked_prefill_size", f"chunked_prefill_size = {chunk} is not divisible by "
                      f"page_size = {page}")


@rule("SGD503", "served-model-name-colon", ERROR, "served_model_name cannot contain ':'.",
      "remove the ':' (SGLang reserves it for LoRA adapters)")
def served_name_colon(ctx: LaunchContext) -> Iterator[Finding]:
    name = ctx.server.get("served_model_name")
    if isinstance(name, str) and ":" in name:
        yield Finding("server.served_model_name", f"served_model_name '{name}' contains ':'")


@rule("SGD504", "grpc-port-equals-port", ERROR, "grpc_port must differ from port.",
      "pick another grpc_port")
def grpc_port(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.given("grpc_port") and ctx.get("grpc_port") == ctx.get("port", 30000):
        yield Finding("server.grpc_port", f"grpc_port ({ctx.get('grpc_port')}) must differ from port")


@rule("SGD505", "two-batch-overlap-needs-a2a", ERROR,
      "enable_two_batch_overlap needs an MoE all-to-all backend (0.5.1x) or attention DP (0.5.2x).",
      "set moe_a2a_backend (e.g. deepep), or drop enable_two_batch_overlap")
def two_batch_overlap(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_two_batch_overlap") or ctx.get("moe_a2a_backend", "none") not in (None, "none"):
        return
    if ctx.version in TBO_NEEDS_A2A:
        yield Finding("server.enable_two_batch_overlap", "When enabling two batch overlap, moe_a2a_backend "
                      "cannot be 'none'")
    elif not _attention_dp(ctx):
        yield Finding("server.enable_two_batch_overlap", "two batch overlap without an EP a2a backend requires "
                      "attention DP (attn_dp_size)")


@rule("SGD506", "positive-counts", ERROR, "Worker counts and GPU ids must be in range.",
      "use a value in range")
def positive_counts(ctx: LaunchContext) -> Iterator[Finding]:
    for name, minimum in (("tp_size", 1), ("pp_size", 1), ("dp_size", 1), ("nnodes", 1), ("base_gpu_id", 0),
                          ("gpu_id_step", 1), ("tokenizer_worker_num", 1), ("detokenizer_worker_num", 1),
                          ("attn_dp_size", 1), ("page_size", 1)):
        value = ctx.server.get(name)
        if isinstance(value, int) and value < minimum:
            yield Finding(_server(name), f"{name} = {value} must be at least {minimum}")
    port = ctx.server.get("port")
    if isinstance(port, int) and not 1 <= port <= 65535:
        yield Finding("server.port", f"port = {port} is not a TCP port")


@rule("SGD507", "moe-dense-tp-size", ERROR, "moe_dense_tp_size may only be unset, 1 (or tp_size in 0.5.2x).",
      "use moe_dense_tp_size = 1 or leave it unset")
def moe_dense_tp(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.server.get("moe_dense_tp_size")
    allowed = {1} if ctx.version in V1X else {1, ctx.int("tp_size", 1)}
    if isinstance(value, int) and value not in allowed:
        yield Finding("server.moe_dense_tp_size", f"moe_dense_tp_size = {value} is not supported")


@rule("SGD508", "priority-scheduling-policy", ERROR,
      "Priority scheduling needs schedule_policy fcfs or lof; retraction_policy priority needs it on.",
      "fix schedule_policy or enable priority scheduling")
def priority_scheduling(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_priority_scheduling") and ctx.get("schedule_policy") not in (None, "fcfs", "lof"):
        yield Finding("server.schedule_policy", "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'")
    if ctx.get("retraction_policy") == "priority" and not ctx.on("enable_priority_scheduling"):
        yield Finding("server.retraction_policy", "retraction_policy priority requires enable_priority_scheduling")


@rule("SGD509", "mamba-no-buffer-speculative", ERROR,
      "A hybrid (Mamba) model with speculative decoding and the radix cache needs the extra_buffer strategy.",
      "set mamba_scheduler_strategy = \"extra_buffer\" (or disable_radix_cache = true)", versions=V1X)
def mamba_no_buffer(ctx: LaunchContext) -> Iterator[Finding]:
    if not models.is_mamba_hybrid(ctx.architecture) or not _algorithm(ctx) or ctx.on("disable_radix_cache"):
        return
    if ctx.get("mamba_scheduler_strategy", "auto") in ("auto", "no_buffer"):
        yield Finding("server.mamba_scheduler_strategy" if ctx.given("mamba_scheduler_strategy") else "server",
                      f"Speculative decoding for {ctx.architecture} is not compatible with radix cache when "
                      "using mamba_scheduler_strategy no_buffer (auto resolves to no_buffer)")


@rule("SGD510", "mamba-extra-buffer-constraints", ERROR,
      "mamba extra_buffer needs the radix cache, mamba_track_interval >= draft tokens and a multiple of page_size.",
      "adjust mamba_track_interval, page_size or the radix cache setting")
def mamba_extra_buffer(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.architecture and not models.is_mamba_hybrid(ctx.architecture):
        return  # SGLang applies the strategy only to hybrid (Mamba) models
    strategy_field = ("mamba_scheduler_strategy" if ctx.has_flag("mamba_scheduler_strategy")
                      else "mamba_radix_cache_strategy")
    if ctx.get(strategy_field) not in ("extra_buffer", "extra_buffer_lazy"):
        return
    if ctx.on("disable_radix_cache") and ctx.version in V1X:
        yield Finding("server.disable_radix_cache", "mamba extra_buffer is not compatible with disable_radix_cache")
    interval, page = ctx.int("mamba_track_interval", 256), ctx.int("page_size", 1) or 1
    draft = ctx.get("speculative_num_draft_tokens")
    if _algorithm(ctx) and isinstance(draft, int) and interval < draft:
        yield Finding("server.speculative_num_draft_tokens", f"mamba_track_interval {interval} must be greater "
                      f"than or equal to speculative_num_draft_tokens {draft}")
    if interval % page:
        yield Finding("server.page_size", f"mamba_track_interval {interval} must be divisible by page_size {page}")


# --------------------------------------------------------------------------- SGD6xx CUDA graphs
_CONTRADICTIONS = (
    ("enforce_piecewise_cuda_graph", "disable_piecewise_cuda_graph"),
    ("enforce_piecewise_cuda_graph", "disable_cuda_graph"),
    ("disable_prefill_cuda_graph", "cuda_graph_backend_prefill"),
    ("disable_decode_cuda_graph", "cuda_graph_backend_decode"),
)


@rule("SGD601", "contradictory-flags", ERROR, "Two flags that ask for opposite things.",
      "keep the one you mean")
def contradictory_flags(ctx: LaunchContext) -> Iterator[Finding]:
    for first, second in _CONTRADICTIONS:
        if ctx.server.get(first) not in (None, False) and ctx.server.get(second) not in (None, False, "disabled"):
            yield Finding(_server(second), f"{first} and {second} contradict each other")


def _piecewise_off_reasons(ctx: LaunchContext) -> list[str]:
    """Why SGLang 0.5.1x would silently turn the piecewise CUDA graph off (B.1)."""
    checks = [
        (ctx.architecture in models.PIECEWISE_DISABLED_ARCHITECTURES, f"{ctx.architecture} is on SGLang's list"),
        (models.is_multimodal(ctx.architecture), f"{ctx.architecture} counts as a multimodal model"),
        (bool(_algorithm(ctx)), "speculative decoding is on"),
        (ctx.on("enable_dp_attention"), "DP attention is on"),
        (ctx.on("enable_torch_compile"), "torch.compile is on"),
        (ctx.int("pp_size", 1) > 1, "pp_size > 1"),
        (ctx.get("moe_a2a_backend", "none") not in (None, "none"), "an MoE a2a backend is set"),
        (ctx.on("enable_lora") or bool(ctx.get("lora_paths")), "LoRA is on"),
        (ctx.get("cpu_offload_gb", 0) not in (0, None) or ctx.on("enable_hierarchical_cache"),
         "CPU offload / HiCache is on"),
        (ctx.on("enable_deterministic_inference"), "deterministic inference is on"),
        (ctx.get("disaggregation_mode", "null") not in (None, "null"), "PD disaggregation is on"),
        (ctx.on("enable_symm_mem"), "symmetric memory is on"),
        (ctx.int("attn_cp_size", 1) > 1, "attention context parallel is on"),
    ]
    return [reason for hit, reason in checks if hit]


@rule("SGD602", "piecewise-graph-silently-disabled", WARNING,
      "SGLang 0.5.1x silently turns the piecewise CUDA graph off for this launch unless it is enforced.",
      "add enforce_piecewise_cuda_graph = true to keep it, or disable_piecewise_cuda_graph = true to say so",
      versions=PIECEWISE_DEFAULT_ON)
def piecewise_silently_disabled(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enforce_piecewise_cuda_graph") or ctx.on("disable_piecewise_cuda_graph") or ctx.on("disable_cuda_graph"):
        return
    reasons = _piecewise_off_reasons(ctx)
    if reasons:
        yield Finding("server", "the piecewise CUDA graph will be silently disabled (no log line) because "
                      + "; ".join(reasons) + " — prefill throughput drops")


@rule("SGD603", "prefill-graph-auto-disabled", WARNING,
      "SGLang 0.5.2x turns the prefill CUDA graph off for multimodal models unless the backend is explicit.",
      "set cuda_graph_backend_prefill = \"breakable\" to keep it, or \"disabled\" to say so", versions=V2X)
def prefill_graph_auto_disabled(ctx: LaunchContext) -> Iterator[Finding]:
    explicit = any(ctx.given(n) for n in ("cuda_graph_backend_prefill", "disable_prefill_cuda_graph",
                                          "disable_cuda_graph", "cuda_graph_config"))
    if not explicit and models.is_multimodal(ctx.architecture):
        yield Finding("server", f"{ctx.architecture} counts as multimodal: SGLang will disable the prefill CUDA "
                      "graph ('Breakable CUDA graph is incompatible with ...')")


@rule("SGD604", "pp-disables-overlap", WARNING, "pp_size > 1 turns the overlap scheduler off.",
      "set disable_overlap_schedule = true to make it explicit")
def pp_disables_overlap(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("pp_size", 1) > 1 and not ctx.on("disable_overlap_schedule"):
        yield Finding("server.pp_size", "Pipeline parallelism is incompatible with overlap schedule: SGLang "
                      "will disable it")


def rule_ids() -> list[str]:
    return sorted([*STRUCTURAL_RULES, *(r.id for r in RULES)])
