"""Every validation rule sgdeploy applies to a launch, one module per topic.

`registry.RULES` is the one list; importing this package registers every topic's rules in it.
A rule for a new SGLang check goes into the module of its topic:

- `flags`: [server] keys against the version's flag catalog (SGD01x)
- `security`: values a unit cannot carry, secrets (SGD02x)
- `parallelism`: GPU counts, tp/pp/dp/ep, MoE, multi-node (SGD1xx)
- `speculative`: speculative decoding (SGD2xx)
- `disaggregation`: encoder and PD disaggregation (SGD3xx)
- `hardware`: GPU generation gates (SGD4xx)
- `memory`: memory fraction, KV and radix cache, Mamba state (SGD5xx)
- `kv_cache`: KV sharding, the unified pool, page-major layout, HiSparse, Mamba state
(SGD551-SGD557)
- `lora`: LoRA adapters, with speculative decoding and the LoRA MoE runners (SGD52x)
- `serving`: ports, names, scheduling, API surface (SGD5xx)
- `cuda_graphs`: CUDA graphs and what SGLang turns off by itself (SGD6xx)
- `model`: checks that read the model's config.json, when one is known (SGD58x)
- `weight_cache`: the weight-cache daemon, `--weight-cache-mode` (SGD54x)
"""

from __future__ import annotations

from sgdeploy.sglang.rules import (  # noqa: F401  (importing registers the rules)
    cuda_graphs,
    disaggregation,
    flags,
    hardware,
    kv_cache,
    lora,
    memory,
    model,
    parallelism,
    security,
    serving,
    speculative,
    weight_cache,
)
from sgdeploy.sglang.rules.parallelism import gpus_per_node
from sgdeploy.sglang.rules.registry import CLUSTER_RULES, HOST_RULES, RULES, STRUCTURAL_RULES

__all__ = ["CLUSTER_RULES", "HOST_RULES", "RULES", "STRUCTURAL_RULES", "gpus_per_node", "rule_ids"]


def rule_ids() -> list[str]:
    return sorted([*STRUCTURAL_RULES, *(r.id for r in RULES)])
