"""Checks that cannot run as asked say so: a host's SGLang release without a bundled catalog is
checked against the nearest older one, and every finding names the release it was checked
against; a release older than every catalog is not checked, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.sglang.catalog import newest_version

INVENTORY = """\
[hosts.box]
address = "192.0.2.10"
gpu = "RTX A6000"
gpu_count = 2
sglang_version = "{version}"
"""

PROFILE = """\
[deploy]
host = "box"
python = "/opt/sglang/bin/python3"

[server]
model_path = "/models/Qwen3-8B"
tp_size = 8
enable_torch_compil = true
"""


def _validate(tmp_path: Path, version: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    (tmp_path / "inventory.toml").write_text(INVENTORY.format(version=version), encoding="utf-8")
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    code = cli.main(["validate", str(tmp_path / "p.toml"), "--inventory", str(tmp_path / "inventory.toml"),
                     "--json"])
    return code, json.loads(capsys.readouterr().out)


def _newer_than_bundled() -> str:
    major, minor, patch = (int(p) for p in newest_version().split(".")[:3])
    return f"{major}.{minor}.{patch + 1}"


def test_a_release_newer_than_every_catalog_is_checked_against_the_nearest_older(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer, nearest = _newer_than_bundled(), newest_version()
    code, doc = _validate(tmp_path, newer, capsys)
    found = {d["rule"]: d for d in doc["profiles"][0]["diagnostics"]}
    assert code == 1, "tp 8 on a 2-GPU host still fails the gate"
    assert found["SGD032"]["severity"] == "warning"
    assert f"checked against the nearest older release, {nearest}" in found["SGD032"]["message"]
    assert "build_catalogs" not in found["SGD032"]["hint"], "the wheel has no scripts/"
    note = f"[checked against SGLang {nearest}'s catalog: none is bundled for {newer}]"
    assert note in found["SGD101"]["message"] and found["SGD101"]["severity"] == "error"
    # an option the older catalog lacks may be new in that release: reported, not refused
    assert note in found["SGD010"]["message"] and found["SGD010"]["severity"] == "warning"


def test_a_release_older_than_every_catalog_says_nothing_was_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = _validate(tmp_path, "0.4.0", capsys)
    found = {d["rule"]: d for d in doc["profiles"][0]["diagnostics"]}
    assert code == 0 and set(found) == {"SGD032"}
    assert "were not checked" in found["SGD032"]["message"] and found["SGD032"]["severity"] == "warning"
