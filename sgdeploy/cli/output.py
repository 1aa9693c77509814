"""What commands print and how they end: stdout and stderr, the exit codes, the errors that
`main` turns into exit code 2, and what `--verbose` adds about a host's connection."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sgdeploy.host.sshconfig import HostSettings

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C


class UsageError(Exception):
    """Bad arguments or unreadable input: exit code 2."""


class RefusedError(Exception):
    """Refused before touching anything: exit code 2."""


def require_file(path: str, what: str, example: str = "", pipe: str | None = None) -> None:
    """UsageError unless `path` is a readable `what` file: a directory, a dangling or looping link,
    a pipe or a permission each said as such, with the fix."""
    # imported here: only commands that read a file need it, and it is small
    from sgdeploy.core.files import path_problem

    problem = path_problem(path, what, example, pipe) if pipe else path_problem(path, what, example)
    if problem is not None:
        raise UsageError(f"{problem.message} ({problem.hint})")


def out(text: str) -> None:
    sys.stdout.write(text)


def err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


class ConnectionReport:
    """`--verbose`: a host's connection settings and their sources, as text and in JSON."""

    def __init__(self, text: str = "", settings: dict[str, object] | None = None) -> None:
        self.text = text
        self.settings = settings

    def document(self, document: dict[str, Any]) -> dict[str, Any]:
        """`document` (a command's JSON for the host) with its connection settings, if shown."""
        return document if self.settings is None else {**document, "connection": self.settings}


def connection_report(args: argparse.Namespace, name: str, entry: HostSettings) -> ConnectionReport:
    """What `--verbose` shows of how host `name` is reached; nothing without `--verbose`."""
    if not getattr(args, "verbose", False):
        return ConnectionReport()
    # imported only with --verbose: the SSH configuration reader is not needed otherwise
    from sgdeploy.host import sshconfig
    from sgdeploy.review import report

    try:
        chain = sshconfig.for_host(name, entry)
    except sshconfig.SshConfigError as exc:
        return ConnectionReport(f"{name}: connection: {exc}\n", {"error": str(exc)})
    settings = {"route": [hop.alias for hop in chain], **chain[-1].as_dict(),
                "through": [hop.as_dict() for hop in chain[:-1]]}
    return ConnectionReport(report.connection_text(name, chain), settings)
