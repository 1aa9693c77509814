"""SGD5xx memory and cache: memory fraction, chunked prefill, Mamba radix-cache strategies, and
SGLang's own radix/hierarchical/LMCache/SWA cache checks (SGD550)."""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang import models
from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.gpus import gpu_memory_gib_for
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.attention import resolve
from sgdeploy.sglang.rules.common import V1X, algorithm, attention_dp, radix_cache_off, server_field
from sgdeploy.sglang.rules.kv_cache import resolved_strategy
from sgdeploy.sglang.rules.parallelism import chunked_prefill_per_rank
from sgdeploy.sglang.rules.registry import ERROR, rule
from sgdeploy.sglang.rules.sites import Condition, Refusal, below, both, number, on, refusal_rule
from sgdeploy.sglang.versions import VersionRange


@rule("SGD501", "mem-fraction-range", ERROR, "mem_fraction_static must be between 0 and 1.",
      "use a fraction such as 0.85")
def mem_fraction_range(ctx: LaunchContext) -> Iterator[Finding]:
    value = ctx.server.get("mem_fraction_static")
    if isinstance(value, int | float) and not 0 < value < 1:
        yield Finding("server.mem_fraction_static", f"mem_fraction_static = {value} is outside (0, "
                      "1); SGLang accepts it and fails when it sizes the KV cache")


# From 0.5.3 check_server_args skips the chunked-prefill check on a PD decode server.
CHUNKED_PREFILL_DECODE_EXEMPT = VersionRange(since="0.5.3")


@rule("SGD502", "chunked-prefill-page-size", ERROR, "chunked_prefill_size must be a multiple of "
                                                    "page_size.",
      "make chunked_prefill_size a multiple of page_size")
def chunked_prefill_page(ctx: LaunchContext) -> Iterator[Finding]:
    chunk, page = ctx.int("chunked_prefill_size", 0), ctx.int("page_size", 1) or 1
    exempt = (
        ctx.version in CHUNKED_PREFILL_DECODE_EXEMPT and ctx.get("disaggregation_mode") == "decode"
    )
    if exempt or page <= 0:
        return
    if chunk > 0 and chunk % page:
        yield Finding("server.chunked_prefill_size", f"chunked_prefill_size = {chunk} is not "
                      f"divisible by page_size = {page}")
    elif not ctx.given("chunked_prefill_size") and page > 1 and _page_kept(ctx):
        derived = chunked_prefill_per_rank(ctx)
        if derived and derived > 0 and derived % page:
            yield Finding("server.page_size", f"page_size = {page} does not divide the "
                          f"chunked_prefill_size SGLang derives here ({derived}, from the GPU's "
                          "memory)")


# Backends whose resolution replaces a page size they do not take (FlashMLA, Cutlass MLA, TRT-LLM,
# FA4, ...): after them the page size the check reads is not the profile's.
_PAGE_SETTING_BACKENDS = (
    "flashmla",
    "cutlass_mla",
    "trtllm_mla",
    "trtllm_mha",
    "fa4",
    "intel_xpu",
    "ascend",
    "aiter",
    "wave",
    "tokenspeed_mla",
    "cutedsl_mla",
)


def _page_kept(ctx: LaunchContext) -> bool:
    """The profile's page_size reaches check_server_args as given: the backends are known and none
    of them replaces it, and the model is no hybrid one (whose Mamba strategy may reset it to 1)."""
    backends = resolve(ctx)
    if not backends.exact or ctx.architecture is None or models.is_mamba_hybrid(ctx.architecture):
        return False
    chosen = {backends.attention, *backends.pair}
    return not chosen & set(_PAGE_SETTING_BACKENDS) and ctx.version >= (0, 5, 9, 0)


def _mamba_cache_support(ctx: LaunchContext) -> tuple[bool, bool] | None:
    """Up to 0.5.13: (radix cache, extra_buffer) SGLang supports for the architecture, from the
    `_handle_mamba_radix_cache` call of its model branch; None for an architecture without one."""
    table = fact("mamba_radix_cache_archs", ctx.version) or {}
    entry = table.get(ctx.architecture or "")
    return (bool(entry[0]), bool(entry[1])) if entry else None


# 0.5.10-0.5.13 refuse speculative decoding with the radix cache under no_buffer; 0.5.9 turns the
# radix cache off instead ("Disabling radix cache since speculative decoding for ... is not
# supported").
MAMBA_SPEC_REFUSED = VersionRange(since="0.5.10", until=V1X.until)


@rule("SGD509", "mamba-no-buffer-speculative", ERROR,
      "0.5.10-0.5.13: a hybrid (Mamba) model with speculative decoding and the radix cache needs "
      "the extra_buffer strategy, which only some architectures support.",
      "set mamba_scheduler_strategy = \"extra_buffer\" where the architecture supports it, else "
      "disable_radix_cache = true", versions=MAMBA_SPEC_REFUSED)
def mamba_no_buffer(ctx: LaunchContext) -> Iterator[Finding]:
    support = _mamba_cache_support(ctx)
    # Without radix-cache support SGLang turns the radix cache off by itself (KimiLinear, ...).
    if support is None or not support[0] or not algorithm(ctx) or radix_cache_off(ctx):
        return
    if ctx.get("mamba_scheduler_strategy", "auto") in ("auto", "no_buffer"):
        hint = ("set mamba_scheduler_strategy = \"extra_buffer\" (SGLang also says: set "
                "SGLANG_ENABLE_SPEC_V2=1), or disable_radix_cache = true" if support[1] else
                f"set disable_radix_cache = true (SGLang {ctx.catalog.version} refuses "
                f"extra_buffer for {ctx.architecture})")
        yield Finding(
            "server.mamba_scheduler_strategy"
            if ctx.given("mamba_scheduler_strategy")
            else "server",
            f"Speculative decoding for {ctx.architecture} is not compatible with radix "
            "cache when using mamba_scheduler_strategy no_buffer (auto resolves to "
            "no_buffer)",
            hint,
        )


def _extra_buffer_support_v2x(ctx: LaunchContext) -> tuple[bool, bool] | None:
    """0.5.14+: (radix cache, extra_buffer) for a known hybrid architecture: extra_buffer needs an
    architecture on the release's list (facts: mamba_extra_buffer_archs) and the triton
    linear-attention backend; None where it cannot be told."""
    archs = fact("mamba_extra_buffer_archs", ctx.version)
    if archs is None or not ctx.architecture:
        return None
    backend = ctx.get("linear_attn_backend", "triton")
    return True, ctx.architecture in archs and backend in (None, "triton")


_DRAFT_CHECK_IN_SPEC = VersionRange(since="0.5.14", until="0.5.17")


@rule("SGD510", "mamba-extra-buffer-constraints", ERROR,
      "mamba extra_buffer needs the radix cache, mamba_track_interval >= draft tokens and a "
      "multiple of page_size.",
      "adjust mamba_track_interval, page_size or the radix cache setting")
def mamba_extra_buffer(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.architecture and not models.is_mamba_hybrid(ctx.architecture):
        return  # SGLang applies the strategy only to hybrid (Mamba) models
    strategy_field = ("mamba_scheduler_strategy" if ctx.has_flag("mamba_scheduler_strategy")
                      else "mamba_radix_cache_strategy")
    # 0.5.14+: `auto` is resolved first (extra_buffer on the architectures that take it); followed
    # below SM100 only: there the hybrid models' own branch changes what the checks read (the page
    # size)
    below_sm100 = ctx.host is not None and ctx.host.sm is not None and ctx.host.sm < 100
    strategy = (
        resolved_strategy(ctx)
        if ctx.version not in V1X and below_sm100
        else ctx.get(strategy_field)
    )
    if strategy not in ("extra_buffer", "extra_buffer_lazy"):
        return
    if ctx.version not in V1X and ctx.on("disable_radix_cache"):
        return  # 0.5.14+: without the radix cache SGLang never looks at the strategy
    support = _mamba_cache_support(ctx) if ctx.version in V1X else _extra_buffer_support_v2x(ctx)
    if support is not None and not support[0]:
        return  # SGLang turns the radix cache off for it before it looks at the strategy
    if support is not None and not support[1]:
        yield Finding(server_field(strategy_field), "mamba extra_buffer is not supported for "
                      f"{ctx.architecture} (SGLang {ctx.catalog.version} asserts 'extra_buffer is "
                      f"not supported for {ctx.architecture}; use "
                      "no_buffer.')", f"remove {strategy_field} or use no_buffer")
        return
    if ctx.on("disable_radix_cache"):
        yield Finding("server.disable_radix_cache", "mamba extra_buffer is not compatible with "
                                                    "disable_radix_cache")
    interval, page = ctx.int("mamba_track_interval", 256), ctx.int("page_size", 1) or 1
    draft = ctx.get("speculative_num_draft_tokens")
    # the draft-token check reads the value as given, with or without an algorithm, except
    # 0.5.14-0.5.16 (inside the speculative branch there)
    if (
        (algorithm(ctx) or ctx.version not in _DRAFT_CHECK_IN_SPEC)
        and isinstance(draft, int)
        and interval < draft
    ):
        yield Finding("server.speculative_num_draft_tokens", f"mamba_track_interval {interval} "
                      f"must be greater than or equal to speculative_num_draft_tokens {draft}")
    if interval % page:
        yield Finding("server.page_size", f"mamba_track_interval {interval} must be divisible by "
                                          f"page_size {page}")


# ------------------------------------------------------------------------ SGLang's own cache checks
# Tables of SGLang's refusals (sgdeploy.sglang.rules.sites): each entry names its check site and
# the releases it exists in, read from the wheels.

def _decode_offload(ctx: LaunchContext) -> bool:
    return ctx.on("disaggregation_decode_enable_offload_kvcache")


def _lmcache(*conditions: Condition) -> Condition:
    return lambda ctx: ctx.on("enable_lmcache") and all(c(ctx) for c in conditions)


def _buffer_only(ctx: LaunchContext) -> bool:
    return bool(ctx.get("hicache_host_memory_mode") == "buffer_only")


def _outside(name: str, low: float, high: float) -> Condition:
    """The value is set and outside (low, high]."""
    def check(ctx: LaunchContext) -> bool:
        value = number(ctx, name)
        return value is not None and not low < value <= high
    return check


def _prefill_only(condition: Condition) -> Condition:
    return lambda ctx: ctx.on("prefill_only_disable_kv_cache") and condition(ctx)


_LMCACHE = VersionRange(since="0.5.21")
_BUFFER_MODE = VersionRange(since="0.5.19")
_PREFILL_ONLY = VersionRange(since="0.5.12")
_SITE = "handle_cache_compatibility: "

CACHE_OPTIONS = (
    Refusal(
        _SITE + "The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
        "exclusive and cannot be used at the same time. Please use only one of "
        "them.",
        "disable_radix_cache",
        both(on("enable_hierarchical_cache"), radix_cache_off),
        "The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
        "exclusive and cannot be used at the same time.",
        VersionRange(since="0.5.3"),
    ),
    Refusal(
        "ServerArgs.__post_init__: The arguments enable-hierarchical-cache and "
        "disable-radix-cache are mutually exclusive and cannot be used at the same time. "
        "Please use only one of them.",
        "disable_radix_cache",
        both(on("enable_hierarchical_cache"), on("disable_radix_cache")),
        "The arguments enable-hierarchical-cache and disable-radix-cache are mutually "
        "exclusive and cannot be used at the same time.",
        VersionRange(until="0.5.3"),
    ),
    Refusal(
        _SITE + "--enable-session-radix-cache requires --radix-eviction-policy priority",
        "radix_eviction_policy",
        lambda ctx: (
            ctx.on("enable_session_radix_cache")
            and ctx.get("radix_eviction_policy", "lru") != "priority"
        ),
        "--enable-session-radix-cache requires --radix-eviction-policy priority",
        VersionRange(since="0.5.15", until="0.5.17"),
    ),
    Refusal(
        _SITE + "Spec v2 and decode offload kv cache are incompatible and cannot be enabled "
        "together.",
        "disaggregation_decode_enable_offload_kvcache",
        lambda ctx: (
            _decode_offload(ctx)
            and ctx.get("disaggregation_mode") == "decode"
            and bool(ctx.env_true("SGLANG_ENABLE_SPEC_V2"))
        ),
        "Spec v2 and decode offload kv cache are incompatible and cannot be enabled together.",
        VersionRange(since="0.5.5.post3", until="0.5.10"),
    ),
    Refusal(
        _SITE + "The argument disaggregation-decode-enable-offload-kvcache is only supported "
        "for decode side.",
        "disaggregation_decode_enable_offload_kvcache",
        lambda ctx: _decode_offload(ctx) and ctx.get("disaggregation_mode", "null") != "decode",
        "The argument disaggregation-decode-enable-offload-kvcache is only supported for "
        "decode side.",
        VersionRange(since="0.5.3"),
    ),
    Refusal(
        _SITE + "The argument disaggregation-decode-enable-offload-kvcache is only supported "
        "when hicache-storage-backend is provided.",
        "hicache_storage_backend",
        lambda ctx: (
            _decode_offload(ctx)
            and ctx.get("disaggregation_mode") == "decode"
            and ctx.get("hicache_storage_backend") is None
        ),
        "The argument disaggregation-decode-enable-offload-kvcache is only supported when "
        "hicache-storage-backend is provided.",
        VersionRange(since="0.5.10"),
    ),
    Refusal(
        _SITE + "The arguments disaggregation-decode-enable-offload-kvcache and "
        "disaggregation-decode-retraction-backup=host_pool are mutually exclusive: both build "
        "a decode host pool.",
        "disaggregation_decode_retraction_backup",
        lambda ctx: (
            _decode_offload(ctx)
            and ctx.get("disaggregation_mode") == "decode"
            and ctx.get("hicache_storage_backend") is not None
            and ctx.get("disaggregation_decode_retraction_backup") == "host_pool"
        ),
        "The arguments disaggregation-decode-enable-offload-kvcache and "
        "disaggregation-decode-retraction-backup=host_pool are mutually exclusive: both build "
        "a decode host pool.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        _SITE + "--swa-full-tokens-ratio should be in range (0, 1.0].",
        "swa_full_tokens_ratio",
        _outside("swa_full_tokens_ratio", 0, 1.0),
        "--swa-full-tokens-ratio should be in range (0, 1.0].",
        VersionRange(since="0.5.7"),
    ),
    Refusal(
        _SITE + "--swa-prefix-tails should be a non-negative integer.",
        "swa_prefix_tails",
        below("swa_prefix_tails", 0),
        "--swa-prefix-tails should be a non-negative integer.",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive",
        "enable_lmcache",
        _lmcache(on("enable_hierarchical_cache")),
        "--enable-lmcache and --enable-hierarchical-cache are mutually exclusive",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "--enable-lmcache and --enable-unified-cache-external-linker are mutually "
        "exclusive",
        "enable_lmcache",
        _lmcache(on("enable_unified_cache_external_linker")),
        "--enable-lmcache and --enable-unified-cache-external-linker are mutually exclusive",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "--enable-lmcache requires radix cache to be enabled",
        "disable_radix_cache",
        _lmcache(on("disable_radix_cache")),
        "--enable-lmcache requires radix cache to be enabled",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "LMCacheUnifiedRadixCache does not yet support speculative decoding",
        "speculative_algorithm",
        _lmcache(lambda ctx: algorithm(ctx) is not None),
        "LMCacheUnifiedRadixCache does not yet support speculative decoding",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "LMCacheUnifiedRadixCache does not yet support DP attention",
        "enable_lmcache",
        _lmcache(attention_dp),
        "LMCacheUnifiedRadixCache does not yet support DP attention",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no "
        "DCP-aware index "
        "translation",
        "dcp_size",
        _lmcache(lambda ctx: ctx.int("dcp_size", 1) > 1),
        "--enable-lmcache with --dcp-size > 1 is not supported: LMCache has no DCP-aware index "
        "translation",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "LMCacheUnifiedRadixCache does not yet support streaming sessions",
        "enable_streaming_session",
        _lmcache(on("enable_streaming_session")),
        "LMCacheUnifiedRadixCache does not yet support streaming sessions",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "--hicache-host-memory-mode=buffer_only is a HiCache-only mode",
        "hicache_host_memory_mode",
        _lmcache(_buffer_only),
        "--hicache-host-memory-mode=buffer_only is a HiCache-only mode",
        _LMCACHE,
    ),
    Refusal(
        _SITE + "LMCacheUnifiedRadixCache currently supports colocated prefill/decode "
        "scheduling only",
        "disaggregation_mode",
        _lmcache(lambda ctx: ctx.get("disaggregation_mode", "null") != "null"),
        "LMCacheUnifiedRadixCache currently supports colocated prefill/decode scheduling only",
        _LMCACHE,
    ),
    Refusal(
        "handle_hicache_ratio_default: --hicache-host-memory-fraction must be in (0, 1].",
        "hicache_host_memory_fraction",
        _outside("hicache_host_memory_fraction", 0, 1.0),
        "--hicache-host-memory-fraction must be in (0, 1].",
        _LMCACHE,
    ),
    Refusal(
        "validate_hicache_host_memory_mode: --hicache-host-memory-mode buffer_only requires a "
        "storage backend (--hicache-storage-backend): host memory is only a staging buffer and "
        "all cached data lives in storage.",
        "hicache_storage_backend",
        lambda ctx: (
            ctx.on("enable_hierarchical_cache")
            and _buffer_only(ctx)
            and ctx.get("hicache_storage_backend") is None
        ),
        "--hicache-host-memory-mode buffer_only requires a storage backend "
        "(--hicache-storage-backend)",
        _BUFFER_MODE,
    ),
    Refusal(
        "handle_int8_mamba_checkpoint: --enable-int8-mamba-checkpoint is not supported "
        "together with --enable-lmcache: LMCache is not int8-aware. Disable one of "
        "them.",
        "enable_int8_mamba_checkpoint",
        both(on("enable_int8_mamba_checkpoint"), on("enable_lmcache")),
        "--enable-int8-mamba-checkpoint is not supported together with --enable-lmcache: "
        "LMCache is not int8-aware.",
        _LMCACHE,
    ),
    Refusal(
        "handle_mamba_backend: --mamba-cache-philox-rounds must be non-negative.",
        "mamba_cache_philox_rounds",
        below("mamba_cache_philox_rounds", 0),
        "--mamba-cache-philox-rounds must be non-negative.",
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "handle_mamba_backend: --mamba-max-states-per-path must be -1 (unlimited) or a "
        "positive integer, got {}.",
        "mamba_max_states_per_path",
        lambda ctx: (
            (value := number(ctx, "mamba_max_states_per_path")) is not None
            and value != -1
            and value <= 0
        ),
        lambda ctx: (
            "--mamba-max-states-per-path must be -1 (unlimited) or a positive integer, "
            f"got {ctx.get('mamba_max_states_per_path')}."
        ),
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache "
        "currently requires --is-embedding. Other prefill-only workloads may be supported in a "
        "future change once their attention paths stop reading or writing the paged KV "
        "cache.",
        "is_embedding",
        _prefill_only(lambda ctx: not ctx.on("is_embedding")),
        "--prefill-only-disable-kv-cache currently requires --is-embedding.",
        _PREFILL_ONLY,
    ),
    Refusal(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache requires "
        "--disable-radix-cache because the radix cache indexes KV pool slots that no longer "
        "hold real data.",
        "disable_radix_cache",
        _prefill_only(lambda ctx: not ctx.on("disable_radix_cache")),
        "--prefill-only-disable-kv-cache requires --disable-radix-cache",
        _PREFILL_ONLY,
    ),
)

refusal_rule("SGD550", "cache-options", "Radix, hierarchical, LMCache, SWA and Mamba cache options "
             "SGLang refuses: options that exclude each other, ranges, what a mode needs.",
             "fix the cache options as the message says", CACHE_OPTIONS)


# SGLang's default mem_fraction_static depends on the GPU's memory and the launch; it stays at or
# below this, so a checkpoint that does not fit under it does not fit under the default either.
DEFAULT_FRACTION_CEILING = 0.9
GIB = 1 << 30


@rule("SGD511", "weights-exceed-gpu-memory", ERROR,
      "The checkpoint's weights per GPU are more than the memory mem_fraction_static gives them.",
      "raise tp_size or pp_size, serve a quantized checkpoint, or deploy to GPUs with more memory")
def weights_exceed_gpu_memory(ctx: LaunchContext) -> Iterator[Finding]:
    config, host = ctx.model_config, ctx.host
    memory = host.gpu_memory_gib if host and host.gpu_memory_gib else (
        gpu_memory_gib_for(host.gpu) if host and host.gpu else None)
    if config is None or not config.weights_bytes or not memory or _quantized_at_load(ctx):
        return
    ranks = max(ctx.int("tp_size", 1), 1) * max(ctx.int("pp_size", 1), 1)
    per_gpu = config.weights_bytes / ranks / GIB - _number(ctx.get("cpu_offload_gb"))
    given = _number(ctx.get("mem_fraction_static"))
    fraction = given if 0 < given < 1 else DEFAULT_FRACTION_CEILING
    room = memory * fraction
    if per_gpu > room:
        said = (f"mem_fraction_static {fraction}" if given
                else f"SGLang's default mem_fraction_static (at most {fraction})")
        yield Finding(server_field("tp_size"), "the checkpoint is "
                      f"{config.weights_bytes / GIB:.1f} GiB ({config.source}); over {ranks} "
                      f"GPU(s) (tp x pp) that is {per_gpu:.1f} GiB each, but "
                      f"{host.name if host else 'the host'}'s {memory:g} GiB GPUs with {said} "
                      f"leave {room:.1f} GiB for weights and KV cache: the server runs out of "
                      "memory at startup")


def _quantized_at_load(ctx: LaunchContext) -> bool:
    """Weights quantized while loading (a bf16 checkpoint served as fp8) take less than on disk."""
    return (
        bool(ctx.get("quantization"))
        and ctx.model_config is not None
        and ctx.model_config.quant_method is None
    )


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
