"""SGD6xx: CUDA graphs (piecewise, prefill/decode backends) and what SGLang turns off by itself."""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang import models
from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import (
    PIECEWISE_DEFAULT_ON,
    PREFILL_DEFAULT_TC_PIECEWISE,
    PREFILL_MULTIMODAL_TO_PIECEWISE,
    V2X,
    algorithm,
    server_field,
)
from sgdeploy.sglang.rules.registry import WARNING, rule
from sgdeploy.sglang.rules.sites import Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange

# Pairs SGLang accepts together, and what it does with them (read from 0.5.11 and 0.5.23).
_CONTRADICTIONS = (
    ("enforce_piecewise_cuda_graph", "disable_piecewise_cuda_graph",
     "enforce_piecewise_cuda_graph wins: SGLang sets disable_piecewise_cuda_graph back to false "
     "(0.5.10-0.5.13; 0.5.14-0.5.19 take both as aliases of cuda_graph_backend_prefill and keep "
     "one value)"),
    ("enforce_piecewise_cuda_graph", "disable_cuda_graph",
     "the piecewise (prefill) CUDA graph still runs: disable_cuda_graph turns off only the decode "
     "graph"),
    ("disable_prefill_cuda_graph", "cuda_graph_backend_prefill",
     "the explicit cuda_graph_backend_prefill wins: disable_prefill_cuda_graph is ignored"),
    ("disable_decode_cuda_graph", "cuda_graph_backend_decode",
     "the explicit cuda_graph_backend_decode wins: disable_decode_cuda_graph is ignored"),
)


@rule("SGD601", "contradictory-flags", WARNING, "Two flags that ask for opposite things: SGLang "
                                                "silently ignores one.",
      "keep the one you mean")
def contradictory_flags(ctx: LaunchContext) -> Iterator[Finding]:
    for first, second, outcome in _CONTRADICTIONS:
        if ctx.server.get(first) not in (None, False) and ctx.server.get(second) not in (
            None,
            False,
            "disabled",
        ):
            yield Finding(server_field(second), f"{first} and {second} contradict each other; "
                                                f"{outcome}")


def _piecewise_off_reasons(ctx: LaunchContext) -> list[str]:
    """Why SGLang 0.5.1x would silently turn the piecewise CUDA graph off (B.1)."""
    checks = [
        (
            ctx.architecture in models.PIECEWISE_DISABLED_ARCHITECTURES,
            f"{ctx.architecture} is on SGLang's list",
        ),
        (
            models.is_multimodal(ctx.architecture),
            f"{ctx.architecture} counts as a multimodal model",
        ),
        (bool(algorithm(ctx)), "speculative decoding is on"),
        (ctx.on("enable_dp_attention"), "DP attention is on"),
        (ctx.on("enable_torch_compile"), "torch.compile is on"),
        (ctx.int("pp_size", 1) > 1, "pp_size > 1"),
        (ctx.get("moe_a2a_backend", "none") not in (None, "none"), "an MoE a2a backend is set"),
        (ctx.on("enable_lora") or bool(ctx.get("lora_paths")), "LoRA is on"),
        (
            ctx.get("cpu_offload_gb", 0) not in (0, None) or ctx.on("enable_hierarchical_cache"),
            "CPU offload / HiCache is on",
        ),
        (ctx.on("enable_deterministic_inference"), "deterministic inference is on"),
        (ctx.get("disaggregation_mode", "null") not in (None, "null"), "PD disaggregation is on"),
        (ctx.on("enable_symm_mem"), "symmetric memory is on"),
        (ctx.int("attn_cp_size", 1) > 1, "attention context parallel is on"),
    ]
    return [reason for hit, reason in checks if hit]


@rule("SGD602", "piecewise-graph-silently-disabled", WARNING,
      "SGLang 0.5.1x silently turns the piecewise CUDA graph off for this launch unless it is "
      "enforced.",
      "add enforce_piecewise_cuda_graph = true to keep it, or disable_piecewise_cuda_graph = true "
      "to say so",
      versions=PIECEWISE_DEFAULT_ON)
def piecewise_silently_disabled(ctx: LaunchContext) -> Iterator[Finding]:
    if (
        ctx.on("enforce_piecewise_cuda_graph")
        or ctx.on("disable_piecewise_cuda_graph")
        or ctx.on("disable_cuda_graph")
    ):
        return
    reasons = _piecewise_off_reasons(ctx)
    if reasons:
        yield Finding("server", "the piecewise CUDA graph will be silently disabled (no log line) "
                                "because "
                      + "; ".join(reasons) + " — prefill throughput drops")


def _prefill_graph_kept(ctx: LaunchContext) -> bool:
    """Whether SGLang keeps a multimodal model's default prefill graph (read per release)."""
    breakable = fact("breakable_prefill_graph_archs", ctx.version) or []  # 0.5.16+
    piecewise = fact("piecewise_prefill_graph_archs", ctx.version) or []  # 0.5.14-0.5.21
    if ctx.version in PREFILL_DEFAULT_TC_PIECEWISE:
        return ctx.architecture in piecewise
    if ctx.version in PREFILL_MULTIMODAL_TO_PIECEWISE and ctx.architecture in piecewise:
        return True  # SGLang moves it to its validated tc_piecewise path instead
    return ctx.architecture in breakable


@rule("SGD603", "prefill-graph-auto-disabled", WARNING,
      "SGLang 0.5.14+ turns the prefill CUDA graph off for a multimodal model outside its "
      "allow-list unless the prefill backend is explicit.",
      "set cuda_graph_backend_prefill = \"disabled\" to say so; forcing \"breakable\" overrides a "
      "shutoff SGLang makes because multimodal prefill replay faults under that "
      "graph", versions=V2X)
def prefill_graph_auto_disabled(ctx: LaunchContext) -> Iterator[Finding]:
    explicit = any(
        ctx.given(n)
        for n in (
            "cuda_graph_backend_prefill",
            "disable_prefill_cuda_graph",
            "disable_cuda_graph",
            "cuda_graph_config",
        )
    )
    multimodal = fact("multimodal_archs", ctx.version)
    is_multimodal = (
        ctx.architecture in multimodal if multimodal else models.is_multimodal(ctx.architecture)
    )
    if not explicit and ctx.architecture and is_multimodal and not _prefill_graph_kept(ctx):
        said = ("silently" if ctx.version in PREFILL_DEFAULT_TC_PIECEWISE
                else "('Breakable CUDA graph is incompatible with multimodal model')")
        yield Finding("server", f"{ctx.architecture} counts as multimodal and is not on SGLang "
                      f"{ctx.catalog.version}'s prefill-graph allow-list: SGLang disables the "
                      f"prefill CUDA graph {said}")


@rule("SGD604", "pp-disables-overlap", WARNING, "pp_size > 1 turns the overlap scheduler off.",
      "set disable_overlap_schedule = true to make it explicit")
def pp_disables_overlap(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.int("pp_size", 1) > 1 and not ctx.on("disable_overlap_schedule"):
        yield Finding("server.pp_size", "Pipeline parallelism is incompatible with overlap "
                      "schedule: SGLang will disable it")


CUDA_GRAPH_OPTIONS: tuple[Refusal, ...] = (
    Refusal("check_server_args: --disable-cuda-graph-padding is incompatible with "
            "--enable-torch-compile. With padding disabled, every distinct batch size gets its own "
            "torch.compile + Triton autotune cycle (O(max_batch_size) compilations) instead of the "
            "small fixed set of padded bucket sizes, causing engine initialisation to stall for "
            "many minutes. Remove --disable-cuda-graph-padding or --enable-torch-compile.",
            "disable_cuda_graph_padding",
            lambda ctx: ctx.on("disable_cuda_graph_padding") and ctx.on("enable_torch_compile"),
            "--disable-cuda-graph-padding is incompatible with "
            "--enable-torch-compile.", VersionRange(since="0.5.12")),
    Refusal("resolve_max_context_size: --cuda-graph-prefill-max-context must be a positive integer",
            "cuda_graph_prefill_max_context",
            lambda ctx: isinstance(ctx.get("cuda_graph_prefill_max_context"), int)
            and ctx.get("cuda_graph_prefill_max_context") <= 0,
            "--cuda-graph-prefill-max-context must be a positive "
            "integer", VersionRange(since="0.5.21")),
)
CUDA_GRAPH_OPTIONS += (
    Refusal(
        "validate_cuda_graph_config: --cuda-graph-config[{}].backend={} not allowed; allowed: {}",
        "cuda_graph_backend_prefill",
        lambda ctx: ctx.get("cuda_graph_backend_prefill") == "full",
        "--cuda-graph-config[prefill].backend='full' not allowed; allowed: breakable, "
        "tc_piecewise, disabled",
        VersionRange(since="0.5.14", until="0.5.15"),
    ),
)
refusal_rule("SGD605", "cuda-graph-options", "A CUDA-graph option SGLang refuses with this launch.",
             "remove the option SGLang's message names", CUDA_GRAPH_OPTIONS)
