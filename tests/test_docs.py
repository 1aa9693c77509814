"""The documentation stands on its own: every relative link resolves inside the repository (to a
file, and to a heading when it names one), nothing points outside it, and every command has its
section in docs/reference.md."""

from __future__ import annotations

import argparse
import re
import unicodedata
from pathlib import Path

import pytest

from sgdeploy.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", REPO / "profiles" / "README.md", *(REPO / "docs").glob("*.md"),
               *(REPO / "examples").rglob("*.md")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
INLINE_LINK = re.compile(r"!?\[(?:[^\]\n]|\][^(\n])*?\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# paths that leave the repository: the folder beside the checkout, a machine's own paths
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.])shared/(?:sglang|fixtures|oracle|SPEC)|/work/|\bSPEC\b(?!_)")


def prose(text: str) -> str:
    """The text with fenced code blocks and code spans blanked (their lines kept)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub("", text)


def links(path: Path) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    return INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower().strip()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    problems = []
    for target in links(doc):
        if not relative(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (doc.parent / file_part).resolve() if file_part else doc
        if not resolved.is_relative_to(REPO):
            problems.append(f"{target}: points outside the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert not problems, f"{doc.relative_to(REPO)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_points_outside_the_repository(doc: Path) -> None:
    lines = doc.read_text(encoding="utf-8").splitlines()
    outside = [f"{n}: {line.strip()}" for n, line in enumerate(lines, 1) if OUTSIDE.search(line)]
    assert not outside, f"{doc.relative_to(REPO)} names places outside the repository:\n  " + "\n  ".join(outside)


def test_the_link_checker_sees_what_it_should(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("See [a](a.md#Part-two), ![img](i.png \"t\") and [web](https://example.org).\n"
                   "`[not](a link)`\n```\n[nor](this.md)\n```\n[ref]: ../b.md\n")
    assert links(doc) == ["a.md#Part-two", "i.png", "https://example.org", "../b.md"]
    assert slug("`sgdeploy diff`") == "sgdeploy-diff"
    assert slug("`logcheck --json`") == "logcheck---json"
    assert slug("`rollback (PROFILE | --host H --unit U)`") == "rollback-profile----host-h---unit-u"
    assert OUTSIDE.search("see ../shared/SPEC.md") and OUTSIDE.search("as SPEC §4 says")
    assert not OUTSIDE.search('SGLANG_ENABLE_SPEC_V2 = "1"')


def test_every_command_has_its_reference_section() -> None:
    reference = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    visible = [action.dest for action in sub._choices_actions]
    missing = [name for name in visible if f"### `sgdeploy {name}" not in reference]
    assert not missing, f"docs/reference.md has no section for: {', '.join(missing)}"


def test_every_option_is_in_the_reference() -> None:
    """A new option gets its line in docs/reference.md, under its command."""
    reference = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for action in sub._choices_actions:
        section = reference.partition(f"### `sgdeploy {action.dest}")[2].partition("\n### ")[0]
        for option in sub.choices[action.dest]._actions:
            names = [n for n in option.option_strings if n.startswith("--") and n != "--help"]
            if names and option.help != argparse.SUPPRESS and not any(f"`{n}" in section for n in names):
                missing.append(f"{action.dest} {names[0]}")
    assert not missing, "docs/reference.md does not describe: " + ", ".join(missing)
