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


GROUP = """\
[hosts.old]
address = "192.0.2.1"
gpu = "RTX A6000"
gpu_count = 2
sglang_version = "0.5.11"

[hosts.new]
address = "192.0.2.2"
gpu = "RTX A6000"
gpu_count = 2
sglang_version = "0.5.23"

[groups]
mixed = ["old", "new"]
"""

GROUP_PROFILE = """\
[deploy]
host = "mixed"
python = "/opt/sglang/bin/python3"

[server]
model_path = " "
tp_size = 4
"""


def test_a_group_mixing_releases_names_host_and_release_once_per_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inventory.toml").write_text(GROUP, encoding="utf-8")
    (tmp_path / "p.toml").write_text(GROUP_PROFILE, encoding="utf-8")
    args = ["validate", str(tmp_path / "p.toml"), "--inventory", str(tmp_path / "inventory.toml")]
    assert cli.main([*args, "--json"]) == 1
    found = json.loads(capsys.readouterr().out)["profiles"][0]["diagnostics"]
    empty = [d for d in found if d["rule"] == "SGD016"]
    assert len(empty) == 1, "the same finding on both members is reported once"
    assert empty[0]["hosts"] == ["old (SGLang 0.5.11)", "new (SGLang 0.5.23)"]
    per_host = [d["hosts"] for d in found if d["rule"] == "SGD101"]
    assert per_host == [["old (SGLang 0.5.11)"], ["new (SGLang 0.5.23)"]]
    cli.main(args)
    assert "[on old (SGLang 0.5.11), new (SGLang 0.5.23)]" in capsys.readouterr().out


def test_a_hint_says_which_members_lack_the_option_it_suggests() -> None:
    from sgdeploy.profile.validate import TargetVerdict, _hint_for_every_member
    from sgdeploy.sglang.catalog import load_catalog
    from sgdeploy.sglang.target import HostTarget

    verdicts = [TargetVerdict(HostTarget("old"), "0.5.11", []), TargetVerdict(HostTarget("new"), "0.5.23", [])]
    catalogs = {v: load_catalog(v) for v in ("0.5.11", "0.5.23")}
    hint = _hint_for_every_member("set --attn-dp-size or --tp-size", verdicts, catalogs)
    assert hint.endswith("(--attn-dp-size is not an option of SGLang on old)")


def test_an_upgrade_check_says_what_the_host_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "inventory.toml").write_text(INVENTORY.format(version="0.5.11"), encoding="utf-8")
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    cli.main(["validate", str(tmp_path / "p.toml"), "--inventory", str(tmp_path / "inventory.toml"),
              "--sglang", "0.5.23", "--json"])
    found = json.loads(capsys.readouterr().out)["profiles"][0]["diagnostics"]
    assert found and all("[validated for SGLang 0.5.23 (--sglang); box runs 0.5.11]" in d["message"]
                         for d in found)


@pytest.mark.parametrize(("facts", "said"), [
    ('gpu_count = true', "hosts.box.gpu_count takes an integer, not true/false"),
    ('gpu_count = "4"', "hosts.box.gpu_count takes an integer, not a string"),
    ('gpu = "NVIDIA H100"\ncompute_capability = "8.6"', "NVIDIA H100 is compute capability 9.0, not 8.6"),
    ('gpu = "NVIDIA H100"\ngpu_memory_gib = 9999', "NVIDIA H100 has 80 GiB or 94 GiB of memory, not 9999 GiB"),
])
def test_inventory_facts_of_the_wrong_type_or_contradicting_the_gpu_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], facts: str, said: str
) -> None:
    (tmp_path / "inventory.toml").write_text(f'[hosts.box]\naddress = "192.0.2.10"\n{facts}\n', encoding="utf-8")
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    code = cli.main(["validate", str(tmp_path / "p.toml"), "--inventory", str(tmp_path / "inventory.toml")])
    assert code == 1 and said in capsys.readouterr().out


@pytest.mark.parametrize(("facts", "lacking"), [
    ('gpu = "NVIDIA H200"', "no gpu_count"),
    ('gpu = "Quantum GPU 9000"\ngpu_count = 8', "sgdeploy's GPU table does not know 'Quantum GPU 9000'"),
])
def test_a_missing_host_fact_says_which_checks_did_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], facts: str, lacking: str
) -> None:
    (tmp_path / "inventory.toml").write_text(
        f'[hosts.box]\naddress = "192.0.2.10"\nsglang_version = "0.5.11"\n{facts}\n', encoding="utf-8")
    (tmp_path / "p.toml").write_text(PROFILE.replace("tp_size = 8\nenable_torch_compil = true\n", ""),
                                     encoding="utf-8")
    args = ["validate", str(tmp_path / "p.toml"), "--inventory", str(tmp_path / "inventory.toml")]
    assert cli.main([*args, "--json"]) == 0
    (note,) = [d for d in json.loads(capsys.readouterr().out)["profiles"][0]["diagnostics"]
               if d["rule"] == "SGD036"]
    assert lacking in note["message"] and "not checked" in note["message"]
    cli.main(args)
    assert "SGD036 info" in capsys.readouterr().out


RULES_DIR = Path(__file__).resolve().parent / "rules"


def _inventory_arguments(path: Path) -> list[str]:
    """The fixture's `# inventory:` choice as validate's options (none: no inventory at all)."""
    choice = next((line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
                   if line.startswith("# inventory:")), None)
    if choice == "none":
        return []
    return ["--inventory", str(RULES_DIR / choice if choice else RULES_DIR.parent / "inventory.rules.toml")]


def test_every_check_that_can_be_skipped_says_so_and_strict_fails_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sgdeploy.sglang.rules.registry import UNCHECKED

    monkeypatch.chdir(tmp_path)  # no ./inventory.toml here
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)
    for rule_id in sorted(UNCHECKED):
        (path,) = [p for p in RULES_DIR.glob(f"{rule_id}-*.toml") if not p.name.endswith(".ok.toml")]
        args = ["validate", str(path), *_inventory_arguments(path)]
        assert cli.main(args) in (0, 1)
        assert f" {rule_id} " in capsys.readouterr().out, f"{rule_id} is not said in text"
        cli.main([*args, "--json"])
        rules = {d["rule"] for d in json.loads(capsys.readouterr().out)["profiles"][0]["diagnostics"]}
        assert rule_id in rules, f"{rule_id} is not said in JSON"
        assert cli.main([*args, "--strict"]) == 1, f"--strict passes {rule_id}"
        capsys.readouterr()


def test_strict_passes_a_profile_with_every_fact_known(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixed = RULES_DIR / "SGD580-model-config-checks-skipped.ok.toml"
    copy = tmp_path / fixed.name
    copy.write_text(fixed.read_text().replace('"models/', f'"{RULES_DIR}/models/'), encoding="utf-8")
    code = cli.main(["validate", str(copy), "--inventory", str(RULES_DIR.parent / "inventory.rules.toml"),
                     "--strict"])
    assert code == 0, capsys.readouterr().out


@pytest.mark.parametrize(("make", "said"), [
    (lambda d: d.mkdir(), "is a directory, not a profile"),
    (lambda d: d.symlink_to(d.parent / "gone.toml"), "p.toml"),
])
def test_a_profile_path_that_is_no_file_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, said: str
) -> None:
    target = tmp_path / "p.toml"
    make(target)  # type: ignore[operator]
    for command in (["validate"], ["render"]):
        assert cli.main([*command, str(target)]) == 2
        message = capsys.readouterr().err
        assert said in message and "no such profile" not in message.replace("dangling", "")
