"""SGLang's refusals written as data (sgdeploy/sglang/rules/sites.py) held against the wheels.

Every entry names the check site it mirrors; the per-release inventories (catalogs/checks/, read
from the wheels) must list that site in every release the entry claims, and check_sites.toml must
map the site to the entry's rule.
"""

from __future__ import annotations

import functools

import pytest

from sgdeploy.sglang import checksites
from sgdeploy.sglang.catalog import available_versions, load_catalog
from sgdeploy.sglang.rules import RULES
from sgdeploy.sglang.rules.sites import TABLES, Refusal
from sgdeploy.sglang.versions import parse_version

ENTRIES = [(rule_id, refusal) for rule_id, table in sorted(TABLES.items()) for refusal in table]


@functools.cache
def _keys(version: str) -> frozenset[str]:
    return frozenset(site["key"] for site in checksites.refusal_sites(version))


def _name(entry: tuple[str, Refusal]) -> str:
    return f"{entry[0]}:{entry[1].site[:60]}"


@pytest.mark.parametrize("entry", ENTRIES, ids=[_name(e) for e in ENTRIES])
def test_the_site_exists_in_every_release_the_entry_claims(entry: tuple[str, Refusal]) -> None:
    rule_id, refusal = entry
    claimed = refusal.inventoried or refusal.versions
    rule = RULES.by_id(rule_id)
    missing = [v for v in checksites.inventoried_versions()
               if parse_version(v) in claimed and rule.applies_to(parse_version(v)) and refusal.site not in _keys(v)]
    assert not missing, f"{refusal.site!r} is not a check site of {', '.join(missing)}"
    assert any(refusal.site in _keys(v) for v in checksites.inventoried_versions())


@pytest.mark.parametrize("entry", ENTRIES, ids=[_name(e) for e in ENTRIES])
def test_the_mapping_names_the_entry_rule(entry: tuple[str, Refusal]) -> None:
    rule_id, refusal = entry
    decision = checksites.decide(refusal.site)
    assert decision is not None and rule_id in decision.rules, (
        f"check_sites.toml does not map {refusal.site!r} to {rule_id}")


@pytest.mark.parametrize("entry", ENTRIES, ids=[_name(e) for e in ENTRIES])
def test_the_field_is_a_flag(entry: tuple[str, Refusal]) -> None:
    field = entry[1].field
    assert callable(field) or not field or any(field in load_catalog(v) for v in available_versions())
