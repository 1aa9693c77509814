"""Helpers shared by the benchmarks."""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CATALOGS = "sgdeploy/sglang/catalogs"


def pin_catalogs(source: str) -> Path | None:
    """With source "head", extract the committed flag catalogs into a temporary folder and put it
    first on SGDEPLOY_CATALOG_PATH (inherited by every command the benchmark starts), so that a
    catalog rebuild running in the same checkout cannot change or break the measurement.
    "tree" leaves the working tree's catalogs in use."""
    if source == "tree":
        return None
    folder = Path(tempfile.mkdtemp(prefix="sgd-bench-catalogs-"))
    archive = subprocess.run(["git", "archive", source if source != "head" else "HEAD", CATALOGS],
                             cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    pinned = folder / CATALOGS
    os.environ["SGDEPLOY_CATALOG_PATH"] = str(pinned)
    return pinned


def code_state() -> str:
    """The commit the measured code is at, and whether sgdeploy/ has uncommitted changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "sgdeploy"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return f"{head}{' + uncommitted changes in sgdeploy/' if dirty else ''}"


def add_catalogs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalogs", default="tree", metavar="tree|head|REV",
                        help="flag catalogs to use: the working tree's (default), or those committed "
                        "at HEAD/REV (pinned through SGDEPLOY_CATALOG_PATH)")


def apply_catalogs_argument(source: str) -> None:
    """Pin the catalogs as --catalogs asks and say so in the report."""
    pinned = pin_catalogs(source)
    if pinned:
        print(f"# flag catalogs pinned to {source}: {pinned}")
