"""Which profiles a change touches: `sgdeploy validate --changed FILE...` (the pre-commit hook).

A hook is handed the files a commit changes. A changed profile is validated alone; a changed
inventory can break any profile (a host moved to another SGLang release, a GPU swapped), so it
brings every default profile in. A file the change deleted is not there to be validated.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sgdeploy.profile.inventory_file import DEFAULT_INVENTORY


def is_inventory(path: str, inventory: Path) -> bool:
    """The inventory in use, or any file named like the default one."""
    return Path(path).name == DEFAULT_INVENTORY or os.path.realpath(path) == os.path.realpath(
        inventory
    )


def profiles_to_check(
    changed: Sequence[str], inventory: Path, default_profiles: Sequence[str]
) -> list[str]:
    """The profiles to validate for a change to `changed`, in a stable order, each once."""
    present = [path for path in changed if Path(path).is_file()]
    profiles = [path for path in present if not is_inventory(path, inventory)]
    if len(profiles) < len(present):
        profiles += default_profiles
    seen: set[str] = set()
    ordered: list[str] = []
    for path in profiles:
        key = os.path.normpath(path)
        if key not in seen:
            seen.add(key)
            ordered.append(path)
    return ordered
