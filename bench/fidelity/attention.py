#!/usr/bin/env python3
"""Does sgdeploy's model of SGLang's attention-backend pick (sgdeploy/sglang/rules/attention.py)
agree with SGLang's own resolution?

A grid of launches (every oracle model on every simulated GPU, with no backend, deterministic
inference, speculative decoding with a chain and a tree, a page size, split backends, the
radix cache off) goes to the oracle (../shared/oracle), which reports the attention_backend,
prefill and decode backends SGLang resolved; `resolve` is asked the same. Verdicts are cached in
.cache/fidelity/attention-<version>.jsonl.

    .venv/bin/python bench/fidelity/attention.py             # 0.5.11 and 0.5.23
    .venv/bin/python bench/fidelity/attention.py --cached    # never run SGLang
    .venv/bin/python bench/fidelity/attention.py --write-fixture   # tests/fixtures/attention_backends.json

The fixture keeps SGLang's answers for the accepted launches, so tests/test_attention.py holds
`resolve` against them without the oracle.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.fidelity import corpus, oracle  # noqa: E402
from bench.fidelity.run import architecture  # noqa: E402
from sgdeploy.deploy.render import flag_args  # noqa: E402
from sgdeploy.sglang.catalog import load_catalog  # noqa: E402
from sgdeploy.sglang.model_config import load_model_config  # noqa: E402
from sgdeploy.sglang.rule import LaunchContext  # noqa: E402
from sgdeploy.sglang.rules.attention import resolve  # noqa: E402
from sgdeploy.sglang.target import HostTarget  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "attention_backends.json"
FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
SPEC = {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": corpus.DRAFT_MODEL,
        "speculative_num_steps": 3}
VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "deterministic": {"enable_deterministic_inference": True},
    "eagle-chain": {**SPEC, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4},
    "eagle-tree": {**SPEC, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8},
    "eagle-no-topk": SPEC,
    "page-16": {"page_size": 16},
    "chain-page-16": {**SPEC, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "page_size": 16},
    "no-radix": {"disable_radix_cache": True},
    "split-equal": {"prefill_attention_backend": "triton", "decode_attention_backend": "triton"},
    "decode-only": {"decode_attention_backend": "triton"},
    "deterministic-split": {"enable_deterministic_inference": True, "prefill_attention_backend": "flashinfer"},
}


def cases(version: str) -> list[dict[str, Any]]:
    catalog = load_catalog(version)
    out = []
    for gpu in corpus.GPUS:
        for model in corpus.MODELS:
            for name, server in VARIANTS.items():
                if any(key not in catalog for key in server):
                    continue
                argv = [arg for key, value in server.items() for arg in flag_args(catalog.flags[key], value)]
                out.append({"id": f"{version}/{gpu}/{model}/{name}", "version": version, "gpu": gpu,
                            "gpu_count": 1, "model": model, "env": {}, "server": server, "argv": argv})
    return out


def sglang_backends(verdict: dict[str, Any]) -> dict[str, Any] | None:
    if not verdict.get("accepted"):
        return None
    adjusted = verdict.get("adjusted") or {}
    return {name: adjusted[name][1] if name in adjusted else None for name in FIELDS}


# What `resolve` reads of a config.json, kept in the fixture so the test needs no model folder.
CONFIG_KEYS = ("architectures", "kv_lora_rank", "index_topk", "head_dim", "v_head_dim", "mamba_ssm_dtype")


def config_facts(model: str) -> dict[str, Any]:
    raw = json.loads((Path(oracle.ORACLE_DIR) / "models" / model / "config.json").read_text(encoding="utf-8"))
    text = raw.get("text_config") or {}
    return {key: raw.get(key, text.get(key)) for key in CONFIG_KEYS if raw.get(key, text.get(key)) is not None}


def resolved_pair(case: dict[str, Any], theirs: dict[str, Any]) -> tuple[str | None, str | None]:
    """SGLang's (prefill, decode) after resolution: a field it left as given is the profile's."""
    def value(name: str) -> Any:
        return theirs[name] or case["server"].get(name)
    base = value("attention_backend")
    return value("prefill_attention_backend") or base, value("decode_attention_backend") or base


def ours(case: dict[str, Any]) -> tuple[tuple[str | None, str | None], bool]:
    name, capability, memory = corpus.GPUS[case["gpu"]]
    model_dir = Path(oracle.ORACLE_DIR) / "models" / case["model"]
    config = load_model_config(model_dir) if (model_dir / "config.json").exists() else None
    catalog = load_catalog(case["version"])
    server = {**case["server"]}
    for key, value in case["server"].items():
        if key in FIELDS:
            server[key] = value
    ctx = LaunchContext(server=server, env={}, catalog=catalog,
                        host=HostTarget("h", gpu=name, compute_capability=capability, gpu_count=1,
                                        gpu_memory_gib=memory),
                        architecture=architecture(case["model"]), model_config=config)
    backends = resolve(ctx)
    return backends.pair, backends.exact


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="append", choices=sorted(oracle.ORACLES))
    parser.add_argument("--cached", action="store_true")
    parser.add_argument("--write-fixture", action="store_true", help=f"write SGLang's answers to {FIXTURE.name}")
    args = parser.parse_args(argv)
    failed = 0
    fixture: list[dict[str, Any]] = []
    for version in args.version or sorted(oracle.ORACLES):
        grid = cases(version)
        answers = oracle.verdicts(version, grid, run_missing=not args.cached, cache=f"attention-{version}",
                                  keep=("adjusted",))
        agree = inexact = refused = 0
        for case in grid:
            verdict = answers.get(case["id"])
            theirs = sglang_backends(verdict) if verdict else None
            if theirs is None:
                refused += 1
                continue
            pair, exact = ours(case)
            sglang_pair = resolved_pair(case, theirs)
            fixture.append({key: case[key] for key in ("id", "version", "gpu", "server")}
                           | {"config": config_facts(case["model"]), "sglang": list(sglang_pair)})
            if not exact:
                inexact += 1
            elif pair == sglang_pair:
                agree += 1
            else:
                failed += 1
                print(f"  differs: {case['id']}: SGLang {sglang_pair}, sgdeploy {pair}")
        print(f"SGLang {version}: {len(grid)} launches, {agree} agree, {inexact} not followed exactly (warned), "
              f"{refused} refused or not run")
    if args.write_fixture:
        lines = ",\n".join(json.dumps(entry, sort_keys=True) for entry in fixture)
        FIXTURE.write_text(f"[\n{lines}\n]\n", encoding="utf-8")
    print(json.dumps({"differs": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
