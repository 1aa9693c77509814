#!/usr/bin/env python3
"""How many of SGLang's own check sites sgdeploy decides, per bundled release.

    python scripts/check_site_coverage.py               # the table, and every unmapped site
    python scripts/check_site_coverage.py --write-docs  # rewrite the table in docs/catalogs.md
    python scripts/check_site_coverage.py --stub        # add unmapped sites to the mapping as todo

The inventories are built by scripts/build_catalogs.py; the mapping is
sgdeploy/sglang/data/check_sites.toml (docs/catalogs.md, "Check sites").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from sgdeploy.sglang import checksites

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs" / "catalogs.md"
TABLE_START = "<!-- check-site coverage: start (scripts/check_site_coverage.py --write-docs) -->"
TABLE_END = "<!-- check-site coverage: end -->"


def unmapped() -> dict[str, list[str]]:
    """Site key -> the releases where it maps to nothing."""
    out: dict[str, list[str]] = {}
    for version in checksites.inventoried_versions():
        for site in checksites.refusal_sites(version):
            if checksites.decide(site["key"]) is None:
                out.setdefault(site["key"], [])
                if version not in out[site["key"]]:
                    out[site["key"]].append(version)
    return out


def docs_with_table(text: str, table: str) -> str:
    pattern = re.compile(re.escape(TABLE_START) + r".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOCS}: markers for the coverage table not found")
    return pattern.sub(lambda _: f"{TABLE_START}\n{table}{TABLE_END}", text)


def toml_key(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def stub(keys: list[str], path: Path = checksites.MAPPING_PATH) -> None:
    """Append `todo` entries; each lands in its own `[function]` table at the end of the file."""
    by_function: dict[str, list[str]] = {}
    for key in sorted(keys):
        function, message = checksites.split_key(key)
        by_function.setdefault(function, []).append(message)
    existing = checksites.load_mapping(path)
    lines = []
    for function, messages in by_function.items():
        if function in existing:
            print(f"{function}: already a table; add these by hand:", *messages, sep="\n  ")
            continue
        lines += ["", f"[{toml_key(function)}]", *(f'{toml_key(m)} = "todo"' for m in messages)]
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-docs", action="store_true", help="rewrite the table in docs/catalogs.md")
    parser.add_argument("--stub", action="store_true", help="add unmapped sites to the mapping as todo")
    args = parser.parse_args(argv)
    table = checksites.coverage_table()
    missing = unmapped()
    if args.write_docs:
        DOCS.write_text(docs_with_table(DOCS.read_text(encoding="utf-8"), table), encoding="utf-8")
    if args.stub and missing:
        stub(list(missing))
        return 0
    print(table, end="")
    for key, versions in sorted(missing.items()):
        print(f"unmapped: {key}  ({versions[0]}..{versions[-1]})")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
