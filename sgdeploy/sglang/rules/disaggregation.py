"""SGD3xx: encoder disaggregation (encoder_only / language_only) and its interplay with PD."""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang import models
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import LANGUAGE_ONLY_REFUSED, V1X, server_field
from sgdeploy.sglang.rules.registry import ERROR, rule


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
        yield Finding(server_field(which), f"Model type {ctx.architecture} is not supported for encoder "
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
