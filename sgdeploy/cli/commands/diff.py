"""`sgdeploy diff [REV...]`: what a change does to each server."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command, add_format_arguments
from sgdeploy.cli.output import EXIT_OK, UsageError, out

if TYPE_CHECKING:
    from sgdeploy.review.revisions import Snapshot


def register(sub: Subparsers) -> None:
    diff = add_command(sub, "diff", "what a change does to each server: flags, env, findings, "
                       "unit diff",
                       "What a change does to each server: flags, environment, findings and the "
                       "unit diff. REV is BASE (compared with the working tree; default HEAD), "
                       "BASE HEAD (two git refs), or OLD.toml NEW.toml.",
                       {0: "the comparison was made (whatever it found)",
                        2: "usage (unknown ref, no git repository, more than two revisions)"})
    diff.add_argument("revisions", nargs="*", metavar="REV",
                      help="BASE (compared with the working tree; default HEAD), BASE HEAD, or "
                      "OLD.toml NEW.toml")
    diff.add_argument("--inventory", metavar="FILE",
                      help=INVENTORY_HELP + ", read from each revision")
    add_format_arguments(diff, ["text", "json", "markdown"],
                         "text, one JSON document, or GitHub-flavoured markdown for a comment or "
                         "a job summary; default text")
    diff.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: `sgdeploy --help` stays fast
    from sgdeploy.profile.inventory_file import inventory_path
    from sgdeploy.review.diff import diff_snapshots
    from sgdeploy.review.diff_report import FORMATTERS

    before, after = _sides(args.revisions, str(inventory_path(args.inventory)))
    out(FORMATTERS[args.format](diff_snapshots(before, after)))
    return EXIT_OK


def _sides(names: list[str], inventory: str) -> tuple[Snapshot, Snapshot]:
    """BASE (vs the working tree), BASE HEAD (two git refs), or OLD.toml NEW.toml."""
    # imported when the command runs: git is read only for a diff
    from sgdeploy.review import revisions

    if len(names) > 2:
        raise UsageError("give at most two revisions (BASE [HEAD]) or two profile files")
    try:
        if len(names) == 2 and all(Path(n).is_file() for n in names):
            return (revisions.one_file(names[0], inventory, key=names[1]),
                    revisions.one_file(names[1], inventory))
        base = names[0] if names else "HEAD"
        head = (revisions.at_ref(names[1], inventory) if len(names) == 2
                else revisions.working_tree(inventory))
        return revisions.at_ref(base, inventory), head
    except revisions.RevisionError as exc:
        raise UsageError(str(exc)) from None
