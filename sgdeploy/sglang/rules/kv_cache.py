"""SGD551-SGD557 KV cache and state layouts: KV cache sharding, the unified memory pool, the
page-major KV layout, HiSparse, Mamba / linear-attention state, HiCache's external linker, and
the serving options that publish cache events or watermark outputs.

Tables of SGLang's own refusals (sgdeploy.sglang.rules.sites): each entry names its check site and
the releases it exists in, read from the wheels. SGLang checks these on resolved values; an
entry fires only where the profile alone decides the outcome (a flag given, or a default SGLang
keeps), and the checks that need the model's config.json read it when one is known.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sgdeploy.sglang import models
from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules.attention import mla_model, resolve
from sgdeploy.sglang.rules.common import algorithm, radix_cache_off
from sgdeploy.sglang.rules.sites import Condition, Refusal, both, given, on, refusal_rule
from sgdeploy.sglang.versions import VersionRange


def _pd(ctx: LaunchContext) -> bool:
    return ctx.get("disaggregation_mode", "null") not in (None, "null")


def _above(name: str, limit: int = 1, default: int = 1) -> Condition:
    return lambda ctx: ctx.int(name, default) > limit


def _spec(ctx: LaunchContext) -> bool:
    return algorithm(ctx) is not None


_mla = mla_model


def _env_on(name: str) -> Condition:
    return lambda ctx: bool(ctx.env_true(name))


def _where(name: str, otherwise: str) -> Callable[[LaunchContext], str]:
    """The key a finding names: `name` when the profile sets it, else the option that needs it."""
    return lambda ctx: name if ctx.given(name) else otherwise


def _with(flag: str, *conditions: Condition) -> Condition:
    return lambda ctx: ctx.on(flag) and all(c(ctx) for c in conditions)


# ------------------------------------------------------------------------- SGD551 KV cache sharding
_SHARD = VersionRange(since="0.5.22")
_SHARD_ONLY_0_5_22 = VersionRange(since="0.5.22", until="0.5.23")
_SHARD_SITE = "handle_kv_cache_sharding: "


def _shard(*conditions: Condition) -> Condition:
    return _with("enable_kv_cache_sharding", *conditions)


def _prefill_backend(ctx: LaunchContext) -> str | None:
    value = ctx.get("prefill_attention_backend") or ctx.get("attention_backend")
    return value if isinstance(value, str) else None


def _tree_core(ctx: LaunchContext) -> str:
    return ctx.env.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python").strip()


def _shard_spec(ctx: LaunchContext) -> bool:
    if not _spec(ctx):
        return False
    arch = ctx.model_config.architecture if ctx.model_config else ctx.architecture
    return (
        algorithm(ctx) not in ("EAGLE", "NEXTN")
        or (arch is not None and arch != "GlmMoeDsaForCausalLM")
        or ctx.get("speculative_eagle_topk") not in (None, 1)
        or ctx.on("enable_multi_layer_eagle")
    )


def _s(key: str, field: str | Callable[[LaunchContext], str], condition: Condition,
       versions: VersionRange = _SHARD) -> Refusal:
    """An entry whose message is the site's own text (no values in it)."""
    message = key.split(": ", 1)[1]
    return Refusal(key, field, condition, message, versions)


KV_CACHE_SHARDING = (
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding is only supported on PD prefill "
        "workers: a rank's pool holds only its stripe of every cached page, which is incompatible "
        "with local decode.",
        "enable_kv_cache_sharding",
        _shard(lambda ctx: ctx.get("disaggregation_mode", "null") != "prefill"),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support speculative "
        "decoding.",
        "speculative_algorithm",
        _shard(_spec),
        _SHARD_ONLY_0_5_22,
    ),
    Refusal(
        "handle_kv_cache_sharding: KV sharding supports speculative decoding only for GLM DSA "
        "single-layer NextN MTP with EAGLE and topk=1.",
        "speculative_algorithm",
        _shard(_shard_spec),
        "KV sharding supports speculative decoding only for GLM DSA single-layer NextN MTP "
        "with EAGLE and topk=1.",
        VersionRange(since="0.5.23"),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support diffusion language "
        "models: DLLM admission bypasses the shard-scratch budget and resolves out of PD-prefill "
        "mode.",
        "dllm_algorithm",
        _shard(given("dllm_algorithm")),
    ),
    Refusal(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding requires the built-in "
        "UnifiedRadixCache with a rotation-aware UnifiedTreeCore and does not support "
        "--radix-cache-backend={}.",
        "radix_cache_backend",
        _shard(given("radix_cache_backend")),
        lambda ctx: (
            "--enable-kv-cache-sharding requires the built-in UnifiedRadixCache with a "
            "rotation-aware UnifiedTreeCore and does not support "
            f"--radix-cache-backend={ctx.get('radix_cache_backend')!r}."
        ),
        _SHARD,
    ),
    Refusal(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding requires the Python "
        "UnifiedTreeCore: SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND={} is not supported for "
        "sharded KV.",
        "",
        _shard(lambda ctx: not radix_cache_off(ctx) and _tree_core(ctx) != "python"),
        lambda ctx: (
            "--enable-kv-cache-sharding requires the Python UnifiedTreeCore: "
            f"SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND={_tree_core(ctx)!r} is not supported for "
            "sharded KV."
        ),
        _SHARD,
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support "
        "--enable-unified-cache-external-linker: load-back allocates through the flat allocator "
        "API.",
        "enable_unified_cache_external_linker",
        _shard(on("enable_unified_cache_external_linker")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support streaming sessions: "
        "their virtual nodes do not carry KV-shard rotation metadata.",
        "enable_streaming_session",
        _shard(on("enable_streaming_session")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support session radix cache "
        "yet.",
        "enable_session_radix_cache",
        _shard(on("enable_session_radix_cache")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support --enable-flexkv: "
        "FlexKV load-back allocates through the stock flat allocator "
        "API.",
        "enable_flexkv",
        _shard(on("enable_flexkv")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support "
        "--enable-unified-memory: the unified pool uses a different virtual-id allocator and "
        "layout.",
        "enable_unified_memory",
        _shard(on("enable_unified_memory")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding and decode context parallelism "
        "(--dcp-size) are mutually exclusive users of the widened allocator index "
        "space.",
        "dcp_size",
        _shard(_above("dcp_size")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support "
        "--enable-hierarchical-cache yet: HiCache backup/load assumes each rank holds full "
        "pages.",
        "enable_hierarchical_cache",
        _shard(on("enable_hierarchical_cache")),
        _SHARD_ONLY_0_5_22,
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding supports HiCache host offload but "
        "not --hicache-storage-backend yet: the storage path reads and writes whole pages per "
        "rank, not each rank's own stripe.",
        "hicache_storage_backend",
        _shard(on("enable_hierarchical_cache"), given("hicache_storage_backend")),
        VersionRange(since="0.5.23"),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support --enable-lmcache.",
        "enable_lmcache",
        _shard(on("enable_lmcache")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support --enable-hisparse: "
        "HiSparse selects a non-sharded allocator and assumes each rank owns complete KV "
        "pages.",
        "enable_hisparse",
        _shard(on("enable_hisparse")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support dynamic chunk "
        "sizing with pipeline parallelism: profiling and predicted chunks can exceed the fixed "
        "sharded scratch capacity. Disable --enable-dynamic-chunking.",
        "enable_dynamic_chunking",
        _shard(on("enable_dynamic_chunking"), _above("pp_size")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding does not support "
        "--enable-two-batch-overlap: the sharded pool's per-batch gather plan is a process-wide "
        "singleton, but TBO rebuilds attention metadata multiple times per extend forward and "
        "clobbers the plan.",
        "enable_two_batch_overlap",
        _shard(on("enable_two_batch_overlap")),
    ),
    Refusal(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding currently only supports the "
        "mooncake and nixl transfer backends: both route sends through "
        "CommonKVSender._prepare_send_indices and pair destinations by fancy index. Got "
        "--disaggregation-transfer-backend {}.",
        "disaggregation_transfer_backend",
        _shard(
            lambda ctx: (
                ctx.get("disaggregation_transfer_backend", "mooncake") not in ("mooncake", "nixl")
            )
        ),
        lambda ctx: (
            "--enable-kv-cache-sharding currently only supports the mooncake and nixl "
            "transfer backends ... Got --disaggregation-transfer-backend "
            f"{ctx.get('disaggregation_transfer_backend')!r}."
        ),
        _SHARD,
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding is incompatible with "
        "SGLANG_DISAGG_STAGING_BUFFER (the staging path assumes contiguous send "
        "slices).",
        "",
        _shard(_env_on("SGLANG_DISAGG_STAGING_BUFFER")),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding for GQA models shards across "
        "attention-CP ranks and requires --enable-prefill-cp with attn_cp_size > "
        "1.",
        "enable_prefill_cp",
        _shard(
            lambda ctx: (
                _mla(ctx) is False
                and not (ctx.on("enable_prefill_cp") and ctx.int("attn_cp_size", 1) > 1)
            )
        ),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding requires a real page size "
        "(--page-size 64 recommended): the physical page is the P/D transfer descriptor and "
        "gather-copy unit; page_size=1 degenerates both into per-token operations.",
        "page_size",
        _shard(lambda ctx: ctx.given("page_size") and ctx.int("page_size", 1) <= 1),
    ),
    _s(
        "handle_kv_cache_sharding: --enable-kv-cache-sharding requires chunked prefill "
        "(--chunked-prefill-size > 0).",
        "chunked_prefill_size",
        _shard(
            lambda ctx: (
                ctx.given("chunked_prefill_size") and ctx.int("chunked_prefill_size", 1) <= 0
            )
        ),
    ),
    Refusal(
        "validate_kv_shard_attention_backend: --enable-kv-cache-sharding currently requires "
        "the fa3 prefill attention backend, or trtllm_mla for plain-TP MLA; got {}.",
        "attention_backend",
        _shard(lambda ctx: _prefill_backend(ctx) not in (None, "fa3", "trtllm_mla", "dsa")),
        lambda ctx: (
            "--enable-kv-cache-sharding currently requires the fa3 prefill attention "
            f"backend, or trtllm_mla for plain-TP MLA; got {_prefill_backend(ctx)!r}."
        ),
        _SHARD,
    ),
    _s(
        "validate_kv_shard_attention_backend: KV sharding with trtllm_mla only supports plain-TP "
        "MLA (attn_cp_size must be 1).",
        "attn_cp_size",
        _shard(
            lambda ctx: _prefill_backend(ctx) == "trtllm_mla" and _mla(ctx) is not False,
            _above("attn_cp_size"),
        ),
    ),
    _s(
        "validate_kv_shard_attention_backend: KV sharding with trtllm_mla requires chunked prefix "
        "caching.",
        "disable_chunked_prefix_cache",
        _shard(
            lambda ctx: (
                _prefill_backend(ctx) == "trtllm_mla"
                and _mla(ctx) is not False
                and ctx.int("attn_cp_size", 1) <= 1
            ),
            on("disable_chunked_prefix_cache"),
        ),
    ),
)

refusal_rule("SGD551", "kv-cache-sharding", "KV cache sharding (0.5.22 and later) runs only on a "
             "PD prefill worker with the options SGLang checks for "
             "it.", "fix the KV-sharding launch as the message says, or "
             "drop enable_kv_cache_sharding", KV_CACHE_SHARDING)


# ----------------------------------------------------------------------- SGD552 unified memory pool
def _unified(*conditions: Condition) -> Condition:
    return _with("enable_unified_memory", *conditions)


def _not_mooncake(ctx: LaunchContext) -> bool:
    return bool(ctx.get("disaggregation_transfer_backend", "mooncake") != "mooncake")


def _tree_topk(ctx: LaunchContext) -> bool:
    return _spec(ctx) and ctx.get("speculative_eagle_topk") not in (None, 1)


def _eagle(ctx: LaunchContext) -> bool:
    return algorithm(ctx) in ("EAGLE", "EAGLE3", "NEXTN")


# The attention backends the unified pool's speculative checks audit, per release
# (kv_cache_hook.py).
_DSPARK_AUDITED_0_5_18 = frozenset({"triton", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla"})
_SPEC_AUDITED_0_5_22 = frozenset(
    {"triton", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "flashmla", "flashinfer", "fa3"}
)
_SPEC_AUDITED_0_5_23 = _SPEC_AUDITED_0_5_22 - {"tokenspeed_mla"}
_MHA_RAILS_0_5_22 = frozenset({"triton", "flashinfer", "fa3"})
_MHA_RAILS_0_5_23 = _MHA_RAILS_0_5_22 | {"trtllm_mha"}


def _chain(ctx: LaunchContext) -> bool:
    return ctx.get("speculative_eagle_topk") in (None, 1)


def _resolved_backends(ctx: LaunchContext) -> set[str] | None:
    """The resolved (prefill, decode) backends as a set, None where the pick cannot be followed."""
    backends = resolve(ctx)
    return {b for b in backends.pair if b is not None} if backends.exact else None


def _mha_rails(ctx: LaunchContext) -> frozenset[str]:
    return _MHA_RAILS_0_5_23 if ctx.version >= (0, 5, 23, 0) else _MHA_RAILS_0_5_22


def _audited(ctx: LaunchContext) -> frozenset[str]:
    """_assert_spec_verify_backends' list for the launch's algorithm (0.5.22+), less flashinfer
    under DCP."""
    spark = algorithm(ctx) == "DSPARK"
    if ctx.version >= (0, 5, 23, 0):
        allowed = _SPEC_AUDITED_0_5_23 | {"fa4"} if spark else _MHA_RAILS_0_5_23
    else:
        allowed = _SPEC_AUDITED_0_5_22 if spark else _MHA_RAILS_0_5_22
    return allowed - {"flashinfer"} if ctx.int("dcp_size", 1) > 1 else allowed


def _outside(allowed: Callable[[LaunchContext], frozenset[str]]) -> Condition:
    def check(ctx: LaunchContext) -> bool:
        backends = _resolved_backends(ctx)
        return backends is not None and not backends <= allowed(ctx)
    return check


def _eagle_allowed(ctx: LaunchContext) -> frozenset[str]:
    if _mla(ctx):
        return _SPEC_AUDITED_0_5_23 if ctx.version >= (0, 5, 23, 0) else _SPEC_AUDITED_0_5_22
    return _mha_rails(ctx)


def _eagle_target_refused(ctx: LaunchContext) -> bool:
    backends = resolve(ctx)
    return backends.exact and (
        None in backends.pair or not set(backends.pair) <= _eagle_allowed(ctx)
    )


def _eagle_draft_refused(ctx: LaunchContext) -> bool:
    draft = ctx.get("speculative_draft_attention_backend")
    backends = {draft} if isinstance(draft, str) and draft else _resolved_backends(ctx)
    return (
        backends is not None and not _eagle_target_refused(ctx) and not backends <= _mha_rails(ctx)
    )


def _decode_graph_on(ctx: LaunchContext) -> bool:
    return not ctx.on("disable_cuda_graph") and ctx.get("cuda_graph_backend_decode") != "disabled" \
        and not ctx.on("enable_mis")


def _backends_words(ctx: LaunchContext) -> str:
    return str(sorted(b for b in resolve(ctx).pair if b is not None))


UNIFIED_MEMORY = (
    _s(
        "handle_unified_memory_pool: --enable-unified-memory is not yet compatible with PD "
        "disaggregation.",
        "disaggregation_mode",
        _unified(_pd),
        VersionRange(since="0.5.15", until="0.5.18"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory is not yet compatible with "
        "speculative decoding.",
        "speculative_algorithm",
        _unified(_spec),
        VersionRange(since="0.5.15", until="0.5.18"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory is not yet compatible with "
        "hierarchical / host-tiered KV cache (--enable-hierarchical-cache / --enable-lmcache): the "
        "unified-memory-pool init wires up no host pools, and its device mamba / full-attention "
        "slots are VIRTUAL — the host-offload path does not translate them to physical.",
        "enable_hierarchical_cache",
        _unified(lambda ctx: ctx.on("enable_hierarchical_cache") or ctx.on("enable_lmcache")),
        VersionRange(since="0.5.15", until="0.5.21"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory is not yet compatible with decode "
        "context parallelism (--dcp-size > 1): the pool has no DCP-aware masked write path "
        "(UnifiedMHATokenToKVPool.set_kv_buffer asserts dcp_kv_mask is None), so a DCP run would "
        "boot and then fail on the first KV write.",
        "dcp_size",
        _unified(_above("dcp_size")),
        VersionRange(since="0.5.15", until="0.5.20"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory with PD disaggregation does not "
        "support pipeline parallelism (whole-envelope transfer has no per-layer entries to "
        "subset).",
        "pp_size",
        _unified(_pd, _above("pp_size")),
        VersionRange(since="0.5.18"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory with PD disaggregation requires lazy "
        "compaction; unset SGLANG_DISABLE_LAZY_COMPACTION.",
        "",
        _unified(_pd, _env_on("SGLANG_DISABLE_LAZY_COMPACTION")),
        VersionRange(since="0.5.18"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory with PD disaggregation is not "
        "compatible with --enable-hisparse: the decode-side HiSparse prealloc path ships host/C4 "
        "rows straight from the allocator, bypassing the virtual->physical translation the unified "
        "pool needs.",
        "enable_hisparse",
        _unified(_pd, on("enable_hisparse")),
        VersionRange(since="0.5.18"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory with PD disaggregation does not "
        "support speculative decoding with the Mooncake transfer backend.",
        "speculative_algorithm",
        _unified(
            _pd,
            _spec,
            lambda ctx: ctx.get("disaggregation_transfer_backend", "mooncake") == "mooncake",
        ),
        VersionRange(since="0.5.21"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory with decode KV offload currently "
        "supports --hicache-storage-backend=file only.",
        "hicache_storage_backend",
        _unified(
            _pd,
            on("disaggregation_decode_enable_offload_kvcache"),
            lambda ctx: ctx.get("hicache_storage_backend") != "file",
        ),
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory only supports "
        "--speculative-algorithm DSPARK, DFLASH, EAGLE and EAGLE3; other speculative "
        "algorithms are not yet audited for the unified pool's virtual-to-physical loc "
        "translation. Got --speculative-algorithm={}.",
        "speculative_algorithm",
        _unified(
            lambda ctx: algorithm(ctx) not in (None, "DSPARK", "EAGLE", "EAGLE3", "DFLASH", "NEXTN")
        ),
        lambda ctx: (
            "--enable-unified-memory only supports --speculative-algorithm DSPARK, "
            "DFLASH, EAGLE and EAGLE3; ... Got "
            f"--speculative-algorithm={algorithm(ctx)!r}."
        ),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory does not support "
        "--enable-two-batch-overlap: TBO's replay split hands each child a view without the "
        "pre-translate write loc, so a captured decode replay raises. TODO(ch-wan): carry "
        "out_cache_loc_virtual into the child view.",
        "enable_two_batch_overlap",
        _unified(on("enable_two_batch_overlap")),
        VersionRange(since="0.5.20", until="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory does not support "
        "--enable-two-batch-overlap: the iteration's read tables are indexed by the whole batch's "
        "rows, and a TBO child's readers do not offset into them.",
        "enable_two_batch_overlap",
        _unified(on("enable_two_batch_overlap")),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory host-pool decode retraction does not "
        "support decode radix-cache H2D/D2H transfers yet.",
        "disaggregation_decode_enable_radix_cache",
        _unified(
            _pd,
            lambda ctx: ctx.get("disaggregation_decode_retraction_backup") == "host_pool",
            on("disaggregation_decode_enable_radix_cache"),
        ),
        VersionRange(since="0.5.21", until="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory is not yet compatible with "
        "--enable-lmcache: the LMCache offload path indexes the device buffers with the ids it is "
        "handed, and under the unified pool those are VIRTUAL.",
        "enable_lmcache",
        _unified(on("enable_lmcache")),
        VersionRange(since="0.5.21"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory does not support "
        "--enable-unified-cache-external-linker: direct L3 transfers do not preserve unified "
        "page-envelope indices and compaction lifetimes. Use --enable-hierarchical-cache for "
        "supported L2/L3 transfers.",
        "enable_unified_cache_external_linker",
        _unified(on("enable_unified_cache_external_linker")),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "validate_unified_memory_dcp: --enable-unified-memory with decode context parallelism "
        "(--dcp-size > 1) supports MLA models only (e.g. kimi-linear): the MHA unified pool has no "
        "DCP-aware masked write path (UnifiedMHATokenToKVPool.set_kv_buffer asserts dcp_kv_mask is "
        "None).",
        "dcp_size",
        _unified(_above("dcp_size"), lambda ctx: _mla(ctx) is False),
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory with PD disaggregation supports "
        "only the mooncake transfer backend; got {}.",
        "disaggregation_transfer_backend",
        _unified(_pd, _not_mooncake),
        lambda ctx: (
            "--enable-unified-memory with PD disaggregation supports only the mooncake transfer "
            f"backend; got {ctx.get('disaggregation_transfer_backend')!r}."
        ),
        VersionRange(since="0.5.18", until="0.5.21"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory with PD disaggregation supports "
        "only these transfer backends: {}; got {}.",
        "disaggregation_transfer_backend",
        _unified(_pd, _not_mooncake),
        lambda ctx: (
            "--enable-unified-memory with PD disaggregation supports only these "
            "transfer backends: mooncake; got "
            f"{ctx.get('disaggregation_transfer_backend')!r}."
        ),
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory only supports "
        "--speculative-algorithm DSPARK (chain draft); other speculative algorithms are not "
        "yet audited for the unified pool's virtual/dense loc translation. Got "
        "--speculative-algorithm={}.",
        "speculative_algorithm",
        _unified(lambda ctx: algorithm(ctx) not in (None, "DSPARK")),
        lambda ctx: (
            "--enable-unified-memory only supports --speculative-algorithm DSPARK (chain draft); "
            f"... Got --speculative-algorithm={algorithm(ctx)!r}."
        ),
        VersionRange(since="0.5.18", until="0.5.19"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory only supports "
        "--speculative-algorithm DSPARK (chain draft); other speculative algorithms are not "
        "yet audited for the unified pool's virtual/kernel-facing loc translation. Got "
        "--speculative-algorithm={}.",
        "speculative_algorithm",
        _unified(lambda ctx: algorithm(ctx) not in (None, "DSPARK")),
        lambda ctx: (
            "--enable-unified-memory only supports --speculative-algorithm DSPARK (chain draft); "
            f"... Got --speculative-algorithm={algorithm(ctx)!r}."
        ),
        VersionRange(since="0.5.19", until="0.5.22"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory + DSPARK supports a linear draft "
        "chain only (--speculative-eagle-topk in {}); tree verify is not audited for the "
        "unified pool. Got --speculative-eagle-topk={}.",
        "speculative_eagle_topk",
        _unified(lambda ctx: algorithm(ctx) == "DSPARK", _tree_topk),
        "--enable-unified-memory + DSPARK supports a linear draft chain only "
        "(--speculative-eagle-topk in {None, 1}); tree verify is not audited for the unified "
        "pool.",
        VersionRange(since="0.5.18", until="0.5.22"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory supports a linear draft chain "
        "only (--speculative-eagle-topk in {}); tree verify relocates accepted tokens one at a "
        "time inside the target pool, which the unified pool's page-granular move_kv_cache "
        "cannot express. Got --speculative-eagle-topk={}.",
        "speculative_eagle_topk",
        # asserted on the value as given, with or without a speculative algorithm
        _unified(lambda ctx: ctx.get("speculative_eagle_topk") not in (None, 1)),
        "--enable-unified-memory supports a linear draft chain only (--speculative-eagle-topk "
        "in {None, 1}).",
        VersionRange(since="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory + EAGLE/EAGLE3 does not support "
        "--disaggregation-decode-retraction-backup=host_pool: the backup builds the draft's host "
        "pool off the draft's own device pool, which a fused EAGLE draft does not have.",
        "disaggregation_decode_retraction_backup",
        _unified(
            _eagle, lambda ctx: ctx.get("disaggregation_decode_retraction_backup") == "host_pool"
        ),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory + EAGLE/EAGLE3 does not support "
        "--enable-hierarchical-cache: HiCache keeps the draft on a private pool, and would pack an "
        "MTP head's KV into the target's page-envelope host pool, which refuses per-layer draft "
        "loads.",
        "enable_hierarchical_cache",
        _unified(_eagle, on("enable_hierarchical_cache")),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "validate_unified_memory_dcp: --enable-unified-memory with decode context parallelism "
        "(--dcp-size > 1) does not support PD disaggregation: the transfer ships whole page "
        "envelopes, which under DCP hold only this rank's shard of each widened page. Rejected "
        "here rather than at the first KV transfer, where translate_kv_indices_for_transfer would "
        "abort a server that had already booted.",
        "disaggregation_mode",
        _unified(_above("dcp_size"), _pd, lambda ctx: _mla(ctx) is not False),
        VersionRange(since="0.5.20"),
    ),
    _s(
        "handle_kv4_compatibility: FP4 KV cache does not yet support --enable-unified-memory: the "
        "unified MHA pool does not allocate FP4 block scales or the prefill dequant "
        "workspace.",
        "kv_cache_dtype",
        _unified(lambda ctx: str(ctx.get("kv_cache_dtype") or "") in ("nvfp4", "fp4_mx_block16")),
        VersionRange(since="0.5.21"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory supports monolithic (decode) "
        "cuda-graph capture only; disable piecewise prefill capture (e.g. "
        "--cuda-graph-backend-prefill=disabled).",
        "cuda_graph_backend_prefill",
        _unified(
            lambda ctx: (
                ctx.get("cuda_graph_backend_prefill") == "tc_piecewise"
                and not ctx.on("disable_cuda_graph")
            )
        ),
        VersionRange(since="0.5.15", until="0.5.19"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory supports decode cuda-graph "
        "capture only; prefill capture is not wired (the prefill graph runner bypasses the "
        "unified virtual->physical loc rebind). Got --cuda-graph-backend-prefill={}; pass "
        "--cuda-graph-backend-prefill=disabled.",
        "cuda_graph_backend_prefill",
        _unified(
            lambda ctx: (
                ctx.get("cuda_graph_backend_prefill") not in (None, "disabled")
                and not ctx.on("disable_cuda_graph")
            )
        ),
        lambda ctx: (
            "--enable-unified-memory supports decode cuda-graph capture only; prefill "
            "capture is not wired. Got "
            f"--cuda-graph-backend-prefill={ctx.get('cuda_graph_backend_prefill')!r}; pass "
            "--cuda-graph-backend-prefill=disabled."
        ),
        VersionRange(since="0.5.19", until="0.5.20"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory + DSPARK requires "
        "spec-verify-audited attention backends {} for both prefill and decode; got {}. "
        "flashinfer / fa3 do not translate speculative verify indices to the unified pool's "
        "dense space yet.",
        "attention_backend",
        _unified(
            lambda ctx: algorithm(ctx) == "DSPARK",
            _chain,
            _outside(lambda ctx: _DSPARK_AUDITED_0_5_18),
        ),
        lambda ctx: (
            "--enable-unified-memory + DSPARK requires spec-verify-audited attention "
            f"backends {sorted(_DSPARK_AUDITED_0_5_18)} for both prefill and decode; got "
            f"{_backends_words(ctx)}."
        ),
        VersionRange(since="0.5.18", until="0.5.19"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory + DSPARK requires "
        "spec-verify-audited attention backends {} for both prefill and decode; got {}. "
        "flashinfer / fa3 do not translate speculative verify indices to the unified pool's "
        "kernel-facing space yet.",
        "attention_backend",
        _unified(
            lambda ctx: algorithm(ctx) == "DSPARK",
            _chain,
            _outside(lambda ctx: _DSPARK_AUDITED_0_5_18),
        ),
        lambda ctx: (
            "--enable-unified-memory + DSPARK requires spec-verify-audited attention "
            f"backends {sorted(_DSPARK_AUDITED_0_5_18)} for both prefill and decode; got "
            f"{_backends_words(ctx)}."
        ),
        VersionRange(since="0.5.19", until="0.5.22"),
    ),
    Refusal(
        "assert_spec_verify_backends: --enable-unified-memory + {} requires "
        "spec-verify-audited attention backends {}{} for both prefill and decode; got {}. "
        "Other backends do not translate speculative verify indices to the unified pool's "
        "physical ids yet.",
        "attention_backend",
        _unified(lambda ctx: algorithm(ctx) in ("DSPARK", "DFLASH"), _chain, _outside(_audited)),
        lambda ctx: (
            f"--enable-unified-memory + {algorithm(ctx)} requires spec-verify-audited "
            f"attention backends {sorted(_audited(ctx))} for both prefill and decode; got "
            f"{_backends_words(ctx)}."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory + EAGLE/EAGLE3 requires the "
        "target on the spec-verify-audited attention backends {} (got "
        "{}).",
        "attention_backend",
        _unified(_eagle, _chain, lambda ctx: _hybrid(ctx), _eagle_target_refused),
        lambda ctx: (
            "--enable-unified-memory + EAGLE/EAGLE3 requires the target on the "
            f"spec-verify-audited attention backends {sorted(_eagle_allowed(ctx))} (got "
            f"{_backends_words(ctx)})."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_unified_memory_pool: --enable-unified-memory + EAGLE/EAGLE3 runs the draft on "
        "{}, but a fused draft is MHA-shaped and reads its KV through the translated MHA rails "
        "{}. Set --speculative-draft-attention-backend to one of "
        "them.",
        "speculative_draft_attention_backend",
        _unified(_eagle, _chain, lambda ctx: _hybrid(ctx), _eagle_draft_refused),
        lambda ctx: (
            "--enable-unified-memory + EAGLE/EAGLE3 runs the draft outside the "
            f"translated MHA rails {sorted(_mha_rails(ctx))}. Set "
            "--speculative-draft-attention-backend to one of them."
        ),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "handle_unified_memory_pool: --enable-unified-memory does not yet support decode cuda "
        "graphs with the trtllm_mha attention backend: its replay refills the page table from the "
        "previous replay's sequence lengths. Pass --disable-cuda-graph, or pick another decode "
        "attention backend (fa3 / fa4 / flashinfer / triton).",
        "decode_attention_backend",
        _unified(
            _decode_graph_on, lambda ctx: resolve(ctx).exact and resolve(ctx).decode == "trtllm_mha"
        ),
        VersionRange(since="0.5.22", until="0.5.23"),
    ),
)

refusal_rule("SGD552", "unified-memory-pool", "The unified memory pool (enable_unified_memory, "
             "0.5.15 and later) with options SGLang does not yet support alongside "
             "it.", "drop enable_unified_memory or the option "
             "the message names", UNIFIED_MEMORY)


# ---------------------------------------------------------------------- SGD553 page-major KV layout
def _page_major(*conditions: Condition) -> Condition:
    # enable_unified_memory turns the page-major layout on by itself (0.5.19 and later).
    return lambda ctx: (ctx.on("enable_page_major_kv_layout") or (ctx.on("enable_unified_memory")
                        and ctx.version >= (0, 5, 19, 0))) and all(c(ctx) for c in conditions)


def _linear(ctx: LaunchContext, phase: str) -> str | None:
    value = ctx.get(f"linear_attn_{phase}_backend") or ctx.get("linear_attn_backend")
    return value if isinstance(value, str) else None


# The widest allow-lists (MLA models add cutedsl and helion): a backend outside them is refused.
_PAGE_MAJOR_DECODE = ("triton", "flashinfer", "cutedsl", "helion")
_PAGE_MAJOR_PREFILL = ("triton", "flashkda", "flashinfer", "cutedsl", "helion")

PAGE_MAJOR_LAYOUT = (
    _s(
        "handle_page_major_kv_layout: --enable-page-major-kv-layout without "
        "--enable-unified-memory is temporarily unsupported: the strided MHA K/V views were "
        "removed and the static-pool page-major layout awaits its per-layer-view reimplementation. "
        "Run with --enable-unified-memory, or drop --enable-page-major-kv-layout.",
        "enable_page_major_kv_layout",
        _page_major(lambda ctx: not ctx.on("enable_unified_memory")),
        VersionRange(since="0.5.19"),
    ),
    Refusal(
        "handle_page_major_kv_layout: --enable-page-major-kv-layout requires the Triton Mamba "
        "kernels for the strided conv/SSM state; got {}. Pass --mamba-backend triton.",
        "mamba_backend",
        _page_major(lambda ctx: ctx.get("mamba_backend") not in (None, "triton")),
        lambda ctx: (
            "--enable-page-major-kv-layout requires the Triton Mamba kernels for the "
            f"strided conv/SSM state; got {ctx.get('mamba_backend')!r}. Pass --mamba-backend "
            "triton."
        ),
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "handle_page_major_kv_layout: --enable-page-major-kv-layout: linear-attention DECODE "
        "backend must be one of {} for the strided conv/SSM state; got "
        "{}.",
        "linear_attn_decode_backend",
        _page_major(lambda ctx: _linear(ctx, "decode") not in (None, *_PAGE_MAJOR_DECODE)),
        lambda ctx: (
            "--enable-page-major-kv-layout: linear-attention DECODE backend must be "
            "one of ... for the strided conv/SSM state; got "
            f"{_linear(ctx, 'decode')!r}."
        ),
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "handle_page_major_kv_layout: --enable-page-major-kv-layout: linear-attention PREFILL "
        "backend must be one of {} for the strided conv/SSM state; got {}.",
        "linear_attn_prefill_backend",
        _page_major(lambda ctx: _linear(ctx, "prefill") not in (None, *_PAGE_MAJOR_PREFILL)),
        lambda ctx: (
            "--enable-page-major-kv-layout: linear-attention PREFILL backend must be "
            "one of ... for the strided conv/SSM state; got "
            f"{_linear(ctx, 'prefill')!r}."
        ),
        VersionRange(since="0.5.17"),
    ),
)

refusal_rule("SGD553", "page-major-kv-layout", "The page-major KV layout needs the unified memory "
             "pool (0.5.19 and later) and stride-aware Mamba and linear-attention "
             "kernels.", "add enable_unified_memory, or pick the "
             "kernels the message names", PAGE_MAJOR_LAYOUT)


# --------------------------------------------------------------------------- SGD554 HiSparse
def _hisparse(*conditions: Condition) -> Condition:
    return _with("enable_hisparse", *conditions)


def _kv_dtype(ctx: LaunchContext) -> str:
    return str(ctx.get("kv_cache_dtype") or "auto")


HISPARSE = (
    _s(
        "check_server_args: Hierarchical sparse attention currently requires "
        "--disable-radix-cache.",
        _where("disable_radix_cache", "enable_hisparse"),
        _hisparse(lambda ctx: not radix_cache_off(ctx)),
        VersionRange(since="0.5.10", until="0.5.12"),
    ),
    _s(
        "validate_hisparse: Hierarchical sparse attention currently requires "
        "--disable-radix-cache.",
        _where("disable_radix_cache", "enable_hisparse"),
        _hisparse(lambda ctx: not radix_cache_off(ctx)),
        VersionRange(since="0.5.12"),
    ),
    Refusal(
        "check_server_args: HiSparse requires bfloat16 KV cache, but got --kv-cache-dtype={}. "
        "Please use --kv-cache-dtype=bfloat16.",
        "kv_cache_dtype",
        _hisparse(
            lambda ctx: (
                ctx.given("kv_cache_dtype") and _kv_dtype(ctx) not in ("bfloat16", "bf16", "auto")
            )
        ),
        lambda ctx: (
            "HiSparse requires bfloat16 KV cache, but got "
            f"--kv-cache-dtype={_kv_dtype(ctx)}. Please use "
            "--kv-cache-dtype=bfloat16."
        ),
        VersionRange(since="0.5.11", until="0.5.12"),
    ),
    Refusal(
        "check_server_args: HiSparse requires flashmla_sparse NSA {} backend, but got "
        "--nsa-{}-backend={}. Please use --nsa-{}-backend=flashmla_sparse or omit it.",
        lambda ctx: (
            "nsa_prefill_backend"
            if ctx.get("nsa_prefill_backend") not in (None, "flashmla_sparse")
            else "nsa_decode_backend"
        ),
        _hisparse(
            lambda ctx: any(
                ctx.get(f) not in (None, "flashmla_sparse")
                for f in ("nsa_prefill_backend", "nsa_decode_backend")
            )
        ),
        "HiSparse requires flashmla_sparse NSA backends: use --nsa-prefill-backend / "
        "--nsa-decode-backend flashmla_sparse or omit "
        "them.",
        VersionRange(since="0.5.10", until="0.5.12"),
    ),
    Refusal(
        "validate_hisparse: HiSparse requires bfloat16 or fp8_e4m3 KV cache, but got "
        "--kv-cache-dtype={}. Please use --kv-cache-dtype=bfloat16 or "
        "fp8_e4m3.",
        "kv_cache_dtype",
        _hisparse(
            lambda ctx: (
                _kv_dtype(ctx) not in ("bfloat16", "auto", "fp8_e4m3")
                and ctx.model_config is not None
                and "DeepseekV4" not in str(ctx.model_config.architecture)
            )
        ),
        lambda ctx: (
            "HiSparse requires bfloat16 or fp8_e4m3 KV cache, but got "
            f"--kv-cache-dtype={_kv_dtype(ctx)}."
        ),
        VersionRange(since="0.5.12", until="0.5.14"),
    ),
    _s(
        "validate_hisparse_feature_combos: --enable-hisparse does not support --enable-mixed-chunk "
        "yet.",
        "enable_mixed_chunk",
        _hisparse(on("enable_mixed_chunk")),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "validate_hisparse: The minimal HiSparse spec integration supports linear speculation "
        "only; use --speculative-eagle-topk 1.",
        "speculative_eagle_topk",
        _hisparse(_spec, lambda ctx: (ctx.get("speculative_eagle_topk") or 1) != 1),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "validate_hisparse: HiSparse speculative decoding uses statically sized swap state; "
        "--speculative-adaptive is not supported.",
        "speculative_adaptive",
        _hisparse(_spec, on("speculative_adaptive")),
        VersionRange(since="0.5.22"),
    ),
    _s(
        "resolve_hicache_dcp_compatibility: --enable-hisparse with --dcp-size > 1 is not "
        "supported: the HiSparse host pool is constructed without DCP translation.",
        "dcp_size",
        _hisparse(on("enable_hierarchical_cache"), _above("dcp_size")),
        VersionRange(since="0.5.17"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache is "
        "incompatible with --enable-hisparse: HiSparse uses a dedicated pool family that is not "
        "the no-op MHA pool.",
        "enable_hisparse",
        _hisparse(on("prefill_only_disable_kv_cache")),
        VersionRange(since="0.5.12"),
    ),
)

refusal_rule("SGD554", "hisparse-options", "Hierarchical sparse attention (enable_hisparse) with "
             "options SGLang refuses alongside "
             "it.", "fix the HiSparse options as the message says", HISPARSE)


# ---------------------------------------------------------- SGD555 Mamba and linear-attention state
def _hybrid(ctx: LaunchContext) -> bool:
    """A hybrid (Mamba / linear-attention) model, known from config.json or the architecture."""
    if ctx.model_config is not None:
        return ctx.model_config.has_hybrid_layers or models.is_mamba_hybrid(
            ctx.model_config.architecture
        )
    return models.is_mamba_hybrid(ctx.architecture)


_EXTRA = ("extra_buffer", "extra_buffer_lazy")


def resolved_strategy(ctx: LaunchContext) -> object:
    """mamba_radix_cache_strategy as the later checks read it (0.5.14+): a given value, else `auto`
    resolved as _mamba_radix_cache_resolution does on a hybrid model with the radix cache on:
    extra_buffer when overlap or paging wants it and the architecture takes it with the triton
    linear-attention backend (facts: mamba_extra_buffer_archs), else no_buffer."""
    strategy = ctx.get("mamba_radix_cache_strategy")
    if strategy != "auto" or not _hybrid(ctx) or radix_cache_off(ctx):
        return strategy
    wants = not ctx.on("disable_overlap_schedule") or ctx.int("page_size", 1) > 1
    arch = ctx.model_config.architecture if ctx.model_config else ctx.architecture
    takes = arch in (fact("mamba_extra_buffer_archs", ctx.version) or ())
    triton = ctx.get("linear_attn_backend", "triton") in (None, "triton")
    return "extra_buffer" if wants and takes and triton else "no_buffer"


def _extra_buffer(ctx: LaunchContext) -> bool:
    return resolved_strategy(ctx) in _EXTRA


def _replay_strategy_words(ctx: LaunchContext) -> str:
    auto = "" if ctx.given("mamba_radix_cache_strategy") else " (what auto resolves to here)"
    return ("--enable-linear-replayssm requires --mamba-radix-cache-strategy no_buffer (the "
            "default); the extra_buffer ping-pong donation path is not yet supported (follow-up). "
            f"Got --mamba-radix-cache-strategy={resolved_strategy(ctx)!r}{auto}.")


def _no_buffer_given(ctx: LaunchContext) -> bool:
    """An explicit no_buffer on a model SGLang gives the Mamba radix cache (validate_mamba_no_buffer
    runs right after; `auto` resolves to no_buffer together with disable_overlap_schedule)."""
    if ctx.get("mamba_radix_cache_strategy") != "no_buffer" or radix_cache_off(ctx):
        return False
    if ctx.model_config is not None:
        return _hybrid(ctx)
    arch = ctx.architecture
    return arch in (fact("mamba_state_archs", ctx.version) or ()) or models.is_mamba_hybrid(arch)


_NO_BUFFER = VersionRange(since="0.5.21")
NO_BUFFER_PAIRS = (
    _s("validate_mamba_no_buffer: no_buffer do not support overlap schedule. Try to set "
       "disable_overlap_schedule=True.", "disable_overlap_schedule",
       lambda ctx: _no_buffer_given(ctx) and not ctx.on("disable_overlap_schedule"), _NO_BUFFER),
    _s("validate_mamba_no_buffer: no_buffer only supports page_size=1.", "page_size",
       lambda ctx: _no_buffer_given(ctx) and ctx.int("page_size", 1) > 1, _NO_BUFFER),
)


def _ssm_dtype(ctx: LaunchContext) -> object:
    """mamba_ssm_dtype as resolution has it: the flag, else the model's config.json (when known)."""
    if ctx.given("mamba_ssm_dtype"):
        return ctx.get("mamba_ssm_dtype")
    return ctx.model_config.value("mamba_ssm_dtype") if ctx.model_config else None


def _ssm_dtype_is_fp16(ctx: LaunchContext) -> bool:
    return not _ssm_dtype_not_fp16(ctx)


def _ssm_dtype_not_fp16(ctx: LaunchContext) -> bool:
    if ctx.given("mamba_ssm_dtype"):
        return bool(ctx.get("mamba_ssm_dtype") != "float16")
    declared = ctx.model_config.value("mamba_ssm_dtype") if ctx.model_config else None
    return declared != "float16"


def _linear_decode(ctx: LaunchContext) -> str | None:
    """The linear-attention decode backend handle_linear_attn_backend checks: the given one, else
    flashinfer on SM100 with a bf16 SSM state (not for a helion base from 0.5.18), else the base;
    a flashkda base decodes on triton."""
    base = ctx.get("linear_attn_backend")
    if not ctx.get("linear_attn_decode_backend"):
        sm100 = ctx.host is not None and ctx.host.sm is not None and ctx.host.sm // 10 == 10
        helion = base == "helion" and ctx.version >= (0, 5, 18, 0)
        if sm100 and not helion and _ssm_dtype(ctx) == "bfloat16":
            return "flashinfer"
        return "triton" if base == "flashkda" else base if isinstance(base, str) else None
    value = ctx.get("linear_attn_decode_backend")
    return value if isinstance(value, str) else None


def _decode_not(*allowed: str) -> Condition:
    return lambda ctx: (decode := _linear_decode(ctx)) is not None and decode not in allowed


def _ragged_mode(ctx: LaunchContext) -> str:
    return ctx.env.get("SGLANG_RAGGED_VERIFY_MODE", "static")


def _replay_max_drafts(ctx: LaunchContext) -> int | None:
    """max_speculative_num_draft_tokens where the profile decides it: a chain (topk 1) drafts
    steps + 1 tokens, else the given count; None with adaptive steps or nothing given."""
    if not _spec(ctx) or ctx.on("speculative_adaptive"):
        return None
    steps, draft = ctx.get("speculative_num_steps"), ctx.get("speculative_num_draft_tokens")
    if ctx.get("speculative_eagle_topk") == 1 and isinstance(steps, int):
        return steps + 1
    return (
        draft if isinstance(draft, int) and ctx.get("speculative_eagle_topk") is not None else None
    )


def _replay_message(prefix: str) -> Callable[[LaunchContext], str]:
    return lambda ctx: f"{prefix}, got --linear-attn-decode-backend={_linear_decode(ctx)!r}."


_GDN_SPEC = VersionRange(since="0.5.16", until="0.5.17")
_LINEAR_SPEC = VersionRange(since="0.5.17")
_EXCLUSIVE = ("they share the ring storage but drive it with incompatible cursor protocols "
              "(per-decode-forward vs per-verify-commit advance).")

REPLAYED_STATE = (
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm requires the Triton linear-attn "
        "decode backend, got --linear-attn-decode-backend={}.",
        "linear_attn_decode_backend",
        _with("enable_linear_replayssm", _decode_not("triton")),
        _replay_message("--enable-linear-replayssm requires the Triton linear-attn decode backend"),
        VersionRange(since="0.5.15", until="0.5.18"),
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm requires Triton, or Helion for "
        "KDA, as the linear-attn decode backend; got "
        "--linear-attn-decode-backend={}.",
        "linear_attn_decode_backend",
        _with("enable_linear_replayssm", _decode_not("triton", "helion")),
        _replay_message(
            "--enable-linear-replayssm requires Triton, or Helion for KDA, as the "
            "linear-attn decode backend"
        ),
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-gdn-replayssm-spec requires a linear draft chain "
        "(--speculative-eagle-topk in {}); the chunked verify kernel uses a strictly-lower "
        "causal mask and is invalid for EAGLE tree verify. Got "
        "--speculative-eagle-topk={}.",
        "speculative_eagle_topk",
        _with(
            "enable_gdn_replayssm_spec",
            lambda ctx: ctx.get("speculative_eagle_topk") not in (None, 1),
        ),
        "--enable-gdn-replayssm-spec requires a linear draft chain (--speculative-eagle-topk "
        "in {None, 1}).",
        _GDN_SPEC,
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-gdn-replayssm-spec requires the Triton "
        "linear-attn decode backend, got "
        "--linear-attn-decode-backend={}.",
        "linear_attn_decode_backend",
        _with("enable_gdn_replayssm_spec", _decode_not("triton")),
        _replay_message(
            "--enable-gdn-replayssm-spec requires the Triton linear-attn decode backend"
        ),
        _GDN_SPEC,
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-gdn-replayssm-spec is not supported under PD "
        "disaggregation yet (follow-up). Got --disaggregation-mode={}.",
        "disaggregation_mode",
        _with("enable_gdn_replayssm_spec", _pd),
        lambda ctx: (
            "--enable-gdn-replayssm-spec is not supported under PD disaggregation yet "
            "(follow-up). Got "
            f"--disaggregation-mode={ctx.get('disaggregation_mode')!r}."
        ),
        _GDN_SPEC,
    ),
    _s(
        "handle_linear_attn_backend: --enable-gdn-replayssm-spec and --enable-linear-replayssm are "
        "mutually exclusive: " + _EXCLUSIVE,
        "enable_linear_replayssm",
        _with("enable_gdn_replayssm_spec", on("enable_linear_replayssm")),
        _GDN_SPEC,
    ),
    Refusal(
        "validate_gdn_replayssm_spec_ring: --linear-replayssm-cache-len must be >= 2 * the "
        "maximum speculative draft-token count for the spec-verify ring (early-flush margin), "
        "got {} < {}.",
        "linear_replayssm_cache_len",
        _with(
            "enable_gdn_replayssm_spec",
            lambda ctx: (
                (m := _replay_max_drafts(ctx)) is not None
                and ctx.int("linear_replayssm_cache_len", 16) < 2 * m
            ),
        ),
        lambda ctx: (
            "--linear-replayssm-cache-len must be >= 2 * the maximum speculative "
            "draft-token count for the spec-verify ring (early-flush margin), got "
            f"{ctx.int('linear_replayssm_cache_len', 16)} < "
            f"{2 * (_replay_max_drafts(ctx) or 0)}."
        ),
        _GDN_SPEC,
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm-spec requires a linear draft "
        "chain (--speculative-eagle-topk in {}); the chunked verify kernel uses a "
        "strictly-lower causal mask and is invalid for EAGLE tree verify. Got "
        "--speculative-eagle-topk={}.",
        "speculative_eagle_topk",
        _with(
            "enable_linear_replayssm_spec",
            lambda ctx: ctx.get("speculative_eagle_topk") not in (None, 1),
        ),
        "--enable-linear-replayssm-spec requires a linear draft chain "
        "(--speculative-eagle-topk in {None, 1}).",
        _LINEAR_SPEC,
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm-spec requires the triton or "
        "flashinfer linear-attn decode backend, got "
        "--linear-attn-decode-backend={}.",
        "linear_attn_decode_backend",
        _with("enable_linear_replayssm_spec", _chain, _decode_not("triton", "flashinfer")),
        _replay_message(
            "--enable-linear-replayssm-spec requires the triton or flashinfer "
            "linear-attn decode backend"
        ),
        _LINEAR_SPEC,
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm-spec with "
        "SGLANG_RAGGED_VERIFY_MODE={} requires the KDA fold-every-commit family "
        "(DSPARK/DFLASH) and a ring-writing verify kernel (--linear-attn-verify-backend triton "
        "or nv_cutedsl); got algorithm={}, verify={}. Use "
        "SGLANG_RAGGED_VERIFY_MODE=static.",
        "speculative_algorithm",
        _with(
            "enable_linear_replayssm_spec",
            _chain,
            lambda ctx: not _decode_not("triton", "flashinfer")(ctx),
            lambda ctx: _ragged_mode(ctx) in ("cap-accept", "compact"),
            lambda ctx: (
                algorithm(ctx) not in ("DSPARK", "DFLASH")
                or ctx.get("linear_attn_verify_backend") not in ("triton", "nv_cutedsl")
            ),
        ),
        lambda ctx: (
            "--enable-linear-replayssm-spec with "
            f"SGLANG_RAGGED_VERIFY_MODE={_ragged_mode(ctx)} requires the KDA fold-every-commit "
            "family (DSPARK/DFLASH) and a ring-writing verify kernel; got "
            f"algorithm={ctx.get('speculative_algorithm')!r}, "
            f"verify={ctx.get('linear_attn_verify_backend')!r}. Use "
            "SGLANG_RAGGED_VERIFY_MODE=static."
        ),
        _LINEAR_SPEC,
    ),
    _s(
        "handle_linear_attn_backend: --enable-linear-replayssm-spec is not supported on a PD "
        "prefill server: the ring is spec-verify-only scratch and the prefill server never runs "
        "spec verify.",
        "disaggregation_mode",
        _with(
            "enable_linear_replayssm_spec", lambda ctx: ctx.get("disaggregation_mode") == "prefill"
        ),
        _LINEAR_SPEC,
    ),
    _s(
        "handle_linear_attn_backend: --enable-linear-replayssm-spec and --enable-linear-replayssm "
        "are mutually exclusive: " + _EXCLUSIVE,
        "enable_linear_replayssm",
        _with("enable_linear_replayssm_spec", on("enable_linear_replayssm")),
        _LINEAR_SPEC,
    ),
    _s(
        "handle_mamba_radix_cache: extra_buffer_lazy is not yet supported with speculative "
        "decoding. Use --mamba-scheduler-strategy extra_buffer instead.",
        "mamba_scheduler_strategy",
        lambda ctx: (
            ctx.get("mamba_scheduler_strategy") == "extra_buffer_lazy"
            and _hybrid(ctx)
            and ctx.get("speculative_num_draft_tokens") is not None
            and not ctx.on("disable_radix_cache")
        ),
        VersionRange(since="0.5.13", until="0.5.14"),
    ),
)

MAMBA_STATE = (
    Refusal(
        "handle_mamba_backend: Stochastic rounding for the Mamba SSM cache requires "
        "--mamba-ssm-dtype float16, got {}. Run with --mamba-ssm-dtype float16 or disable "
        "--enable-mamba-cache-stochastic-rounding.",
        _where("mamba_ssm_dtype", "enable_mamba_cache_stochastic_rounding"),
        _with("enable_mamba_cache_stochastic_rounding", _ssm_dtype_not_fp16),
        lambda ctx: (
            "Stochastic rounding for the Mamba SSM cache requires --mamba-ssm-dtype "
            f"float16, got {ctx.get('mamba_ssm_dtype')!r}. Run with --mamba-ssm-dtype float16 or "
            "disable --enable-mamba-cache-stochastic-rounding."
        ),
        VersionRange(since="0.5.15"),
    ),
    _s(
        "handle_int8_mamba_checkpoint: --enable-int8-mamba-checkpoint is not supported together "
        "with --enable-hierarchical-cache: the host-offload path (HiMambaRadixCache) is not "
        "int8-aware. Disable one of them.",
        "enable_int8_mamba_checkpoint",
        _with("enable_int8_mamba_checkpoint", on("enable_hierarchical_cache")),
        VersionRange(since="0.5.14", until="0.5.18"),
    ),
    _s(
        "handle_int8_mamba_checkpoint: --enable-int8-mamba-checkpoint is not supported together "
        "with --enable-hierarchical-cache: the host-offload path is not int8-aware. Disable one of "
        "them.",
        "enable_int8_mamba_checkpoint",
        _with("enable_int8_mamba_checkpoint", on("enable_hierarchical_cache")),
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_int8_mamba_checkpoint: --enable-int8-mamba-checkpoint only supports the "
        "built-in mamba radix cache; --radix-cache-backend={} is not int8-aware. Omit "
        "--radix-cache-backend.",
        "radix_cache_backend",
        _with("enable_int8_mamba_checkpoint", given("radix_cache_backend")),
        lambda ctx: (
            "--enable-int8-mamba-checkpoint only supports the built-in mamba radix "
            f"cache; --radix-cache-backend={ctx.get('radix_cache_backend')!r} is not int8-aware. "
            "Omit --radix-cache-backend."
        ),
        VersionRange(since="0.5.14"),
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm requires "
        "--mamba-radix-cache-strategy no_buffer (the default); the extra_buffer ping-pong "
        "donation path is not yet supported (follow-up). Got --mamba-radix-cache-strategy={}.",
        "mamba_radix_cache_strategy",
        _with("enable_linear_replayssm", _extra_buffer),
        _replay_strategy_words,
        VersionRange(since="0.5.16"),
        hint='set mamba_radix_cache_strategy = "no_buffer" (auto resolves to extra_buffer '
        "here), or remove enable_linear_replayssm",
    ),
    _s(
        "handle_mamba_backend: Stochastic rounding for the Mamba SSM cache is only supported on "
        "NVIDIA CUDA platforms. Disable --enable-mamba-cache-stochastic-rounding on this "
        "platform.",
        "device",
        _with(
            "enable_mamba_cache_stochastic_rounding",
            _ssm_dtype_is_fp16,
            lambda ctx: ctx.get("device") not in (None, "cuda"),
        ),
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "handle_linear_attn_backend: --linear-replayssm-cache-len must be >= 1, got {}.",
        "linear_replayssm_cache_len",
        lambda ctx: (
            ctx.given("linear_replayssm_cache_len")
            and ctx.int("linear_replayssm_cache_len", 1) < 1
            and ctx.on("enable_linear_replayssm")
        ),
        lambda ctx: (
            "--linear-replayssm-cache-len must be >= 1, got "
            f"{ctx.get('linear_replayssm_cache_len')}."
        ),
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm is not supported under PD "
        "disaggregation yet (follow-up). Got --disaggregation-mode={}.",
        "disaggregation_mode",
        _with("enable_linear_replayssm", _pd),
        lambda ctx: (
            "--enable-linear-replayssm is not supported under PD disaggregation yet (follow-up). "
            f"Got --disaggregation-mode={ctx.get('disaggregation_mode')!r}."
        ),
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "handle_linear_attn_backend: --linear-attn-decode-backend flashinfer on SM100+ "
        "requires --mamba-ssm-dtype bfloat16, got {}",
        _where("mamba_ssm_dtype", "linear_attn_decode_backend"),
        lambda ctx: (
            _linear(ctx, "decode") == "flashinfer"
            and _ssm_dtype(ctx) != "bfloat16"
            and ctx.host is not None
            and ctx.host.sm is not None
            and ctx.host.sm >= 100
        ),
        lambda ctx: (
            "--linear-attn-decode-backend flashinfer on SM100+ requires "
            f"--mamba-ssm-dtype bfloat16, got {_ssm_dtype(ctx)!r}"
        ),
        VersionRange(since="0.5.10"),
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-linear-replayssm requires "
        "--mamba-scheduler-strategy no_buffer (the default); the extra_buffer ping-pong "
        "donation path is not yet supported (follow-up). Got --mamba-scheduler-strategy={}.",
        "mamba_radix_cache_strategy",
        _with(
            "enable_linear_replayssm",
            lambda ctx: (
                ctx.get("mamba_radix_cache_strategy") in ("extra_buffer", "extra_buffer_lazy")
            ),
        ),
        "--enable-linear-replayssm requires --mamba-scheduler-strategy no_buffer (the "
        "default); the extra_buffer ping-pong donation path is not yet "
        "supported.",
        VersionRange(since="0.5.15", until="0.5.16"),
    ),
    _s(
        "handle_linear_attn_backend: --enable-gdn-replayssm-spec is not yet compatible with mamba "
        "extra_buffer (radix prefix caching); use --disable-radix-cache or "
        "--mamba-radix-cache-strategy no_buffer.",
        "mamba_radix_cache_strategy",
        _with(
            "enable_gdn_replayssm_spec", lambda ctx: not radix_cache_off(ctx) and _extra_buffer(ctx)
        ),
        VersionRange(since="0.5.16", until="0.5.17"),
    ),
    Refusal(
        "handle_linear_attn_backend: --enable-gdn-replayssm-spec requires --mamba-ssm-dtype "
        "float32, got {}. The closed-loop exact fold keeps the committed state bit-identical "
        "to the recurrent baseline, which is only meaningful against the fp32 checkpoint; a "
        "16-bit checkpoint would re-quantize it every flush.",
        "mamba_ssm_dtype",
        _with(
            "enable_gdn_replayssm_spec",
            lambda ctx: ctx.given("mamba_ssm_dtype") and ctx.get("mamba_ssm_dtype") != "float32",
        ),
        lambda ctx: (
            "--enable-gdn-replayssm-spec requires --mamba-ssm-dtype float32, got "
            f"{ctx.get('mamba_ssm_dtype')!r}."
        ),
        VersionRange(since="0.5.16", until="0.5.17"),
    ),
    Refusal(
        "handle_linear_attn_backend: --linear-replayssm-cache-len must be a power of two for "
        "the circular spec-verify ring, got {}.",
        "linear_replayssm_cache_len",
        _with(
            "enable_gdn_replayssm_spec",
            lambda ctx: (n := ctx.int("linear_replayssm_cache_len", 16)) > 0 and n & (n - 1) != 0,
        ),
        lambda ctx: (
            "--linear-replayssm-cache-len must be a power of two for the circular spec-verify "
            f"ring, got {ctx.get('linear_replayssm_cache_len')}."
        ),
        VersionRange(since="0.5.16", until="0.5.17"),
    ),
    _s(
        "validate_mamba_extra_buffer: extra_buffer_lazy unsupported under PD disaggregation; use "
        "--mamba-radix-cache-strategy extra_buffer.",
        "mamba_radix_cache_strategy",
        lambda ctx: (
            ctx.get("mamba_radix_cache_strategy") == "extra_buffer_lazy"
            and _hybrid(ctx)
            and _pd(ctx)
            and not radix_cache_off(ctx)
        ),
        VersionRange(since="0.5.17"),
    ),
    _s(
        "validate_mamba_extra_buffer: extra_buffer_lazy unsupported with spec.",
        "mamba_radix_cache_strategy",
        lambda ctx: (
            ctx.get("mamba_radix_cache_strategy") == "extra_buffer_lazy"
            and _spec(ctx)
            and _hybrid(ctx)
            and not radix_cache_off(ctx)
        ),
        VersionRange(since="0.5.14", until="0.5.17"),
    ),
    Refusal(
        "validate_mamba_extra_buffer: extra_buffer_lazy unsupported with {}; use "
        "--mamba-radix-cache-strategy extra_buffer.",
        "mamba_radix_cache_strategy",
        lambda ctx: (
            ctx.get("mamba_radix_cache_strategy") == "extra_buffer_lazy"
            and algorithm(ctx) == "DFLASH"
            and _hybrid(ctx)
            and not radix_cache_off(ctx)
            and not _pd(ctx)
        ),
        "extra_buffer_lazy unsupported with DFLASH; use --mamba-radix-cache-strategy extra_buffer.",
        VersionRange(since="0.5.17", until="0.5.18"),
    ),
    _s(
        "handle_linear_attn_backend: --linear-attn-decode-backend flashkda is not supported: "
        "FlashKDA is prefill-only. Use --linear-attn-prefill-backend flashkda (decode stays on "
        "triton).",
        "linear_attn_decode_backend",
        lambda ctx: ctx.get("linear_attn_decode_backend") == "flashkda",
        VersionRange(since="0.5.15"),
    ),
)

refusal_rule("SGD555", "mamba-state-options", "Mamba and linear-attention state options SGLang "
             "checks together: stochastic rounding, the int8 checkpoint, replayed SSM "
             "state.", "fix the Mamba options as the message "
             "says", (*MAMBA_STATE, *REPLAYED_STATE, *NO_BUFFER_PAIRS))


# ---------------------------------------------------------------- SGD556 HiCache and cache policies
def _tlru(ctx: LaunchContext) -> tuple[float, float] | None:
    """(threshold, next_prompt_estimate) of a tlru policy config (SGLang reads 0 for a missing key),
    when both are numbers."""
    if ctx.get("radix_eviction_policy") != "tlru":
        return None
    raw = ctx.get("radix_eviction_policy_config")
    try:
        config = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    config = config or {}
    if not isinstance(config, dict):
        return None
    values = config.get("threshold", 0), config.get("next_prompt_estimate", 0)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return float(values[0]), float(values[1])
    return None


def _not_json_object(value: object) -> bool:
    """A value SGLang's json.loads would turn into something other than an object."""
    if value is None or isinstance(value, dict):
        return False
    try:
        return not isinstance(json.loads(value), dict) if isinstance(value, str) else True
    except ValueError:
        return False  # not JSON at all: argparse's json.loads refuses it first


def _hicache_dcp(*conditions: Condition) -> Condition:
    return _with("enable_hierarchical_cache", _above("dcp_size"), *conditions)


def _buffer_only_with_storage(condition: Condition) -> Condition:
    return lambda ctx: (
        ctx.on("enable_hierarchical_cache")
        and ctx.get("hicache_host_memory_mode") == "buffer_only"
        and ctx.get("hicache_storage_backend") is not None
        and condition(ctx)
    )


def _linker(*conditions: Condition) -> Condition:
    return _with("enable_unified_cache_external_linker", *conditions)


HICACHE = (
    _s(
        "handle_hicache: --enable-unified-cache-external-linker and --enable-hierarchical-cache "
        "are mutually exclusive.",
        "enable_unified_cache_external_linker",
        _linker(on("enable_hierarchical_cache")),
        VersionRange(since="0.5.20"),
    ),
    _s(
        "handle_hicache: --enable-unified-cache-external-linker does not use "
        "--hicache-storage-backend.",
        "hicache_storage_backend",
        _linker(
            lambda ctx: not ctx.on("enable_hierarchical_cache"), given("hicache_storage_backend")
        ),
        VersionRange(since="0.5.20"),
    ),
    _s(
        "handle_hicache: --enable-unified-cache-external-linker requires the default "
        "UnifiedRadixCache with radix caching enabled.",
        "enable_unified_cache_external_linker",
        _linker(
            lambda ctx: ctx.on("disable_radix_cache") or ctx.get("radix_cache_backend") is not None
        ),
        VersionRange(since="0.5.23"),
    ),
    _s(
        "resolve_hicache_dcp_compatibility: --enable-lmcache with --dcp-size > 1 is not supported: "
        "LMCache has no DCP-aware index translation.",
        "enable_lmcache",
        _hicache_dcp(on("enable_lmcache")),
        VersionRange(since="0.5.17"),
    ),
    _s(
        "resolve_hicache_dcp_compatibility: --hicache-storage-backend (L3) with --dcp-size > 1 is "
        "not supported yet: under DCP each rank holds a distinct interleaved MLA KV shard, so the "
        "rank-0-only replicated-MLA backup and the storage keys must become dcp_rank-aware first. "
        "Run HiCache+DCP with L1/L2 only.",
        "hicache_storage_backend",
        _hicache_dcp(given("hicache_storage_backend")),
        VersionRange(since="0.5.17", until="0.5.23"),
    ),
    _s(
        "resolve_hicache_dcp_compatibility: HiCache L3 with DCP does not support buffer_only host "
        "memory.",
        "hicache_host_memory_mode",
        _hicache_dcp(
            given("hicache_storage_backend"),
            lambda ctx: ctx.get("hicache_host_memory_mode") == "buffer_only",
        ),
        VersionRange(since="0.5.23"),
    ),
    _s(
        "resolve_hicache_dcp_compatibility: HiCache with --dcp-size > 1 does not support "
        "speculative decoding yet (the draft-model host pool has no DCP index "
        "translation).",
        "speculative_algorithm",
        _hicache_dcp(_spec),
        VersionRange(since="0.5.17", until="0.5.18"),
    ),
    _s(
        "resolve_hicache_dcp_compatibility: HiCache with --dcp-size > 1 only supports DSPARK "
        "speculative decoding; other draft-model host pools have no DCP index "
        "translation.",
        "speculative_algorithm",
        _hicache_dcp(lambda ctx: algorithm(ctx) not in (None, "DSPARK")),
        VersionRange(since="0.5.18"),
    ),
    _s(
        "validate_hicache_host_memory_mode: --hicache-host-memory-mode buffer_only does not "
        "support --hicache-write-policy write_back; use write_through or write_through_selective.",
        "hicache_write_policy",
        _buffer_only_with_storage(lambda ctx: ctx.get("hicache_write_policy") == "write_back"),
        VersionRange(since="0.5.19", until="0.5.22"),
    ),
    _s(
        "validate_hicache_host_memory_mode: --hicache-host-memory-mode buffer_only is not "
        "supported on decode instances: the decode-side prefetch and offload paths bypass the "
        "buffer-mode pipeline, fetching without its prefix context and never consuming its staged "
        "holds. Prefill instances share the standard scheduler path and are supported.",
        "hicache_host_memory_mode",
        _buffer_only_with_storage(
            lambda ctx: (
                ctx.get("disaggregation_mode") == "decode"
                and (
                    ctx.version >= (0, 5, 22, 0) or ctx.get("hicache_write_policy") != "write_back"
                )
            )
        ),
        VersionRange(since="0.5.19"),
    ),
    _s(
        "handle_hicache: --enable-linker-mla-dedup requires the Mooncake linker.",
        "enable_linker_mla_dedup",
        both(
            on("enable_linker_mla_dedup"),
            lambda ctx: (
                not ctx.on("enable_unified_cache_external_linker")
                or ctx.get("unified_cache_external_linker_backend", "mooncake") != "mooncake"
            ),
        ),
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_cache_compatibility: --radix-eviction-policy tlru requires non-negative "
        "'threshold' and 'next_prompt_estimate' in --radix-eviction-policy-config, got {} and "
        "{}.",
        "radix_eviction_policy_config",
        lambda ctx: (t := _tlru(ctx)) is not None and min(t) < 0,
        "--radix-eviction-policy tlru requires non-negative 'threshold' and "
        "'next_prompt_estimate' in "
        "--radix-eviction-policy-config",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_cache_compatibility: --radix-eviction-policy tlru needs 'threshold' greater "
        "than 'next_prompt_estimate' in --radix-eviction-policy-config, got {} <= {}; "
        "otherwise no tokens are ever TEL-safe and T-LRU is exactly LRU.",
        "radix_eviction_policy_config",
        lambda ctx: (t := _tlru(ctx)) is not None and min(t) >= 0 and t[0] <= t[1],
        "--radix-eviction-policy tlru needs 'threshold' greater than 'next_prompt_estimate' in "
        "--radix-eviction-policy-config",
        VersionRange(since="0.5.21"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache requires "
        "--chunked-prefill-size=-1 so the FA backend takes the fa_skip_kv_cache path; otherwise "
        "the pool would be touched between prefill chunks.",
        "chunked_prefill_size",
        _with(
            "prefill_only_disable_kv_cache", lambda ctx: ctx.int("chunked_prefill_size", 0) != -1
        ),
        VersionRange(since="0.5.12"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache is "
        "incompatible with --attn-cp-size > 1: the context-parallel attention path writes K/V to "
        "the pool via set_kv_buffer, which the no-op pool intentionally rejects.",
        "attn_cp_size",
        _with("prefill_only_disable_kv_cache", _above("attn_cp_size")),
        VersionRange(since="0.5.12"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache is "
        "incompatible with --enable-prefill-cp: the prefill-CP path stages K/V through the paged "
        "cache, which the no-op pool does not support.",
        "enable_prefill_cp",
        _with("prefill_only_disable_kv_cache", on("enable_prefill_cp")),
        VersionRange(since="0.5.14"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache is "
        "incompatible with --enable-prefill-context-parallel: the prefill-CP path stages K/V "
        "through the paged cache, which the no-op pool does not support.",
        "enable_prefill_context_parallel",
        _with("prefill_only_disable_kv_cache", on("enable_prefill_context_parallel")),
        VersionRange(since="0.5.12", until="0.5.14"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache does not "
        "currently support --kv-cache-dtype=fp4_e2m1 because the FP4 pool uses a separate "
        "allocation path.",
        "kv_cache_dtype",
        _with("prefill_only_disable_kv_cache", lambda ctx: ctx.get("kv_cache_dtype") == "fp4_e2m1"),
        VersionRange(since="0.5.12", until="0.5.16"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache does not "
        "currently support --kv-cache-dtype=mxfp8 because the MXFP8 pool stores separate "
        "scale-factor buffers.",
        "kv_cache_dtype",
        _with("prefill_only_disable_kv_cache", lambda ctx: ctx.get("kv_cache_dtype") == "mxfp8"),
        VersionRange(since="0.5.16"),
    ),
    _s(
        "validate_prefill_only_disable_kv_cache_args: --prefill-only-disable-kv-cache does not "
        "currently support --kv-cache-dtype=nvfp4 or --kv-cache-dtype=fp4_mx_block16 because the "
        "FP4 pool uses a separate allocation path.",
        "kv_cache_dtype",
        _with(
            "prefill_only_disable_kv_cache",
            lambda ctx: ctx.get("kv_cache_dtype") in ("nvfp4", "fp4_mx_block16"),
        ),
        VersionRange(since="0.5.16"),
    ),
    _s(
        "handle_hicache: --unified-cache-external-linker-config must be a JSON object.",
        "unified_cache_external_linker_config",
        lambda ctx: _not_json_object(ctx.get("unified_cache_external_linker_config")),
        VersionRange(since="0.5.23"),
    ),
    _s(
        "handle_offload_compatibility: --ple-offload-backend file requires "
        "--ple-offload-embedding: the file-backed table is the offloaded table.",
        "ple_offload_embedding",
        lambda ctx: (
            ctx.get("ple_offload_backend") == "file" and ctx.get("ple_offload_embedding") is False
        ),
        VersionRange(since="0.5.20"),
    ),
    _s(
        "handle_offload_compatibility: --ple-offload-embedding cannot be combined with "
        "--cpu-offload-gb or --offload-group-size: generic layer offload would stage the pinned "
        "PLE embedding back to the device.",
        "ple_offload_embedding",
        lambda ctx: (
            ctx.get("ple_offload_embedding") is True
            and (ctx.int("cpu_offload_gb", 0) > 0 or ctx.int("offload_group_size", -1) > 0)
        ),
        VersionRange(since="0.5.20"),
    ),
    Refusal(
        "handle_prefill_only_disable_kv_cache: --prefill-only-disable-kv-cache currently "
        "requires the FA prefill backend (fa3/fa4), but got prefill backend {}. Other "
        "prefill-only workloads and backends may be supported in a future "
        "change.",
        "attention_backend",
        _with(
            "prefill_only_disable_kv_cache",
            lambda ctx: _prefill_backend(ctx) not in (None, "fa3", "fa4"),
        ),
        lambda ctx: (
            "--prefill-only-disable-kv-cache currently requires the FA prefill backend "
            "(fa3/fa4), but got prefill backend "
            f"{_prefill_backend(ctx)!r}."
        ),
        VersionRange(since="0.5.12"),
    ),
)

refusal_rule("SGD556", "cache-layout-options", "HiCache's external linker, radix eviction policies "
             "and the prefill-only KV cache with options SGLang refuses alongside "
             "them.", "fix the cache options as the "
             "message says", HICACHE)


# --------------------------------------------------------------------- SGD557 events and watermarks
def _load_publish(ctx: LaunchContext) -> bool:
    mode = str(ctx.get("load_publish_endpoint") or "").strip()
    return bool(mode) and mode.lower() != "off"


def _has_key(value: object, key: str) -> bool:
    """A JSON object flag (a table, or its JSON text) that has `key`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return False
    return isinstance(value, dict) and key in value


def _not_json(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except ValueError:
        return True
    return False


# The server's watermark settings when the config leaves a key out (arg_groups/fields/exec_.py).
_WATERMARK_DEFAULTS = {"key": None, "key_b": None, "context_window": 4, "mixing_probability": 0.5,
                       "max_probability": 1.0, "default_enabled": False, "enforce_all": False}


def _watermark_settings(ctx: LaunchContext) -> dict[str, object] | None:
    """The settings an inline watermark_config gives (JSON starting with '{'); None for a file path
    (read on the host) or a config SGLang's own loader refuses first."""
    raw = ctx.get("watermark_config")
    if not isinstance(raw, str) or not raw.lstrip().startswith("{"):
        return None
    try:
        given = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(given, dict) or set(given) - set(_WATERMARK_DEFAULTS):
        return None
    return {**_WATERMARK_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _setting(check: Callable[[dict[str, object]], bool]) -> Condition:
    def fires(ctx: LaunchContext) -> bool:
        settings = _watermark_settings(ctx)
        return settings is not None and check(settings)
    return _watermark(fires)


def _mixing(settings: dict[str, object]) -> float | None:
    return _number(settings["mixing_probability"])


def _watermark(*conditions: Condition) -> Condition:
    return _with("enable_watermark", *conditions)


_WATERMARK = VersionRange(since="0.5.22")

EVENTS_AND_WATERMARKS = (
    _s(
        "check_load_publish_args: --load-publish-endpoint requires --kv-events-config: routers "
        "discover the load range through /server_info's kv_events block, absent without a "
        "publisher.",
        "load_publish_endpoint",
        lambda ctx: _load_publish(ctx) and not ctx.get("kv_events_config"),
        VersionRange(since="0.5.19"),
    ),
    Refusal(
        "check_load_publish_args: --kv-events-config is not parseable: {}",
        "kv_events_config",
        lambda ctx: (
            _load_publish(ctx)
            and bool(ctx.get("kv_events_config"))
            and _not_json(ctx.get("kv_events_config"))
        ),
        "--kv-events-config is not parseable: it must be the publisher's JSON settings",
        VersionRange(since="0.5.19"),
    ),
    _s(
        "handle_other_validations: watermark is not supported in --preferred-sampling-params",
        "preferred_sampling_params",
        lambda ctx: _has_key(ctx.get("preferred_sampling_params"), "watermark"),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --watermark-config requires --enable-watermark",
        "watermark_config",
        lambda ctx: ctx.get("watermark_config") is not None and not ctx.on("enable_watermark"),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: watermark context_window must be an integer from 1 to 64",
        "watermark_config",
        _setting(
            lambda w: (
                not (
                    isinstance(w["context_window"], int)
                    and not isinstance(w["context_window"], bool)
                    and 1 <= w["context_window"] <= 64
                )
            )
        ),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: watermark key_b requires a server key",
        "watermark_config",
        _setting(lambda w: w["key_b"] is not None and w["key"] is None),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: watermark mixing_probability must be strictly between 0 and "
        "1",
        "watermark_config",
        _setting(lambda w: (m := _mixing(w)) is not None and not 0 < m < 1),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: watermark mixing_probability requires key_b",
        "watermark_config",
        _setting(
            lambda w: (
                w["key_b"] is None
                and _mixing(w) is not None
                and 0 < (_mixing(w) or 0) < 1
                and _mixing(w) != 0.5
            )
        ),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: watermark max_probability must be greater than 0 and at most "
        "1",
        "watermark_config",
        _setting(lambda w: (p := _number(w["max_probability"])) is not None and not 0 < p <= 1),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: watermark default_enabled and enforce_all require a server "
        "key",
        "watermark_config",
        _setting(lambda w: bool(w["default_enabled"] or w["enforce_all"]) and w["key"] is None),
        _WATERMARK,
    ),
    Refusal(
        "check_watermark_server_args: --enable-watermark requires --device cuda, got {}",
        "device",
        _watermark(lambda ctx: ctx.get("device") not in (None, "cuda")),
        lambda ctx: f"--enable-watermark requires --device cuda, got {ctx.get('device')!r}",
        _WATERMARK,
    ),
    Refusal(
        "check_watermark_server_args: --enable-watermark does not support custom sampling "
        "backends; got --sampling-backend {}",
        "sampling_backend",
        _watermark(
            lambda ctx: (
                ctx.get("sampling_backend")
                not in (None, "flashinfer", "pytorch", "ascend", "intel_xpu")
            )
        ),
        lambda ctx: (
            "--enable-watermark does not support custom sampling backends; got "
            f"--sampling-backend {ctx.get('sampling_backend')!r}"
        ),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --enable-watermark is incompatible with "
        "--enable-custom-logit-processor",
        "enable_custom_logit_processor",
        _watermark(on("enable_custom_logit_processor")),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --enable-watermark is not supported with diffusion LLM",
        "dllm_algorithm",
        _watermark(given("dllm_algorithm")),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --enable-watermark is not supported with PD disaggregation",
        "disaggregation_mode",
        _watermark(_pd),
        _WATERMARK,
    ),
    Refusal(
        "check_watermark_server_args: --enable-watermark supports speculative algorithms "
        "NGRAM, EAGLE, and EAGLE3, got {}",
        "speculative_algorithm",
        _watermark(lambda ctx: algorithm(ctx) not in (None, "NGRAM", "EAGLE", "EAGLE3", "NEXTN")),
        lambda ctx: (
            "--enable-watermark supports speculative algorithms NGRAM, EAGLE, and "
            f"EAGLE3, got {algorithm(ctx)!r}"
        ),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --enable-watermark is not supported with pipeline-parallel "
        "speculative decoding",
        "pp_size",
        _watermark(_spec, _above("pp_size")),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --enable-watermark is incompatible with "
        "--speculative-use-rejection-sampling",
        "speculative_use_rejection_sampling",
        _watermark(on("speculative_use_rejection_sampling")),
        _WATERMARK,
    ),
    _s(
        "check_watermark_server_args: --enable-watermark is not supported with SGLANG_RUST_SERVER",
        "",
        _watermark(_env_on("SGLANG_RUST_SERVER")),
        _WATERMARK,
    ),
)

refusal_rule("SGD557", "events-and-watermark-options", "KV-event load publishing and output "
             "watermarking with what SGLang requires alongside "
             "them.", "fix the options as the message says", EVENTS_AND_WATERMARKS)


# ---------------------------------------------------------------- SGD558 KV cache dtype and backend
def _given_backend(ctx: LaunchContext, name: str, *, decode: bool = True) -> bool:
    """The attention (or decode) backend is `name` after SGLang's resolution, or as given where
    sgdeploy cannot follow it (DeepSeek V3 on SM100 gets trtllm_mla from its model branch)."""
    backends = resolve(ctx)
    if not backends.exact:
        return ctx.get("attention_backend") == name or (
            decode and ctx.get("decode_attention_backend") == name
        )
    return backends.attention == name or (decode and backends.decode == name)


def _mla_dtype(backend: str, allowed: tuple[str, ...], decode: bool = True) -> Condition:
    return lambda ctx: (_given_backend(ctx, backend, decode=decode) and ctx.given("kv_cache_dtype")
                        and _kv_dtype(ctx) not in allowed)


# handle_kv4_compatibility's lists per release (read from the wheels): (MLA, MHA) backends, then
# the decode backends with an fa4 prefill.
_KV4_LISTS = (
    (VersionRange(until="0.5.16"), ("cutlass_mla", "flashinfer", "trtllm_mla", "flashmla"),
     ("cutlass_mla", "flashinfer", "trtllm_mla")),
    (VersionRange(since="0.5.16", until="0.5.20"), ("cutlass_mla", "flashinfer", "trtllm_mla"),
     ("cutlass_mla", "flashinfer", "trtllm_mla")),
    (VersionRange(since="0.5.20"), ("flashinfer", "trtllm_mla"), ("flashinfer", "trtllm_mla")),
)
_KV4_MHA = ("triton", "torch_native", "flex_attention", "trtllm_mha")
_KV4_FA4_MHA = ("triton", "torch_native", "flex_attention")


def _kv4(ctx: LaunchContext) -> bool:
    """An FP4 KV cache whose backends SGLang leaves as given: fp4_e2m1 before 0.5.16, then nvfp4 and
    fp4_mx_block16 (from 0.5.21 nvfp4 gets its own prefill/decode pair first)."""
    dtype = _kv_dtype(ctx)
    if ctx.version < (0, 5, 16, 0):
        return dtype == "fp4_e2m1"
    return dtype == "fp4_mx_block16" or (dtype == "nvfp4" and ctx.version < (0, 5, 21, 0))


def kv4_model_unknown(ctx: LaunchContext) -> bool:
    """An FP4 KV cache whose allowed backends depend on MLA, which neither config.json nor the
    declared architecture settles."""
    return _kv4(ctx) and _mla(ctx) is None


def _kv4_lists(ctx: LaunchContext, fa4: bool) -> tuple[str, ...]:
    """The backends the KV4 check allows for this model: MLA or MHA from config.json, both
    unknown."""
    mla_list, fa4_mla_list = next(
        (a, b) for versions, a, b in _KV4_LISTS if ctx.version in versions
    )
    mla, mha = (fa4_mla_list, _KV4_FA4_MHA) if fa4 else (mla_list, _KV4_MHA)
    is_mla = _mla(ctx)
    return mla if is_mla else mha if is_mla is False else (*mla, *mha)


def _kv4_resolved(ctx: LaunchContext) -> tuple[str | None, str | None, str | None] | None:
    """(attention, prefill, decode) as the KV4 check reads them (resolved), None where it does not
    run or sgdeploy cannot follow SGLang's pick."""
    if not _kv4(ctx):
        return None
    backends = resolve(ctx)
    return (backends.attention, *backends.pair) if backends.exact else None


def _kv4_backend(ctx: LaunchContext) -> str | None:
    """The attention backend the KV4 check reads when prefill and decode agree (and are not fa4)."""
    resolved = _kv4_resolved(ctx)
    if resolved is None or resolved[1] != resolved[2] or resolved[1] == "fa4":
        return None
    return resolved[0]


def _kv4_fa4_decode(ctx: LaunchContext) -> str | None:
    """With an fa4 prefill, the decode backend the KV4 check reads."""
    resolved = _kv4_resolved(ctx)
    return resolved[2] if resolved is not None and resolved[1] == "fa4" else None


_TRTLLM_MLA = "TensorRT-LLM MLA backend only supports kv-cache-dtype of "
_CUTEDSL_DTYPES = ("fp8_e4m3", "bf16", "bfloat16", "auto")


def _nvfp4(ctx: LaunchContext) -> bool:
    return _kv_dtype(ctx) == "nvfp4"


def _dequant(ctx: LaunchContext) -> str:
    return str(ctx.get("prefill_kv_cache_dequant_dtype") or "auto")


_NVFP4_PREFILL_BACKEND = {"fp8_e4m3": "flashinfer", "nvfp4": "trtllm_mha"}


def _nvfp4_prefill(ctx: LaunchContext) -> str | None:
    """The backend handle_nvfp4_prefill_kv_dequant_dtype reads: the prefill backend, else
    attention_backend as the model's branch and deterministic inference left it (it runs before the
    default is picked)."""
    backends = resolve(ctx)
    if not backends.exact:
        return _prefill_backend(ctx)
    value = ctx.get("prefill_attention_backend") or backends.before_default
    return value if isinstance(value, str) else None
_NVFP4 = VersionRange(since="0.5.21")

KV_CACHE_DTYPE = (
    Refusal(
        "ServerArgs.__post_init__: TensorRT-LLM MLA backend only supports kv-cache-dtype of "
        "fp8_e4m3 or auto.",
        "kv_cache_dtype",
        _mla_dtype("trtllm_mla", ("fp8_e4m3", "auto"), decode=False),
        _TRTLLM_MLA + "fp8_e4m3 or auto.",
        VersionRange(until="0.5.3"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: TensorRT-LLM MLA backend only supports "
        "kv-cache-dtype of fp8_e4m3 or auto.",
        "kv_cache_dtype",
        _mla_dtype("trtllm_mla", ("fp8_e4m3", "auto"), decode=False),
        _TRTLLM_MLA + "fp8_e4m3 or auto.",
        VersionRange(since="0.5.3", until="0.5.4.post3"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: TensorRT-LLM MLA backend only supports "
        "kv-cache-dtype of fp8_e4m3, fp4_e2m1, or auto.",
        "kv_cache_dtype",
        _mla_dtype("trtllm_mla", ("fp8_e4m3", "fp4_e2m1", "auto"), decode=False),
        _TRTLLM_MLA + "fp8_e4m3, fp4_e2m1, or auto.",
        VersionRange(since="0.5.4.post3", until="0.5.7"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: TensorRT-LLM MLA backend only supports "
        "kv-cache-dtype of fp8_e4m3, fp4_e2m1, bf16, or auto.",
        "kv_cache_dtype",
        _mla_dtype("trtllm_mla", ("fp8_e4m3", "fp4_e2m1", "bf16", "auto")),
        _TRTLLM_MLA + "fp8_e4m3, fp4_e2m1, bf16, or auto.",
        VersionRange(since="0.5.7", until="0.5.15"),
    ),
    Refusal(
        "mla_kv_cache_dtype_checks: TensorRT-LLM MLA backend only supports kv-cache-dtype of "
        "fp8_e4m3, fp4_e2m1, bf16, or auto.",
        "kv_cache_dtype",
        _mla_dtype("trtllm_mla", ("fp8_e4m3", "fp4_e2m1", "bf16", "auto")),
        _TRTLLM_MLA + "fp8_e4m3, fp4_e2m1, bf16, or auto.",
        VersionRange(since="0.5.15", until="0.5.21"),
    ),
    Refusal(
        "mla_kv_cache_dtype_checks: TensorRT-LLM MLA backend only supports kv-cache-dtype of "
        "fp8_e4m3, bf16, or auto.",
        "kv_cache_dtype",
        _mla_dtype("trtllm_mla", ("fp8_e4m3", "bf16", "auto")),
        _TRTLLM_MLA + "fp8_e4m3, bf16, or auto.",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: tokenspeed_mla backend requires "
        "kv-cache-dtype=fp8_e4m3, got {}.",
        "kv_cache_dtype",
        _mla_dtype("tokenspeed_mla", ("fp8_e4m3",)),
        lambda ctx: (
            f"tokenspeed_mla backend requires kv-cache-dtype=fp8_e4m3, got {_kv_dtype(ctx)}."
        ),
        VersionRange(since="0.5.12", until="0.5.15"),
    ),
    Refusal(
        "mla_kv_cache_dtype_checks: tokenspeed_mla backend requires kv-cache-dtype=fp8_e4m3, "
        "got {}.",
        "kv_cache_dtype",
        _mla_dtype("tokenspeed_mla", ("fp8_e4m3",)),
        lambda ctx: (
            f"tokenspeed_mla backend requires kv-cache-dtype=fp8_e4m3, got {_kv_dtype(ctx)}."
        ),
        VersionRange(since="0.5.15", until="0.5.23"),
    ),
    Refusal(
        "handle_attention_backend_compatibility: CuteDSL MLA backend only supports "
        "kv-cache-dtype of fp8_e4m3, bf16, or auto.",
        "kv_cache_dtype",
        _mla_dtype("cutedsl_mla", _CUTEDSL_DTYPES),
        "CuteDSL MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.",
        VersionRange(since="0.5.13", until="0.5.15"),
    ),
    Refusal(
        "cutedsl_prefill_backend_fill: CuteDSL MLA backend only supports kv-cache-dtype of "
        "fp8_e4m3, bf16, or auto.",
        "kv_cache_dtype",
        _mla_dtype("cutedsl_mla", _CUTEDSL_DTYPES),
        "CuteDSL MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.",
        VersionRange(since="0.5.15"),
    ),
    Refusal(
        "handle_kv4_compatibility: KV4 MHA expects attention_backend to be one of {}, but got {}",
        _where("attention_backend", "kv_cache_dtype"),
        lambda ctx: (
            _mla(ctx) is not True
            and (b := _kv4_backend(ctx)) is not None
            and b not in _kv4_lists(ctx, fa4=False)
        ),
        lambda ctx: (
            f"KV4 MHA expects attention_backend to be one of {list(_KV4_MHA)}, but got "
            f"{_kv4_backend(ctx)}"
        ),
        VersionRange(since="0.5.7"),
    ),
    Refusal(
        "handle_kv4_compatibility: KV4 MLA expects attention_backend to be one of {}, but got {}",
        _where("attention_backend", "kv_cache_dtype"),
        lambda ctx: (
            _mla(ctx) is True
            and (b := _kv4_backend(ctx)) is not None
            and b not in _kv4_lists(ctx, fa4=False)
        ),
        lambda ctx: (
            "KV4 MLA expects attention_backend to be one of "
            f"{list(_kv4_lists(ctx, fa4=False))}, but got "
            f"{_kv4_backend(ctx)}"
        ),
        VersionRange(since="0.5.7"),
    ),
    Refusal(
        "handle_kv4_compatibility: KV4 FA4 MHA expects decode_attention_backend to be one of "
        "{}, but got {}",
        _where("decode_attention_backend", "kv_cache_dtype"),
        lambda ctx: (
            _mla(ctx) is not True
            and (d := _kv4_fa4_decode(ctx)) is not None
            and d not in _kv4_lists(ctx, fa4=True)
        ),
        lambda ctx: (
            "KV4 FA4 MHA expects decode_attention_backend to be one of "
            f"{list(_KV4_FA4_MHA)}, but got {_kv4_fa4_decode(ctx)}"
        ),
        VersionRange(since="0.5.7"),
    ),
    Refusal(
        "handle_kv4_compatibility: KV4 FA4 MLA expects decode_attention_backend to be one of "
        "{}, but got {}",
        _where("decode_attention_backend", "kv_cache_dtype"),
        lambda ctx: (
            _mla(ctx) is True
            and (d := _kv4_fa4_decode(ctx)) is not None
            and d not in _kv4_lists(ctx, fa4=True)
        ),
        lambda ctx: (
            "KV4 FA4 MLA expects decode_attention_backend to be one of "
            f"{list(_kv4_lists(ctx, fa4=True))}, but got "
            f"{_kv4_fa4_decode(ctx)}"
        ),
        VersionRange(since="0.5.7"),
    ),
    _s(
        "handle_nvfp4_prefill_kv_dequant_dtype: --prefill-kv-cache-dequant-dtype applies only with "
        "--kv-cache-dtype=nvfp4.",
        "prefill_kv_cache_dequant_dtype",
        lambda ctx: not _nvfp4(ctx) and _dequant(ctx) != "auto",
        _NVFP4,
    ),
    Refusal(
        "handle_nvfp4_prefill_kv_dequant_dtype: NVFP4 prefill supports an FP8 E4M3 workspace "
        "or native NVFP4, but backend {} provides neither.",
        "attention_backend",
        lambda ctx: (
            _nvfp4(ctx)
            and _dequant(ctx) == "auto"
            and _nvfp4_prefill(ctx) not in (None, *_NVFP4_PREFILL_BACKEND.values())
        ),
        lambda ctx: (
            "NVFP4 prefill supports an FP8 E4M3 workspace or native NVFP4, but backend "
            f"{_nvfp4_prefill(ctx)!r} provides neither."
        ),
        _NVFP4,
    ),
    Refusal(
        "handle_nvfp4_prefill_kv_dequant_dtype: --prefill-kv-cache-dequant-dtype={} requires "
        "prefill backend {}, but --prefill-attention-backend={} was set. Remove the backend "
        "option and select the KV dtype only.",
        "prefill_attention_backend",
        lambda ctx: (
            _nvfp4(ctx)
            and _dequant(ctx) in _NVFP4_PREFILL_BACKEND
            and ctx.get("prefill_attention_backend")
            not in (None, _NVFP4_PREFILL_BACKEND[_dequant(ctx)])
        ),
        lambda ctx: (
            f"--prefill-kv-cache-dequant-dtype={_dequant(ctx)} requires prefill "
            f"backend {_NVFP4_PREFILL_BACKEND.get(_dequant(ctx))!r}, but "
            f"--prefill-attention-backend={ctx.get('prefill_attention_backend')!r} was "
            "set."
        ),
        _NVFP4,
    ),
    Refusal(
        "handle_nvfp4_prefill_kv_dequant_dtype: NVFP4 decode requires "
        "--decode-attention-backend=trtllm_mha; got {}. Remove the backend option; NVFP4 "
        "selects the supported decode implementation automatically.",
        "decode_attention_backend",
        lambda ctx: _nvfp4(ctx) and ctx.get("decode_attention_backend") not in (None, "trtllm_mha"),
        lambda ctx: (
            "NVFP4 decode requires --decode-attention-backend=trtllm_mha; got "
            f"{ctx.get('decode_attention_backend')!r}."
        ),
        _NVFP4,
    ),
)

refusal_rule("SGD558", "kv-cache-dtype-for-backend", "A KV cache dtype the chosen MLA attention "
             "backend does not take, and NVFP4 KV with prefill/decode backends it cannot "
             "use.", "pick a kv_cache_dtype the backend "
             "takes, or drop the backend option and let SGLang choose", KV_CACHE_DTYPE)
