"""Each rule's claim about SGLang held against what the wheels show, and its docs entry against both.

The rules written as Refusal tables name a check site per entry (tests/test_site_refusals.py). The
others list their evidence in sgdeploy/sglang/rules/claims.py: check sites, flags and facts, each
with the releases it claims. Here every claim must match the per-release inventories, catalogs
and facts exactly (a site present in every release the claim names and in no other), each bound
of a rule's `versions` must be a bound of one of its claims, and docs/rules.md must give each rule
a "What SGLang does" paragraph that cites the releases its claims start and stop in, or says
the check is sgdeploy's own.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from sgdeploy.sglang import checksites
from sgdeploy.sglang.catalog import available_versions, load_catalog
from sgdeploy.sglang.facts import fact, recorded, spans
from sgdeploy.sglang.rules import RULES, STRUCTURAL_RULES, rule_ids
from sgdeploy.sglang.rules.claims import CLAIMS, Argparse, Claim, Fact, Flag, Own, Site
from sgdeploy.sglang.rules.sites import TABLES
from sgdeploy.sglang.versions import ALL_VERSIONS, VersionRange, parse_version

DOCS = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
VERSIONS = available_versions()
VERSION_TOKEN = re.compile(r"(?<![\w.])0\.5\.\d+(?:\.post\d+)?(?![\w])")
OWN_MARKER = "sgdeploy's own"


def _claims() -> list[tuple[str, Claim]]:
    return [(rule_id, claim) for rule_id, claims in sorted(CLAIMS.items()) for claim in claims
            if not isinstance(claim, Own | Argparse)]


def _claim_name(entry: tuple[str, Claim]) -> str:
    rule_id, claim = entry
    what = claim.key if isinstance(claim, Site) else claim.name
    return f"{rule_id}:{type(claim).__name__}:{what[:50]}"


@functools.cache
def _site_keys(version: str) -> frozenset[str]:
    return frozenset(site["key"] for site in checksites.load_sites(version))


def _holds_in(versions: VersionRange | None) -> list[str]:
    return [v for v in VERSIONS if versions is not None and parse_version(v) in versions]


def _rule_versions(rule_id: str) -> VersionRange:
    return ALL_VERSIONS if rule_id in STRUCTURAL_RULES else RULES.by_id(rule_id).versions


# --------------------------------------------------------------------------- claims against the wheels
def test_every_rule_has_its_evidence() -> None:
    missing = [r for r in rule_ids() if r not in TABLES and r not in CLAIMS]
    assert not missing, f"no claims in sgdeploy/sglang/rules/claims.py for {', '.join(missing)}"
    assert not set(CLAIMS) - set(rule_ids()), "claims for rules that do not exist"


@pytest.mark.parametrize("entry", _claims(), ids=[_claim_name(e) for e in _claims()])
def test_the_claim_holds_in_exactly_its_releases(entry: tuple[str, Claim]) -> None:
    rule_id, claim = entry
    if isinstance(claim, Site):
        shown = [v for v in checksites.inventoried_versions() if claim.key in _site_keys(v)]
        claimed = [v for v in checksites.inventoried_versions() if parse_version(v) in claim.versions]
        site = next(s for v in shown[:1] for s in checksites.load_sites(v) if s["key"] == claim.key) if shown else None
        if site is not None and site["kind"] in checksites.REFUSAL_KINDS:
            decision = checksites.decide(claim.key)
            assert decision is not None and decision.rules, f"check_sites.toml decides {claim.key!r} by no rule"
    elif isinstance(claim, Flag):
        shown = [v for v in VERSIONS if claim.name in load_catalog(v).flags]
        claimed = _holds_in(claim.versions)
    else:
        assert isinstance(claim, Fact)
        assert recorded(claim.name), f"facts.json has no fact {claim.name!r}"
        shown = [v for v in VERSIONS if fact(claim.name, parse_version(v)) is not None]
        claimed = _holds_in(claim.versions)
    assert shown == claimed, (f"{rule_id}: the wheels show it in {_span(shown)}, the claim says {_span(claimed)}")


def _span(versions: list[str]) -> str:
    return f"{versions[0]}..{versions[-1]} ({len(versions)} releases)" if versions else "no release"


def _bounds(claim: Claim) -> set[str | None]:
    versions = getattr(claim, "versions", None)
    return {versions.since, versions.until} if isinstance(versions, VersionRange) else set()


@pytest.mark.parametrize("rule_id", sorted(r for r in CLAIMS if r not in STRUCTURAL_RULES))
def test_the_rules_releases_start_and_end_where_a_claim_does(rule_id: str) -> None:
    versions = RULES.by_id(rule_id).versions
    bounds = set().union(*(_bounds(c) for c in CLAIMS[rule_id]))
    for bound in (versions.since, versions.until):
        assert bound is None or bound in bounds, (
            f"{rule_id} applies {versions.describe()}, but no claim of it starts or ends at {bound}")


# --------------------------------------------------------------------------- the docs entry
@functools.cache
def _sections() -> dict[str, str]:
    text = DOCS.read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"^## (SGD\d{3})\b[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)}


def _what_sglang_does(rule_id: str) -> str:
    section = _sections().get(rule_id, "")
    found = re.search(r"^What SGLang does: (.*?)(?=^Policy:|^Bad|^Good|^Fix:|\Z)", section, re.M | re.S)
    return found.group(1) if found else ""


def _previous(version: str) -> str:
    """The bundled release before `version` (a range's last release)."""
    return VERSIONS[VERSIONS.index(version) - 1]


def describe(versions: VersionRange) -> str:
    """A rule's releases as its docs entry's versions line says them."""
    if versions.since and versions.until:
        return f"{versions.since} to {_previous(versions.until)}"
    if versions.since:
        return f"{versions.since} and later"
    if versions.until:
        return f"up to {_previous(versions.until)}"
    return "all releases"


@pytest.mark.parametrize("rule_id", rule_ids())
def test_the_entry_says_what_sglang_does_and_in_which_releases(rule_id: str) -> None:
    said = _what_sglang_does(rule_id)
    assert said, f"docs/rules.md: {rule_id} has no 'What SGLang does:' paragraph"
    own = any(isinstance(c, Own) for c in CLAIMS.get(rule_id, ()))
    assert VERSION_TOKEN.search(said) or (own and OWN_MARKER in said), (
        f"docs/rules.md: {rule_id}'s 'What SGLang does' names no release range"
        + (f" and does not say it is {OWN_MARKER} check" if own else ""))
    if own and not any(isinstance(c, Site | Fact | Argparse) for c in CLAIMS[rule_id]):
        assert OWN_MARKER in said, f"docs/rules.md: {rule_id} is {OWN_MARKER} check: say so"


@pytest.mark.parametrize("rule_id", rule_ids())
def test_the_versions_line_is_the_rules_range(rule_id: str) -> None:
    line = re.search(r"^- SGLang versions: (.*)$", _sections().get(rule_id, ""), re.M)
    assert line, f"docs/rules.md: {rule_id} has no '- SGLang versions:' line"
    expected = describe(_rule_versions(rule_id))
    assert re.match(rf"{re.escape(expected)}(?:$|[ (;,:])", line.group(1)), (
        f"docs/rules.md: {rule_id}'s versions line says {line.group(1)!r}; the rule applies to {expected!r}")


def _cited_bounds(claim: Claim) -> list[tuple[str, set[str]]]:
    """Each bound of a cited claim with the spellings that cite it: a range's first release, and for
    its end the last release it holds for (or that release's series, 0.5.13 for 0.5.13.post1) or
    the first it no longer holds for."""
    versions = getattr(claim, "versions", None)
    if not getattr(claim, "cited", False) or not isinstance(versions, VersionRange):
        return []
    out = []
    if versions.since and versions.since != VERSIONS[0]:
        out.append((versions.since, {versions.since}))
    if versions.until:
        last = _previous(versions.until)
        out.append((versions.until, {versions.until, last, re.sub(r"\.post\d+$", "", last)}))
    return out


@pytest.mark.parametrize("entry", _claims(), ids=[_claim_name(e) for e in _claims()])
def test_the_entry_cites_the_claims_releases(entry: tuple[str, Claim]) -> None:
    rule_id, claim = entry
    cited = set(VERSION_TOKEN.findall(_what_sglang_does(rule_id)))
    for bound, spellings in _cited_bounds(claim):
        assert cited & spellings, (f"docs/rules.md: {rule_id}'s 'What SGLang does' does not cite where "
                                   f"{_claim_name(entry)} changes ({bound}: one of {sorted(spellings)})")


def test_facts_named_by_claims_have_their_spans_loaded() -> None:
    assert spans("source:spec_v2_env") and not spans("source:api_key_env") and recorded("source:api_key_env")
