"""Following a profile through apply climbs back no more often than docs/architecture.md says
("Following a profile through apply", measured by bench/architecture_path.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.architecture_path import Measure, measure

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
ROWS = {"the profile's path": 0, "every sgdeploy call": 1}


def documented() -> dict[str, dict[str, int]]:
    """The table's figures: {row: {stops, files, climbs_back, returns}}."""
    text = DOC.read_text(encoding="utf-8")
    found = {}
    for row in ROWS:
        match = re.search(rf"^\| {re.escape(row)} \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", text, re.MULTILINE)
        assert match, f"docs/architecture.md has no figures for {row!r}"
        found[row] = dict(zip(("stops", "files", "climbs_back", "returns"), map(int, match.groups()), strict=True))
    return found


@pytest.fixture(scope="module")
def measured() -> tuple[Measure, Measure]:
    return measure()


def test_the_measured_run_is_a_plan(measured: tuple[Measure, Measure]) -> None:
    path, _ = measured
    assert path.exit_code == 0, path.output
    assert "plan for sglang.service on ct129" in path.output and "install" in path.output
    modules = {s.module for s in path.stops}
    assert {"sgdeploy.profile.model", "sgdeploy.profile.validate", "sgdeploy.deploy.apply",
            "sgdeploy.deploy.preflight", "sgdeploy.deploy.render"} <= modules


@pytest.mark.parametrize("row", ROWS)
def test_climbs_back_do_not_grow(measured: tuple[Measure, Measure], row: str) -> None:
    figures = measured[ROWS[row]].figures()
    limit = documented()[row]["climbs_back"]
    assert figures["climbs_back"] <= limit, (
        f"{row}: {figures['climbs_back']} climbs back, docs/architecture.md says {limit} "
        f"(.venv/bin/python bench/architecture_path.py shows where each comes from): {figures}")


def test_the_profile_climbs_back_at_most_six_times(measured: tuple[Measure, Measure]) -> None:
    """The bar of the redesign: where the six come from is listed in docs/architecture.md."""
    path, _ = measured
    assert path.figures()["climbs_back"] <= 6, [f"{a.module} -> {b.module}" for a, b in path.climbs()]
