"""Rules' claims about SGLang against facts read from the wheels (catalogs/facts.json and the
catalogs): each version boundary a rule or a replacement names must be where the wheels put it,
and every advised replacement, applied to its own bad entry, must be accepted by every bundled
release of its range."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sgdeploy.core.diagnostics import Severity
from sgdeploy.profile.validate import InventoryContext, validate_file
from sgdeploy.sglang.catalog import available_versions, load_catalog
from sgdeploy.sglang.facts import fact, spans
from sgdeploy.sglang.flags import REPLACEMENTS, choice_problem, replacement_for, value_problem
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules import RULES
from sgdeploy.sglang.rules.common import (
    MIXED_CHUNK_BY_ALGORITHM,
    PP_SPEC_ON_PREFILL,
    PREFILL_DEFAULT_TC_PIECEWISE,
    PREFILL_MULTIMODAL_TO_PIECEWISE,
    V1X,
    V2X,
)
from sgdeploy.sglang.versions import VersionRange, format_version, parse_version
from tests.variants import sample_value

VERSIONS = available_versions()


def first_with(name: str) -> str:
    """The first bundled release where fact `name` exists."""
    return format_version(spans(name)[0][0])


def boundary_of(window: VersionRange) -> tuple[str | None, str | None]:
    return window.since, window.until


def option_span(key: str) -> tuple[str, str | None]:
    (since, until, _), *_ = spans(f"option:{key}")
    return format_version(since), format_version(until) if until else None


# --------------------------------------------------------------------------- version lines
def test_v2x_starts_where_the_per_phase_graph_aliases_appear() -> None:
    assert V2X.since == option_span("enforce_piecewise_cuda_graph")[0] == "0.5.14"
    assert V1X.until == V2X.since
    assert "mamba_scheduler_strategy" in load_catalog("0.5.13").flags
    assert "mamba_scheduler_strategy" in load_catalog("0.5.14").aliases


@pytest.mark.parametrize("key", ["enforce_piecewise_cuda_graph", "disable_piecewise_cuda_graph",
                                 "mamba_scheduler_strategy", "cuda_graph_max_bs", "cuda_graph_bs",
                                 "piecewise_cuda_graph_tokens", "piecewise_cuda_graph_max_tokens",
                                 "piecewise_cuda_graph_compiler", "stream_output"])
def test_aliases_of_the_v2_migration_last_until_0_5_20(key: str) -> None:
    assert option_span(key)[1] == "0.5.20"


def test_expert_distribution_metrics_is_refused_in_0_5_18_and_0_5_19() -> None:
    (since, until, value), = spans("option:enable_expert_distribution_metrics")
    assert (format_version(since), until and format_version(until)) == ("0.5.18", "0.5.20")
    assert "expert-balancedness-report-mode" in value["refused"]


def test_prefill_graph_windows_match_the_allow_lists() -> None:
    assert first_with("breakable_prefill_graph_archs") == "0.5.16"
    piecewise = spans("piecewise_prefill_graph_archs")
    assert format_version(piecewise[0][0]) == PREFILL_DEFAULT_TC_PIECEWISE.since == "0.5.14"
    assert PREFILL_MULTIMODAL_TO_PIECEWISE.until == "0.5.22"
    assert "tc_piecewise" not in (load_catalog("0.5.22").flags["cuda_graph_backend_prefill"].choices or ())
    assert "tc_piecewise" in (load_catalog("0.5.21").flags["cuda_graph_backend_prefill"].choices or ())


def test_mixed_chunk_window_matches_supports_mixed_chunk() -> None:
    assert first_with("mixed_chunk_speculative_algorithms") == MIXED_CHUNK_BY_ALGORITHM.since == "0.5.19"
    assert {"EAGLE", "EAGLE3"} <= set(fact("mixed_chunk_speculative_algorithms", parse_version("0.5.23")))
    assert "STANDALONE" not in fact("mixed_chunk_speculative_algorithms", parse_version("0.5.23"))


def test_pp_spec_window() -> None:
    assert PP_SPEC_ON_PREFILL.since == "0.5.21"


def test_mamba_table_covers_the_v1x_rule() -> None:
    table = fact("mamba_radix_cache_archs", parse_version("0.5.11"))
    assert table["NemotronHForCausalLM"] == [True, False]
    assert table["KimiLinearForCausalLM"][0] is False
    assert table["Qwen3NextForCausalLM"] == [True, True]


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11", "0.5.12", "0.5.13"])
def test_mamba_table_names_only_the_models_whose_branch_calls_the_handler(version: str) -> None:
    """0.5.10-0.5.13 share one model branch between the Qwen3 MoE models and the Qwen3-Next/3.5
    hybrids and call _handle_mamba_radix_cache for the hybrids only, inside a nested test."""
    table = fact("mamba_radix_cache_archs", parse_version(version))
    assert "Qwen3MoeForCausalLM" not in table and "Qwen3VLMoeForConditionalGeneration" not in table
    assert table["Qwen3_5MoeForConditionalGeneration"] == [True, True]
    server = {"model_path": "/m", "speculative_algorithm": "EAGLE"}
    assert not fired("SGD509", ctx(version, server, "Qwen3MoeForCausalLM"))
    assert fired("SGD509", ctx(version, server, "Qwen3_5MoeForConditionalGeneration"))


# --------------------------------------------------------------------------- rules against facts
def ctx(version: str, server: dict[str, Any], architecture: str | None = None) -> LaunchContext:
    catalog = load_catalog(version)
    return LaunchContext(server=server, raw_server=server, env={}, catalog=catalog, architecture=architecture)


def fired(rule_id: str, context: LaunchContext) -> bool:
    return any(True for _ in RULES.by_id(rule_id).run(context))


@pytest.mark.parametrize("version", [v for v in VERSIONS if parse_version(v) in V2X])
def test_sgd603_agrees_with_the_allow_lists(version: str) -> None:
    v = parse_version(version)
    breakable = fact("breakable_prefill_graph_archs", v) or []
    piecewise = fact("piecewise_prefill_graph_archs", v) or []
    for arch in fact("multimodal_archs", v) or []:
        kept = (arch in piecewise if v in PREFILL_DEFAULT_TC_PIECEWISE
                else arch in breakable or (v in PREFILL_MULTIMODAL_TO_PIECEWISE and arch in piecewise))
        assert fired("SGD603", ctx(version, {"model_path": "/m"}, arch)) is not kept, (version, arch)


@pytest.mark.parametrize("version", VERSIONS)
def test_sgd303_agrees_with_the_allow_list(version: str) -> None:
    allowed = fact("encoder_disagg_archs", parse_version(version))
    if allowed is None or "encoder_only" not in load_catalog(version):
        pytest.skip("no encoder disaggregation in this release")
    for arch in allowed:
        assert not fired("SGD303", ctx(version, {"model_path": "/m", "encoder_only": True}, arch)), (version, arch)
    assert fired("SGD303", ctx(version, {"model_path": "/m", "encoder_only": True}, "LlamaForCausalLM"))


@pytest.mark.parametrize("version", [v for v in VERSIONS if parse_version(v) >= (0, 5, 10, 0)])
def test_sgd211_agrees_with_supports_mixed_chunk(version: str) -> None:
    kept = fact("mixed_chunk_speculative_algorithms", parse_version(version)) or []
    for algo in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        server = {"model_path": "/m", "speculative_algorithm": algo, "enable_mixed_chunk": True}
        keeps = ("EAGLE" if algo == "NEXTN" else algo) in kept
        assert fired("SGD211", ctx(version, server)) is not keeps, (version, algo)


# --------------------------------------------------------------------------- advised replacements
def replaced_cases() -> list[tuple[str, str]]:
    """(key, version) for every replacement entry and every bundled release in its range where
    SGLang no longer accepts the key as it is, or deprecates it."""
    cases = []
    for key, entries in REPLACEMENTS.items():
        for entry in entries:
            for version in VERSIONS:
                if parse_version(version) in entry.versions:
                    cases.append((key, version))
    return cases


def bad_value(key: str, version: str) -> Any:
    """A value the old key took when it was last a field of its own (its choices, its type)."""
    for candidate in reversed(VERSIONS):
        flag = load_catalog(candidate).flags.get(key)
        if flag is not None and flag.refusal is None and not flag.ignored:
            return sample_value(flag)
    return True


@pytest.mark.parametrize(("key", "version"), replaced_cases())
def test_each_replacement_is_accepted_where_it_is_advised(key: str, version: str) -> None:
    catalog = load_catalog(version)
    replacement = replacement_for(key, catalog)
    if replacement is None:
        pytest.skip(f"{key} has no replacement for {version}")
    for new_key, new_value in replacement.entries(bad_value(key, version)).items():
        flag = catalog.flags.get(new_key)
        assert flag is not None, f"{version}: {key} -> {new_key}, which SGLang {version} does not have"
        assert not flag.deprecated, f"{version}: {key} -> {new_key}, itself deprecated"
        assert not value_problem(flag, new_value) and not choice_problem(flag, new_value), (
            f"{version}: {key} -> {new_key} = {new_value!r} is refused")


@pytest.mark.parametrize("version", VERSIONS)
def test_each_alias_replacement_is_the_mapping_sglang_applies(version: str) -> None:
    catalog = load_catalog(version)
    for key, alias in catalog.aliases.items():
        if catalog.flags[alias.field].deprecated:
            continue  # an alias of a deprecated field: the table's entry, checked above
        replacement = replacement_for(key, catalog)
        assert replacement is not None
        value = sample_value(alias)
        assert replacement.entries(value) == {alias.field: alias.stored(value)}, (version, key)


# --------------------------------------------------------------------------- each rule's fix, validated
RULES_DIR = Path(__file__).resolve().parent / "rules"
RULES_INVENTORY = InventoryContext.load(Path(__file__).resolve().parent / "inventory.rules.toml")


def rule_pairs() -> list[tuple[str, Path, Path]]:
    """(rule id, bad example, its fixed twin) for every rule of the registry with both profiles."""
    registered = {r.id for r in RULES}
    pairs = []
    for ok in sorted(RULES_DIR.glob("SGD*.ok.toml")):
        bad = ok.with_name(ok.name.replace(".ok.toml", ".toml"))
        rule_id = ok.name.split("-", 1)[0]
        if rule_id in registered and bad.exists() and "# inventory:" not in bad.read_text(encoding="utf-8"):
            pairs.append((rule_id, bad, ok))
    return pairs


FIX_FOR = re.compile(r"^# fix-for: since (\S+)(?: until (\S+))?$", re.MULTILINE)


def fix_range(ok: Path) -> VersionRange:
    """`# fix-for: since X [until Y]` in a fixed twin: the releases whose spelling it is written in
    (its docs entry gives the fix for the others); every release without one."""
    found = FIX_FOR.search(ok.read_text(encoding="utf-8"))
    return VersionRange(since=found.group(1), until=found.group(2)) if found else VersionRange()


def _only_this_rule(bad: Path, rule_id: str, version: str) -> bool:
    found = validate_file(str(bad), RULES_INVENTORY, version).diagnostics
    fired = any(d.rule == rule_id for d in found)
    return fired and all(d.rule == rule_id for d in found if d.severity is Severity.ERROR)


@pytest.mark.parametrize(("rule_id", "bad", "ok"), rule_pairs(), ids=[p[1].name for p in rule_pairs()])
def test_each_rules_fix_validates_cleanly_wherever_it_is_advised(rule_id: str, bad: Path, ok: Path) -> None:
    """The fixed twin is the rule's advice applied to its bad example: in every bundled release
    where the bad example shows this rule's problem and no other error (it fires this rule, and
    any error it draws is this rule's), the fixed profile draws no error from any rule."""
    rule, holds = RULES.by_id(rule_id), fix_range(ok)
    advised = [v for v in VERSIONS if rule.applies_to(parse_version(v)) and parse_version(v) in holds
               and _only_this_rule(bad, rule_id, v)]
    if not advised:
        pytest.skip(f"{bad.name} shows {rule_id} alone in no bundled release of the fix's range")
    refused = {}
    for version in advised:
        errors = [f"{d.rule} {d.message}" for d in validate_file(str(ok), RULES_INVENTORY, version).diagnostics
                  if d.severity is Severity.ERROR]
        if errors:
            refused[version] = errors
    assert not refused, f"{ok.name}: the advised fix is refused where {rule_id} advises it: {refused}"


def toml_value(value: Any) -> str:
    return json.dumps(value)  # the strings, numbers, booleans and arrays used here are JSON and TOML alike


@pytest.mark.parametrize(("key", "version"), replaced_cases())
def test_each_replacement_validates_cleanly(tmp_path: Path, key: str, version: str) -> None:
    """A removed or deprecated key replaced as the hint says: the whole launch draws no error."""
    replacement = replacement_for(key, load_catalog(version))
    if replacement is None:
        pytest.skip(f"{key} has no replacement for {version}")
    server = {"model_path": "/models/Qwen3-8B", **replacement.entries(bad_value(key, version))}
    profile = tmp_path / "replaced.toml"
    profile.write_text("[deploy]\nhost = \"h200-new\"\nunit = \"sglang\"\npython = \"/usr/bin/python3\"\n\n[server]\n"
                       + "".join(f"{k} = {toml_value(v)}\n" for k, v in server.items()), encoding="utf-8")
    errors = [f"{d.rule} {d.message}" for d in validate_file(str(profile), RULES_INVENTORY, version).diagnostics
              if d.severity is Severity.ERROR]
    assert not errors, f"{version}: {key} -> {server}: {errors}"


# --------------------------------------------------------------------------- GPU generation gates
@pytest.mark.parametrize("version", VERSIONS)
def test_sgd404_fires_exactly_outside_each_gates_majors(version: str) -> None:
    from sgdeploy.sglang.rules.hardware import SM_GATES
    from sgdeploy.sglang.target import HostTarget

    v = parse_version(version)
    for gate in SM_GATES:
        found = fact(f"sm_gate:{gate.gate}", v) or (fact(f"sm_gate:{gate.alias_of}", v) if gate.alias_of else None)
        if found is None:
            continue
        server = {"model_path": "/m", gate.fields[0]: gate.values[0]}
        for major in (8, 9, 10, 11, 12):
            host = HostTarget(name="h", gpu="GPU", compute_capability=f"{major}.0", gpu_count=8)
            context = LaunchContext(server=server, raw_server=server, env={}, catalog=load_catalog(version), host=host)
            assert fired("SGD404", context) is (major not in found["majors"]), (version, gate.gate, major)


# --------------------------------------------------------------------------- DFLASH with DP attention
@pytest.mark.parametrize("version", [v for v in VERSIONS if parse_version(v) >= (0, 5, 11, 0)])
def test_dflash_with_dp_attention_follows_each_releases_check(version: str) -> None:
    """Up to 0.5.22 SGLang refuses DFLASH with DP attention on CUDA ('does not support dp attention');
    0.5.23 takes it with enable_dp_lm_head (measured on 0.5.11 and 0.5.23 with SGLang's own resolution).
    Which releases refuse is read from the check-site inventories."""
    from sgdeploy.sglang import checksites

    keys = {site["key"] for site in checksites.refusal_sites(version)}
    refuses = any(k.endswith("Currently DFLASH speculative decoding does not support dp attention.")
                  or k.endswith("does not support dp attention on non-NPU devices.") for k in keys)
    needs_lm_head = "handle_dflash: DFLASH with dp attention requires --enable-dp-lm-head." in keys
    assert refuses != needs_lm_head, version
    dp: dict[str, Any] = {"attn_dp_size": 2} if "attn_dp_size" in load_catalog(version) \
        else {"dp_size": 2, "enable_dp_attention": True}
    server = {"model_path": "/m", "tp_size": 2, "speculative_algorithm": "DFLASH",
              "speculative_draft_model_path": "/d", **dp}
    assert fired("SGD216", ctx(version, server))
    assert fired("SGD216", ctx(version, {**server, "enable_dp_lm_head": True})) is refuses


@pytest.mark.parametrize("version", VERSIONS)
def test_sgd502_exempts_a_decode_server_where_the_wheel_does(version: str) -> None:
    exempt = fact("source:chunked_prefill_decode_exempt", parse_version(version)) is not None
    server = {"model_path": "/m", "page_size": 64, "chunked_prefill_size": 1000}
    assert fired("SGD502", ctx(version, server))
    assert fired("SGD502", ctx(version, {**server, "disaggregation_mode": "decode"})) is not exempt


@pytest.mark.parametrize("version", [v for v in VERSIONS if parse_version(v) >= (0, 5, 12, 0)])
def test_sgd201_knows_the_members_of_each_releases_speculative_algorithm(version: str) -> None:
    members = fact("speculative_algorithms", parse_version(version))
    for name in [*members, "NEXTN", "nextn"]:
        assert not fired("SGD201", ctx(version, {"model_path": "/m", "speculative_algorithm": name})), (version, name)
    assert fired("SGD201", ctx(version, {"model_path": "/m", "speculative_algorithm": "MTP"}))
    if "UNO" not in members:
        assert fired("SGD201", ctx(version, {"model_path": "/m", "speculative_algorithm": "UNO"}))


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_mla_by_name_is_a_part_of_the_mla_branches(version: str) -> None:
    """DeepSeek V3's branch decides MLA by its name; Pixtral's reads kv_lora_rank from the config."""
    by_name = set(fact("mla_archs_by_name", parse_version(version)) or ())
    named = set(fact("mla_archs", parse_version(version)) or ())
    assert by_name < named
    assert "DeepseekV3ForCausalLM" in by_name and "PixtralForConditionalGeneration" in named - by_name
