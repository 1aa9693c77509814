"""SGD52x LoRA: the adapter arguments SGLang checks together, LoRA with speculative decoding and
with the LoRA MoE runners.

SGLang turns LoRA on by itself when `lora_paths` is given and `--enable-lora` is absent (a
profile's `enable_lora = false` renders to nothing, so it is absent too); every check below reads
LoRA as on in that case, as SGLang does.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules.common import algorithm, attention_dp
from sgdeploy.sglang.rules.sites import Refusal, given, refusal_rule
from sgdeploy.sglang.versions import VersionRange


def lora_on(ctx: LaunchContext) -> bool:
    return ctx.on("enable_lora") or bool(ctx.get("lora_paths"))


def _paths(ctx: LaunchContext) -> list[Any]:
    """The adapters as SGLang's LoRAPathAction sees them (a table renders as one JSON word)."""
    value = ctx.get("lora_paths")
    items = value if isinstance(value, list) else [value] if value else []
    out: list[Any] = []
    for item in items:
        if isinstance(item, str) and item.strip().startswith("{") and item.strip().endswith("}"):
            with contextlib.suppress(ValueError):
                item = json.loads(item)
        out.append(item)
    return out


def _bad_json_path(ctx: LaunchContext) -> bool:
    return any(
        isinstance(p, dict) and not ("lora_name" in p and "lora_path" in p) for p in _paths(ctx)
    )


def _per_batch(ctx: LaunchContext) -> int:
    return ctx.int("max_loras_per_batch", 8)


def _loaded(ctx: LaunchContext) -> int | None:
    value = ctx.get("max_loaded_loras")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _overlap_limit(ctx: LaunchContext) -> bool:
    loaded = _loaded(ctx)
    return lora_on(ctx) and ctx.on("enable_lora_overlap_loading") and (
        loaded is None or loaded > 2 * _per_batch(ctx))


def _targets(ctx: LaunchContext) -> list[Any]:
    value = ctx.get("lora_target_modules")
    return value if isinstance(value, list) else [value] if value else []


def _no_init_info(ctx: LaunchContext) -> bool:
    return lora_on(ctx) and not _paths(ctx) and not (ctx.get("max_lora_rank") and _targets(ctx))


def _loaded_below_batch(ctx: LaunchContext) -> bool:
    loaded = _loaded(ctx)
    return lora_on(ctx) and loaded is not None and loaded < _per_batch(ctx)


def _too_many_paths(ctx: LaunchContext) -> bool:
    loaded = _loaded(ctx)
    return (
        lora_on(ctx)
        and loaded is not None
        and loaded >= _per_batch(ctx)
        and len(_paths(ctx)) > loaded
    )


LORA_ARGUMENTS = (
    Refusal(
        "check_lora_server_args: max_loras_per_batch must be positive",
        "max_loras_per_batch",
        lambda ctx: _per_batch(ctx) <= 0,
        "max_loras_per_batch must be positive",
    ),
    Refusal(
        "LoRAPathAction.__call__: {} looks like a JSON str, but it does not contain "
        "'lora_name' and 'lora_path' keys.",
        "lora_paths",
        _bad_json_path,
        "... looks like a JSON str, but it does not contain 'lora_name' and 'lora_path' keys.",
        hint='write each adapter as "name=/path" or as a table with lora_name and lora_path',
        inventoried=VersionRange(until="0.5.14"),
    ),
    Refusal(
        "check_lora_server_args: Enabling LoRA overlap loading requires pinning LoRA adapter "
        "weights in CPU memory, so --max-loaded-loras must be less than or equal to double "
        "--max-loras-per-batch: {}",
        "max_loaded_loras",
        _overlap_limit,
        lambda ctx: (
            "Enabling LoRA overlap loading requires pinning LoRA adapter weights in "
            "CPU memory, so --max-loaded-loras must be less than or equal to double "
            f"--max-loras-per-batch: {2 * _per_batch(ctx)}"
        ),
        VersionRange(since="0.5.8"),
        hint="set max_loaded_loras to at most twice max_loras_per_batch",
    ),
    Refusal(
        "check_lora_server_args: If 'all' is specified in --lora-target-modules, it should be "
        "the only module specified.",
        "lora_target_modules",
        lambda ctx: lora_on(ctx) and "all" in _targets(ctx) and len(set(_targets(ctx))) > 1,
        "If 'all' is specified in --lora-target-modules, it should be the only module specified.",
    ),
    Refusal(
        "check_lora_server_args: When no initial --lora-paths is provided, you need to specify "
        "both --max-lora-rank and --lora-target-modules for LoRA "
        "initialization.",
        "enable_lora",
        _no_init_info,
        "When no initial --lora-paths is provided, you need to specify both --max-lora-rank "
        "and --lora-target-modules for LoRA initialization.",
        hint="give lora_paths, or both max_lora_rank and lora_target_modules",
    ),
    Refusal(
        "check_lora_server_args: max_loaded_loras should be greater than or equal to "
        "max_loras_per_batch. max_loaded_loras={}, "
        "max_loras_per_batch={}",
        "max_loaded_loras",
        _loaded_below_batch,
        lambda ctx: (
            "max_loaded_loras should be greater than or equal to max_loras_per_batch. "
            f"max_loaded_loras={_loaded(ctx)}, max_loras_per_batch={_per_batch(ctx)}"
        ),
    ),
    Refusal(
        "check_lora_server_args: The number of LoRA paths should not exceed max_loaded_loras. "
        "max_loaded_loras={}, lora_paths={}",
        "max_loaded_loras",
        _too_many_paths,
        lambda ctx: (
            "The number of LoRA paths should not exceed max_loaded_loras. "
            f"max_loaded_loras={_loaded(ctx)}, lora_paths={len(_paths(ctx))}"
        ),
    ),
    Refusal(
        "check_lora_server_args: --lora-use-virtual-experts requires --lora-backend triton. "
        "Got: {}",
        "lora_backend",
        lambda ctx: (
            lora_on(ctx)
            and ctx.on("lora_use_virtual_experts")
            and ctx.get("lora_backend") != "triton"
        ),
        lambda ctx: (
            "--lora-use-virtual-experts requires --lora-backend triton. Got: "
            f"{ctx.get('lora_backend')}"
        ),
        VersionRange(since="0.5.11", until="0.5.12"),
    ),
    Refusal(
        "check_lora_server_args: --lora-drain-wait-threshold must be non-negative.",
        "lora_drain_wait_threshold",
        lambda ctx: (
            lora_on(ctx)
            and isinstance(ctx.get("lora_drain_wait_threshold"), int | float)
            and ctx.get("lora_drain_wait_threshold") < 0
        ),
        "--lora-drain-wait-threshold must be non-negative.",
        VersionRange(since="0.5.12"),
    ),
)

refusal_rule("SGD520", "lora-arguments", "LoRA arguments SGLang checks together: counts, target "
             "modules, adapter "
             "paths.", "fix the LoRA arguments as the message says", LORA_ARGUMENTS)


# 0.5.19 widened LoRA + speculative decoding from NGRAM only to the EAGLE family, DFLASH and DSPARK
# (NEXTN has become EAGLE by then).
_LORA_SPEC_ALGORITHMS = {"NGRAM", "EAGLE", "NEXTN", "EAGLE3", "DFLASH", "DSPARK"}


def _lora_spec(ctx: LaunchContext) -> str | None:
    return algorithm(ctx) if lora_on(ctx) else None


def _spec_reason(ctx: LaunchContext) -> str | None:
    name = _lora_spec(ctx)
    if name in (None, "NGRAM") or name not in _LORA_SPEC_ALGORITHMS:
        return None
    if ctx.on("speculative_adaptive"):
        return ("does not support --speculative-adaptive: the draft is built from a static "
                "ServerArgs snapshot, and the runtime-state swap does not rebuild LoRA cuda-graph "
                "metadata")
    if "experimental_sgl_trtllm" in (
        ctx.get("moe_runner_backend"),
        ctx.get("speculative_moe_runner_backend"),
    ):
        return ("does not support the experimental_sgl_trtllm MoE runner: its TopK reads the LoRA "
                "config per forward, which the draft resolves against the target's after its own "
                "publish ended")
    if ctx.env_true("SGLANG_ENABLE_OVERLAP_PLAN_STREAM"):
        return ("does not support SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1: LoRA batch preparation "
                "would run on the plan stream, unordered against in-flight forwards")
    return None


LORA_SPECULATIVE = (
    Refusal("check_lora_server_args: Currently LoRA is only compatible with NGRAM speculative "
            "decoding.",
            "speculative_algorithm", lambda ctx: _lora_spec(ctx) not in (None, "NGRAM"),
            "Currently LoRA is only compatible with NGRAM speculative decoding.",
            VersionRange(since="0.5.5.post3", until="0.5.19")),
    Refusal("check_lora_speculative_compatibility: LoRA is only compatible with NGRAM, EAGLE, "
            "NEXTN, EAGLE3, DFLASH, or DSPARK speculative decoding, not "
            "{}{}.", "speculative_algorithm",
            lambda ctx: _lora_spec(ctx) not in (None, *_LORA_SPEC_ALGORITHMS),
            lambda ctx: "LoRA is only compatible with NGRAM, EAGLE, NEXTN, EAGLE3, DFLASH, or "
            f"DSPARK speculative decoding, not {_lora_spec(ctx)}.", VersionRange(since="0.5.19")),
    Refusal("check_lora_speculative_compatibility: LoRA with EAGLE/NEXTN/EAGLE3 speculative "
            "decoding {}.",
            "speculative_algorithm", lambda ctx: _spec_reason(ctx) is not None,
            lambda ctx: f"LoRA with EAGLE/NEXTN/EAGLE3 speculative decoding {_spec_reason(ctx)}.",
            VersionRange(since="0.5.19")),
)

refusal_rule("SGD521", "lora-speculative", "LoRA works only with the speculative algorithms the "
             "SGLang release supports it "
             "with.", "turn speculative decoding off, or use an algorithm LoRA supports "
             "in this release", LORA_SPECULATIVE)


_MOE_RUNNER = VersionRange(since="0.5.23")


def _lora_runner(ctx: LaunchContext) -> str | None:
    backend = ctx.get("moe_runner_backend")
    return backend if isinstance(backend, str) and backend.startswith("lora") else None


def _v2_mode(ctx: LaunchContext) -> str | None:
    """What `_check_v2_lora_modes` refuses for the triton_v2 LoRA kernels (0.5.23)."""
    for unsupported, mode in (
        (attention_dp(ctx), "DP-attention with --attn-dp-size > 1"),
        (ctx.on("enable_pdmux"), "PD-multiplexing"),
        (ctx.on("enable_two_batch_overlap"), "two-batch overlap"),
        (bool(ctx.env_true("SGLANG_EXPERIMENTAL_LORA_OPTI")), "SGLANG_EXPERIMENTAL_LORA_OPTI"),
    ):
        if unsupported:
            return mode
    return None


def _v2_option(ctx: LaunchContext) -> str | None:
    if _lora_runner(ctx) and lora_on(ctx) and ctx.get("lora_backend") == "triton_v2":
        return f"--moe-runner-backend {_lora_runner(ctx)}"
    if lora_on(ctx) and ctx.get("lora_backend") == "triton_v2" and not _lora_runner(ctx):
        return "--lora-backend triton_v2"
    return None


def _runner_gate(ctx: LaunchContext) -> bool:
    """The LoRA MoE runner got past its first two checks (LoRA on, triton_v2) and the v2 modes."""
    return bool(_lora_runner(ctx)) and lora_on(ctx) and ctx.get("lora_backend") == "triton_v2" \
        and _v2_mode(ctx) is None


LORA_MOE_RUNNER = (
    Refusal(
        "check_v2_lora_modes: {} does not yet support {}",
        "lora_backend",
        lambda ctx: _v2_option(ctx) is not None and _v2_mode(ctx) is not None,
        lambda ctx: f"{_v2_option(ctx)} does not yet support {_v2_mode(ctx)}",
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --speculative-moe-runner-backend {} is not supported: the "
        "LoRA MoE runner serves adapter traffic on the target "
        "model",
        "speculative_moe_runner_backend",
        lambda ctx: (
            bool(algorithm(ctx))
            and str(ctx.get("speculative_moe_runner_backend") or "").startswith("lora")
        ),
        lambda ctx: (
            "--speculative-moe-runner-backend "
            f"{ctx.get('speculative_moe_runner_backend')} is not supported: the LoRA MoE runner "
            "serves adapter traffic on the target model"
        ),
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} requires --enable-lora (or "
        "--lora-paths)",
        "moe_runner_backend",
        lambda ctx: bool(_lora_runner(ctx)) and not lora_on(ctx),
        lambda ctx: (
            f"--moe-runner-backend {_lora_runner(ctx)} requires --enable-lora (or --lora-paths)"
        ),
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} requires --lora-backend triton_v2",
        "lora_backend",
        lambda ctx: (
            bool(_lora_runner(ctx)) and lora_on(ctx) and ctx.get("lora_backend") != "triton_v2"
        ),
        lambda ctx: f"--moe-runner-backend {_lora_runner(ctx)} requires --lora-backend triton_v2",
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} supports unquantized BF16, "
        "128-block FP8 and ModelOpt NVFP4 MoE, got --quantization {}",
        "quantization",
        lambda ctx: (
            _runner_gate(ctx) and ctx.get("quantization") not in (None, "fp8", "modelopt_fp4")
        ),
        lambda ctx: (
            f"--moe-runner-backend {_lora_runner(ctx)} supports unquantized BF16, "
            "128-block FP8 and ModelOpt NVFP4 MoE, got --quantization "
            f"{ctx.get('quantization')}"
        ),
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} cannot run ModelOpt NVFP4 MoE; "
        "use --moe-runner-backend lora_marlin",
        "moe_runner_backend",
        lambda ctx: (
            _runner_gate(ctx)
            and ctx.get("quantization") == "modelopt_fp4"
            and _lora_runner(ctx) != "lora_marlin"
        ),
        lambda ctx: (
            f"--moe-runner-backend {_lora_runner(ctx)} cannot run ModelOpt NVFP4 MoE; "
            "use --moe-runner-backend lora_marlin"
        ),
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} requires Standard dispatch, got "
        "--moe-a2a-backend {}",
        "moe_a2a_backend",
        lambda ctx: (
            _runner_gate(ctx)
            and ctx.get("quantization") in (None, "fp8", "modelopt_fp4")
            and ctx.get("moe_a2a_backend", "none") not in ("none", None)
        ),
        lambda ctx: (
            f"--moe-runner-backend {_lora_runner(ctx)} requires Standard dispatch, got "
            f"--moe-a2a-backend {ctx.get('moe_a2a_backend')}"
        ),
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} does not yet support elastic EP",
        "ep_join_mode",
        lambda ctx: (
            _runner_gate(ctx)
            and ctx.get("moe_a2a_backend", "none") in ("none", None)
            and ctx.get("quantization") in (None, "fp8", "modelopt_fp4")
            and given("ep_join_mode")(ctx)
        ),
        lambda ctx: f"--moe-runner-backend {_lora_runner(ctx)} does not yet support elastic EP",
        _MOE_RUNNER,
    ),
    Refusal(
        "check_lora_moe_runner_args: --moe-runner-backend {} currently requires trivial expert "
        "placement without EPLB or redundant experts",
        "enable_eplb",
        lambda ctx: (
            _runner_gate(ctx)
            and ctx.get("moe_a2a_backend", "none") in ("none", None)
            and not given("ep_join_mode")(ctx)
            and (
                ctx.on("enable_eplb")
                or ctx.get("init_expert_location", "trivial") != "trivial"
                or ctx.int("ep_num_redundant_experts", 0) > 0
            )
        ),
        lambda ctx: (
            f"--moe-runner-backend {_lora_runner(ctx)} currently requires trivial "
            "expert placement without EPLB or redundant experts"
        ),
        _MOE_RUNNER,
    ),
)

refusal_rule("SGD522", "lora-moe-runner", "The LoRA MoE runners (lora_triton, lora_marlin, "
             "lora_cutedsl) need LoRA on with the triton_v2 kernels, standard dispatch and trivial "
             "expert placement.",
             "use the LoRA MoE runner as the message says, or another "
             "moe_runner_backend", LORA_MOE_RUNNER)
