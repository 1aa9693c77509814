"""`sgdeploy diff` on a real git repository holding a copy of the example profiles and inventory."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sgdeploy import cli

REPO = Path(__file__).resolve().parents[1]
REFERENCE = "profiles/qwen36-mtp3.toml"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    shutil.copy(REPO / "inventory.toml", tmp_path / "inventory.toml")
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "start")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SGDEPLOY_INVENTORY", raising=False)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["diff", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def drop_num_steps(repo: Path) -> None:
    edit(repo / REFERENCE, "speculative_num_steps = 3\n", "")
    edit(repo / REFERENCE, "context_length = 131072", "context_length = 65536")


def test_removed_flag_comes_first_in_text(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drop_num_steps(repo)
    code, out, _ = run(capsys, "main")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "sgdeploy diff: main -> working tree"
    assert lines[1].startswith(f"FLAG REMOVED: {REFERENCE} on ct129: --speculative-num-steps 3 ")
    detail = lines.index(f"{REFERENCE} (changed)")
    assert lines[detail + 1].startswith("  ct129: SGLang 0.5.11, 2x RTX A6000")
    # within the host, the removal precedes the other changes
    assert lines[detail + 2].startswith("    REMOVED flag  --speculative-num-steps 3")
    assert lines[detail + 3] == "    changed flag  --context-length 131072 -> 65536"
    assert '-    "--speculative-num-steps" "3" \\' in out


def test_removed_flag_comes_first_in_json(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drop_num_steps(repo)
    code, out, _ = run(capsys, "main", "--format", "json")
    assert code == 0
    document = json.loads(out)
    assert list(document)[:3] == ["before", "after", "removed_flags"]
    assert document["removed_flags"] == [{"profile": REFERENCE, "host": "ct129", "flag": "speculative_num_steps",
                                          "option": "--speculative-num-steps", "before": 3, "default": None}]
    (profile,) = document["profiles"]
    (target,) = profile["targets"]
    assert target["host"] == "ct129" and target["flags"][0]["kind"] == "removed"
    assert [f["name"] for f in target["flags"]] == ["speculative_num_steps", "context_length"]
    assert target["facts"]["after"]["sglang_version"] == "0.5.11"


def test_removed_flag_comes_first_in_markdown(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drop_num_steps(repo)
    code, out, _ = run(capsys, "main", "--format", "markdown")
    assert code == 0
    lines = out.splitlines()
    assert lines[2:4] == ["> [!CAUTION]", "> **Flags removed** (the server will run without them):"]
    assert lines[4].startswith(f"> - `{REFERENCE}` on **ct129**: `--speculative-num-steps 3`")
    assert "| **REMOVED** flag | `--speculative-num-steps` | `3` | *SGLang default:* `None` |" in out
    assert out.index("**REMOVED** flag") < out.index("| changed flag | `--context-length`")
    assert "```diff" in out


def test_inventory_upgrade_shows_the_new_errors(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(repo / "inventory.toml", 'gpu_memory_gib = 48\nsglang_version = "0.5.11"',
         'gpu_memory_gib = 48\nsglang_version = "0.5.23"')
    code, out, _ = run(capsys, "main", "--format", "json")
    assert code == 0
    document = json.loads(out)
    assert document["removed_flags"] == []
    errors = [(e["profile"], e["host"], e["rule"], e["field"]) for e in document["new_errors"]]
    assert (REFERENCE, "ct129", "SGD011", "server.mamba_scheduler_strategy") in errors
    assert (REFERENCE, "ct129", "SGD011", "server.enforce_piecewise_cuda_graph") in errors
    reference = next(p for p in document["profiles"] if p["path"] == REFERENCE)
    assert reference["status"] == "hosts changed"
    (target,) = reference["targets"]
    assert target["facts_changed"] == [{"kind": "changed", "name": "sglang_version", "before": "0.5.11",
                                        "after": "0.5.23"}]
    assert target["unit_diff"] == "" and "has errors" in target["unit_note"]
    # the dense profile on the same host still renders: its unit names the new version
    dense = next(p for p in document["profiles"] if p["path"] == "profiles/qwen3-8b-dense.toml")
    assert "+# target: host ct129, SGLang 0.5.23" in dense["targets"][0]["unit_diff"]

    _, text, _ = run(capsys, "main")
    assert any(line.startswith(f"NEW ERROR: {REFERENCE} on ct129: SGD011 --mamba-scheduler-strategy")
               for line in text.splitlines())
    _, markdown, _ = run(capsys, "main", "--format", "markdown")
    assert markdown.splitlines()[2:4] == ["> [!WARNING]", "> **New errors:**"]
    assert "SGLang 0.5.11, 2x RTX A6000 (sm 8.6, 48 GiB) → SGLang 0.5.23" in markdown


def test_nothing_changed(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(repo / "inventory.toml", "# Example inventory", "# An inventory")  # a comment alone changes nothing
    code, out, _ = run(capsys, "main")
    assert (code, out.splitlines()[-1]) == (0, "no profile or host changed")
    assert json.loads(run(capsys, "main", "--format", "json")[1])["profiles"] == []


def test_two_refs_and_default_head(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    drop_num_steps(repo)
    assert "FLAG REMOVED" in run(capsys)[1]  # no revision: HEAD against the working tree
    git(repo, "commit", "-q", "-am", "drop num steps")
    assert "FLAG REMOVED" not in run(capsys)[1]
    code, out, _ = run(capsys, "main~1", "main")
    assert code == 0 and out.splitlines()[0] == "sgdeploy diff: main~1 -> main"
    assert "FLAG REMOVED" in out


def test_two_files(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new = tmp_path / "new.toml"
    new.write_text((repo / REFERENCE).read_text().replace("speculative_num_steps = 3\n", ""))
    code, out, _ = run(capsys, REFERENCE, str(new))
    assert code == 0
    assert out.splitlines()[1].startswith(f"FLAG REMOVED: {new} on ct129: --speculative-num-steps 3")


def test_added_removed_and_moved_profiles(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(repo / REFERENCE, repo / "profiles" / "copy.toml")
    (repo / "profiles" / "qwen3-8b-dense.toml").unlink()
    edit(repo / "profiles" / "deepseek-v3-h200.toml", 'host = "h200-02"', 'host = "h200"')
    document = json.loads(run(capsys, "main", "--format", "json")[1])
    status = {p["path"]: p["status"] for p in document["profiles"]}
    assert status == {"profiles/copy.toml": "added", "profiles/qwen3-8b-dense.toml": "removed",
                      "profiles/deepseek-v3-h200.toml": "changed"}
    moved = next(p for p in document["profiles"] if p["path"] == "profiles/deepseek-v3-h200.toml")
    deployed = {t["host"]: t["deployed"] for t in moved["targets"]}
    assert deployed == {"h200-01": {"before": False, "after": True}, "h200-02": {"before": True, "after": True}}
    # a profile no longer deployed to a host loses its flags there: listed, and said so
    removed = [r for r in document["removed_flags"] if r["profile"] == "profiles/qwen3-8b-dense.toml"]
    assert removed and all(r["host"] == "ct129" for r in removed)


def test_env_and_deploy_changes(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(repo / REFERENCE, 'SGLANG_ENABLE_SPEC_V2 = "1"', 'SGLANG_ENABLE_SPEC_V2 = "0"\nNCCL_DEBUG = "INFO"')
    edit(repo / REFERENCE, "ready_timeout_s = 1200", "ready_timeout_s = 900")
    out = run(capsys, "main")[1]
    assert "changed env   SGLANG_ENABLE_SPEC_V2: 1 -> 0" in out
    assert "added   env   NCCL_DEBUG=INFO" in out
    assert "changed deploy  ready_timeout_s: 1200 -> 900" in out


def test_unknown_revision_is_a_usage_error(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "no-such-branch")
    assert (code, out) == (2, "")
    assert "'no-such-branch' is no commit of this repository" in err


def test_outside_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    code, _, err = run(capsys, "main")
    assert code == 2 and "not in a git repository" in err
