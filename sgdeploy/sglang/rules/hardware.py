"""SGD4xx: options that need a GPU generation (compute capability) the host may not have."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sgdeploy.sglang.rule import Finding, LaunchContext
from sgdeploy.sglang.rules.common import TRTLLM_MHA_PREFILL_BLACKWELL_ONLY, V1X, V2X, server_field
from sgdeploy.sglang.rules.registry import ERROR, WARNING, rule
from sgdeploy.sglang.versions import ALL_VERSIONS, VersionRange


@dataclass(frozen=True)
class SmGate:
    fields: tuple[str, ...]
    value: Any  # the value that needs the GPU generation (True for switches)
    min_sm: int
    need: str
    versions: VersionRange = ALL_VERSIONS


SM_GATES: tuple[SmGate, ...] = (
    SmGate(("attention_backend", "prefill_attention_backend"), "trtllm_mha", 100, "Blackwell (SM100)",
           TRTLLM_MHA_PREFILL_BLACKWELL_ONLY),
    SmGate(("attention_backend", "prefill_attention_backend"), "trtllm_mha", 90, "Hopper (SM90) or newer",
           VersionRange(since="0.5.19")),
    SmGate(("decode_attention_backend",), "trtllm_mha", 90, "Hopper (SM90) or newer"),
    # SGLang checks the attention and decode backends only (a prefill backend equal to the decode
    # one becomes the attention backend, which the decode field already covers).
    SmGate(("attention_backend", "decode_attention_backend"), "trtllm_mla", 100, "Blackwell (SM100/SM12x)"),
    SmGate(("attention_backend", "decode_attention_backend"), "cutedsl_mla", 100, "Blackwell (SM100)"),
    SmGate(("attention_backend", "decode_attention_backend"), "tokenspeed_mla", 100, "Blackwell (SM100)"),
    SmGate(("kv_cache_dtype",), "nvfp4", 100, "Blackwell SM100 or SM120"),
    SmGate(("kv_cache_dtype",), "mxfp8", 100, "an SM100+ (Blackwell) GPU"),
    SmGate(("kv_cache_dtype",), "fp4_mx_block16", 100, "an SM100+ (Blackwell) GPU"),
    SmGate(("quantization",), "nvfp4_online", 100, "an SM100+ (Blackwell) GPU"),
    SmGate(("enable_deepseek_v4_fp4_indexer",), True, 100, "SM100/SM120"),
    SmGate(("moe_a2a_backend", "moe_runner_backend"), "megamoe", 90, "SM90 or SM100"),
)


def _below(ctx: LaunchContext, min_sm: int) -> bool:
    return ctx.host is not None and ctx.host.sm is not None and ctx.host.sm < min_sm


def _gpu_words(ctx: LaunchContext) -> str:
    assert ctx.host is not None
    return f"{ctx.host.name} has {ctx.host.gpu or 'GPUs'} (SM{ctx.host.sm})"


@rule("SGD401", "nccl-nvls-needs-sm90", WARNING,
      "NCCL NVLS (enable_nccl_nvls) needs NVSwitch multicast, which only SM90+ systems have: elsewhere it does "
      "nothing.",
      "remove enable_nccl_nvls on this host")
def nccl_nvls(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_nccl_nvls") and _below(ctx, 90):
        yield Finding("server.enable_nccl_nvls", f"enable_nccl_nvls has no effect: NVLS needs an SM90+ GPU with "
                      f"NVSwitch and {_gpu_words(ctx)}; SGLang exports NCCL_NVLS_ENABLE=1 and NCCL falls back silently")


@rule("SGD402", "allreduce-fusion-needs-sm90", ERROR,
      "FlashInfer all-reduce fusion requires SM90 or SM10x GPUs; SGLang raises when the model runner starts.",
      "remove flashinfer_allreduce_fusion_backend / enable_flashinfer_allreduce_fusion on this host",
      versions=V2X)
def allreduce_fusion_v2(ctx: LaunchContext) -> Iterator[Finding]:
    for name in ("flashinfer_allreduce_fusion_backend", "enable_flashinfer_allreduce_fusion"):
        if ctx.given(name) and ctx.server[name] not in (None, False) and _below(ctx, 90):
            yield Finding(server_field(name), f"FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs; "
                          f"{_gpu_words(ctx)}")


@rule("SGD403", "allreduce-fusion-ignored", WARNING,
      "On GPUs below SM90, SGLang 0.5.1x accepts enable_flashinfer_allreduce_fusion but never uses it.",
      "remove enable_flashinfer_allreduce_fusion on this host", versions=V1X)
def allreduce_fusion_v1(ctx: LaunchContext) -> Iterator[Finding]:
    if ctx.on("enable_flashinfer_allreduce_fusion") and _below(ctx, 90):
        yield Finding("server.enable_flashinfer_allreduce_fusion", "enable_flashinfer_allreduce_fusion has no "
                      f"effect: the fused path needs SM90/SM100 and {_gpu_words(ctx)}")


@rule("SGD404", "needs-newer-gpu", ERROR, "An option SGLang accepts only on a newer GPU generation.",
      "choose another backend or dtype for this GPU")
def needs_newer_gpu(ctx: LaunchContext) -> Iterator[Finding]:
    for gate in SM_GATES:
        if ctx.version not in gate.versions or not _below(ctx, gate.min_sm):
            continue
        for name in gate.fields:
            if ctx.given(name) and ctx.server[name] == gate.value:
                shown = f"{name} = {gate.value!r}" if gate.value is not True else name
                yield Finding(server_field(name), f"{shown} requires {gate.need}; {_gpu_words(ctx)}")


@rule("SGD405", "mis-needs-flashinfer", ERROR,
      "enable_mis needs the flashinfer attention backend, which is the default only below SM90.",
      "set attention_backend = \"flashinfer\"")
def mis_needs_flashinfer(ctx: LaunchContext) -> Iterator[Finding]:
    backend = ctx.get("attention_backend")
    sm = ctx.host.sm if ctx.host else None
    if ctx.on("enable_mis") and (backend not in (None, "flashinfer") or (backend is None and sm and sm >= 90)):
        yield Finding("server.enable_mis", "Multi-item scoring requires the flashinfer attention backend")
