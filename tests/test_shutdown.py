"""The stop of a unit sgdeploy renders: SGLang's crash diagnostics, which sleep 5 s at every
systemd stop from 0.5.13 on, are off unless the profile asks for them (sgdeploy.sglang.shutdown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgdeploy.deploy.render import render_unit
from sgdeploy.profile.model import load_profile
from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.shutdown import CRASH_DIAGNOSTICS_ENV, stop_environment
from tests.test_weight_daemon import rendered

OFF = [(name, "0") for name in CRASH_DIAGNOSTICS_ENV]


@pytest.mark.parametrize(("version", "expected"), [
    ("0.5.11", []), ("0.5.12", []), ("0.5.13", OFF), ("0.5.17", OFF), ("0.5.23", OFF), (None, []),
])
def test_the_releases_whose_stop_sleeps_get_both_off(version: str | None,
                                                     expected: list[tuple[str, str]]) -> None:
    assert stop_environment(version, {}) == expected


def test_a_variable_the_profile_sets_is_left_to_it() -> None:
    assert stop_environment("0.5.17", {"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "1"}) == [
        ("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0")]


def test_the_server_unit_says_why_and_the_daemon_unit_stays_the_same(tmp_path: Path) -> None:
    unit = rendered(tmp_path, version="0.5.17")
    for name in CRASH_DIAGNOSTICS_ENV:
        assert f'Environment="{name}=0"' in unit.text
    assert "Sleeping 5 s" not in unit.text and "would sleep 5 s" in unit.text
    kept = rendered(tmp_path, version="0.5.17", running=128)
    assert unit.daemon is not None and kept.daemon is not None
    assert "BEFORE_CRASH" not in unit.daemon.text and unit.daemon.text == kept.daemon.text


def test_before_0_5_13_the_unit_has_neither(tmp_path: Path) -> None:
    path = tmp_path / "plain.toml"
    path.write_text('[deploy]\nhost = "h"\npython = "/opt/sgl/bin/python3"\n'
                    '[server]\nmodel_path = "/models/m"\n')
    text = render_unit(load_profile(path), load_catalog("0.5.11"), "h").text
    assert "BEFORE_CRASH" not in text and "Crash diagnostics" not in text
