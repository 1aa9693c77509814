"""bench/fidelity without SGLang: the corpus is deterministic and every case is a profile validate reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.fidelity import corpus, oracle, run
from sgdeploy.profile.validate import InventoryContext
from sgdeploy.sglang.catalog import load_catalog


def test_the_corpus_is_deterministic_and_a_seed_changes_its_draws() -> None:
    first, again, other = corpus.build("0.5.11"), corpus.build("0.5.11"), corpus.build("0.5.11", seed=1)
    assert first == again
    assert first != other
    assert len({c["id"] for c in first}) == len(first)
    assert len({oracle.case_key(c) for c in first}) == len(first)


def test_every_case_renders_flags_of_its_version() -> None:
    catalog = load_catalog("0.5.23")
    for case in corpus.build("0.5.23")[::25]:
        assert all(key in catalog for key in case["server"])
        assert case["gpu"] in corpus.GPUS and case["gpu_count"] in corpus.COUNTS


def test_sgdeploy_side_of_a_case() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.toml"
        path.write_text(run.inventory_text(), encoding="utf-8")
        inventory = InventoryContext.load(path)
        cases = [c for c in corpus.build("0.5.11") if c["origin"] == "flag:enable_eplb"]
        verdict = run.sgdeploy_verdict(cases[0], inventory, model_config=True)
    assert "SGD112" in verdict["errors"]


def test_a_refusal_is_named_by_the_nearest_site_above_the_raising_line() -> None:
    sites = run.Sites("0.5.11")
    key = sites.key("sglang/srt/server_args.py:2925:_handle_context_parallelism")
    assert key == "handle_context_parallelism: attn_cp_size != moe_dp_size is only supported when moe_dp_size == 1"
