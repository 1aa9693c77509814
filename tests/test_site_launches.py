"""Launches derived from SGLang's own check sites, both sides of each condition, with SGLang's verdict.

tests/fixtures/site_launches.json.gz is written by `bench/fidelity/sitegen.py --write-fixture`: for
0.5.11 and 0.5.23, every launch the generator derives from a refusal site's condition (read from
the release's source) with what SGLang itself (the oracle) said of it, and the config.json of each
model used. Here sgdeploy's side is replayed without SGLang: a refusal at a site that
data/check_sites.toml says a rule decides offline must be an error, and an accepted launch must
not be refused except by a policy rule. A change that opens a new miss of that kind fails here.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from bench.fidelity import run, sitegen
from sgdeploy.sglang.checksites import OFFLINE, decide

# Refusals at sites decided offline that sgdeploy does not catch yet, each with why.
KNOWN_MISSES: dict[str, str] = {}
# Accepted launches sgdeploy refuses (no policy rule), each with why.
KNOWN_FALSE_ALARMS: dict[str, str] = {}


@cache
def fixture() -> dict[str, object]:
    return sitegen.load_fixture()


@cache
def outcomes(version: str, models: str, model_config: bool = True) -> list[sitegen.Outcome]:
    data = fixture()
    entries = data["versions"][version]  # type: ignore[index]
    verdicts = {e["id"]: e["sglang"] for e in entries}
    return sitegen.compare(version, entries, verdicts, Path(models), model_config)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("models")
    for name, config in fixture()["models"].items():  # type: ignore[attr-defined]
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(root)


VERSIONS = ("0.5.11", "0.5.23")


def offline(site: str) -> bool:
    if site == "argparse":
        return True
    decision = decide(site)
    return decision is not None and decision.category == OFFLINE


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fixture_has_both_sides_of_many_sites(version: str) -> None:
    entries = fixture()["versions"][version]  # type: ignore[index]
    sides = {e["side"].split(":")[0] for e in entries}
    assert sides == {"refuse", "other"}
    refused_at_own_site = {e["site"] for e in entries if e["side"] == "refuse" and e["sglang"]["accepted"] is False}
    assert len(refused_at_own_site) >= 40, version
    assert all(e["version"] == version for e in entries)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_refusal_at_a_site_decided_offline_is_caught(version: str, models: str) -> None:
    missed = [f"{o.case['id']} ({o.raised_site[:90]}): {' '.join(o.case['argv'])[:160]}"
              for o in outcomes(version, models)
              if o.status == "miss" and offline(o.raised_site) and o.case["id"] not in KNOWN_MISSES]
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize("version", VERSIONS)
def test_no_accepted_launch_is_refused(version: str, models: str) -> None:
    alarms = [f"{o.case['id']} {o.ours['errors']}: {' '.join(o.case['argv'])[:160]}"
              for o in outcomes(version, models)
              if o.status == "false_alarm" and o.case["id"] not in KNOWN_FALSE_ALARMS]
    assert not alarms, "\n".join(alarms)


@pytest.mark.parametrize("version", VERSIONS)
def test_without_config_json_a_refusal_is_caught_or_its_check_named_as_not_checked(version: str, models: str) -> None:
    """With only deploy.model_architecture, a refusal caught with the config is caught still (the
    architecture-only checks), or SGD580's note names the check that needs the config."""
    with_config = {o.case["id"]: o for o in outcomes(version, models)}
    silent = []
    for outcome in outcomes(version, models, False):
        caught_before = with_config[outcome.case["id"]]
        if outcome.status != "miss" or caught_before.status != "caught":
            continue
        note = " ".join(outcome.ours.get("unchecked") or [])
        if not any(run.UNCHECKED_WORDS.get(rule, "\0") in note for rule in caught_before.ours["errors"]):
            argv = ' '.join(outcome.case['argv'])[:140]
            silent.append(f"{outcome.case['id']} {caught_before.ours['errors']}: {argv}")
    assert not silent, "\n".join(silent)
    assert not [o for o in outcomes(version, models, False) if o.status == "false_alarm"]


def test_known_entries_are_still_in_the_fixture() -> None:
    ids = {e["id"] for version in VERSIONS for e in fixture()["versions"][version]}  # type: ignore[index]
    assert set(KNOWN_MISSES) | set(KNOWN_FALSE_ALARMS) <= ids
