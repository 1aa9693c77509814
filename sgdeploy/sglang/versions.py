"""SGLang release numbers, compared without third-party packages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?(?:[.+-].*)?\s*$")

Version = tuple[int, int, int, int]


@lru_cache(maxsize=512)
def parse_version(text: str) -> Version:
    """`0.5.10.post1` -> (0, 5, 10, 1). Raises ValueError for anything else."""
    match = _VERSION.match(text)
    if not match:
        raise ValueError(f"not an SGLang version: {text!r} (a release number such as 0.5.11 is)")
    major, minor, patch, post = match.groups()
    return (int(major), int(minor), int(patch or 0), int(post or 0))


def format_version(version: Version) -> str:
    base = f"{version[0]}.{version[1]}.{version[2]}"
    return f"{base}.post{version[3]}" if version[3] else base


@dataclass(frozen=True)
class VersionRange:
    """Releases from `since` (inclusive) up to `until` (exclusive); None means open."""

    since: str | None = None
    until: str | None = None

    def __contains__(self, version: Version) -> bool:
        if self.since is not None and version < parse_version(self.since):
            return False
        return not (self.until is not None and version >= parse_version(self.until))

    def describe(self) -> str:
        if self.since and self.until:
            return f">={self.since},<{self.until}"
        if self.since:
            return f">={self.since}"
        if self.until:
            return f"<{self.until}"
        return "all"


ALL_VERSIONS = VersionRange()
