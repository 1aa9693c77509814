"""`sgdeploy logcheck LOGFILE`: an SGLang server log read: phases, readiness, the failure."""

from __future__ import annotations

import argparse
import json
import sys

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command, add_json_argument
from sgdeploy.cli.output import EXIT_FAILED, EXIT_OK, out, require_file
from sgdeploy.cli.targets import inventory_context, load_valid_profile


def register(sub: Subparsers) -> None:
    logcheck = add_command(sub, "logcheck", "read an SGLang server log: phases, readiness, failure",
                           "Read an SGLang server log: startup phases and their times, readiness, "
                           "the failure and its cause, settings SGLang changed on its own.",
                           {0: "reached ready", 1: "failed or not ready",
                            2: "usage (no such file)"})
    logcheck.add_argument("logfile", metavar="LOGFILE", help="a log file, or - for stdin")
    logcheck.add_argument("--profile", metavar="P",
                          help="the profile the server was launched from")
    logcheck.add_argument("--inventory", metavar="FILE",
                          help=INVENTORY_HELP + ", for the profile's host")
    add_json_argument(logcheck, "one JSON document (see docs/reference.md)")
    logcheck.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: `sgdeploy --help` stays fast
    from sgdeploy.logs import read_log
    from sgdeploy.review import report
    from sgdeploy.sglang.secrets import redact_data, redact_known, secret_values

    server, version = _profile_server(args)
    if args.logfile == "-":
        log = read_log(sys.stdin, server, version)
    else:
        require_file(args.logfile, "log file", "server.log",
                     pipe="read it from standard input: COMMAND | sgdeploy logcheck -")
        with open(args.logfile, encoding="utf-8", errors="replace") as handle:
            log = read_log(handle, server, version)
    # what the log itself says is a secret (the dump's api_key, ...) leaves no output, in any shape
    known = secret_values({**(log.server_args or {}), **(server or {})})
    if args.json:
        out(
            redact_known(json.dumps(redact_data(log.as_json()), indent=2, default=str), known)
            + "\n"
        )
    else:
        out(
            redact_known(
                report.logcheck_text(log, "<stdin>" if args.logfile == "-" else args.logfile,
                                     profile_given=server is not None),
                known,
            )
        )
    return EXIT_OK if log.ready else EXIT_FAILED


def _profile_server(args: argparse.Namespace) -> tuple[dict[str, object] | None, str | None]:
    """The profile's [server] and, when its host is in the inventory, that host's SGLang
    version."""
    if not args.profile:
        return None, None
    # imported only with --profile: the profile is validated then
    from sgdeploy.profile.validate import select_host

    loaded = load_valid_profile(args.profile)
    assert loaded.model is not None  # load_valid_profile refuses an invalid one
    inventory = inventory_context(args.inventory)
    clusters = inventory.inventory.clusters if inventory.inventory is not None else {}
    if loaded.model.deploy.host in clusters:  # a pod's log (kubectl logs): the image's release
        return dict(loaded.model.server), clusters[loaded.model.deploy.host].release
    try:
        host = select_host(loaded.model.deploy.host, inventory, None)
    except LookupError:
        host = None
    return dict(loaded.model.server), (host.sglang_version if host else None)
