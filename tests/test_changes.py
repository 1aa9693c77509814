"""`sgdeploy validate --changed FILE...`: the profiles a change touches, and the exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.review.changes import profiles_to_check

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    shutil.copy(REPO / "inventory.toml", tmp_path / "inventory.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)
    return tmp_path


EVERY = ["profiles/a.toml", "profiles/b.toml"]


def test_profiles_alone_are_checked_alone(checkout: Path) -> None:
    assert profiles_to_check(["profiles/qwen36-mtp3.toml"], Path("inventory.toml"), EVERY) == [
        "profiles/qwen36-mtp3.toml"]


def test_the_inventory_brings_every_profile_once(checkout: Path) -> None:
    changed = ["profiles/qwen36-mtp3.toml", "inventory.toml"]
    every = ["profiles/deepseek-v3-h200.toml", "profiles/qwen36-mtp3.toml"]
    assert profiles_to_check(changed, Path("inventory.toml"), every) == [
        "profiles/qwen36-mtp3.toml", "profiles/deepseek-v3-h200.toml"]


def test_the_inventory_in_use_counts_under_any_name(checkout: Path) -> None:
    shutil.copy("inventory.toml", "hosts.toml")
    assert profiles_to_check(["hosts.toml"], Path("hosts.toml"), EVERY) == EVERY
    assert profiles_to_check(["./hosts.toml"], Path("hosts.toml"), EVERY) == EVERY


def test_deleted_files_are_skipped(checkout: Path) -> None:
    assert profiles_to_check(["profiles/gone.toml"], Path("inventory.toml"), EVERY) == []


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["validate", "--changed", *args])
    return code, capsys.readouterr().out


def test_cli_exit_codes(checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "profiles/qwen36-mtp3.toml")
    assert (code, out.splitlines()[-1]) == (0, "1 profile(s) checked: 1 valid, 0 with errors, 0 warning(s)")
    bad = checkout / "profiles" / "bad.toml"
    bad.write_text((checkout / "profiles" / "qwen36-mtp3.toml").read_text().replace("tp_size", "tp_sise"))
    code, out = run(capsys, "profiles/qwen3-8b-dense.toml")
    assert code == 0 and "bad.toml" not in out
    code, out = run(capsys, "inventory.toml", "--format", "json")
    document = json.loads(out)
    assert code == 1 and len(document["profiles"]) == 5
    assert [p["path"] for p in document["profiles"] if not p["ok"]] == ["profiles/bad.toml"]
    # nothing to check (a deleted profile, or no file given) is no error
    assert run(capsys, "profiles/gone.toml")[0] == 0
    assert run(capsys)[0] == 0
    assert cli.main(["validate", "--changed", "--sglang", "9.9.9", "profiles/qwen36-mtp3.toml"]) == 2
