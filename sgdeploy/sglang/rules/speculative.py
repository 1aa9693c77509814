"""SGD2xx: speculative decoding (EAGLE family, NGRAM, DFLASH, ...)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.attention import resolve
from sgdeploy.sglang.rules.common import (
    EAGLE_FAMILY,
    MIXED_CHUNK_BY_ALGORITHM,
    PP_SPEC_ON_PREFILL,
    SPECULATIVE_ALGORITHMS,
    algorithm,
    server_field,
)
from sgdeploy.sglang.rules.parallelism import attention_dp_on
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.rules.sites import Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange


@rule("SGD201", "unknown-speculative-algorithm", ERROR, "speculative_algorithm must be a name "
                                                        "SGLang knows.",
      "use NEXTN for a model's built-in MTP head, or EAGLE / EAGLE3 / STANDALONE / NGRAM")
def unknown_speculative_algorithm(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.raw_server.get("speculative_algorithm")
    if not isinstance(value, str):
        return
    flag = ctx.catalog.get("speculative_algorithm")
    # Without argparse choices (0.5.12+) the names are SpeculativeAlgorithm's members (facts.json),
    # and NEXTN, which resolution renames to EAGLE first.
    members = fact("speculative_algorithms", ctx.version)
    known = ([str(c) for c in flag.choices] if flag and flag.choices
             else [*members, "NEXTN"] if members else list(SPECULATIVE_ALGORITHMS))
    # 0.5.1x checks choices at argparse (exact case); 0.5.2x upper-cases first.
    accepted = value in known if flag and flag.choices else value.upper() in known
    if not accepted:
        hint = "MTP is not an algorithm name: use NEXTN" if value.upper() == "MTP" else None
        yield Finding("server.speculative_algorithm",
                      f"unknown speculative algorithm '{value}' (SGLang {ctx.catalog.version} "
                      f"knows {', '.join(known)})", hint)


@rule("SGD202", "speculative-params-together", ERROR,
      "speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens go together.",
      "give speculative_num_steps and speculative_eagle_topk (and draft tokens), or none of them")
def speculative_params_together(ctx: LaunchContext) -> Iterator[Finding]:
    if algorithm(ctx) not in EAGLE_FAMILY or ctx.on("speculative_adaptive"):
        return
    steps, topk, draft = (ctx.given(n) for n in ("speculative_num_steps", "speculative_eagle_topk",
                                                  "speculative_num_draft_tokens"))
    if (topk or draft) and not steps:
        given = "speculative_eagle_topk" if topk else "speculative_num_draft_tokens"
        yield Finding(server_field(given), f"{given} is set without speculative_num_steps "
                      "(SGLang fails with a bare AssertionError)")
    elif steps and not topk:
        yield Finding("server.speculative_num_steps", "speculative_num_steps is set without "
                      "speculative_eagle_topk (SGLang crashes with a TypeError)")


@rule("SGD203", "draft-tokens-adjusted", WARNING,
      "With speculative_eagle_topk = 1 SGLang forces draft tokens to steps + 1.",
      "set speculative_num_draft_tokens = speculative_num_steps + 1")
def draft_tokens_adjusted(ctx: LaunchContext) -> Iterator[Finding]:
    if algorithm(ctx) not in EAGLE_FAMILY:
        return
    steps, topk = ctx.get("speculative_num_steps"), ctx.get("speculative_eagle_topk")
    draft = ctx.get("speculative_num_draft_tokens")
    if topk == 1 and isinstance(steps, int) and isinstance(draft, int) and draft != steps + 1:
        yield Finding("server.speculative_num_draft_tokens", "speculative_num_draft_tokens = "
                      f"{draft} will be silently changed to {steps + 1} (steps + 1, because topk "
                      "is 1)",
                      f"set speculative_num_draft_tokens = {steps + 1}")


# SGLANG_ENABLE_SPEC_V2 is read from 0.5.4.post1 to 0.5.13 (off by default up to 0.5.10, on from
# 0.5.11); 0.5.14-0.5.20 only log that it was removed; 0.5.21+ never look at it.
SPEC_V2_ENV_READ = VersionRange(since="0.5.4.post1", until="0.5.14")
SPEC_V2_ENV_DEFAULT_ON = VersionRange(since="0.5.11")
SPEC_V2_REMOVAL_NOTICE = VersionRange(since="0.5.14", until="0.5.21")


@rule("SGD204", "spec-v2-env-ignored", WARNING, "SGLANG_ENABLE_SPEC_V2 is not read by this SGLang "
                                                "version.",
      "remove SGLANG_ENABLE_SPEC_V2; to run speculative decoding without the overlap scheduler, "
      "set disable_overlap_schedule = true")
def spec_v2_ignored(ctx: LaunchContext) -> Iterator[Finding]:
    if "SGLANG_ENABLE_SPEC_V2" not in ctx.env or ctx.version in SPEC_V2_ENV_READ:
        return
    if ctx.version in SPEC_V2_REMOVAL_NOTICE:
        said = ("SGLang only logs 'SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding "
                "always runs the V2 worker. Use --disable-overlap-schedule to select the "
                "non-overlap (synchronous) path.'")
    elif ctx.version in SPEC_V2_ENV_DEFAULT_ON:
        said = "it is not read anywhere and gives no warning"
    else:
        said = "this release predates it (it is read from 0.5.4.post1 to 0.5.13)"
    yield Finding("env.SGLANG_ENABLE_SPEC_V2", f"SGLANG_ENABLE_SPEC_V2 has no effect in SGLang "
                  f"{ctx.catalog.version}: {said}")


@rule("SGD205", "spec-v1-overlap-off", WARNING,
      "SGLANG_ENABLE_SPEC_V2=0 with EAGLE-family decoding turns the overlap scheduler off "
      "(0.5.4.post1-0.5.13).",
      "set SGLANG_ENABLE_SPEC_V2 = \"1\" (0.5.11-0.5.13: or leave it unset) to keep the overlap "
      "scheduler",
      versions=SPEC_V2_ENV_READ)
def spec_v1_overlap_off(ctx: LaunchContext) -> Iterator[Finding]:
    if algorithm(ctx) not in EAGLE_FAMILY or ctx.env_true("SGLANG_ENABLE_SPEC_V2") is not False:
        return
    if ctx.on("disable_overlap_schedule"):
        return  # the profile asks for the synchronous path itself
    topk = ctx.get("speculative_eagle_topk")
    if ctx.version in SPEC_V2_ENV_DEFAULT_ON:
        hint = ("remove SGLANG_ENABLE_SPEC_V2 (on by default in this release) to keep the overlap "
                "scheduler")
    elif isinstance(topk, int) and topk > 1:
        hint = ("keep it: this release refuses spec v2 with speculative_eagle_topk > 1 ('Spec v2 "
                "currently only supports topk = 1'); set speculative_eagle_topk = 1 first to use "
                "it")
    else:
        hint = ("set SGLANG_ENABLE_SPEC_V2 = \"1\" (off by default up to 0.5.10) to turn the "
                "overlap scheduler on")
    yield Finding("env.SGLANG_ENABLE_SPEC_V2", "SGLANG_ENABLE_SPEC_V2 is false: SGLang will "
                  "silently set disable_overlap_schedule = true (spec v1, no overlap "
                  "scheduler)", hint)


@rule("SGD206", "speculative-with-pp", ERROR,
      "Speculative decoding does not run with pipeline parallelism (from 0.5.21: except on PD "
      "prefill nodes).",
      "use pp_size = 1 with speculative decoding")
def speculative_with_pp(ctx: LaunchContext) -> Iterator[Finding]:
    if not algorithm(ctx) or ctx.int("pp_size", 1) <= 1:
        return
    if ctx.version not in PP_SPEC_ON_PREFILL:
        yield Finding("server.pp_size", "pp_size > 1 with speculative decoding is refused "
                      "('Pipeline parallelism is not compatible with overlap schedule, speculative "
                      "decoding')")
    elif ctx.get("disaggregation_mode") != "prefill":
        yield Finding("server.pp_size", "pp_size > 1 with speculative decoding is refused "
                      "('PP + speculative decoding (MTP) is only supported on prefill nodes')")


@rule("SGD207", "trtllm-mha-topk", ERROR, "The trtllm_mha attention backend supports only topk 1.",
      "use speculative_eagle_topk = 1 or another attention backend")
def trtllm_mha_topk(ctx: LaunchContext) -> Iterator[Finding]:
    backends = {
        ctx.get(n)
        for n in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    }
    topk = ctx.get("speculative_eagle_topk")
    if (
        algorithm(ctx) in EAGLE_FAMILY
        and "trtllm_mha" in backends
        and isinstance(topk, int)
        and topk > 1
    ):
        yield Finding("server.speculative_eagle_topk",
                      "trtllm_mha backend only supports topk = 1 for speculative decoding")


@rule("SGD208", "dflash-needs-draft-model", ERROR, "DFLASH needs speculative_draft_model_path.",
      "set speculative_draft_model_path")
def dflash_draft(ctx: LaunchContext) -> Iterator[Finding]:
    if algorithm(ctx) == "DFLASH" and not ctx.get("speculative_draft_model_path"):
        yield Finding("server.speculative_algorithm", "DFLASH speculative decoding requires "
                      "setting speculative_draft_model_path")


@rule("SGD209", "standalone-with-dp-attention", ERROR,
      "STANDALONE and NGRAM speculative decoding do not support DP attention.",
      "turn DP attention off or use another algorithm")
def standalone_dp(ctx: LaunchContext) -> Iterator[Finding]:
    if algorithm(ctx) in {"STANDALONE", "NGRAM"} and attention_dp_on(ctx):
        yield Finding("server.speculative_algorithm", f"{algorithm(ctx)} speculative decoding does "
                      "not support dp attention (SGLang raises 'Currently "
                      f"{'standalone' if algorithm(ctx) == 'STANDALONE' else 'ngram'} speculative "
                      "decoding does not support dp attention.')")


@rule("SGD210", "topk-page-size-backend", ERROR,
      "speculative_eagle_topk > 1 with page_size > 1 needs an attention backend SGLang lists for "
      "it (flashinfer; fa3 from 0.5.6; triton from 0.5.13).",
      "use page_size = 1, speculative_eagle_topk = 1, or attention_backend = \"flashinfer\"")
def topk_page_size(ctx: LaunchContext) -> Iterator[Finding]:
    topk, page = ctx.get("speculative_eagle_topk"), ctx.int("page_size", 1)
    backend = ctx.get("attention_backend")
    allowed = fact("paged_topk_backends", ctx.version)
    if (
        allowed
        and algorithm(ctx) in EAGLE_FAMILY
        and isinstance(topk, int)
        and topk > 1
        and page > 1
        and backend is not None
        and backend not in allowed
    ):
        yield Finding("server.page_size", f"SGLang {ctx.catalog.version} refuses "
                      "speculative_eagle_topk > 1 with page_size > 1 on attention_backend = "
                      f"{backend} (it allows {', '.join(allowed)})")


@rule("SGD211", "mixed-chunk-off-with-speculative", WARNING,
      "SGLang turns enable_mixed_chunk off for EAGLE-family speculative decoding (from 0.5.19 only "
      "for the algorithms that do not support it, such as STANDALONE).",
      "remove enable_mixed_chunk")
def mixed_chunk_off(ctx: LaunchContext) -> Iterator[Finding]:
    name = algorithm(ctx)
    if name not in EAGLE_FAMILY or ctx.raw_server.get("enable_mixed_chunk") is not True:
        return
    if ctx.version in MIXED_CHUNK_BY_ALGORITHM:
        kept = fact("mixed_chunk_speculative_algorithms", ctx.version) or []
        if ("EAGLE" if name == "NEXTN" else name) in kept:  # SGLang runs NEXTN as EAGLE
            return
        said = (f"'Mixed chunked prefill is disabled: {name} speculative decoding does not support "
                "it'")
    else:
        said = "'Mixed chunked prefill is disabled because of using eagle speculative decoding'"
    yield Finding("server.enable_mixed_chunk", f"SGLang {ctx.catalog.version} turns "
                  f"enable_mixed_chunk off for {name} ({said})")


@rule("SGD212", "max-running-requests-reset", WARNING,
      "Without max_running_requests, speculative decoding caps it at 48.",
      "set max_running_requests explicitly")
def max_running_reset(ctx: LaunchContext) -> Iterator[Finding]:
    if algorithm(ctx) and not ctx.given("max_running_requests"):
        yield Finding("server.speculative_algorithm", "max_running_requests is unset: SGLang will "
                      "set it to 48 for speculative decoding")


@rule("SGD213", "skip-dp-mlp-sync-needs-eagle", ERROR,
      "speculative_skip_dp_mlp_sync works only with EAGLE (or NEXTN, which SGLang turns into "
      "EAGLE).",
      "drop speculative_skip_dp_mlp_sync, or use speculative_algorithm = \"EAGLE\"",
      versions=VersionRange(since="0.5.11", until="0.5.23"))
def skip_dp_mlp_sync(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("speculative_skip_dp_mlp_sync") and algorithm(ctx) not in {"EAGLE", "NEXTN"}:
        yield Finding("server.speculative_skip_dp_mlp_sync", "SGLang refuses it: "
                      "'--speculative-skip-dp-mlp-sync is only supported with "
                      f"speculative_algorithm == EAGLE, got {algorithm(ctx)}.'")


@rule("SGD214", "speculative-moe-runner-trtllm", ERROR,
      "speculative_moe_runner_backend = \"flashinfer_trtllm\" is refused by SGLang 0.5.7 to "
      "0.5.11.",
      "leave speculative_moe_runner_backend unset, or use \"triton\" or \"auto\"",
      versions=VersionRange(since="0.5.7", until="0.5.12"))
def speculative_moe_runner_trtllm(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.server.get("speculative_moe_runner_backend") == "flashinfer_trtllm":
        yield Finding("server.speculative_moe_runner_backend", "SGLang refuses it: 'Currently "
                      "speculative MoE runner backend doesn't support flashinfer_trtllm, please "
                      "use triton or auto backend for speculative moe runner instead.'")


def _aux_capture(ctx: LaunchContext) -> bool:
    return ctx.on("enable_return_aux_hidden_states")


def _aux_layer_ids(ctx: LaunchContext) -> list[object]:
    value = ctx.get("return_aux_hidden_state_layer_ids")
    return value if isinstance(value, list) else [] if value is None else [value]


def _number(ctx: LaunchContext, name: str) -> int | None:
    value = ctx.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _below(value: int | None, minimum: int) -> bool:
    return value is not None and value < minimum


_AUX = VersionRange(since="0.5.23")
SPECULATIVE_OPTIONS: tuple[Refusal, ...] = (
    Refusal(
        "handle_aux_hidden_state_capture: --return-aux-hidden-state-layer-ids requires "
        "--enable-return-aux-hidden-states.",
        "return_aux_hidden_state_layer_ids",
        lambda ctx: (
            not _aux_capture(ctx) and ctx.get("return_aux_hidden_state_layer_ids") is not None
        ),
        "--return-aux-hidden-state-layer-ids requires --enable-return-aux-hidden-states.",
        _AUX,
    ),
    Refusal(
        "handle_aux_hidden_state_capture: --enable-return-aux-hidden-states needs "
        "--speculative-algorithm EAGLE3, DFLASH or DSPARK to name the capture convention, got "
        "{}.",
        "enable_return_aux_hidden_states",
        lambda ctx: _aux_capture(ctx) and algorithm(ctx) not in ("EAGLE3", "DFLASH", "DSPARK"),
        lambda ctx: (
            "--enable-return-aux-hidden-states needs --speculative-algorithm EAGLE3, "
            "DFLASH or DSPARK to name the capture convention, got "
            f"{ctx.get('speculative_algorithm')!r}."
        ),
        _AUX,
    ),
    Refusal(
        "handle_aux_hidden_state_capture: --enable-return-aux-hidden-states captures without a "
        "draft; drop --speculative-draft-model-path.",
        "speculative_draft_model_path",
        lambda ctx: _aux_capture(ctx) and ctx.get("speculative_draft_model_path") is not None,
        "--enable-return-aux-hidden-states captures without a draft; drop "
        "--speculative-draft-model-path.",
        _AUX,
    ),
    Refusal(
        "handle_aux_hidden_state_capture: --enable-return-aux-hidden-states only supports "
        "pp_size == 1: the capture hooks only see the layers on the last pipeline "
        "rank.",
        "pp_size",
        lambda ctx: _aux_capture(ctx) and ctx.int("pp_size", 1) != 1,
        "--enable-return-aux-hidden-states only supports pp_size == 1",
        _AUX,
    ),
    Refusal(
        "handle_aux_hidden_state_capture: --enable-return-aux-hidden-states with {} requires "
        "--return-aux-hidden-state-layer-ids.",
        "return_aux_hidden_state_layer_ids",
        lambda ctx: (
            _aux_capture(ctx) and algorithm(ctx) in ("DFLASH", "DSPARK") and not _aux_layer_ids(ctx)
        ),
        lambda ctx: (
            f"--enable-return-aux-hidden-states with {algorithm(ctx)} requires "
            "--return-aux-hidden-state-layer-ids."
        ),
        _AUX,
    ),
    Refusal(
        "handle_aux_hidden_state_capture: --return-aux-hidden-state-layer-ids must be "
        "non-negative, got {}.",
        "return_aux_hidden_state_layer_ids",
        lambda ctx: (
            _aux_capture(ctx) and any(isinstance(i, int) and i < 0 for i in _aux_layer_ids(ctx))
        ),
        lambda ctx: (
            f"--return-aux-hidden-state-layer-ids must be non-negative, got {_aux_layer_ids(ctx)}."
        ),
        _AUX,
    ),
    Refusal(
        "handle_aux_hidden_state_capture: --return-aux-hidden-state-layer-ids must not repeat "
        "a layer, got {}.",
        "return_aux_hidden_state_layer_ids",
        lambda ctx: (
            _aux_capture(ctx)
            and len({str(i) for i in _aux_layer_ids(ctx)}) != len(_aux_layer_ids(ctx))
        ),
        lambda ctx: (
            "--return-aux-hidden-state-layer-ids must not repeat a layer, got "
            f"{_aux_layer_ids(ctx)}."
        ),
        _AUX,
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-draft-window-size must be positive, got {}.",
        "speculative_draft_window_size",
        lambda ctx: _below(_number(ctx, "speculative_draft_window_size"), 1),
        lambda ctx: (
            "--speculative-draft-window-size must be positive, got "
            f"{_number(ctx, 'speculative_draft_window_size')}."
        ),
        VersionRange(since="0.5.12"),
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-draft-sink-size must be non-negative, got {}.",
        "speculative_draft_sink_size",
        lambda ctx: _below(_number(ctx, "speculative_draft_sink_size"), 0),
        lambda ctx: (
            "--speculative-draft-sink-size must be non-negative, got "
            f"{_number(ctx, 'speculative_draft_sink_size')}."
        ),
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-draft-sink-size requires "
        "--speculative-draft-window-size.",
        "speculative_draft_sink_size",
        lambda ctx: (
            ctx.get("speculative_draft_sink_size") is not None
            and not _below(_number(ctx, "speculative_draft_sink_size"), 0)
            and ctx.get("speculative_draft_window_size") is None
        ),
        "--speculative-draft-sink-size requires --speculative-draft-window-size.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-use-block-verification only supports EAGLE "
        "/ EAGLE3 / NEXTN / DFLASH / DSPARK.",
        "speculative_use_block_verification",
        lambda ctx: (
            ctx.on("speculative_use_block_verification")
            and algorithm(ctx) not in ("EAGLE", "EAGLE3", "NEXTN", "DFLASH", "DSPARK")
        ),
        "--speculative-use-block-verification only supports EAGLE / EAGLE3 / NEXTN / DFLASH / "
        "DSPARK.",
        VersionRange(since="0.5.22"),
    ),
)
SPECULATIVE_OPTIONS += (
    Refusal(
        "handle_aux_hidden_state_capture: --return-aux-hidden-state-layer-ids must not be empty.",
        "return_aux_hidden_state_layer_ids",
        lambda ctx: (
            _aux_capture(ctx)
            and algorithm(ctx) == "EAGLE3"
            and ctx.get("return_aux_hidden_state_layer_ids") == []
        ),
        "--return-aux-hidden-state-layer-ids must not be empty.",
        _AUX,
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-use-block-verification only supports CUDA "
        "or ROCm.",
        "device",
        lambda ctx: (
            ctx.on("speculative_use_block_verification") and _device_not("cuda", "hip", "rocm")(ctx)
        ),
        "--speculative-use-block-verification only supports CUDA or ROCm.",
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_speculative_decoding: Spec v2 currently only supports topk = 1 for speculative "
        "decoding.",
        "speculative_eagle_topk",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_ENABLE_SPEC_V2"))
            and algorithm(ctx) in EAGLE_FAMILY
            and (_number(ctx, "speculative_eagle_topk") or 1) > 1
        ),
        "Spec v2 currently only supports topk = 1 for speculative decoding.",
        VersionRange(since="0.5.7", until="0.5.11"),
    ),
)
refusal_rule("SGD215", "speculative-options-together",
             "A speculative-decoding option SGLang refuses without the setting it depends on "
             "(auxiliary hidden-state capture, draft window and sink, block verification).",
             "set what SGLang's message names, or drop the option", SPECULATIVE_OPTIONS)


def _algorithm_is(*names: str) -> Callable[[LaunchContext], bool]:
    return lambda ctx: algorithm(ctx) in names


def _device_not(*prefixes: str) -> Callable[[LaunchContext], bool]:
    """The profile names a device SGLang's check refuses (unset resolves to cuda on these hosts)."""
    def check(ctx: LaunchContext) -> bool:
        device = ctx.get("device")
        return (
            isinstance(device, str)
            and device not in ("", "auto")
            and not device.startswith(prefixes)
        )

    return check


def _both(*conditions: Callable[[LaunchContext], bool]) -> Callable[[LaunchContext], bool]:
    return lambda ctx: all(c(ctx) for c in conditions)


def _attn_dp(ctx: LaunchContext) -> bool:
    return attention_dp_on(ctx)


def _given_below(name: str, minimum: int) -> Callable[[LaunchContext], bool]:
    return lambda ctx: _below(_number(ctx, name), minimum)


def _differs(first: str, second: str) -> Callable[[LaunchContext], bool]:
    return lambda ctx: _number(ctx, first) is not None and _number(ctx, second) is not None and \
        _number(ctx, first) != _number(ctx, second)


def _window_below_draft(ctx: LaunchContext) -> bool:
    window, draft = (
        _number(ctx, "speculative_draft_window_size"),
        _number(ctx, "speculative_num_draft_tokens"),
    )
    return window is not None and draft is not None and 0 < window < draft


def _rejection(ctx: LaunchContext) -> bool:
    return ctx.on("speculative_use_rejection_sampling")


def _thresholds_set(ctx: LaunchContext) -> bool:
    names = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
    return any(ctx.get(n, 1.0) != 1.0 for n in names)


def _uno_tree(ctx: LaunchContext) -> bool:
    return algorithm(ctx) == "UNO" and (_number(ctx, "speculative_eagle_topk") or 1) > 1


def _uno_backends_not_fa3(ctx: LaunchContext) -> bool:
    """UNO needs FA3 for prefill and decode, as SGLang resolves them (its default is FA3 only on
    Hopper)."""
    backends = resolve(ctx)
    return backends.exact and backends.pair != ("fa3", "fa3")


# the checks lived in handle_speculative_decoding
_DFLASH_V1 = VersionRange(since="0.5.11", until="0.5.13")
_DFLASH = VersionRange(since="0.5.13")
_DSPARK = VersionRange(since="0.5.16")
_UNO = VersionRange(since="0.5.20")
_REJECTION = VersionRange(since="0.5.14")
DFLASH, DSPARK, NGRAM, UNO = (_algorithm_is(n) for n in ("DFLASH", "DSPARK", "NGRAM", "UNO"))
ALGORITHM_REQUIREMENTS: tuple[Refusal, ...] = (
    Refusal(
        "handle_speculative_decoding: Currently DFLASH speculative decoding does not support "
        "dp attention.",
        "speculative_algorithm",
        _both(DFLASH, _attn_dp),
        "Currently DFLASH speculative decoding does not support dp attention.",
        _DFLASH_V1,
    ),
    Refusal(
        "handle_dflash: Currently DFLASH speculative decoding does not support dp attention.",
        "speculative_algorithm",
        _both(DFLASH, _attn_dp),
        "Currently DFLASH speculative decoding does not support dp attention.",
        VersionRange(since="0.5.13", until="0.5.20"),
    ),
    Refusal(
        "handle_dflash: Currently DFLASH speculative decoding does not support dp attention on "
        "non-NPU devices.",
        "speculative_algorithm",
        _both(DFLASH, _attn_dp, lambda ctx: ctx.get("device") != "npu"),
        "Currently DFLASH speculative decoding does not support dp attention on non-NPU devices.",
        VersionRange(since="0.5.20", until="0.5.23"),
    ),
    Refusal(
        "handle_dflash: DFLASH with dp attention requires --enable-dp-lm-head.",
        "enable_dp_lm_head",
        _both(
            DFLASH,
            _attn_dp,
            lambda ctx: ctx.get("device") != "npu",
            lambda ctx: not ctx.on("enable_dp_lm_head"),
        ),
        "DFLASH with dp attention requires --enable-dp-lm-head.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_dflash: DFLASH with dp attention does not support context parallel.",
        "attn_cp_size",
        _both(
            DFLASH,
            _attn_dp,
            lambda ctx: ctx.get("device") != "npu",
            lambda ctx: ctx.on("enable_dp_lm_head"),
            lambda ctx: ctx.int("attn_cp_size", 1) != 1,
        ),
        "DFLASH with dp attention does not support context parallel.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_speculative_decoding: Currently DFLASH speculative decoding only supports "
        "pp_size == 1.",
        "pp_size",
        _both(DFLASH, lambda ctx: ctx.int("pp_size", 1) != 1),
        "Currently DFLASH speculative decoding only supports pp_size == 1.",
        _DFLASH_V1,
    ),
    Refusal(
        "handle_dflash: Currently DFLASH speculative decoding only supports pp_size == 1.",
        "pp_size",
        _both(DFLASH, lambda ctx: ctx.int("pp_size", 1) != 1),
        "Currently DFLASH speculative decoding only supports pp_size == 1.",
        _DFLASH,
    ),
    Refusal(
        "handle_speculative_decoding: DFLASH requires --speculative-dflash-block-size to be "
        "positive, got {}.",
        "speculative_dflash_block_size",
        _both(DFLASH, _given_below("speculative_dflash_block_size", 1)),
        lambda ctx: (
            "DFLASH requires --speculative-dflash-block-size to be positive, got "
            f"{_number(ctx, 'speculative_dflash_block_size')}."
        ),
        _DFLASH_V1,
    ),
    Refusal(
        "handle_dflash: DFLASH requires --speculative-dflash-block-size to be positive, got {}.",
        "speculative_dflash_block_size",
        _both(DFLASH, _given_below("speculative_dflash_block_size", 1)),
        lambda ctx: (
            "DFLASH requires --speculative-dflash-block-size to be positive, got "
            f"{_number(ctx, 'speculative_dflash_block_size')}."
        ),
        _DFLASH,
    ),
    Refusal(
        "handle_speculative_decoding: Both --speculative-num-draft-tokens and "
        "--speculative-dflash-block-size are set but they differ. For DFLASH they must match. "
        "speculative_num_draft_tokens={}, "
        "speculative_dflash_block_size={}.",
        "speculative_dflash_block_size",
        _both(DFLASH, _differs("speculative_num_draft_tokens", "speculative_dflash_block_size")),
        "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but "
        "they differ. For DFLASH they must match.",
        _DFLASH_V1,
    ),
    Refusal(
        "handle_dflash: Both --speculative-num-draft-tokens and "
        "--speculative-dflash-block-size are set but they differ. For DFLASH they must match. "
        "speculative_num_draft_tokens={}, speculative_dflash_block_size={}.",
        "speculative_dflash_block_size",
        _both(DFLASH, _differs("speculative_num_draft_tokens", "speculative_dflash_block_size")),
        "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but "
        "they differ. For DFLASH they must match.",
        _DFLASH,
    ),
    Refusal(
        "handle_dflash: --speculative-draft-window-size must be >= "
        "--speculative-num-draft-tokens (block_size). window_size={}, "
        "block_size={}.",
        "speculative_draft_window_size",
        _both(DFLASH, _window_below_draft),
        "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size).",
        _DFLASH,
    ),
    Refusal(
        "handle_dflash: DFLASH speculative decoding only supports CUDA device.",
        "device",
        _both(DFLASH, _device_not("cuda")),
        "DFLASH speculative decoding only supports CUDA device.",
        VersionRange(since="0.5.16", until="0.5.17"),
    ),
    Refusal(
        "handle_dflash: DFLASH speculative decoding only supports CUDA and NPU devices.",
        "device",
        _both(DFLASH, _device_not("cuda", "npu")),
        "DFLASH speculative decoding only supports CUDA and NPU devices.",
        VersionRange(since="0.5.17", until="0.5.20"),
    ),
    Refusal(
        "handle_dflash: DFLASH speculative decoding only supports CUDA, NPU and XPU devices.",
        "device",
        _both(DFLASH, _device_not("cuda", "npu", "xpu")),
        "DFLASH speculative decoding only supports CUDA, NPU and XPU devices.",
        VersionRange(since="0.5.20", until="0.5.21"),
    ),
    Refusal(
        "handle_dflash: {} speculative decoding is not supported by {} on device {}.",
        "device",
        _both(DFLASH, _device_not("cuda", "npu", "xpu")),
        lambda ctx: (
            f"DFLASH speculative decoding is not supported on device {ctx.get('device')!r}."
        ),
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_dspark: DSpark speculative decoding only supports CUDA device.",
        "device",
        _both(DSPARK, _device_not("cuda")),
        "DSpark speculative decoding only supports CUDA device.",
        VersionRange(since="0.5.16", until="0.5.18"),
    ),
    Refusal(
        "handle_dspark: DSpark speculative decoding only supports CUDA or NPU device.",
        "device",
        _both(DSPARK, _device_not("cuda", "npu")),
        "DSpark speculative decoding only supports CUDA or NPU device.",
        VersionRange(since="0.5.18", until="0.5.23"),
    ),
    Refusal(
        "handle_dspark: DSpark speculative decoding only supports CUDA, NPU or XPU device.",
        "device",
        _both(DSPARK, _device_not("cuda", "npu", "xpu")),
        "DSpark speculative decoding only supports CUDA, NPU or XPU device.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_dspark: DSpark with dp attention requires --enable-dp-lm-head.",
        "enable_dp_lm_head",
        _both(DSPARK, _attn_dp, lambda ctx: not ctx.on("enable_dp_lm_head")),
        "DSpark with dp attention requires --enable-dp-lm-head.",
        _DSPARK,
    ),
    Refusal(
        "handle_dspark: DSpark with dp attention does not support context parallel "
        "(attn_cp_size={}).",
        "attn_cp_size",
        _both(
            DSPARK,
            _attn_dp,
            lambda ctx: ctx.on("enable_dp_lm_head"),
            lambda ctx: ctx.int("attn_cp_size", 1) > 1,
        ),
        lambda ctx: (
            f"DSpark with dp attention does not support context parallel (attn_cp_size="
            f"{ctx.int('attn_cp_size', 1)})."
        ),
        _DSPARK,
    ),
    Refusal(
        "handle_dspark: DSpark with dp attention only supports the built-in TP MoE "
        "(moe_a2a_backend='none'), got {}.",
        "moe_a2a_backend",
        _both(DSPARK, _attn_dp, lambda ctx: ctx.get("moe_a2a_backend", "none") != "none"),
        lambda ctx: (
            "DSpark with dp attention only supports the built-in TP MoE (moe_a2a_backend='none'), "
            f"got {ctx.get('moe_a2a_backend')}."
        ),
        VersionRange(since="0.5.16", until="0.5.18"),
    ),
    Refusal(
        "handle_dspark: Currently DSpark speculative decoding only supports pp_size == 1.",
        "pp_size",
        _both(DSPARK, lambda ctx: ctx.int("pp_size", 1) != 1),
        "Currently DSpark speculative decoding only supports pp_size == 1.",
        VersionRange(since="0.5.16", until="0.5.21"),
    ),
    Refusal(
        "handle_dspark: DSpark pipeline parallelism requires PD prefill; decode and "
        "non-disaggregated serving require pp_size == 1.",
        "pp_size",
        _both(
            DSPARK,
            lambda ctx: ctx.int("pp_size", 1) != 1,
            lambda ctx: ctx.get("disaggregation_mode") != "prefill",
        ),
        "DSpark pipeline parallelism requires PD prefill; decode and non-disaggregated serving "
        "require pp_size == 1.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_dspark: DSpark requires --speculative-dspark-block-size to be positive, got {}.",
        "speculative_dspark_block_size",
        _both(DSPARK, _given_below("speculative_dspark_block_size", 1)),
        lambda ctx: (
            "DSpark requires --speculative-dspark-block-size to be positive, got "
            f"{_number(ctx, 'speculative_dspark_block_size')}."
        ),
        _DSPARK,
    ),
    Refusal(
        "handle_ngram: --speculative-ngram-external-corpus-max-tokens must be positive when "
        "--speculative-ngram-external-corpus-path is set.",
        "speculative_ngram_external_corpus_max_tokens",
        _both(
            NGRAM,
            lambda ctx: bool(ctx.get("speculative_ngram_external_corpus_path")),
            _given_below("speculative_ngram_external_corpus_max_tokens", 1),
        ),
        "--speculative-ngram-external-corpus-max-tokens must be positive when "
        "--speculative-ngram-external-corpus-path is set.",
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_ngram: --speculative-ngram-external-sam-budget must be positive when "
        "--speculative-ngram-external-corpus-path is set.",
        "speculative_ngram_external_sam_budget",
        _both(
            NGRAM,
            lambda ctx: bool(ctx.get("speculative_ngram_external_corpus_path")),
            _given_below("speculative_ngram_external_sam_budget", 1),
        ),
        "--speculative-ngram-external-sam-budget must be positive when "
        "--speculative-ngram-external-corpus-path is set.",
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_ngram: Ngram speculative decoding only supports CUDA device.",
        "device",
        _both(NGRAM, _device_not("cuda")),
        "Ngram speculative decoding only supports CUDA device.",
        VersionRange(since="0.5.13", until="0.5.16"),
    ),
    Refusal(
        "handle_ngram: Ngram speculative decoding only supports CUDA or CPU devices.",
        "device",
        _both(NGRAM, _device_not("cuda", "cpu")),
        "Ngram speculative decoding only supports CUDA or CPU devices.",
        VersionRange(since="0.5.16", until="0.5.21"),
    ),
    Refusal(
        "handle_ngram: Ngram speculative decoding only supports CUDA, CPU, or XPU devices.",
        "device",
        _both(NGRAM, _device_not("cuda", "cpu", "xpu")),
        "Ngram speculative decoding only supports CUDA, CPU, or XPU devices.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_speculative_decoding: Ngram speculative decoding only supports CUDA device.",
        "device",
        _both(NGRAM, _device_not("cuda")),
        "Ngram speculative decoding only supports CUDA device.",
        VersionRange(since="0.5.3", until="0.5.13"),
    ),
    Refusal(
        "handle_eagle_family: --speculative-use-rejection-sampling is only supported for EAGLE "
        "/ EAGLE3 / NEXTN, not speculative_algorithm={}.",
        "speculative_use_rejection_sampling",
        _both(_rejection, _algorithm_is("STANDALONE")),
        lambda ctx: (
            "--speculative-use-rejection-sampling is only supported for EAGLE / EAGLE3 "
            f"/ NEXTN, not speculative_algorithm={algorithm(ctx)}."
        ),
        _REJECTION,
    ),
    Refusal(
        "handle_eagle_family: --speculative-use-rejection-sampling requires "
        "--speculative-eagle-topk=1.",
        "speculative_eagle_topk",
        _both(
            _rejection,
            _algorithm_is("EAGLE", "EAGLE3", "NEXTN"),
            lambda ctx: (_number(ctx, "speculative_eagle_topk") or 1) > 1,
            lambda ctx: not ctx.on("enable_multi_layer_eagle"),
        ),
        "--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.",
        _REJECTION,
    ),
    Refusal(
        "handle_eagle_family: --speculative-use-rejection-sampling is incompatible with "
        "--speculative-accept-threshold-single / --speculative-accept-threshold-acc; rejection "
        "sampling ignores the accept thresholds.",
        "speculative_use_rejection_sampling",
        _both(_rejection, _algorithm_is("EAGLE", "EAGLE3", "NEXTN"), _thresholds_set),
        "--speculative-use-rejection-sampling is incompatible with "
        "--speculative-accept-threshold-single / "
        "--speculative-accept-threshold-acc",
        _REJECTION,
    ),
    Refusal(
        "handle_eagle_family: --speculative-use-rejection-sampling is incompatible with "
        "--enable-deterministic-inference; the sampling kernel draws coins from the global RNG "
        "and is not batch-invariant.",
        "speculative_use_rejection_sampling",
        _both(
            _rejection,
            _algorithm_is("EAGLE", "EAGLE3", "NEXTN"),
            lambda ctx: ctx.on("enable_deterministic_inference"),
        ),
        "--speculative-use-rejection-sampling is incompatible with "
        "--enable-deterministic-inference",
        VersionRange(since="0.5.14", until="0.5.23"),
    ),
    Refusal(
        "handle_eagle_family: --speculative-use-rejection-sampling is not supported with "
        "multi-layer EAGLE (--enable-multi-layer-eagle).",
        "enable_multi_layer_eagle",
        _both(
            _rejection,
            _algorithm_is("EAGLE", "EAGLE3", "NEXTN"),
            lambda ctx: ctx.on("enable_multi_layer_eagle"),
        ),
        "--speculative-use-rejection-sampling is not supported with multi-layer EAGLE "
        "(--enable-multi-layer-eagle).",
        VersionRange(since="0.5.14", until="0.5.16"),
    ),
    Refusal(
        "handle_uno: UNO only supports CUDA.",
        "device",
        _both(UNO, _device_not("cuda")),
        "UNO only supports CUDA.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO reuses the target model and does not accept "
        "--speculative-draft-model-path.",
        "speculative_draft_model_path",
        _both(UNO, lambda ctx: ctx.get("speculative_draft_model_path") is not None),
        "UNO reuses the target model and does not accept --speculative-draft-model-path.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO requires --uno-lora-path.",
        "speculative_algorithm",
        _both(UNO, lambda ctx: ctx.get("uno_lora_path") is None),
        "UNO requires --uno-lora-path.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO does not support --enable-deterministic-inference because its "
        "sampling path does not use per-request seeds.",
        "enable_deterministic_inference",
        _both(UNO, lambda ctx: ctx.on("enable_deterministic_inference")),
        "UNO does not support --enable-deterministic-inference",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO does not support --enable-strict-thinking because it requires grammar "
        "decoding.",
        "enable_strict_thinking",
        _both(UNO, lambda ctx: ctx.on("enable_strict_thinking")),
        "UNO does not support --enable-strict-thinking because it requires grammar decoding.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO requires --speculative-num-draft-tokens to be a positive integer "
        "denoting the linear width or tree verify width Q.",
        "speculative_num_draft_tokens",
        _both(UNO, lambda ctx: (_number(ctx, "speculative_num_draft_tokens") or 0) < 1),
        "UNO requires --speculative-num-draft-tokens to be a positive integer denoting the "
        "linear width or tree verify width Q.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO requires --speculative-eagle-topk to be at least 1, got {}.",
        "speculative_eagle_topk",
        _both(UNO, _given_below("speculative_eagle_topk", 1)),
        lambda ctx: (
            f"UNO requires --speculative-eagle-topk to be at least 1, got "
            f"{_number(ctx, 'speculative_eagle_topk')}."
        ),
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode requires --speculative-num-steps so its draft width F can "
        "be derived as speculative_num_steps + 1.",
        "speculative_num_steps",
        _both(_uno_tree, lambda ctx: ctx.get("speculative_num_steps") is None),
        "UNO tree mode requires --speculative-num-steps",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode does not yet support PDMux.",
        "enable_pdmux",
        _both(_uno_tree, lambda ctx: ctx.on("enable_pdmux")),
        "UNO tree mode does not yet support PDMux.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode does not yet support two-batch overlap.",
        "enable_two_batch_overlap",
        _both(_uno_tree, lambda ctx: ctx.on("enable_two_batch_overlap")),
        "UNO tree mode does not yet support two-batch overlap.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO requires TP=PP=1.",
        "tp_size",
        _both(UNO, lambda ctx: (ctx.int("tp_size", 1), ctx.int("pp_size", 1)) != (1, 1)),
        "UNO requires TP=PP=1.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO does not support DP attention or context parallelism.",
        "speculative_algorithm",
        _both(UNO, lambda ctx: _attn_dp(ctx) or ctx.int("attn_cp_size", 1) != 1),
        "UNO does not support DP attention or context parallelism.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO does not support public Multi-LoRA serving.",
        "enable_lora",
        _both(UNO, lambda ctx: ctx.on("enable_lora") or bool(ctx.get("lora_paths"))),
        "UNO does not support public Multi-LoRA serving.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO manages its own stochastic verification and does not use "
        "--speculative-use-rejection-sampling.",
        "speculative_use_rejection_sampling",
        _both(UNO, _rejection),
        "UNO manages its own stochastic verification and does not use "
        "--speculative-use-rejection-sampling.",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO requires FA3 for both prefill and decode attention; got prefill={}, "
        "decode={}.",
        "attention_backend",
        _both(UNO, _uno_backends_not_fa3),
        lambda ctx: (
            "UNO requires FA3 for both prefill and decode attention; got "
            f"{resolve(ctx).words()} (SGLang picks FA3 by itself only on Hopper)."
        ),
        _UNO,
    ),
)
def _sam_budget_too_big(ctx: LaunchContext) -> bool:
    budget, draft = (
        _number(ctx, "speculative_ngram_external_sam_budget"),
        _number(ctx, "speculative_num_draft_tokens"),
    )
    return budget is not None and budget > 0 and budget > (12 if draft is None else draft) - 1


def _uno_q_f_k(ctx: LaunchContext) -> tuple[int, int, int]:
    """UNO tree mode's verify width Q, draft width F (steps + 1) and candidate top-k K."""
    steps = _number(ctx, "speculative_num_steps") or 0
    return (
        _number(ctx, "speculative_num_draft_tokens") or 0,
        steps + 1,
        _number(ctx, "speculative_eagle_topk") or 1,
    )


def _uno_capacity(ctx: LaunchContext) -> int:
    q, f, k = _uno_q_f_k(ctx)
    capacity, nodes = 1, 1
    for _ in range(f - 1):
        nodes *= k
        capacity += nodes
        if capacity >= q:
            break
    return capacity


def _uno_tree_sized(ctx: LaunchContext) -> bool:
    q, f, _ = _uno_q_f_k(ctx)
    return _uno_tree(ctx) and q >= 1 and f >= 2


_NGRAM_CORPUS = VersionRange(since="0.5.11", until="0.5.13")
ALGORITHM_REQUIREMENTS += (
    Refusal(
        "handle_speculative_decoding: --speculative-ngram-external-corpus-max-tokens must be "
        "positive when --speculative-ngram-external-corpus-path is "
        "set.",
        "speculative_ngram_external_corpus_max_tokens",
        _both(
            NGRAM,
            lambda ctx: bool(ctx.get("speculative_ngram_external_corpus_path")),
            _given_below("speculative_ngram_external_corpus_max_tokens", 1),
        ),
        "--speculative-ngram-external-corpus-max-tokens must be positive when "
        "--speculative-ngram-external-corpus-path is set.",
        _NGRAM_CORPUS,
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-ngram-external-sam-budget must be positive "
        "when --speculative-ngram-external-corpus-path is "
        "set.",
        "speculative_ngram_external_sam_budget",
        _both(
            NGRAM,
            lambda ctx: bool(ctx.get("speculative_ngram_external_corpus_path")),
            _given_below("speculative_ngram_external_sam_budget", 1),
        ),
        "--speculative-ngram-external-sam-budget must be positive when "
        "--speculative-ngram-external-corpus-path is set.",
        _NGRAM_CORPUS,
    ),
    Refusal(
        "handle_speculative_decoding: speculative_ngram_external_sam_budget must be less than "
        "or equal to speculative_num_draft_tokens - 1 "
        "({}).",
        "speculative_ngram_external_sam_budget",
        _both(
            NGRAM,
            lambda ctx: bool(ctx.get("speculative_ngram_external_corpus_path")),
            _sam_budget_too_big,
        ),
        "speculative_ngram_external_sam_budget must be less than or equal to "
        "speculative_num_draft_tokens - 1.",
        _NGRAM_CORPUS,
    ),
    Refusal(
        "handle_ngram: speculative_ngram_external_sam_budget must be less than or equal to "
        "speculative_num_draft_tokens - 1 ({}).",
        "speculative_ngram_external_sam_budget",
        _both(
            NGRAM,
            lambda ctx: bool(ctx.get("speculative_ngram_external_corpus_path")),
            _sam_budget_too_big,
        ),
        "speculative_ngram_external_sam_budget must be less than or equal to "
        "speculative_num_draft_tokens - 1.",
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_speculative_decoding: DFLASH requires --speculative-dflash-draft-window-size "
        "to be positive, got {}.",
        "speculative_dflash_draft_window_size",
        _both(DFLASH, _given_below("speculative_dflash_draft_window_size", 1)),
        lambda ctx: (
            "DFLASH requires --speculative-dflash-draft-window-size to be positive, "
            f"got {_number(ctx, 'speculative_dflash_draft_window_size')}."
        ),
        VersionRange(since="0.5.11", until="0.5.12"),
    ),
    Refusal(
        "handle_speculative_decoding: DFLASH --speculative-dflash-draft-window-size must be >= "
        "--speculative-num-draft-tokens (block_size). window_size={}, block_size={}.",
        "speculative_dflash_draft_window_size",
        _both(
            DFLASH,
            lambda ctx: (
                0
                < (_number(ctx, "speculative_dflash_draft_window_size") or 0)
                < (_number(ctx, "speculative_num_draft_tokens") or 0)
            ),
        ),
        "DFLASH --speculative-dflash-draft-window-size must be >= "
        "--speculative-num-draft-tokens (block_size).",
        VersionRange(since="0.5.11", until="0.5.12"),
    ),
    Refusal(
        "handle_speculative_decoding: --speculative-draft-window-size must be >= "
        "--speculative-num-draft-tokens (block_size). window_size={}, "
        "block_size={}.",
        "speculative_draft_window_size",
        _both(DFLASH, _window_below_draft),
        "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size).",
        VersionRange(since="0.5.12", until="0.5.13"),
    ),
    Refusal(
        "handle_dflash: DFLASH with dp attention requires CUDA or NPU.",
        "device",
        _both(DFLASH, _attn_dp, lambda ctx: ctx.get("device") != "npu", _device_not("cuda")),
        "DFLASH with dp attention requires CUDA or NPU.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_dflash: DFLASH with dp attention requires "
        "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=0.",
        "speculative_algorithm",
        _both(
            DFLASH,
            _attn_dp,
            lambda ctx: ctx.get("device") != "npu",
            lambda ctx: ctx.on("enable_dp_lm_head"),
            lambda ctx: ctx.int("attn_cp_size", 1) == 1,
            lambda ctx: bool(ctx.env_true("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION")),
        ),
        "DFLASH with dp attention requires SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=0.",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_eagle_family: --speculative-use-rejection-sampling with multi-layer EAGLE "
        "(--enable-multi-layer-eagle) requires --speculative-eagle-topk 1; rejection sampling "
        "is only implemented for the linear (topk=1) chain.",
        "speculative_eagle_topk",
        _both(
            _rejection,
            _algorithm_is("EAGLE", "EAGLE3", "NEXTN"),
            lambda ctx: ctx.on("enable_multi_layer_eagle"),
            lambda ctx: (_number(ctx, "speculative_eagle_topk") or 1) > 1,
        ),
        "--speculative-use-rejection-sampling with multi-layer EAGLE "
        "(--enable-multi-layer-eagle) requires --speculative-eagle-topk "
        "1",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_uno: UNO tree mode requires --speculative-num-steps to be positive, got {}.",
        "speculative_num_steps",
        _both(_uno_tree, _given_below("speculative_num_steps", 1)),
        lambda ctx: (
            "UNO tree mode requires --speculative-num-steps to be positive, got "
            f"{_number(ctx, 'speculative_num_steps')}."
        ),
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode requires Q >= F; got Q={}, F={}.",
        "speculative_num_draft_tokens",
        _both(_uno_tree_sized, lambda ctx: _uno_q_f_k(ctx)[0] < _uno_q_f_k(ctx)[1]),
        lambda ctx: (
            f"UNO tree mode requires Q >= F; got Q={_uno_q_f_k(ctx)[0]}, F={_uno_q_f_k(ctx)[1]}."
        ),
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode currently supports at most Q=128 verify nodes, got Q={}.",
        "speculative_num_draft_tokens",
        _both(
            _uno_tree_sized,
            lambda ctx: _uno_q_f_k(ctx)[1] <= _uno_q_f_k(ctx)[0] and _uno_q_f_k(ctx)[0] > 128,
        ),
        lambda ctx: (
            "UNO tree mode currently supports at most Q=128 verify nodes, got "
            f"Q={_uno_q_f_k(ctx)[0]}."
        ),
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode currently supports Q*K <= 2048; got Q*K={}*{}={}.",
        "speculative_eagle_topk",
        _both(
            _uno_tree_sized,
            lambda ctx: (
                _uno_q_f_k(ctx)[1] <= _uno_q_f_k(ctx)[0] <= 128
                and _uno_q_f_k(ctx)[0] * _uno_q_f_k(ctx)[2] > 2048
            ),
        ),
        "UNO tree mode currently supports Q*K <= 2048",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode cannot build the requested Q from F and K: Q={} exceeds "
        "capacity={} for F={}, K={}.",
        "speculative_num_draft_tokens",
        _both(
            _uno_tree_sized,
            lambda ctx: (
                _uno_q_f_k(ctx)[1] <= _uno_q_f_k(ctx)[0] <= 128
                and _uno_q_f_k(ctx)[0] * _uno_q_f_k(ctx)[2] <= 2048
                and _uno_q_f_k(ctx)[0] > _uno_capacity(ctx)
            ),
        ),
        lambda ctx: (
            "UNO tree mode cannot build the requested Q from F and K: "
            f"Q={_uno_q_f_k(ctx)[0]} exceeds capacity={_uno_capacity(ctx)}."
        ),
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode cannot represent the requested Q in EAGLE's parent-list "
        "ABI: Q-1={} exceeds K*(F-2)+1={} for F={}, K={}.",
        "speculative_num_draft_tokens",
        _both(
            _uno_tree_sized,
            lambda ctx: (
                _uno_q_f_k(ctx)[1] <= _uno_q_f_k(ctx)[0] <= 128
                and _uno_q_f_k(ctx)[0] * _uno_q_f_k(ctx)[2] <= 2048
                and _uno_q_f_k(ctx)[0] <= _uno_capacity(ctx)
                and _uno_q_f_k(ctx)[0] - 1 > _uno_q_f_k(ctx)[2] * max(_uno_q_f_k(ctx)[1] - 2, 0) + 1
            ),
        ),
        "UNO tree mode cannot represent the requested Q in EAGLE's parent-list ABI",
        _UNO,
    ),
    Refusal(
        "handle_uno: UNO tree mode reuses EAGLE target-only sampling and requires both "
        "speculative accept thresholds to be "
        "1.0.",
        "speculative_accept_threshold_single",
        _both(_uno_tree, _thresholds_set),
        "UNO tree mode reuses EAGLE target-only sampling and requires both speculative accept "
        "thresholds to be 1.0.",
        _UNO,
    ),
)
ALGORITHM_REQUIREMENTS += (
    Refusal(
        "handle_eagle_family: Deterministic rejection sampling is currently supported only on "
        "CUDA-compatible devices because draft proposal sampling uses a Triton hash "
        "kernel.",
        "device",
        _both(
            _rejection,
            _algorithm_is("EAGLE", "EAGLE3", "NEXTN"),
            lambda ctx: (_number(ctx, "speculative_eagle_topk") or 1) == 1,
            lambda ctx: ctx.on("enable_deterministic_inference"),
            _device_not("cuda"),
        ),
        "Deterministic rejection sampling is currently supported only on CUDA-compatible devices",
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_ngram: speculative_eagle_topk({}) > 1 with page_size({}) > 1 is unstable and "
        "produces incorrect results for paged attention backends. This combination is only "
        "supported for the 'flashinfer' backend.",
        "page_size",
        _both(
            NGRAM,
            lambda ctx: (_number(ctx, "speculative_eagle_topk") or 1) > 1,
            lambda ctx: ctx.int("page_size", 1) > 1,
            lambda ctx: ctx.get("attention_backend") not in (None, "flashinfer"),
        ),
        "speculative_eagle_topk > 1 with page_size > 1 is only supported for the 'flashinfer' "
        "backend.",
        VersionRange(since="0.5.13"),
    ),
    Refusal(
        "handle_speculative_decoding: DP spec/prefill coordination requires single-layer EAGLE "
        "or EAGLE3",
        "speculative_algorithm",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION"))
            and (
                algorithm(ctx) not in ("EAGLE", "EAGLE3", "NEXTN")
                or ctx.on("enable_multi_layer_eagle")
            )
        ),
        "DP spec/prefill coordination requires single-layer EAGLE or EAGLE3",
        VersionRange(since="0.5.21", until="0.5.22"),
    ),
    Refusal(
        "handle_speculative_decoding: DP spec/prefill coordination requires single-layer "
        "EAGLE, EAGLE3 or DSPARK",
        "speculative_algorithm",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION"))
            and (
                algorithm(ctx) not in ("EAGLE", "EAGLE3", "NEXTN", "DSPARK")
                or ctx.on("enable_multi_layer_eagle")
            )
        ),
        "DP spec/prefill coordination requires single-layer EAGLE, EAGLE3 or DSPARK",
        VersionRange(since="0.5.22"),
    ),
)
refusal_rule("SGD216", "speculative-algorithm-requirements",
             "What a speculative algorithm requires (DFLASH, DSpark, NGRAM, UNO, rejection "
             "sampling): devices, DP attention, PP, block and draft sizes, companion flags.",
             "set what SGLang's message names, or choose another algorithm", ALGORITHM_REQUIREMENTS)
