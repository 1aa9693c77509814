"""The two sides `sgdeploy diff` compares: profiles and inventory of one revision, as text.

A side is read from the working tree, from a git ref (through the `git` command, the one
local tool this needs), or from one profile file. Paths are as the user names them, relative
to the current folder, so both sides of a profile share one key.
"""

from __future__ import annotations

import glob
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

PROFILE_DIR = "profiles"
WORKING_TREE = "working tree"


class RevisionError(Exception):
    """A side cannot be read (no git, not a repository, unknown ref): a usage error."""


@dataclass(frozen=True)
class Snapshot:
    """Profile texts by path, and the inventory text (None where the revision has none)."""

    label: str
    inventory_path: str
    inventory_text: str | None
    profiles: dict[str, str] = field(default_factory=dict)


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def working_tree(inventory_path: str, profiles: list[str] | None = None) -> Snapshot:
    """The files on disk: the given profiles, or every profiles/*.toml."""
    paths = profiles if profiles is not None else sorted(glob.glob(f"{PROFILE_DIR}/*.toml"))
    texts = {path: text for path in paths if (text := _read(path)) is not None}
    return Snapshot(WORKING_TREE, inventory_path, _read(inventory_path), texts)


def one_file(path: str, inventory_path: str, key: str | None = None) -> Snapshot:
    """One profile file (under `key`, so that two files can be compared as one profile)."""
    text = _read(path)
    if text is None:
        raise RevisionError(f"no such profile: {path}")
    return Snapshot(path, inventory_path, _read(inventory_path), {key or path: text})


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=60, check=False
        )
    except FileNotFoundError:
        raise RevisionError("git is not installed: compare two files instead") from None


def is_ref(name: str) -> bool:
    return _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").returncode == 0


def at_ref(ref: str, inventory_path: str) -> Snapshot:
    """Every profiles/*.toml and the inventory as they are in commit `ref`."""
    if not is_ref(ref):
        inside = _git("rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
        raise RevisionError(f"'{ref}' is no commit of this repository" if inside else
                            f"'{ref}' is no file, and this folder is not in a git repository")
    listed = _git("ls-tree", "--name-only", ref, "--", f"{PROFILE_DIR}/")
    paths = sorted(
        p for p in listed.stdout.splitlines() if p.endswith(".toml") and p.count("/") == 1
    )
    texts = {path: text for path in paths if (text := _show(ref, path)) is not None}
    return Snapshot(ref, inventory_path, _inventory_at(ref, inventory_path), texts)


def _show(ref: str, path: str) -> str | None:
    done = _git("show", f"{ref}:./{path}")
    return done.stdout if done.returncode == 0 else None


def _inventory_at(ref: str, path: str) -> str | None:
    """The inventory in `ref`; one outside the repository is the same file on both sides."""
    top = _git("rev-parse", "--show-toplevel").stdout.strip()
    resolved = Path(path).resolve()
    if not top or not resolved.is_relative_to(Path(top).resolve()):
        return _read(path)
    relative = resolved.relative_to(Path(top).resolve()).as_posix()
    done = _git("show", f"{ref}:{relative}")
    return done.stdout if done.returncode == 0 else None
