#!/usr/bin/env python3
"""A deterministic corpus of launches for one SGLang version, to ask SGLang and sgdeploy about.

Each case is a `[server]` table (ServerArgs field names, as a profile has them), an `[env]`, a
simulated host (GPU model, count) and one of the oracle's config-only model folders; `argv` is
what sgdeploy renders from it (`sgdeploy.deploy.render.flag_args`), so SGLang sees exactly what a
deploy would run. The lines are in the batch format of ../shared/oracle (`id`, `gpu`,
`gpu_count`, `model`, `env`, `argv`) with `version`, `server` and `origin` added.

Kinds of case, all drawn from the bundled catalog and check-site inventory of the version:

- `base`: every model on every GPU model and count, tp = count.
- `flag`: every flag alone with in-range values, out-of-range values and values of the wrong
  type or outside its choices (argparse refusals).
- `site`: for every refusal site of the check-site inventory, the flags its message and
  condition name, set together (in-range values), a few draws each.
- `group`: random combinations inside hand-picked groups of related flags (parallelism,
  speculative decoding, disaggregation, hardware generation, CUDA graphs, memory, LoRA,
  serving, elastic EP), where SGLang's resolution order matters.

    .venv/bin/python bench/fidelity/corpus.py --version 0.5.23 -o /tmp/c.jsonl [--seed 1]

The seed picks the draws (GPU, model, values); seed 0 is the corpus the numbers in
docs/fidelity.md are measured on, another seed gives a held-out corpus of the same shape.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sgdeploy.deploy.render import flag_args  # noqa: E402
from sgdeploy.sglang.catalog import Catalog, Flag, load_catalog  # noqa: E402
from sgdeploy.sglang.checksites import refusal_sites  # noqa: E402

# The oracle's simulated GPUs: its name -> (name, compute capability, GiB) as an inventory has them.
GPUS = {
    "A6000": ("NVIDIA RTX A6000", "8.6", 48),
    "H200": ("NVIDIA H200", "9.0", 141),
    "B200": ("NVIDIA B200", "10.0", 180),
}
COUNTS = (1, 2, 4, 8)
MODELS = ("qwen3.6-27b", "deepseek-v3", "qwen3-30b-a3b", "llama-3.1-8b", "qwen3-vl-8b", "qwen3-8b")
DRAFT_MODEL = "@qwen3-tiny"

# Flags the corpus leaves alone: the model itself, and flags that read files, open sockets or
# print and exit instead of launching.
SKIPPED = {"model_path", "config", "help", "version", "tokenizer_path", "model_loader_extra_config"}

# Values that exercise a flag's checks better than a generic draw.
SPECIAL: dict[str, list[Any]] = {
    "tp_size": [1, 2, 3, 4, 8], "dp_size": [1, 2, 3, 4], "pp_size": [1, 2], "ep_size": [1, 2, 4, 8],
    "attn_dp_size": [1, 2, 4], "attn_cp_size": [1, 2, 4], "dcp_size": [1, 2, 4], "moe_dp_size": [1, 2],
    "nnodes": [1, 2], "node_rank": [0, 1, 2], "moe_dense_tp_size": [1, 2],
    "speculative_num_steps": [1, 3, 5], "speculative_eagle_topk": [1, 2, 4],
    "speculative_num_draft_tokens": [2, 4, 8, 16], "speculative_draft_model_path": [DRAFT_MODEL],
    "page_size": [1, 16, 64], "chunked_prefill_size": [-1, 2048, 8192], "max_running_requests": [16, 256],
    "mem_fraction_static": [0.5, 0.88, 0.0, 1.2], "cuda_graph_max_bs": [8, 64, 512],
    "encoder_urls": [["http://127.0.0.1:30001"]], "dist_init_addr": ["127.0.0.1:5000"],
    "lora_paths": [["adapter=/adapters/a"]], "max_lora_rank": [8, 64], "max_loras_per_batch": [1, 8],
    "context_length": [4096, 131072, 10_000_000], "schedule_conservativeness": [0.3, 1.0, -1.0],
    "swa_full_tokens_ratio": [0.5, 1.5, -0.5], "ep_num_redundant_experts": [0, 8],
    "max_ep_size": [4, 16], "elastic_ep_initial_size": [2, 4, 8], "ep_join_rank_offset": [0, 4, 8],
}
SMALL_INTS = (1, 2, 4, 8, 64)
FLOATS = (0.5, 1.0, 0.0, -0.5, 1.5)

# Related flags whose combinations the resolution order decides, by topic.
GROUPS: dict[str, tuple[str, ...]] = {
    "parallelism": (
        "tp_size", "dp_size", "pp_size", "ep_size", "enable_dp_attention", "attn_dp_size", "moe_a2a_backend",
        "moe_runner_backend", "enable_dp_lm_head", "moe_dense_tp_size", "enable_eplb", "ep_num_redundant_experts",
        "attn_cp_size", "dcp_size", "enable_two_batch_overlap", "enable_single_batch_overlap", "nnodes",
        "node_rank", "load_balance_method", "deepep_mode", "enable_prefill_context_parallel", "moe_dp_size",
        "enable_expert_distribution_metrics", "expert_distribution_recorder_mode", "init_expert_location",
    ),
    "speculative": (
        "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
        "speculative_draft_model_path", "page_size", "attention_backend", "enable_mixed_chunk", "pp_size",
        "enable_dp_attention", "dp_size", "tp_size", "speculative_adaptive", "speculative_moe_runner_backend",
        "speculative_attention_mode", "enable_return_hidden_states", "disable_overlap_schedule",
        "speculative_draft_attention_backend", "enable_multi_layer_eagle", "max_running_requests",
        "disaggregation_mode", "mamba_scheduler_strategy", "speculative_ngram_max_bfs_breadth",
    ),
    "disaggregation": (
        "disaggregation_mode", "disaggregation_transfer_backend", "disaggregation_decode_tp",
        "disaggregation_decode_dp", "encoder_only", "language_only", "encoder_urls", "enable_pdmux",
        "chunked_prefill_size", "load_balance_method", "prefill_round_robin_balance", "enable_prefix_mm_cache",
        "disaggregation_bootstrap_port", "enable_dp_attention", "dp_size", "tp_size", "pp_size",
        "encoder_transfer_backend", "disaggregation_decode_enable_offload_kvcache", "enable_hierarchical_cache",
    ),
    "hardware": (
        "attention_backend", "prefill_attention_backend", "decode_attention_backend", "kv_cache_dtype",
        "quantization", "enable_nccl_nvls", "enable_flashinfer_allreduce_fusion",
        "flashinfer_allreduce_fusion_backend", "moe_runner_backend", "fp8_gemm_runner_backend", "enable_symm_mem",
        "mm_attention_backend", "sampling_backend", "device", "enable_deterministic_inference",
        "fp4_gemm_runner_backend", "enable_mis", "tp_size",
    ),
    "cuda_graphs": (
        "disable_cuda_graph", "cuda_graph_max_bs", "cuda_graph_bs", "enforce_piecewise_cuda_graph",
        "disable_piecewise_cuda_graph", "piecewise_cuda_graph_max_tokens", "cuda_graph_backend_prefill",
        "cuda_graph_backend_decode", "disable_prefill_cuda_graph", "disable_decode_cuda_graph",
        "enable_torch_compile", "torch_compile_max_bs", "speculative_algorithm", "enable_dp_attention", "pp_size",
        "attention_backend", "piecewise_cuda_graph_compiler", "enable_lora",
    ),
    "memory": (
        "mem_fraction_static", "page_size", "disable_radix_cache", "enable_hierarchical_cache", "hicache_ratio",
        "hicache_size", "mamba_scheduler_strategy", "mamba_full_memory_ratio", "max_mamba_cache_size",
        "swa_full_tokens_ratio", "kv_cache_dtype", "chunked_prefill_size", "max_total_tokens", "context_length",
        "hicache_storage_backend", "enable_lmcache", "cpu_offload_gb", "radix_eviction_policy",
    ),
    "lora": (
        "enable_lora", "lora_paths", "max_lora_rank", "lora_target_modules", "max_loras_per_batch",
        "max_loaded_loras", "lora_backend", "lora_eviction_policy", "tp_size", "disable_radix_cache",
        "enable_lora_overlap_loading",
    ),
    "serving": (
        "port", "host", "api_key", "admin_api_key", "ssl_keyfile", "ssl_certfile", "enable_ssl_refresh",
        "export_metrics_to_file", "export_metrics_to_file_dir", "enable_metrics", "tokenizer_worker_num",
        "skip_tokenizer_init", "grpc_mode", "schedule_policy", "schedule_conservativeness",
        "enable_priority_scheduling", "served_model_name", "reasoning_parser", "tool_call_parser",
    ),
    "elastic_ep": (
        "elastic_ep_backend", "max_ep_size", "ep_join_mode", "ep_join_rank_offset", "elastic_ep_initial_size",
        "enable_eplb", "eplb_algorithm", "pp_size", "attn_dp_size", "enable_dp_attention", "dp_size",
        "enable_dp_lm_head", "moe_a2a_backend", "node_rank", "load_balance_method", "tp_size", "moe_dense_tp_size",
        "cuda_graph_backend_decode", "cuda_graph_backend_prefill", "disable_cuda_graph",
    ),
}
GROUP_DRAWS = 60  # combinations per group
SITE_DRAWS = 3  # draws per refusal site
_WORD = re.compile(r"--[a-z0-9][a-z0-9-]*|[a-z][a-z0-9_]+")


def values_for(flag: Flag) -> list[tuple[Any, bool]]:
    """Values to try for one flag: (value, SGLang's parser should take it)."""
    if flag.is_switch:
        return [(True, True), (False, True)] if flag.boolean_optional else [(not flag.store_false, True)]
    if flag.field in SPECIAL:
        good = [(v, True) for v in SPECIAL[flag.field]]
    elif flag.choices:
        good = [(c, True) for c in flag.choices if c is not None]
    elif flag.value_kind == "int":
        default = flag.default if isinstance(flag.default, int) and not isinstance(flag.default, bool) else None
        good = [(v, True) for v in {*SMALL_INTS[:3], *((default * 2, 0, -1) if default else (0, -1))}]
    elif flag.value_kind == "float":
        good = [(v, True) for v in FLOATS]
    elif flag.value_kind == "json":
        good = [({}, True), ({"a": 1}, True)]
    else:
        good = [("x", True), ("auto", True)]
    if flag.is_list:
        good = [(v if isinstance(v, list) else [v], ok) for v, ok in good]
    bad: list[tuple[Any, bool]] = []
    if flag.choices:
        bad.append(("not-a-choice", False))
    if flag.value_kind in ("int", "float"):
        bad.append(("abc", False))
    if flag.value_kind == "json" and not flag.is_list:
        bad.append(("{not json", False))
    return good + bad


def valid_values(flag: Flag) -> list[Any]:
    return [value for value, ok in values_for(flag) if ok]


def fields_named(text: str, catalog: Catalog) -> list[str]:
    """Catalog fields a check's message or condition names (`tp_size`, `--tp-size`)."""
    found: list[str] = []
    for word in _WORD.findall(text):
        flag = catalog.by_option.get(word) if word.startswith("--") else catalog.get(word)
        if flag is not None and flag.field not in SKIPPED and flag.field not in found:
            found.append(flag.field)
    return found


class Builder:
    """Cases of one version and seed, with ids unique by origin."""

    def __init__(self, version: str, seed: int) -> None:
        self.catalog = load_catalog(version)
        self.version = self.catalog.version
        self.seed = seed
        self.cases: list[dict[str, Any]] = []
        self._seen: set[str] = set()

    def rng(self, origin: str) -> random.Random:
        return random.Random(f"{self.version}:{self.seed}:{origin}")

    def host(self, rng: random.Random) -> tuple[str, int, str]:
        return rng.choice(list(GPUS)), rng.choice(COUNTS), rng.choice(MODELS)

    def add(self, origin: str, server: dict[str, Any], gpu: str, count: int, model: str,
            env: dict[str, str] | None = None) -> None:
        argv: list[str] = []
        for key, value in server.items():
            flag = self.catalog.get(key)
            assert flag is not None, key
            argv.extend(flag_args(flag, value))
        signature = json.dumps([server, gpu, count, model, env or {}], sort_keys=True, default=str)
        if signature in self._seen:
            return
        self._seen.add(signature)
        self.cases.append({
            "id": f"{self.version}/{origin}/{len(self.cases)}", "version": self.version, "origin": origin,
            "gpu": gpu, "gpu_count": count, "model": model, "env": env or {}, "server": server, "argv": argv,
        })

    def with_tp(self, server: dict[str, Any], count: int) -> dict[str, Any]:
        """The launch on `count` GPUs: tp = count unless the case sets a parallel size itself."""
        sizes = {"tp_size", "dp_size", "pp_size", "attn_dp_size", "ep_size"}
        if count > 1 and not sizes & set(server):
            return {"tp_size": count, **server}
        return server

    def base(self) -> None:
        for gpu in GPUS:
            for count in COUNTS:
                for model in MODELS:
                    self.add("base", self.with_tp({}, count), gpu, count, model)

    def flags(self) -> None:
        for name in sorted(self.catalog.flags):
            if name in SKIPPED:
                continue
            flag = self.catalog.flags[name]
            for index, (value, _) in enumerate(values_for(flag)):
                gpu, count, model = self.host(self.rng(f"flag:{name}:{index}"))
                self.add(f"flag:{name}", self.with_tp({name: value}, count), gpu, count, model)

    def sites(self) -> None:
        for site in refusal_sites(self.version):
            text = " ".join(str(site.get(k) or "") for k in ("message", "condition"))
            names = fields_named(text, self.catalog)[:4]
            if not names:
                continue
            for draw in range(SITE_DRAWS):
                rng = self.rng(f"site:{site['key']}:{draw}")
                server = {n: rng.choice(valid_values(self.catalog.flags[n])) for n in names}
                gpu, count, model = self.host(rng)
                self.add(f"site:{site['function'].rsplit('.', 1)[-1]}", self.with_tp(server, count), gpu, count,
                         model)

    def groups(self) -> None:
        for topic, members in GROUPS.items():
            present = [n for n in members if n in self.catalog and n not in SKIPPED]
            for draw in range(GROUP_DRAWS):
                rng = self.rng(f"group:{topic}:{draw}")
                names = sorted(rng.sample(present, k=min(len(present), rng.choice((2, 3, 4)))))
                server = {n: rng.choice(valid_values(self.catalog.flags[n])) for n in names}
                gpu, count, model = self.host(rng)
                env = {"SGLANG_ENABLE_SPEC_V2": rng.choice(("0", "1"))} if topic == "speculative" and draw % 4 == 0 \
                    else None
                self.add(f"group:{topic}", self.with_tp(server, count), gpu, count, model, env)


def build(version: str, seed: int = 0) -> list[dict[str, Any]]:
    """Every case of one version and seed, in a fixed order."""
    builder = Builder(version, seed)
    builder.base()
    builder.flags()
    builder.sites()
    builder.groups()
    return builder.cases


def iter_lines(cases: list[dict[str, Any]]) -> Iterator[str]:
    for case in cases:
        yield json.dumps(case, sort_keys=True, ensure_ascii=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="SGLang version with a bundled catalog")
    parser.add_argument("--seed", type=int, default=0, help="0: the measured corpus; other: a held-out one")
    parser.add_argument("-o", "--output", help="JSONL file (default: stdout)")
    args = parser.parse_args(argv)
    lines = "\n".join(iter_lines(build(args.version, args.seed))) + "\n"
    if args.output:
        Path(args.output).write_text(lines, encoding="utf-8")
    else:
        sys.stdout.write(lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
