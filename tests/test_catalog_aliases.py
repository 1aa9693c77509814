"""Deprecated options as SGLang maps them: an alias feeds another field, a bare DeprecatedAction
is ignored or refused. Presence checks, rendering, import and replacements follow the catalog's
own mapping (read from each wheel's `add_argument` calls), never the alias's spelling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sgdeploy.deploy.render import launch_argv
from sgdeploy.profile.model import load_profile
from sgdeploy.profile.validate import InventoryContext, validate_loaded
from sgdeploy.sglang.argv import parse_server_argv
from sgdeploy.sglang.catalog import NOT_GIVEN, available_versions, flag_history, load_catalog
from sgdeploy.sglang.flags import valid_server_values
from tests.variants import sample_value

V2_ALIAS_ERA = ("0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def profile(tmp_path: Path, server: dict[str, Any]) -> Path:
    lines = ["[deploy]", 'host = "h"', 'python = "/opt/sglang/bin/python3"', "", "[server]",
             'model_path = "/models/m"', *(f"{k} = {toml_value(v)}" for k, v in server.items())]
    path = tmp_path / "p.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def findings(path: Path, version: str) -> list[tuple[str, str, str | None]]:
    result = validate_loaded(load_profile(path), InventoryContext(str(path.parent / "none.toml"), None), version)
    return [(d.rule, d.severity.value, d.field) for d in result.diagnostics if d.rule != "SGD034"]


def argv(path: Path, version: str) -> list[str]:
    loaded = load_profile(path)
    assert loaded.model is not None
    return launch_argv(loaded.model, load_catalog(version))[5:]  # after python -m module --model-path m


# --------------------------------------------------------------------------- the catalog model
@pytest.mark.parametrize("version", available_versions())
def test_aliases_never_replace_the_fields_own_option(version: str) -> None:
    catalog = load_catalog(version)
    for name, flag in catalog.flags.items():
        assert not flag.is_alias, f"{version}: {name} is keyed by an alias row {flag.options}"
    for key, alias in catalog.aliases.items():
        assert alias.deprecated and alias.field in catalog.flags, f"{version}: {key} feeds no field"
        assert key not in catalog.flags, f"{version}: alias {key} shadows a field"


@pytest.mark.parametrize("version", V2_ALIAS_ERA)
def test_prefill_backend_is_a_valued_option_next_to_its_aliases(version: str) -> None:
    catalog = load_catalog(version)
    prefill = catalog.flags["cuda_graph_backend_prefill"]
    assert prefill.takes_value and prefill.option == "--cuda-graph-backend-prefill"
    assert catalog.aliases["enforce_piecewise_cuda_graph"].stored(True) == "tc_piecewise"
    assert catalog.aliases["disable_piecewise_cuda_graph"].stored(True) == "disabled"
    assert catalog.aliases["enforce_piecewise_cuda_graph"].stored(False) is NOT_GIVEN


def test_history_counts_an_alias_as_accepted_and_a_refusal_as_not() -> None:
    assert flag_history("enforce_piecewise_cuda_graph") == ("0.5.19", "0.5.10")
    assert flag_history("stream_output")[0] == "0.5.19"
    assert flag_history("enable_expert_distribution_metrics")[0] == "0.5.17"


# --------------------------------------------------------------------------- rendering
@pytest.mark.parametrize("version", available_versions())
def test_render_never_emits_a_deprecated_alias(version: str, tmp_path: Path) -> None:
    catalog = load_catalog(version)
    for key, alias in catalog.aliases.items():
        words = argv(profile(tmp_path, {key: sample_value(alias)}), version)
        assert not set(words) & set(alias.options), f"{version}: {key} rendered as {words}"
        assert words[:1] == [catalog.flags[alias.field].option], f"{version}: {key} rendered as {words}"


def test_stream_output_renders_as_the_real_option_on_0_5_11(tmp_path: Path) -> None:
    assert argv(profile(tmp_path, {"incremental_streaming_output": True}), "0.5.11") == [
        "--incremental-streaming-output"]
    assert argv(profile(tmp_path, {"stream_output": True}), "0.5.11") == ["--incremental-streaming-output"]
    assert argv(profile(tmp_path, {"stream_output": False}), "0.5.11") == []


@pytest.mark.parametrize("version", V2_ALIAS_ERA)
def test_piecewise_aliases_render_as_the_prefill_backend(version: str, tmp_path: Path) -> None:
    assert argv(profile(tmp_path, {"enforce_piecewise_cuda_graph": True}), version) == [
        "--cuda-graph-backend-prefill", "tc_piecewise"]
    assert argv(profile(tmp_path, {"mamba_scheduler_strategy": "extra_buffer"}), version) == [
        "--mamba-radix-cache-strategy", "extra_buffer"]
    assert argv(profile(tmp_path, {"cuda_graph_backend_prefill": "breakable"}), version) == [
        "--cuda-graph-backend-prefill", "breakable"]


def test_an_option_sglang_ignores_renders_to_nothing(tmp_path: Path) -> None:
    assert argv(profile(tmp_path, {"enable_piecewise_cuda_graph": True}), "0.5.11") == []


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("version", V2_ALIAS_ERA)
def test_deprecated_aliases_are_warnings_where_sglang_accepts_them(version: str, tmp_path: Path) -> None:
    keys = {"enforce_piecewise_cuda_graph": True, "mamba_scheduler_strategy": "extra_buffer",
            "cuda_graph_max_bs": 32, "piecewise_cuda_graph_tokens": [64, 128]}
    for key, value in keys.items():
        found = findings(profile(tmp_path, {key: value}), version)
        assert found == [("SGD015", "warning", f"server.{key}")], (version, key, found)


@pytest.mark.parametrize("version", V2_ALIAS_ERA)
def test_explicit_breakable_prefill_backend_is_valid(version: str, tmp_path: Path) -> None:
    assert findings(profile(tmp_path, {"cuda_graph_backend_prefill": "breakable"}), version) == []


def test_alias_values_are_seen_as_the_field_they_feed() -> None:
    catalog = load_catalog("0.5.16")
    server = valid_server_values({"enforce_piecewise_cuda_graph": True, "cuda_graph_bs": [8, 16],
                                  "disable_piecewise_cuda_graph": False}, catalog)
    assert server == {"cuda_graph_backend_prefill": "tc_piecewise", "cuda_graph_bs_decode": [8, 16]}


def test_alias_value_must_suit_the_field_it_renders_as(tmp_path: Path) -> None:
    found = findings(profile(tmp_path, {"mamba_scheduler_strategy": "bogus"}), "0.5.16")
    assert ("SGD014", "error", "server.mamba_scheduler_strategy") in found


@pytest.mark.parametrize("version", ["0.5.18", "0.5.19"])
def test_a_refusing_deprecated_action_is_an_error(version: str, tmp_path: Path) -> None:
    found = findings(profile(tmp_path, {"enable_expert_distribution_metrics": True}), version)
    assert found == [("SGD011", "error", "server.enable_expert_distribution_metrics")]
    assert ("SGD015", "warning", "server.enable_expert_distribution_metrics") not in findings(
        profile(tmp_path, {"enable_expert_distribution_metrics": False}), version)


def test_alias_removed_in_0_5_20_is_an_error_there(tmp_path: Path) -> None:
    found = findings(profile(tmp_path, {"enforce_piecewise_cuda_graph": True}), "0.5.20")
    assert found == [("SGD011", "error", "server.enforce_piecewise_cuda_graph")]


# --------------------------------------------------------------------------- import
def test_import_follows_the_alias_into_its_field() -> None:
    parsed = parse_server_argv(["--model-path", "/m", "--enforce-piecewise-cuda-graph", "--cuda-graph-bs", "8",
                                "16"], load_catalog("0.5.16"))
    assert parsed.server == {"model_path": "/m", "cuda_graph_backend_prefill": "tc_piecewise",
                             "cuda_graph_bs_decode": [8, 16]}
    assert all(f.severity == "warning" for f in parsed.findings)


def test_import_stream_output_on_0_5_11() -> None:
    parsed = parse_server_argv(["--model-path", "/m", "--stream-output"], load_catalog("0.5.11"))
    assert parsed.server == {"model_path": "/m", "incremental_streaming_output": True}


def test_import_reports_a_refusing_and_an_ignored_deprecated_action() -> None:
    parsed = parse_server_argv(["--model-path", "/m", "--enable-expert-distribution-metrics"],
                               load_catalog("0.5.18"))
    assert not parsed.ok and "no longer supported" in parsed.findings[0].message
    parsed = parse_server_argv(["--model-path", "/m", "--enable-piecewise-cuda-graph"], load_catalog("0.5.11"))
    assert parsed.ok and parsed.server == {"model_path": "/m"}


# --------------------------------------------------------------------------- argparse shapes per alias
def _words_for(flag: Any) -> list[str]:
    """Values for one option as its own registration takes them: none for a switch, one for a
    single value, two for `+`/`*`, N for an integer nargs."""
    if flag.is_switch:
        return []
    value = sample_value(flag)
    one = str(value[0] if isinstance(value, list) else value)
    if flag.nargs in ("+", "*"):
        return [one, one]
    if isinstance(flag.nargs, int):
        return [one] * flag.nargs
    return [one]


@pytest.mark.parametrize("version", available_versions())
def test_every_alias_reads_with_its_own_nargs_into_the_field_it_feeds(version: str) -> None:
    """Every alias of every bundled release, an `enable_*` alias of a valued option included:
    its option with the values its own nargs takes lands in the field it feeds; a switch alias
    takes no value (a word after it is not its value), a valued one refuses to stand alone."""
    catalog = load_catalog(version)
    wrong = []
    for key, alias in sorted(catalog.aliases.items()):
        if alias.refusal is not None or alias.ignored:
            continue
        for option in alias.options:
            if option.startswith("--no-"):
                continue
            words = [option, *_words_for(alias)]
            parsed = parse_server_argv(["--model-path", "/m", *words], catalog)
            if not parsed.ok or alias.field not in parsed.server:
                wrong.append(f"{key} {words}: {[f.message for f in parsed.findings]}")
                continue
            if alias.is_switch:
                if parsed.server[alias.field] != alias.stored(True):
                    wrong.append(f"{key}: {option} stored {parsed.server[alias.field]!r}, not {alias.stored(True)!r}")
                extra = parse_server_argv(["--model-path", "/m", option, "stray"], catalog)
                if extra.ok:
                    wrong.append(f"{key}: the switch {option} took a value")
            else:
                bare = parse_server_argv(["--model-path", "/m", option], catalog)
                if bare.ok:
                    wrong.append(f"{key}: {option} stood alone though it takes {alias.nargs or 1} value(s)")
    assert not wrong, f"{version}: " + "; ".join(wrong)


@pytest.mark.parametrize("version", V2_ALIAS_ERA)
def test_an_enable_switch_alias_of_a_valued_option_stores_its_value(version: str) -> None:
    """`--enable-breakable-cuda-graph` takes no value of its own: it stores `breakable` into the
    valued `--cuda-graph-backend-prefill`, and a value word after it is not read as its value."""
    catalog = load_catalog(version)
    alias = catalog.aliases["enable_breakable_cuda_graph"]
    assert alias.is_switch and catalog.flags[alias.field].takes_value
    parsed = parse_server_argv(["--model-path", "/m", "--enable-breakable-cuda-graph"], catalog)
    assert parsed.ok and parsed.server["cuda_graph_backend_prefill"] == "breakable"
    assert not parse_server_argv(["--model-path", "/m", "--enable-breakable-cuda-graph", "tc_piecewise"], catalog).ok
