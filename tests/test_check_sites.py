"""SGLang's own check sites: the inventory per release, the mapping to rules, the coverage table."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sgdeploy.sglang import checksites
from sgdeploy.sglang.catalog import available_versions
from sgdeploy.sglang.rules import RULES, rule_ids
from sgdeploy.sglang.versions import parse_version

REPO = Path(__file__).resolve().parents[1]
WHEEL_CACHE = REPO / ".cache" / "wheels"


@functools.cache
def _script(name: str) -> ModuleType:
    """A module of scripts/, imported from its path (scripts/ is not a package)."""
    sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_every_bundled_catalog_has_an_inventory() -> None:
    assert checksites.inventoried_versions() == available_versions()


def test_every_refusal_site_of_every_release_is_accounted_for() -> None:
    missing = _script("check_site_coverage").unmapped()
    assert not missing, "sites no entry of sgdeploy/sglang/data/check_sites.toml covers " \
        "(scripts/check_site_coverage.py --stub adds them as todo):\n" + "\n".join(sorted(missing))


def test_mapping_names_only_existing_rules() -> None:
    known = set(rule_ids())
    unknown = {
        f"{function}: {message} -> {rule}"
        for function, entries in checksites.load_mapping().items()
        for message, decision in entries.items()
        for rule in decision.rules
        if rule not in known
    }
    assert not unknown


def test_mapping_has_no_entry_that_matches_no_site() -> None:
    keys = {site["key"] for v in checksites.inventoried_versions() for site in checksites.refusal_sites(v)}
    functions = {checksites.split_key(key)[0] for key in keys}
    stale = {
        f"{function}: {message}"
        for function, entries in checksites.load_mapping().items()
        for message in entries
        if (function not in functions if message == checksites.WILDCARD else f"{function}: {message}" not in keys)
    }
    assert not stale


def test_categories_carry_a_reason() -> None:
    bare = {
        f"{function}: {message}"
        for function, entries in checksites.load_mapping().items()
        for message, decision in entries.items()
        if decision.category not in (checksites.OFFLINE, checksites.TODO) and not decision.reason
    }
    assert not bare


def test_a_mapped_rule_applies_to_every_release_with_the_site() -> None:
    """A site mapped to rules is decided in a release only if one of them runs for it."""
    by_id = {rule.id: rule for rule in RULES}
    wrong = set()
    for version in checksites.inventoried_versions():
        parsed = parse_version(version)
        for site in checksites.refusal_sites(version):
            decision = checksites.decide(site["key"])
            rules = [by_id[r] for r in decision.rules if r in by_id] if decision else []
            if rules and not any(rule.applies_to(parsed) for rule in rules):
                wrong.add(f"{version} {site['key']} -> {' '.join(decision.rules)}")  # type: ignore[union-attr]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_entry_is_left_todo() -> None:
    """Every site is read against SGLang's code: mapped to a rule, or host/undecidable/internal with a reason."""
    todo = sorted(
        f"{function}: {message}"
        for function, entries in checksites.load_mapping().items()
        for message, decision in entries.items()
        if decision.category == checksites.TODO
    )
    assert not todo, "entries marked todo in sgdeploy/sglang/data/check_sites.toml:\n" + "\n".join(todo)


def test_the_coverage_table_in_the_docs_is_current() -> None:
    coverage = _script("check_site_coverage")
    text = coverage.DOCS.read_text(encoding="utf-8")
    assert coverage.docs_with_table(text, checksites.coverage_table()) == text, (
        "run scripts/check_site_coverage.py --write-docs"
    )


def test_decision_of_a_function_wildcard_and_of_an_exact_key() -> None:
    mapping = {
        "handle_x": {
            "*": checksites.Decision.parse("host: needs config.json"),
            "a {} b": checksites.Decision.parse("SGD101 SGD102"),
        }
    }
    exact = checksites.decide("handle_x: a {} b", mapping)
    assert exact and exact.category == checksites.OFFLINE and exact.rules == ("SGD101", "SGD102")
    other = checksites.decide("handle_x: c", mapping)
    assert other and other.category == checksites.HOST and other.reason == "needs config.json"
    assert checksites.decide("handle_y: a {} b", mapping) is None


FAKE_SERVER_ARGS = '''
from sglang.srt.arg_groups.hook import handle_ssl
from dataclasses import dataclass

@dataclass
class ServerArgs:
    tp_size: int = 1
    ssl_keyfile: str = None

    def __post_init__(self):
        self._handle_tp()
        run_hook(handle_ssl, self)

    def _handle_tp(self):
        if self.tp_size < 1:
            raise ValueError(f"tp_size must be positive, got {self.tp_size}")
        assert self.tp_size % 2 == 0
        logger.warning("tp_size changed")
        self.tp_size = 2

    @staticmethod
    def add_cli_args(parser):
        raise RuntimeError("flag set, not a check")

def unused():
    raise ValueError("never reached")
'''
FAKE_HOOK = '''
def handle_ssl(server_args):
    if server_args.ssl_keyfile:
        raise ValueError("--ssl-keyfile " + "needs a cert")

@register
def _post_pass(view):
    return {"tp_size": 4}
'''


def test_extraction_follows_what_server_args_reaches() -> None:
    sites = _script("check_sites").extract_check_sites(
        {
            "sglang/srt/server_args.py": FAKE_SERVER_ARGS,
            "sglang/srt/arg_groups/hook.py": FAKE_HOOK,
            "sglang/srt/speculative/x.py": "import os\n",
        },
        {"tp_size", "ssl_keyfile"},
    )
    keys = {(site["kind"], site["key"]) for site in sites}
    assert keys == {
        ("raise", "handle_tp: tp_size must be positive, got {}"),
        ("assert", "handle_tp: assert tp_size % 2 == 0"),
        ("warning", "handle_tp: tp_size changed"),
        ("override", "handle_tp: tp_size"),
        ("raise", "handle_ssl: --ssl-keyfile needs a cert"),
        ("override", "post_pass: tp_size"),
    }
    raise_site = next(s for s in sites if s["kind"] == "raise" and "tp_size" in s["key"])
    assert raise_site["function"] == "server_args.ServerArgs._handle_tp"
    assert raise_site["message"] == "tp_size must be positive, got {self.tp_size}"


def test_rebuilding_the_0_5_11_inventory_is_byte_identical() -> None:
    builder = _script("build_catalogs")
    dist = builder.find_cached_dist(WHEEL_CACHE, "0.5.11")
    if dist is None:
        pytest.skip("sglang 0.5.11 wheel not in .cache/wheels (run scripts/build_catalogs.py)")
    catalog = builder.json.loads(builder.gzip.decompress((checksites.CATALOG_DIR / "0.5.11.json.gz").read_bytes()))
    data = builder.catalog_bytes(builder.build_check_sites("0.5.11", dist, catalog))
    assert data == (checksites.CHECKS_DIR / "0.5.11.json.gz").read_bytes()
