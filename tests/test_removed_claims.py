"""Argparse shapes per option string and "removed in" claims, held against every bundled catalog.

Each option string of a release (a field's own, its aliases, a deprecated spelling) keeps the
shape its own `add_argument` call gave it: whether it takes a value, and its nargs; for 0.5.11
and 0.5.23 the same as SGLang's own parser (tests/fixtures/argparse-<version>.json). SGD011
says a key was removed only where the release's catalog takes no option spelled from it; a
former field name the release still takes (renamed, old spelling kept) is not removed.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sgdeploy.sglang.catalog import CATALOG_DIR, available_versions, flag_history, load_catalog
from sgdeploy.sglang.rule import LaunchContext
from sgdeploy.sglang.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures"


@cache
def raw_rows(version: str) -> list[dict[str, Any]]:
    path = CATALOG_DIR / f"{version}.json.gz"
    rows: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))["flags"]
    return rows


def row_shape(row: dict[str, Any]) -> tuple[bool, object]:
    takes = row.get("takes_value", True)
    switch = bool(row.get("store_true")) or not takes or row.get("nargs") == 0
    return (not switch, None if switch else row.get("nargs"))


@pytest.mark.parametrize("version", available_versions())
def test_every_option_keeps_the_shape_of_its_own_registration(version: str) -> None:
    catalog = load_catalog(version)
    wrong = []
    for row in raw_rows(version):
        for option in row["flags"]:
            flag = catalog.by_option[option]
            if flag.field != row["field"] or set(flag.options) != set(row["flags"]):
                continue  # another registration of the same option (a later one wins in argparse)
            if (flag.takes_value, flag.nargs) != row_shape(row):
                ours = (flag.takes_value, flag.nargs)
                wrong.append(f"{option}: catalog {ours}, row {row_shape(row)}")
    assert not wrong, f"{version}: " + "; ".join(wrong)


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_every_option_agrees_with_sglangs_own_parser(version: str) -> None:
    """tests/fixtures/argparse-<version>.json: SGLang's parser as built on a CUDA host
    (bench/fidelity/parser_shapes.py): each option's dest, nargs and choices, aliases included."""
    real = json.loads((FIXTURES / f"argparse-{version}.json").read_text(encoding="utf-8"))
    catalog = load_catalog(version)
    assert set(real) == set(catalog.by_option), f"{version}: options differ"
    rows = raw_rows(version)
    dests = {option: row.get("argparse_dest") for row in rows for option in row["flags"]}
    wrong = []
    for option, (dest, nargs, choices) in real.items():
        flag = catalog.by_option[option]
        ours = (dests[option], flag.takes_value, flag.nargs)
        if ours != (dest, nargs != 0, None if nargs == 0 else nargs):
            wrong.append(f"{option}: catalog {ours}, SGLang {dest, nargs}")
        if choices is not None and sorted(map(str, flag.choices or ())) != choices:
            wrong.append(f"{option}: choices differ")
    assert not wrong, f"{version}: " + "; ".join(wrong)


@cache
def every_key() -> frozenset[str]:
    keys: set[str] = set()
    for version in available_versions():
        catalog = load_catalog(version)
        keys.update(catalog.flags, catalog.aliases)
    return frozenset(keys)


def sgd011(version: str, key: str, value: Any) -> list[str]:
    catalog = load_catalog(version)
    ctx = LaunchContext(server={}, env={}, catalog=catalog, raw_server={key: value})
    return [f.message for f in RULES.by_id("SGD011").run(ctx)]


def sample(key: str) -> Any:
    last, _ = flag_history(key)
    flag = load_catalog(last).lookup(key) if last else None
    return True if flag is None or flag.is_switch else "1"


@pytest.mark.parametrize("version", available_versions())
def test_removed_only_where_the_catalog_takes_no_such_option(version: str) -> None:
    catalog = load_catalog(version)
    wrong = []
    for key in sorted(every_key()):
        said = [m for m in sgd011(version, key, sample(key)) if "was removed in SGLang" in m]
        if not said:
            continue
        option = "--" + key.replace("_", "-")
        last, _ = flag_history(key)
        removed_in = said[0].split("was removed in SGLang ", 1)[1].split(" ", 1)[0]
        if option in catalog.by_option or catalog.lookup(key) is not None:
            wrong.append(f"{key}: claimed removed, but {version} takes {option}")
        elif last is None or load_catalog(last).lookup(key) is None:
            wrong.append(f"{key}: 'last in {last}' has no such key")
        elif removed_in in available_versions() and load_catalog(removed_in).accepts(key):
            wrong.append(f"{key}: 'removed in {removed_in}', which still accepts it")
    assert not wrong, f"{version}: " + "; ".join(wrong)


def test_a_renamed_field_keeps_its_old_spelling_as_an_alias() -> None:
    catalog = load_catalog("0.5.23")
    flag = catalog.lookup("grpc_http_sidecar_port")
    assert flag is not None and flag.field == "smg_http_sidecar_port" and flag.is_alias
    assert sgd011("0.5.23", "grpc_http_sidecar_port", 30001) == []
    assert catalog.lookup("tensor_parallel_size") is None  # a spelling, never a field: SGD010
