"""SGD3xx: encoder disaggregation (encoder_only / language_only) and its interplay with PD."""

from __future__ import annotations

from collections.abc import Iterator

from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import LANGUAGE_ONLY_REFUSED, server_field
from sgdeploy.sglang.rules.parallelism import ep_size, moe_a2a
from sgdeploy.sglang.rules.registry import ERROR, rule
from sgdeploy.sglang.rules.sites import Condition, Refusal, refusal_rule
from sgdeploy.sglang.versions import VersionRange


@rule("SGD301", "language-only-without-encoders", ERROR,
      "Up to 0.5.12.post1, language_only needs encoder_urls (from 0.5.13 encoders may register "
      "dynamically).",
      "add encoder_urls = [\"http://encoder-host:port\"] or remove "
      "language_only", versions=LANGUAGE_ONLY_REFUSED)
def language_only_without_encoders(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("language_only") and not ctx.get("encoder_urls"):
        yield Finding("server.language_only", "language_only is set without encoder_urls: SGLang "
                      f"{ctx.catalog.version} refuses to start ('requires at least one encoder "
                      "urls to be set via --encoder-urls'); from 0.5.13 encoders may register with "
                      "it dynamically")


@rule("SGD302", "encoder-and-language-only", ERROR, "encoder_only and language_only exclude each "
                                                    "other.",
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
    # SGLang's inline allow-list of each release, read from the wheel (catalogs/facts.json).
    allowed = fact("encoder_disagg_archs", ctx.version)
    if allowed is None:
        return  # 0.5.7-0.5.9 have no architecture check
    if ctx.architecture not in allowed:
        which = "encoder_only" if ctx.on("encoder_only") else "language_only"
        yield Finding(server_field(which), f"Model type {ctx.architecture} is not supported for "
                      "encoder disaggregation")


@rule("SGD304", "prefix-mm-cache-needs-encoder-only", ERROR, "enable_prefix_mm_cache requires "
                                                             "encoder_only.",
      "set encoder_only = true or remove enable_prefix_mm_cache")
def prefix_mm_cache(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_prefix_mm_cache") and not ctx.on("encoder_only"):
        yield Finding("server.enable_prefix_mm_cache", "enable_prefix_mm_cache requires "
                                                       "encoder_only")


@rule("SGD305", "encoder-only-with-pd", ERROR, "encoder_only cannot be combined with PD "
                                               "disaggregation.",
      "remove disaggregation_mode or encoder_only")
def encoder_only_pd(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("encoder_only") and ctx.get("disaggregation_mode") in {"prefill", "decode"}:
        yield Finding("server.encoder_only", "Cannot set encoder_only and disaggregation_mode "
                                             "prefill/decode together")


@rule("SGD306", "blank-encoder-url", ERROR,
      "An empty entry in encoder_urls: SGLang starts, then sends images to a URL with no host.",
      "remove the empty entries, or write each encoder's URL (\"http://encoder-host:port\")")
def blank_encoder_url(ctx: LaunchContext) -> Iterator[Finding]:
    urls = ctx.get("encoder_urls")
    if not ctx.on("language_only") or not isinstance(urls, list):
        return
    blank = [i + 1 for i, url in enumerate(urls) if not str(url).strip()]
    if blank:
        which = ", ".join(str(i) for i in blank)
        yield Finding("server.encoder_urls", f"encoder_urls has {len(blank)} empty "
                      f"entr{'y' if len(blank) == 1 else 'ies'} (item {which} of {len(urls)}): "
                      "SGLang accepts it and then posts each image part to "
                      "'/scheduler_receive_url' with no host")


def _overlap_off_by_sglang(ctx: LaunchContext) -> bool:
    """SGLang may turn the overlap scheduler off by itself: speculative decoding, diffusion LLMs,
    PP."""
    return (
        bool(ctx.get("speculative_algorithm") or ctx.get("dllm_algorithm"))
        or ctx.int("pp_size", 1) > 1
    )


@rule(
    "SGD307",
    "pdmux-layout",
    ERROR,
    "enable_pdmux (PD-Multiplexing) needs pp_size 1, chunked_prefill_size = -1, no PD "
    "disaggregation and disable_overlap_schedule.",
    "set chunked_prefill_size = -1 and disable_overlap_schedule = true, or drop enable_pdmux",
    versions=VersionRange(since="0.5.3.post2"),
)
def pdmux_layout(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_pdmux"):
        return
    # check_server_args asserts these in order, on values already resolved: chunked_prefill_size
    # gets a positive default unless the profile says -1.
    if ctx.int("pp_size", 1) != 1:
        name, said = "pp_size", ("PD-Multiplexing is only supported with pipeline parallelism "
                                 "disabled (pp_size=1).")
    elif ctx.server.get("chunked_prefill_size") != -1:
        name, said = "chunked_prefill_size", ("PD-Multiplexing is not compatible with chunked "
                                              "prefill.")
    elif ctx.get("disaggregation_mode", "null") not in (None, "null"):
        name, said = "disaggregation_mode", ("PD-Multiplexing is not compatible with "
                                             "disaggregation mode.")
    elif not ctx.on("disable_overlap_schedule") and not _overlap_off_by_sglang(ctx):
        name, said = "disable_overlap_schedule", ("PD-Multiplexing is not compatible with overlap "
                                                  "schedule.")
    else:
        return
    yield Finding(server_field(name) if ctx.given(name) else "server.enable_pdmux", "SGLang "
                  f"refuses enable_pdmux here: '{said}'")


def _pd_mode(ctx: LaunchContext) -> str | None:
    mode = ctx.get("disaggregation_mode", "null")
    return None if mode in (None, "null") else str(mode)


# The decode host receive threshold turned around in 0.5.22: in 0.5.21 0 (the default) disables
# host receive and anything above enables it; from 0.5.22 1 (the default) disables it and anything
# below enables it.
HOST_RECEIVE_BELOW_ONE = VersionRange(since="0.5.22")


def _host_receive(ctx: LaunchContext) -> bool:
    """Decode host receive is on (0.5.21+), which SGLang resolves to the host_pool retraction
    backup."""
    threshold = ctx.get("disaggregation_decode_host_receive_threshold")
    if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        return False
    return threshold < 1 if ctx.version in HOST_RECEIVE_BELOW_ONE else threshold > 0


def _retraction_backup(ctx: LaunchContext) -> object:
    """The decode retraction backup after resolution: host receive sets host_pool."""
    return "host_pool" if _host_receive(ctx) else ctx.get("disaggregation_decode_retraction_backup")


PD_OPTIONS: tuple[Refusal, ...] = (
    Refusal(
        "handle_cache_compatibility: --disaggregation-decode-retraction-backup=host_pool is "
        "only supported on a PD decode "
        "server.",
        lambda ctx: (
            "disaggregation_decode_retraction_backup"
            if ctx.given("disaggregation_decode_retraction_backup")
            else "disaggregation_decode_host_receive_threshold"
        ),
        lambda ctx: _retraction_backup(ctx) == "host_pool" and _pd_mode(ctx) != "decode",
        "--disaggregation-decode-retraction-backup=host_pool is only supported on a PD decode "
        "server.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_cache_compatibility: --disaggregation-decode-retraction-backup=host_pool does "
        "not support --dcp-size > 1.",
        "dcp_size",
        lambda ctx: (
            _retraction_backup(ctx) == "host_pool"
            and _pd_mode(ctx) == "decode"
            and ctx.int("dcp_size", 1) > 1
        ),
        "--disaggregation-decode-retraction-backup=host_pool does not support --dcp-size > 1.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_pd_disaggregation: --disaggregation-decode-host-receive-threshold must be "
        "between 0 and 1",
        "disaggregation_decode_host_receive_threshold",
        lambda ctx: (
            isinstance(ctx.get("disaggregation_decode_host_receive_threshold"), int | float)
            and not 0 <= ctx.get("disaggregation_decode_host_receive_threshold") <= 1
        ),
        "--disaggregation-decode-host-receive-threshold must be between 0 and 1",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "validate_response_store: --enable-response-store is not supported with "
        "--disaggregation-mode=prefill or decode; response storage must remain disabled in PD "
        "mode.",
        "enable_response_store",
        lambda ctx: ctx.on("enable_response_store") and _pd_mode(ctx) in ("prefill", "decode"),
        "--enable-response-store is not supported with --disaggregation-mode=prefill or decode",
        VersionRange(since="0.5.20"),
    ),
)
def _decode_sets(name: str) -> Condition:
    return lambda ctx: _pd_mode(ctx) == "decode" and ctx.get(name) is not None


def _decode_dp_without_round_robin(ctx: LaunchContext) -> bool:
    return (
        _pd_mode(ctx) == "decode"
        and ctx.int("dp_size", 1) > 1
        and not ctx.on("prefill_round_robin_balance")
    )


def _transport(ctx: LaunchContext) -> object:
    return ctx.get("mm_feature_transport")


_ROUND_ROBIN = ("Prefill round robin balance is required when dp size > 1. Please make sure that "
                "the prefill instance is launched with `--load-balance-method round_robin` and "
                "`--prefill-round-robin-balance` is set for decode server.")
_DECODE_TP, _DECODE_DP = ("Cannot set --disaggregation-decode-tp for the decode engine.",
                          "Cannot set --disaggregation-decode-dp for the decode engine.")
_DECODE_ENGINE = ((VersionRange(until="0.5.3"), "ServerArgs.__post_init__"),
                  (VersionRange(since="0.5.3", until="0.5.7"), "handle_disaggregation"),
                  (VersionRange(since="0.5.7", until="0.5.10"), "handle_pd_disaggregation"))
PD_OPTIONS += (
    *(
        Refusal(f"{function}: {message}", field, _decode_sets(field), message, versions)
        for versions, function in _DECODE_ENGINE
        for message, field in (
            (_DECODE_TP, "disaggregation_decode_tp"),
            (_DECODE_DP, "disaggregation_decode_dp"),
        )
    ),
    Refusal(
        f"ServerArgs.__post_init__: {_ROUND_ROBIN}",
        "prefill_round_robin_balance",
        _decode_dp_without_round_robin,
        _ROUND_ROBIN,
        VersionRange(since="0.5.2", until="0.5.3"),
    ),
    Refusal(
        f"handle_disaggregation: {_ROUND_ROBIN}",
        "prefill_round_robin_balance",
        _decode_dp_without_round_robin,
        _ROUND_ROBIN,
        VersionRange(since="0.5.3", until="0.5.7"),
    ),
    Refusal(
        f"handle_pd_disaggregation: {_ROUND_ROBIN}",
        "prefill_round_robin_balance",
        _decode_dp_without_round_robin,
        _ROUND_ROBIN,
        VersionRange(since="0.5.7", until="0.5.8"),
    ),
    Refusal(
        "handle_cache_compatibility: --disaggregation-decode-retraction-backup=host_pool "
        "requires --disable-priority-preemption when priority scheduling is "
        "enabled.",
        "disable_priority_preemption",
        lambda ctx: (
            _retraction_backup(ctx) == "host_pool"
            and _pd_mode(ctx) == "decode"
            and ctx.int("dcp_size", 1) <= 1
            and ctx.on("enable_priority_scheduling")
            and not ctx.on("disable_priority_preemption")
        ),
        "--disaggregation-decode-retraction-backup=host_pool requires "
        "--disable-priority-preemption when priority scheduling is "
        "enabled.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "alias_bootstrap_port_to_api_port: SGLANG_RUST_SERVER serves the PD KV bootstrap "
        "registry on the api port itself; --disaggregation-bootstrap-port {} conflicts with "
        "--port {}. Drop --disaggregation-bootstrap-port (decode nodes and the PD router must "
        "then target the prefill api port).",
        "disaggregation_bootstrap_port",
        lambda ctx: (
            bool(ctx.env_true("SGLANG_RUST_SERVER"))
            and _pd_mode(ctx) == "prefill"
            and ctx.given("disaggregation_bootstrap_port")
            and ctx.server["disaggregation_bootstrap_port"]
            not in (ctx.catalog.default("disaggregation_bootstrap_port"), ctx.get("port"))
        ),
        "SGLANG_RUST_SERVER serves the PD KV bootstrap registry on the api port itself; "
        "--disaggregation-bootstrap-port conflicts with --port.",
        VersionRange(since="0.5.17"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --mm-feature-transport=cuda_ipc only supports a "
        "single node.",
        "mm_feature_transport",
        lambda ctx: _transport(ctx) == "cuda_ipc" and ctx.int("nnodes", 1) > 1,
        "--mm-feature-transport=cuda_ipc only supports a single node.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --mm-feature-transport=cuda_ipc requires NVIDIA "
        "CUDA.",
        "device",
        lambda ctx: (
            _transport(ctx) == "cuda_ipc"
            and str(ctx.get("device") or "cuda") not in ("cuda", "auto")
        ),
        "--mm-feature-transport=cuda_ipc requires NVIDIA CUDA.",
        VersionRange(since="0.5.16"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --mm-feature-transport=cuda_vmm does not support "
        "pipeline parallelism.",
        "pp_size",
        lambda ctx: _transport(ctx) == "cuda_vmm" and ctx.int("pp_size", 1) > 1,
        "--mm-feature-transport=cuda_vmm does not support pipeline parallelism.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --mm-feature-transport=cuda_vmm requires NVIDIA "
        "CUDA.",
        "device",
        lambda ctx: (
            _transport(ctx) == "cuda_vmm"
            and str(ctx.get("device") or "cuda") not in ("cuda", "auto")
        ),
        "--mm-feature-transport=cuda_vmm requires NVIDIA CUDA.",
        VersionRange(since="0.5.18"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --mm-feature-transport=cuda_vmm is not supported "
        "with SGLANG_RUST_SERVER.",
        "mm_feature_transport",
        lambda ctx: _transport(ctx) == "cuda_vmm" and bool(ctx.env_true("SGLANG_RUST_SERVER")),
        "--mm-feature-transport=cuda_vmm is not supported with SGLANG_RUST_SERVER.",
        VersionRange(since="0.5.18", until="0.5.20"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --keep-mm-feature-on-device conflicts with "
        "--mm-feature-transport=cpu. Use only --mm-feature-transport=cuda_ipc.",
        "keep_mm_feature_on_device",
        lambda ctx: ctx.on("keep_mm_feature_on_device") and _transport(ctx) == "cpu",
        "--keep-mm-feature-on-device conflicts with --mm-feature-transport=cpu.",
        VersionRange(since="0.5.16", until="0.5.18"),
    ),
    Refusal(
        "handle_multimodal_feature_transport: --keep-mm-feature-on-device conflicts with "
        "--mm-feature-transport={}. Use only --mm-feature-transport=cuda_ipc.",
        "keep_mm_feature_on_device",
        lambda ctx: ctx.on("keep_mm_feature_on_device") and _transport(ctx) in ("cpu", "cuda_vmm"),
        lambda ctx: (
            f"--keep-mm-feature-on-device conflicts with --mm-feature-transport={_transport(ctx)}."
        ),
        VersionRange(since="0.5.18", until="0.5.21"),
    ),
)
refusal_rule("SGD308", "pd-options-together",
             "A PD-disaggregation option SGLang refuses outside the mode it belongs to, or out of "
             "range (and the multimodal feature transports of encoder disaggregation).",
             "set disaggregation_mode as SGLang's message names, or drop the option", PD_OPTIONS)


def _decode_radix(ctx: LaunchContext) -> bool:
    return _pd_mode(ctx) == "decode" and ctx.on("disaggregation_decode_enable_radix_cache")


def _transfer(ctx: LaunchContext) -> object:
    return ctx.get("disaggregation_transfer_backend", "mooncake")


def _dcp_transfer(ctx: LaunchContext) -> object:
    """The transfer backend handle_pd_disaggregation's checks read: it rewrites mooncake_tcp
    (mooncake over TCP, MC_FORCE_TCP=1) to mooncake first, in every release that has the decode DCP
    check."""
    value = _transfer(ctx)
    return "mooncake" if value == "mooncake_tcp" else value


def _decode_dcp(ctx: LaunchContext) -> bool:
    return _pd_mode(ctx) == "decode" and ctx.int("dcp_size", 1) > 1


def _staging(ctx: LaunchContext) -> bool:
    return bool(ctx.env_true("SGLANG_DISAGG_STAGING_BUFFER")) and _pd_mode(ctx) in (
        "prefill",
        "decode",
    )


def _spec_name(ctx: LaunchContext) -> str | None:
    value = ctx.get("speculative_algorithm")
    return str(value).upper() if value else None


PD_TRANSFER: tuple[Refusal, ...] = (
    Refusal(
        "handle_pd_disaggregation: --disaggregation-decode-enable-radix-cache is incompatible "
        "with --enable-hisparse",
        "disaggregation_decode_enable_radix_cache",
        lambda ctx: _decode_radix(ctx) and ctx.on("enable_hisparse"),
        "--disaggregation-decode-enable-radix-cache is incompatible with --enable-hisparse",
        VersionRange(since="0.5.11"),
    ),
    Refusal(
        "handle_pd_disaggregation: --disaggregation-decode-enable-radix-cache currently "
        "requires --disaggregation-transfer-backend nixl",
        "disaggregation_transfer_backend",
        lambda ctx: (
            _decode_radix(ctx) and not ctx.on("enable_hisparse") and _transfer(ctx) != "nixl"
        ),
        "--disaggregation-decode-enable-radix-cache currently requires "
        "--disaggregation-transfer-backend nixl",
        VersionRange(since="0.5.11", until="0.5.12"),
    ),
    Refusal(
        "handle_pd_disaggregation: --disaggregation-decode-enable-radix-cache currently "
        "requires --disaggregation-transfer-backend in ('nixl', 'mooncake'), but got "
        "{}",
        "disaggregation_transfer_backend",
        lambda ctx: (
            _decode_radix(ctx)
            and not ctx.on("enable_hisparse")
            and _transfer(ctx) not in ("nixl", "mooncake")
        ),
        lambda ctx: (
            "--disaggregation-decode-enable-radix-cache currently requires "
            "--disaggregation-transfer-backend in ('nixl', 'mooncake'), but got "
            f"{_transfer(ctx)}"
        ),
        VersionRange(since="0.5.12", until="0.5.14"),
    ),
    Refusal(
        "handle_pd_disaggregation: --disaggregation-decode-enable-radix-cache is incompatible "
        "with --disaggregation-transfer-backend fake",
        "disaggregation_transfer_backend",
        lambda ctx: (
            _decode_radix(ctx) and not ctx.on("enable_hisparse") and _transfer(ctx) == "fake"
        ),
        "--disaggregation-decode-enable-radix-cache is incompatible with "
        "--disaggregation-transfer-backend fake",
        VersionRange(since="0.5.14"),
    ),
    Refusal(
        "handle_pd_disaggregation: --disaggregation-decode-enable-radix-cache is incompatible "
        "with speculative decoding (--speculative-algorithm {})",
        "speculative_algorithm",
        lambda ctx: _decode_radix(ctx) and _spec_name(ctx) not in (None, "DSPARK"),
        lambda ctx: (
            "--disaggregation-decode-enable-radix-cache is incompatible with "
            "speculative decoding (--speculative-algorithm "
            f"{ctx.get('speculative_algorithm')})"
        ),
        VersionRange(since="0.5.11", until="0.5.23"),
    ),
    Refusal(
        "handle_speculative_decoding: --disaggregation-decode-enable-radix-cache is "
        "incompatible with speculative decoding (--speculative-algorithm "
        "{})",
        "speculative_algorithm",
        lambda ctx: (
            _decode_radix(ctx)
            and _spec_name(ctx) not in (None, "DSPARK", "EAGLE", "EAGLE3", "NEXTN")
        ),
        lambda ctx: (
            "--disaggregation-decode-enable-radix-cache is incompatible with "
            "speculative decoding (--speculative-algorithm "
            f"{ctx.get('speculative_algorithm')})"
        ),
        VersionRange(since="0.5.23"),
    ),
    Refusal(
        "handle_pd_disaggregation: Prefill server does not support 'fake' as the transfer backend",
        "disaggregation_transfer_backend",
        lambda ctx: _pd_mode(ctx) == "prefill" and _transfer(ctx) == "fake",
        "Prefill server does not support 'fake' as the transfer backend",
        VersionRange(since="0.5.10"),
    ),
    Refusal(
        "handle_pd_disaggregation: SGLANG_DISAGG_STAGING_BUFFER requires "
        "disaggregation_transfer_backend='mooncake', got "
        "'{}'.",
        "disaggregation_transfer_backend",
        lambda ctx: _staging(ctx) and _transfer(ctx) != "mooncake",
        lambda ctx: (
            "SGLANG_DISAGG_STAGING_BUFFER requires "
            "disaggregation_transfer_backend='mooncake', got "
            f"'{_transfer(ctx)}'."
        ),
        VersionRange(since="0.5.10", until="0.5.12"),
    ),
    Refusal(
        "handle_pd_disaggregation: SGLANG_DISAGG_STAGING_BUFFER requires "
        "disaggregation_transfer_backend='mooncake' or 'nixl', got "
        "'{}'.",
        "disaggregation_transfer_backend",
        lambda ctx: _staging(ctx) and _transfer(ctx) not in ("mooncake", "nixl"),
        lambda ctx: (
            "SGLANG_DISAGG_STAGING_BUFFER requires "
            "disaggregation_transfer_backend='mooncake' or 'nixl', got "
            f"'{_transfer(ctx)}'."
        ),
        VersionRange(since="0.5.12"),
    ),
    Refusal(
        "handle_pd_disaggregation: Decode host receive does not yet support HiSparse or role "
        "switching",
        "disaggregation_decode_host_receive_threshold",
        lambda ctx: (
            _host_receive(ctx) and (ctx.on("enable_hisparse") or ctx.on("enable_pd_role_switch"))
        ),
        "Decode host receive does not yet support HiSparse or role switching",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_pd_disaggregation: Decode host KV buffering requires host_pool retraction",
        "disaggregation_decode_retraction_backup",
        lambda ctx: (
            _host_receive(ctx)
            and not (ctx.on("enable_hisparse") or ctx.on("enable_pd_role_switch"))
            and ctx.get("disaggregation_decode_retraction_backup") == "cpu_tensor"
        ),
        "Decode host KV buffering requires host_pool retraction",
        VersionRange(since="0.5.21"),
    ),
    Refusal(
        "handle_pd_disaggregation: PD decode DCP requires --disaggregation-transfer-backend "
        "mooncake or nixl, got {}.",
        "disaggregation_transfer_backend",
        lambda ctx: _decode_dcp(ctx) and _dcp_transfer(ctx) not in ("mooncake", "nixl"),
        lambda ctx: (
            "PD decode DCP requires --disaggregation-transfer-backend mooncake or "
            "nixl, got "
            f"{_transfer(ctx)}."
        ),
        VersionRange(since="0.5.17", until="0.5.19"),
    ),
    Refusal(
        "handle_pd_disaggregation: PD decode DCP requires --disaggregation-transfer-backend "
        "mooncake, nixl, or fake for synthetic benchmarking, got "
        "{}.",
        "disaggregation_transfer_backend",
        lambda ctx: _decode_dcp(ctx) and _dcp_transfer(ctx) not in ("mooncake", "nixl", "fake"),
        lambda ctx: (
            "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, "
            "or fake, got "
            f"{_transfer(ctx)}."
        ),
        VersionRange(since="0.5.19", until="0.5.22"),
    ),
    Refusal(
        "handle_pd_disaggregation: PD decode DCP requires --disaggregation-transfer-backend "
        "mooncake, nixl, mori, ascend, or fake for synthetic benchmarking, got "
        "{}.",
        "disaggregation_transfer_backend",
        lambda ctx: (
            _decode_dcp(ctx)
            and _dcp_transfer(ctx) not in ("mooncake", "nixl", "mori", "ascend", "fake")
        ),
        lambda ctx: (
            "PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, "
            "mori, ascend, or fake, got "
            f"{_transfer(ctx)}."
        ),
        VersionRange(since="0.5.22"),
    ),
    Refusal(
        "handle_pd_disaggregation: PD decode DCP currently requires chunk cache; "
        "--disaggregation-decode-enable-radix-cache is not supported.",
        "disaggregation_decode_enable_radix_cache",
        lambda ctx: _decode_dcp(ctx) and ctx.on("disaggregation_decode_enable_radix_cache"),
        "PD decode DCP currently requires chunk cache; "
        "--disaggregation-decode-enable-radix-cache is not "
        "supported.",
        VersionRange(since="0.5.17", until="0.5.21"),
    ),
    Refusal(
        "handle_pd_disaggregation: PD decode DCP currently requires chunk cache; "
        "--enable-hierarchical-cache is not supported.",
        "enable_hierarchical_cache",
        lambda ctx: _decode_dcp(ctx) and ctx.on("enable_hierarchical_cache"),
        "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not "
        "supported.",
        VersionRange(since="0.5.17", until="0.5.21"),
    ),
)
def _prefill_complete_unsupported(ctx: LaunchContext) -> list[str]:
    """What `--disaggregation-decode-allocation-policy prefill_complete` does not support yet
    (0.5.22+)."""
    found = []
    if _pd_mode(ctx) not in ("prefill", "decode"):
        found.append("aggregated serving")
    if _transfer(ctx) != "mooncake":
        found.append("transfer backends other than Mooncake")
    if ctx.int("pp_size", 1) != 1 or ctx.int("attn_cp_size", 1) != 1 or ctx.int("dcp_size", 1) != 1:
        found.append("pipeline or attention context parallelism")
    # SGLang compares with dp_size under enable_dp_attention, which it has already turned into
    # attn_dp_size.
    if ctx.int("tp_size", 1) != 1:
        found.append("attention tensor parallelism greater than one")
    if ctx.on("enable_pdmux"):
        found.append("PD multiplexing or decoupled speculation")
    if ctx.on("enable_pd_role_switch"):
        found.append("runtime PD role switching")
    if ctx.on("encoder_only") or ctx.on("language_only"):
        found.append("encoder disaggregation")
    if ctx.on("enable_hisparse"):
        found.append("HiSparse")
    if _host_receive(ctx):
        found.append("decode host KV buffering")
    if _pd_mode(ctx) == "decode" and (ctx.on("disaggregation_decode_enable_radix_cache")
                                      or ctx.on("enable_hierarchical_cache")):
        found.append("decode radix cache or decode HiCache")
    if bool(ctx.env_true("SGLANG_DISAGG_STAGING_BUFFER")):
        found.append("staging buffers")
    if bool(ctx.env_true("SGLANG_RUST_SERVER")):
        found.append("the Rust bootstrap registry")
    return found


PD_TRANSFER += (
    Refusal(
        "validate_prefill_complete: --disaggregation-decode-allocation-policy prefill_complete "
        "does not yet support {}",
        "disaggregation_decode_allocation_policy",
        lambda ctx: (
            ctx.get("disaggregation_decode_allocation_policy") == "prefill_complete"
            and bool(_prefill_complete_unsupported(ctx))
        ),
        lambda ctx: (
            "--disaggregation-decode-allocation-policy prefill_complete does not yet "
            "support " + ", ".join(_prefill_complete_unsupported(ctx))
        ),
        VersionRange(since="0.5.22"),
    ),
)
def _role_switch_unsupported(ctx: LaunchContext) -> list[str]:
    found = []
    if ep_size(ctx) > 1:
        found.append(f"expert parallelism (--ep-size {ep_size(ctx)})")
    if moe_a2a(ctx) not in (None, "none"):
        found.append(f"MoE all-to-all (--moe-a2a-backend {moe_a2a(ctx)})")
    if ctx.int("pp_size", 1) > 1:
        found.append(f"pipeline parallelism (--pp-size {ctx.int('pp_size', 1)})")
    if ctx.int("dcp_size", 1) > 1:
        found.append(f"decode context parallelism (--dcp-size {ctx.int('dcp_size', 1)})")
    if ctx.get("speculative_algorithm"):
        found.append("speculative decoding (--speculative-algorithm "
                     f"{ctx.get('speculative_algorithm')})")
    return found


PD_TRANSFER += (
    Refusal("handle_pd_disaggregation: --enable-pd-role-switch does not rebuild role-specific "
            "state for the following features: {}. Remove these options or drop "
            "--enable-pd-role-switch.", "enable_pd_role_switch",
            lambda ctx: ctx.on("enable_pd_role_switch") and _pd_mode(ctx) in ("prefill", "decode")
            and bool(_role_switch_unsupported(ctx)),
            lambda ctx: "--enable-pd-role-switch does not rebuild role-specific state for the "
                        "following features: "
                        + ", ".join(_role_switch_unsupported(ctx)), VersionRange(since="0.5.21")),
)
refusal_rule("SGD309", "pd-transfer-requirements",
             "What a PD-disaggregated node requires of its transfer backend and caches (decode "
             "radix cache, the fake backend, the staging buffer, decode host receive, decode DCP).",
             "choose the transfer backend or cache SGLang's message names, or drop the "
             "option", PD_TRANSFER)
