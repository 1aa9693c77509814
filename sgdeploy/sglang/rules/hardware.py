"""SGD4xx: options that need a GPU generation (compute capability) the host may not have.

SGLang gates an option on the compute-capability major (`is_sm90_supported()` is SM9x only,
`is_sm100_supported()` SM10x only, `is_blackwell_supported()` SM10x-SM12x), so an RTX PRO 6000
(SM120) fails a gate an H200 passes. Which majors each gate lets through is read from each
release (`sm_gate:<gate>` in catalogs/facts.json); a gate the release does not have never fires.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sgdeploy.sglang.facts import fact
from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.attention import resolve
from sgdeploy.sglang.rules.common import V1X, V2X, algorithm, server_field
from sgdeploy.sglang.rules.parallelism import attn_dp_size, ep_size
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule


@dataclass(frozen=True)
class SmGate:
    """An option SGLang refuses on some GPU generations: which ones is the fact
    `sm_gate:<gate>` of the release."""

    gate: str
    fields: tuple[str, ...]
    values: tuple[Any, ...]  # the values that need the GPU generation (True for switches)
    # "any": each field is checked; "first": SGLang reads the first field that is set (the prefill
    # and decode backends fall back to attention_backend)
    read: str = "any"
    alias_of: str | None = None  # the gate that applies where SGLang maps the value to another one


_BACKENDS = ("attention_backend", "decode_attention_backend")
SM_GATES: tuple[SmGate, ...] = (
    SmGate("trtllm_mha", (*_BACKENDS, "prefill_attention_backend"), ("trtllm_mha",)),  # up to 0.5.9
    SmGate(
        "trtllm_mha_prefill",
        ("prefill_attention_backend", "attention_backend"),
        ("trtllm_mha",),
        "first",
    ),
    SmGate(
        "trtllm_mha_decode",
        ("decode_attention_backend", "attention_backend"),
        ("trtllm_mha",),
        "first",
    ),
    SmGate("trtllm_mla", _BACKENDS, ("trtllm_mla",)),
    SmGate("cutedsl_mla", _BACKENDS, ("cutedsl_mla",)),
    # an alias from 0.5.23
    SmGate("tokenspeed_mla", _BACKENDS, ("tokenspeed_mla",), alias_of="cutedsl_mla"),
    SmGate("kv_cache_nvfp4", ("kv_cache_dtype",), ("nvfp4",)),
    SmGate("kv_cache_mxfp8", ("kv_cache_dtype",), ("mxfp8",)),
    SmGate("quantization_nvfp4_online", ("quantization",), ("nvfp4_online",)),
    SmGate("deepseek_v4_fp4_indexer", ("enable_deepseek_v4_fp4_indexer",), (True,)),
    SmGate("megamoe_a2a", ("moe_a2a_backend",), ("megamoe",)),
)


def major(ctx: LaunchContext) -> int | None:
    """The host's compute-capability major (SM86 -> 8), what SGLang's is_sm*_supported() read."""
    return ctx.host.sm // 10 if ctx.host is not None and ctx.host.sm is not None else None


def gate_fact(gate: str, ctx: LaunchContext) -> dict[str, Any] | None:
    """{"majors": where SGLang lets the option through, "message": its refusal}, or None where
    this release has no such gate."""
    value = fact(f"sm_gate:{gate}", ctx.version)
    return value if isinstance(value, dict) else None


def refused_here(gate: str, ctx: LaunchContext) -> dict[str, Any] | None:
    """The gate's fact when the host's GPU generation is outside the majors it lets through."""
    found, host_major = gate_fact(gate, ctx), major(ctx)
    return (
        found
        if found is not None and host_major is not None and host_major not in found["majors"]
        else None
    )


def _gated_fields(ctx: LaunchContext, gate: SmGate) -> Iterator[str]:
    if gate.read == "first":
        name = next((n for n in gate.fields if ctx.get(n) is not None), None)
        if name is not None and ctx.given(name) and ctx.server[name] in gate.values:
            yield name
        return
    yield from (n for n in gate.fields if ctx.given(n) and ctx.server[n] in gate.values)


def _majors_words(majors: list[int]) -> str:
    return ", ".join(f"SM{m}x" for m in majors) or "no NVIDIA GPU"


def _gpu_words(ctx: LaunchContext) -> str:
    assert ctx.host is not None
    return f"{ctx.host.name} has {ctx.host.gpu or 'GPUs'} (SM{ctx.host.sm})"


def _below(ctx: LaunchContext, min_sm: int) -> bool:
    return ctx.host is not None and ctx.host.sm is not None and ctx.host.sm < min_sm


@rule("SGD401", "nccl-nvls-needs-sm90", WARNING,
      "NCCL NVLS (enable_nccl_nvls) needs NVSwitch multicast, which only SM90+ systems have: "
      "elsewhere it does nothing.",
      "remove enable_nccl_nvls on this host")
def nccl_nvls(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_nccl_nvls") and _below(ctx, 90):
        yield Finding("server.enable_nccl_nvls", "enable_nccl_nvls has no effect: NVLS needs an "
                      f"SM90+ GPU with NVSwitch and {_gpu_words(ctx)}; SGLang exports "
                      "NCCL_NVLS_ENABLE=1 and NCCL falls back silently")


# Where SGLang runs the FlashInfer all-reduce fusion: SM9x and SM10x (0.5.1x: communicator.py
# `_is_sm90_supported or _is_sm100_supported`; 0.5.14+: flashinfer_comm_fusion._resolve_backend).
FUSION_MAJORS_V1X = (9, 10)


def _fusion_backend(ctx: LaunchContext) -> str | None:
    """The fusion backend SGLang resolves: the deprecated switch becomes "auto"; deterministic
    inference and the enforce-disable switch turn it off (0.5.2x)."""
    backend = ctx.get("flashinfer_allreduce_fusion_backend")
    if backend is None and ctx.on("enable_flashinfer_allreduce_fusion"):
        backend = "auto"
    if ctx.on("enforce_disable_flashinfer_allreduce_fusion"):
        return None
    if ctx.on("enable_deterministic_inference") and ctx.has_flag(
        "enforce_disable_flashinfer_allreduce_fusion"
    ):
        return None
    return backend if isinstance(backend, str) else None


def _fusion_group_wider_than_one(ctx: LaunchContext) -> bool:
    """The workspace is set up (and the backend resolved) only for an attention-TP or MoE-TP group
    of more than one rank."""
    tp = ctx.int("tp_size", 1)
    return tp // max(attn_dp_size(ctx), 1) > 1 or tp // max(ep_size(ctx), 1) > 1


@rule("SGD402", "allreduce-fusion-needs-sm90", ERROR,
      "FlashInfer all-reduce fusion runs on SM9x and SM10x GPUs only (the cutedsl backend on "
      "SM10x): on any other GPU (SM8x, SM12x) SGLang 0.5.14+ raises when the model runner starts "
      "with tp_size > 1.",
      "remove flashinfer_allreduce_fusion_backend / enable_flashinfer_allreduce_fusion on this "
      "host",
      versions=V2X)
def allreduce_fusion_v2(ctx: LaunchContext) -> Iterator[Finding]:
    backend = _fusion_backend(ctx)
    if backend is None:
        return
    gate = refused_here("allreduce_fusion_cutedsl", ctx) if backend == "cutedsl" else None
    if gate is None and (backend == "cutedsl" or _fusion_group_wider_than_one(ctx)):
        gate = refused_here("allreduce_fusion", ctx)
    if gate is None:
        return
    name = next(
        (
            n
            for n in ("flashinfer_allreduce_fusion_backend", "enable_flashinfer_allreduce_fusion")
            if ctx.given(n)
        ),
        "flashinfer_allreduce_fusion_backend",
    )
    yield Finding(server_field(name), f"SGLang {ctx.catalog.version} raises when the model runner "
                  f"starts: '{gate['message']}' (it runs on {_majors_words(gate['majors'])}); "
                  f"{_gpu_words(ctx)}")


@rule("SGD403", "allreduce-fusion-ignored", WARNING,
      "SGLang 0.5.1x accepts enable_flashinfer_allreduce_fusion on any GPU but uses it only on "
      "SM9x and SM10x.",
      "remove enable_flashinfer_allreduce_fusion on this host", versions=V1X)
def allreduce_fusion_v1(ctx: LaunchContext) -> Iterator[Finding]:
    host_major = major(ctx)
    if (
        ctx.on("enable_flashinfer_allreduce_fusion")
        and host_major is not None
        and host_major not in FUSION_MAJORS_V1X
    ):
        yield Finding(
            "server.enable_flashinfer_allreduce_fusion",
            "enable_flashinfer_allreduce_fusion has no "
            f"effect: the fused path runs on SM9x/SM10x only and {_gpu_words(ctx)}",
        )


@rule("SGD404", "needs-newer-gpu", ERROR, "An option SGLang accepts only on some GPU generations.",
      "choose another backend or dtype for this GPU")
def needs_newer_gpu(ctx: LaunchContext) -> Iterator[Finding]:
    for gate in SM_GATES:
        fields = list(_gated_fields(ctx, gate))
        name = (
            gate.gate
            if gate_fact(gate.gate, ctx) is not None or gate.alias_of is None
            else gate.alias_of
        )
        found = refused_here(name, ctx) if fields else None
        if found is None:
            continue
        for field_name in fields:
            value = ctx.server[field_name]
            shown = f"{field_name} = {value!r}" if value is not True else field_name
            yield Finding(server_field(field_name), f"{shown}: SGLang {ctx.catalog.version} "
                          f"refuses it on this GPU ('{found['message']}'; it runs on "
                          f"{_majors_words(found['majors'])}); {_gpu_words(ctx)}")


@rule("SGD405", "mis-needs-flashinfer", ERROR,
      "enable_mis needs flashinfer as both the prefill and the decode attention backend, as SGLang "
      "resolves them (its default for a non-MLA model is flashinfer below SM90 and on SM12x, and "
      "on SM100 with deterministic inference from 0.5.15).",
      "set attention_backend = \"flashinfer\" (and no other prefill_/decode_attention_backend)")
def mis_needs_flashinfer(ctx: LaunchContext) -> Iterator[Finding]:
    if not ctx.on("enable_mis"):
        return
    backends = resolve(ctx)
    if backends.exact and backends.pair != ("flashinfer", "flashinfer"):
        picked = "" if ctx.given("attention_backend") else (" as SGLang resolves them for this GPU "
                                                            "and model")
        yield Finding("server.enable_mis", "SGLang refuses it: 'Multi-item scoring requires "
                      "flashinfer attention backend for custom attention mask support' "
                      f"({backends.words()}{picked})")


def _backend_readers(ctx: LaunchContext) -> list[str]:
    """The checks of this launch that read the attention backends SGLang resolves."""
    readers = []
    if ctx.on("enable_mis") and ctx.version >= (0, 5, 11, 0):
        readers.append("multi-item scoring (flashinfer for prefill and decode)")
    if algorithm(ctx) == "UNO" and ctx.version >= (0, 5, 20, 0):
        readers.append("UNO (fa3 for prefill and decode)")
    if ctx.on("enable_unified_memory") and algorithm(ctx) and ctx.version >= (0, 5, 18, 0):
        readers.append("the unified pool's speculative checks (audited backends)")
    if (
        ctx.on("enable_deterministic_inference")
        and ctx.version >= (0, 5, 15, 0)
        and not ctx.get("attention_backend")
    ):
        readers.append("deterministic inference (its backend list, after the model's own branch)")
    dtype = str(ctx.get("kv_cache_dtype") or "")
    if dtype in ("fp4_e2m1", "nvfp4", "fp4_mx_block16") and ctx.version >= (0, 5, 7, 0):
        readers.append("the FP4 KV cache (its backend lists)")
    return readers


@rule("SGD409", "attention-backend-unresolved", WARNING,
      "A check that reads the attention backends SGLang picks, on a launch whose pick sgdeploy "
      "cannot follow (no GPU facts, an architecture with a branch of its own, no model known).",
      "set attention_backend (or both prefill_ and decode_attention_backend) explicitly")
def attention_backend_unresolved(ctx: LaunchContext) -> Iterator[Finding]:
    readers = _backend_readers(ctx)
    if not readers:
        return
    backends = resolve(ctx)
    if not backends.exact:
        yield Finding("server", f"SGLang {ctx.catalog.version} picks the attention backends itself "
                      f"here and sgdeploy cannot follow its pick ({backends.why}); "
                      f"{', '.join(readers)} read(s) that pick, so they are not checked")
