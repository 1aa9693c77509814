"""The project's shell scripts pass ShellCheck (warnings and errors), as CI runs them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


SHEBANGS = ("#!/bin/sh", "#!/bin/bash", "#!/usr/bin/env bash")


def shell_scripts() -> list[Path]:
    candidates = [*sorted((REPO / "scripts").iterdir()), REPO / ".ci" / "run", *sorted((REPO / "bench").glob("*.sh"))]
    return [p for p in candidates if p.is_file() and p.read_text(errors="replace").startswith(SHEBANGS)]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="no shellcheck (scripts/setup installs it)")
@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck(script: Path) -> None:
    done = subprocess.run(["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
