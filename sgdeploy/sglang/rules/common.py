"""What several topics of rules share: SGLang's version lines and readings of a launch."""

from __future__ import annotations

from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.versions import VersionRange

# Where SGLang's behaviour changed, read from the released wheels (docs/catalogs.md). 0.5.14
# removed the piecewise CUDA graph flags, --mamba-scheduler-strategy and SGLANG_ENABLE_SPEC_V2
# and introduced per-phase graph backends; V1X/V2X are the two sides of that line.
V1X = VersionRange(until="0.5.14")
V2X = VersionRange(since="0.5.14")
# --enforce-piecewise-cuda-graph era
PIECEWISE_DEFAULT_ON = VersionRange(since="0.5.10", until="0.5.14")
LANGUAGE_ONLY_REFUSED = VersionRange(until="0.5.13")  # 'requires at least one encoder urls'
TBO_NEEDS_A2A = VersionRange(since="0.5.7", until="0.5.15")  # "moe_a2a_backend cannot be 'none'"
TBO_UNCHECKED = VersionRange(until="0.5.7")  # two-batch overlap has no layout check yet
TRTLLM_MHA_PREFILL_BLACKWELL_ONLY = VersionRange(until="0.5.19")
# The prefill CUDA graph on CUDA: tc_piecewise by default in 0.5.14, breakable from 0.5.15
# (cuda_graph_config.default_prefill_backend); 0.5.16-0.5.21 move a multimodal model on the
# piecewise allow-list to tc_piecewise (apply_cuda_graph_compatibility); 0.5.22 removed it.
PREFILL_DEFAULT_TC_PIECEWISE = VersionRange(since="0.5.14", until="0.5.15")
PREFILL_MULTIMODAL_TO_PIECEWISE = VersionRange(since="0.5.16", until="0.5.22")
# From 0.5.19 SGLang keeps mixed chunked prefill for the algorithms whose
# SpeculativeAlgorithm.supports_mixed_chunk() says so (EAGLE, EAGLE3, NEXTN as EAGLE).
MIXED_CHUNK_BY_ALGORITHM = VersionRange(since="0.5.19")
# 0.5.21 lets PP run with speculative decoding on PD prefill nodes; before, PP refuses any.
PP_SPEC_ON_PREFILL = VersionRange(since="0.5.21")

SPECULATIVE_ALGORITHMS = (
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
    "DFLASH",
    "DSPARK",
    "UNO",
)
EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
# Flags whose values a rule of their own checks (SGD014 leaves them alone).
DEDICATED_VALUE_RULES = {"speculative_algorithm"}


def server_field(name: str) -> str:
    """The dotted profile key of a [server] flag, as findings name it."""
    return f"server.{name}"


def algorithm(ctx: LaunchContext) -> str | None:
    """The speculative algorithm, upper-cased as SGLang compares it; None when off."""
    value = ctx.get("speculative_algorithm")
    return value.upper() if isinstance(value, str) and value else None


def attention_dp(ctx: LaunchContext) -> bool:
    """DP attention is on: 0.5.2x's attn_dp_size, or the deprecated enable_dp_attention +
    dp_size."""
    return ctx.int("attn_dp_size", 1) > 1 or (
        ctx.on("enable_dp_attention") and ctx.int("dp_size", 1) > 1
    )


def radix_cache_off(ctx: LaunchContext) -> bool:
    """The radix cache is off after resolution: disabled, or on a PD decode server that does not
    enable its decode radix cache (SGLang turns it off there by itself)."""
    return ctx.on("disable_radix_cache") or (
        ctx.get("disaggregation_mode") == "decode"
        and not ctx.on("disaggregation_decode_enable_radix_cache")
    )
