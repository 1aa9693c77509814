"""Bundled SGLang flag catalogs: shape, uniqueness, agreement with the shared facts,
and byte-identical regeneration from the cached wheel."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CATALOGS = REPO / "sgdeploy" / "sglang" / "catalogs"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FACTS = SHARED / "sglang"
WHEEL_CACHE = REPO / ".cache" / "wheels"

ROW_KEYS = {
    "field",
    "argparse_dest",
    "flags",
    "python_type",
    "argparse_type",
    "default",
    "choices",
    "store_true",
    "action",
    "nargs",
    "required",
    "deprecated",
    "const",
    "new_flag",
    "error_message",
    "help_first_sentence",
    "boolean_optional",
    "takes_value",
}
COMPARED_VERSIONS = ("0.5.10", "0.5.11", "0.5.23")

# Known, documented differences (docs/catalogs.md, "Known differences").
# --stream-output uses DeprecatedStoreTrueAction (nargs=0, default=False in its __init__):
# it is a switch. The 0.5.10/0.5.11 facts read only the add_argument call.
DEPRECATED_SWITCHES = {("0.5.10", "--stream-output"), ("0.5.11", "--stream-output")}


def _index() -> dict[str, Any]:
    return json.loads((CATALOGS / "index.json").read_text())


def _catalog(version: str) -> dict[str, Any]:
    name = _index()["files"][version]
    with gzip.open(CATALOGS / name) as fh:
        return json.load(fh)


def _facts(version: str) -> dict[str, Any]:
    path = FACTS / f"flags-{version}.json"
    if not path.is_file():
        pytest.skip(f"shared facts {path} not present (needs the shared/ folder next to the repo)")
    return json.loads(path.read_text())


@functools.cache
def _builder() -> ModuleType:
    """scripts/build_catalogs.py, imported from its path (scripts/ is not a package)."""
    name = "sgdeploy_build_catalogs"
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "build_catalogs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _options(rows: list[dict[str, Any]]) -> set[str]:
    return {opt for row in rows for opt in row["flags"]}


def _unevaluated(value: Any) -> bool:
    """Values the older facts files left as source text instead of evaluating them."""
    if not isinstance(value, str):
        return False
    return value.startswith(("<expr> ", "<name> ")) or (
        value.startswith("{'") and value.endswith("}")
    )


def _type_name(value: str | None) -> str | None:
    # "json.loads" as written vs "loads" as a runtime __name__.
    return None if value is None else value.rsplit(".", 1)[-1]


def _nargs(value: Any) -> Any:
    # Zero-argument actions report nargs=0 at runtime and nothing when read from source.
    return None if value == 0 else value


def test_index_lists_required_versions() -> None:
    index = _index()
    versions = index["versions"]
    assert "0.5.11" in versions
    assert "0.5.23" in versions
    builder = _builder()
    assert versions == sorted(versions, key=builder.version_key)
    assert set(index["files"]) == set(versions)
    on_disk = {p.name for p in CATALOGS.glob("*.json.gz")}
    assert on_disk == set(index["files"].values())


def test_catalog_folder_is_small() -> None:
    total = sum(p.stat().st_size for p in CATALOGS.iterdir() if p.is_file())
    assert total < 3 * 1024 * 1024


@pytest.mark.parametrize("version", _index()["versions"])
def test_catalog_loads_and_is_consistent(version: str) -> None:
    catalog = _catalog(version)
    assert catalog["sglang_version"] == version
    assert catalog["wheel"].startswith(f"sglang-{version}")
    assert len(catalog["wheel_sha256"]) == 64
    assert isinstance(catalog["fixups"], list)
    rows = catalog["flags"]
    assert rows, "empty catalog"
    for row in rows:
        assert set(row) == ROW_KEYS, row["field"]
        assert row["flags"] and all(o.startswith("-") for o in row["flags"])
        if row["store_true"] or row["boolean_optional"]:
            assert not row["takes_value"], row["flags"]
        if row["boolean_optional"]:
            longs = [o for o in row["flags"] if not o.startswith("--no-")]
            assert all("--no-" + o[2:] in row["flags"] for o in longs)
    all_opts = [opt for row in rows for opt in row["flags"]]
    assert len(all_opts) == len(set(all_opts)), "an option string appears twice"
    # A field may have a second, deprecated spelling registered as its own action
    # (e.g. --stream-output next to --incremental-streaming-output); otherwise unique.
    current = [row["field"] for row in rows if not row["deprecated"]]
    assert len(current) == len(set(current)), "a field has two non-deprecated entries"
    assert "model_path" in {row["field"] for row in rows}


@pytest.mark.parametrize("version", COMPARED_VERSIONS)
def test_option_strings_match_facts(version: str) -> None:
    facts = _facts(version)
    mine = _catalog(version)["flags"]
    expected = _options(facts["flags"])
    got = _options(mine)
    if version == "0.5.10":
        # The 0.5.10 facts list BooleanOptionalAction flags without their --no- spelling.
        added_no = {
            o
            for row in mine
            if row["boolean_optional"]
            for o in row["flags"]
            if o.startswith("--no-")
        }
        got -= added_no - expected
    assert got == expected


@pytest.mark.parametrize("version", COMPARED_VERSIONS)
def test_flag_attributes_match_facts(version: str) -> None:
    facts = {row["flags"][0]: row for row in _facts(version)["flags"]}
    mine = {row["flags"][0]: row for row in _catalog(version)["flags"]}
    assert set(mine) == set(facts)
    problems = []
    for opt, fact in facts.items():
        row = mine[opt]
        checks = {
            "field": (row["field"], fact["field"]),
            "store_true": (row["store_true"], fact["store_true"]),
            "nargs": (_nargs(row["nargs"]), _nargs(fact["nargs"])),
            "choices": (row["choices"], fact["choices"]),
            "default": (row["default"], fact["default"]),
        }
        if not row["store_true"]:
            checks["argparse_type"] = (
                _type_name(row["argparse_type"]),
                _type_name(fact["argparse_type"]),
            )
        for attr, (got, want) in checks.items():
            if _unevaluated(want):
                continue
            if (version, opt) in DEPRECATED_SWITCHES and attr in {"store_true", "default"}:
                assert (row["store_true"], row["default"]) == (True, False)
                continue
            if got != want:
                problems.append(f"{opt} {attr}: catalog={got!r} facts={want!r}")
    assert not problems, "\n".join(problems)


def test_removed_option_strings_match_facts_diff() -> None:
    path = FACTS / "flag-diff-0.5.10-to-0.5.23.json"
    if not path.is_file():
        pytest.skip(f"shared facts {path} not present")
    diff = json.loads(path.read_text())
    old = _options(_catalog("0.5.10")["flags"])
    new = _options(_catalog("0.5.23")["flags"])
    assert sorted(old - new) == sorted(diff["removed_option_strings"])
    # Added: the facts count --no-experts-shared-outer-loras as new in 0.5.23, but 0.5.10
    # registers it too (BooleanOptionalAction); see docs/catalogs.md.
    assert set(diff["added_option_strings"]) - (new - old) == {"--no-experts-shared-outer-loras"}
    assert (new - old) <= set(diff["added_option_strings"])


def test_regenerating_0_5_11_is_byte_identical() -> None:
    builder = _builder()
    dist = builder.find_cached_dist(WHEEL_CACHE, "0.5.11")
    if dist is None:
        pytest.skip("sglang 0.5.11 wheel not in .cache/wheels (run scripts/build_catalogs.py)")
    data = builder.catalog_bytes(builder.build_catalog("0.5.11", dist))
    assert data == (CATALOGS / "0.5.11.json.gz").read_bytes()
