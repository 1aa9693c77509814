"""`sgdeploy schema`: the JSON Schema of a profile."""

from __future__ import annotations

import argparse
import json

from sgdeploy.cli.arguments import Subparsers, add_command, check_sglang_version
from sgdeploy.cli.output import EXIT_OK, out


def register(sub: Subparsers) -> None:
    schema = add_command(sub, "schema", "print the JSON Schema of a profile",
                         "Print the JSON Schema of a profile.",
                         {0: "printed", 2: "unknown version"})
    schema.add_argument("--sglang", metavar="VERSION", help="spell out [server] for this version")
    schema.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: pydantic builds the schema
    from sgdeploy.profile.schema import profile_schema

    if args.sglang:
        check_sglang_version(args.sglang)
    out(json.dumps(profile_schema(args.sglang), indent=2) + "\n")
    return EXIT_OK
