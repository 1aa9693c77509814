"""The `sgdeploy-validate` hook of `.pre-commit-hooks.yaml`, run by the real `pre-commit`.

A throwaway repository of profiles adds the hook the way users do, by repository and rev. The
hook's repository is this one as it stands (tracked files and new ones git does not ignore,
committed into a scratch repository), so pre-commit clones and installs the code under test.
pre-commit builds the hook's virtualenv as it always does; pip reads the wheels that
scripts/setup saved in .cache/wheelhouse and no package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
PRE_COMMIT = Path(sys.executable).parent / "pre-commit"
REFERENCE = "profiles/qwen36-mtp3.toml"
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **IDENTITY})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This repository's working tree committed into a scratch repository: (path, rev)."""
    if not (WHEELHOUSE / ".done").is_file():
        pytest.fail(f"{WHEELHOUSE} is missing: run scripts/setup")
    dest = tmp_path_factory.mktemp("hook-repo")
    for name in git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0"):
        source = REPO / name
        if name and source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "snapshot")
    return dest, git(dest, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pre-commit cache for the module: the hook's virtualenv is built once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def project(tmp_path: Path, hook_repo: tuple[Path, str]) -> Path:
    """A repository of profiles whose .pre-commit-config.yaml adds the hook by repo and rev."""
    repo, rev = hook_repo
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    shutil.copy(REPO / "inventory.toml", tmp_path / "inventory.toml")
    (tmp_path / "README.md").write_text("profiles of our GPU hosts\n")
    (tmp_path / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {repo}\n    rev: {rev}\n    hooks:\n      - id: sgdeploy-validate\n")
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "start")
    return tmp_path


def pre_commit(project: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit run --verbose` on what is staged, offline."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGDEPLOY_INVENTORY", "VIRTUAL_ENV")}
    env.update(IDENTITY, PRE_COMMIT_HOME=str(home), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELHOUSE),
               VIRTUALENV_NO_PERIODIC_UPDATE="1", NO_COLOR="1")
    return subprocess.run([str(PRE_COMMIT), "run", "--verbose", "--color", "never", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)


def stage(project: Path, name: str, text: str) -> None:
    (project / name).write_text(text)
    git(project, "add", name)


def misspelt(project: Path) -> str:
    return (project / REFERENCE).read_text().replace("tp_size = 2", "tp_sise = 2")


def test_a_bad_profile_fails_and_a_good_one_passes(project: Path, pre_commit_home: Path) -> None:
    stage(project, "profiles/new.toml", misspelt(project))
    failed = pre_commit(project, pre_commit_home)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "sgdeploy validate" in failed.stdout and "Failed" in failed.stdout
    assert "profiles/new.toml:18: SGD010 error: 'tp_sise' is not a flag of SGLang 0.5.11" in failed.stdout
    assert "1 profile(s) checked: 0 valid, 1 with errors" in failed.stdout

    stage(project, "profiles/new.toml", (project / REFERENCE).read_text())
    passed = pre_commit(project, pre_commit_home)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout and "1 profile(s) checked: 1 valid" in passed.stdout


def test_only_changed_profiles_unless_the_inventory_changed(project: Path, pre_commit_home: Path) -> None:
    stage(project, "profiles/broken.toml", misspelt(project))
    git(project, "commit", "-q", "--no-verify", "-m", "a broken profile, committed past the hook")

    dense = project / "profiles" / "qwen3-8b-dense.toml"
    stage(project, "profiles/qwen3-8b-dense.toml", dense.read_text() + "\n# a comment\n")
    one = pre_commit(project, pre_commit_home)
    assert one.returncode == 0, one.stdout + one.stderr
    assert "1 profile(s) checked: 1 valid" in one.stdout and "broken.toml" not in one.stdout

    inventory = (project / "inventory.toml").read_text()
    stage(project, "inventory.toml", inventory.replace("gpu_memory_gib = 48", "gpu_memory_gib = 48.0"))
    every = pre_commit(project, pre_commit_home)
    assert every.returncode == 1, every.stdout + every.stderr
    assert "profiles/broken.toml:18: SGD010" in every.stdout
    assert "5 profile(s) checked: 4 valid, 1 with errors" in every.stdout


def test_other_files_are_not_checked(project: Path, pre_commit_home: Path) -> None:
    stage(project, "README.md", "profiles of our GPU hosts, and more\n")
    skipped = pre_commit(project, pre_commit_home)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "(no files to check)" in skipped.stdout and "Skipped" in skipped.stdout
