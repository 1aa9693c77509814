"""Every command into each outcome docs/reference.md gives it an exit code for, without a GPU
host: the offline commands into every documented code, the commands that connect into "the host
cannot be reached" (2). Their other codes (apply's and rollback's 0, 1 and 3, status's and
history's 0, probe's 1) are reached on the systemd test hosts: test_apply_hosts.py,
test_operate_hosts.py, test_probe_hosts.py, test_faults.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sgdeploy import cli

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "fixtures" / "h200-real"

UNREACHABLE = """\
[hosts.ct129]
address = "127.0.0.1"
port = 1
user = "root"
gpu = "RTX A6000"
compute_capability = "8.6"
gpu_count = 2
gpu_memory_gib = 48
sglang_version = "0.5.11"
"""
BAD = '[deploy]\nhost = "ct129"\npython = "/x/python3"\n[server]\nmodel_path = "/m"\nmem_fraction_static = 7\n'
LAUNCH = "/v/bin/python3 -m sglang.launch_server --model-path /m"

# (command as the reference names it, its arguments, the exit code the reference gives that outcome)
CASES = [
    ("validate", ["good.toml"], 0), ("validate", ["bad.toml"], 1), ("validate", ["nope.toml"], 2),
    ("render", ["good.toml"], 0), ("render", ["bad.toml"], 1), ("render", ["nope.toml"], 2),
    ("logcheck", [str(REAL / "restart.log")], 0), ("logcheck", [str(REAL / "hand-no-ninja.log")], 1),
    ("logcheck", ["nope.log"], 2),
    ("import", ["ct129", "--command", LAUNCH], 0), ("import", ["--command", LAUNCH.replace("/v/bin/", "")], 1),
    ("import", ["--command", "ls -l"], 2), ("import", ["ct129"], 2),
    ("schema", [], 0), ("schema", ["--sglang", "9.9.9"], 2),
    ("diff", ["HEAD"], 0), ("diff", ["no-such-ref"], 2),
    ("init", ["gpu9", "--address", "127.0.0.1", "--port", "1"], 2),
    ("plan", ["good.toml"], 2), ("apply", ["good.toml"], 2), ("rollback", ["good.toml"], 2),
    ("status", ["good.toml"], 2), ("history", ["good.toml"], 2), ("probe", ["good.toml"], 2),
]
INVENTORY_FREE = {"schema", "diff", "logcheck"}


def documented_codes() -> dict[str, set[int]]:
    """command -> the exit codes its "Exit codes:" paragraph in docs/reference.md names."""
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    found: dict[str, set[int]] = {}
    for m in re.finditer(r"^### `sgdeploy (\w+)[^\n]*\n(.*?)(?=^### |\Z)", text, re.M | re.S):
        said = re.search(r"Exit codes:\s+(.*?)(?:\n\n|\Z)", m[2], re.S)
        if said:
            found[m[1]] = {int(c) for c in re.findall(r"(?:^|, |\n)(\d) ", said[1])}
    return found


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "inventory.toml").write_text(UNREACHABLE)
    (tmp_path / "good.toml").write_text((REPO / "profiles" / "qwen3-8b-dense.toml").read_text())
    (tmp_path / "bad.toml").write_text(BAD)
    if shutil.which("git"):
        for argv in (["init", "-q"], ["add", "good.toml"],
                     ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]):
            subprocess.run(["git", *argv], cwd=tmp_path, check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SGDEPLOY_OPENSSH", "0")
    return tmp_path


@pytest.mark.parametrize(("command", "args", "code"), CASES, ids=[f"{c}-{e}-{' '.join(a)[:30]}" for c, a, e in CASES])
def test_each_outcome_exits_with_the_documented_code(workdir: Path, command: str, args: list[str], code: int,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    if command == "diff" and not shutil.which("git"):
        pytest.skip("no git")
    assert code in documented_codes()[command], f"docs/reference.md gives {command} no exit code {code}"
    extra = [] if command in INVENTORY_FREE else ["--inventory", str(workdir / "inventory.toml")]
    got = cli.main([command, *args, *extra])
    err = capsys.readouterr().err
    assert got == code, err[-600:]
    if command == "init":  # the host is named once
        assert "error: gpu9: cannot connect to 127.0.0.1:1" in err


def test_every_code_of_an_offline_command_is_reached() -> None:
    """Each documented code of the commands that need no host has a case above."""
    reached: dict[str, set[int]] = {}
    for command, _, code in CASES:
        reached.setdefault(command, set()).add(code)
    documented = documented_codes()
    for command in ("validate", "render", "logcheck", "import", "schema", "diff"):
        assert reached[command] == documented[command], command
