"""SGD5xx memory and cache: memory fraction, chunked prefill, Mamba radix-cache strategies."""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang import models
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import V1X, algorithm
from sgdeploy.sglang.rules.registry import ERROR, rule


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


@rule("SGD509", "mamba-no-buffer-speculative", ERROR,
      "A hybrid (Mamba) model with speculative decoding and the radix cache needs the extra_buffer strategy.",
      "set mamba_scheduler_strategy = \"extra_buffer\" (or disable_radix_cache = true)", versions=V1X)
def mamba_no_buffer(ctx: LaunchContext) -> Iterator[Finding]:
    if not models.is_mamba_hybrid(ctx.architecture) or not algorithm(ctx) or ctx.on("disable_radix_cache"):
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
    if algorithm(ctx) and isinstance(draft, int) and interval < draft:
        yield Finding("server.speculative_num_draft_tokens", f"mamba_track_interval {interval} must be greater "
                      f"than or equal to speculative_num_draft_tokens {draft}")
    if interval % page:
        yield Finding("server.page_size", f"mamba_track_interval {interval} must be divisible by page_size {page}")
