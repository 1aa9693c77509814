"""`sgdeploy render PROFILE`: the systemd unit of a profile."""

from __future__ import annotations

import argparse
import sys

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command
from sgdeploy.cli.output import EXIT_FAILED, EXIT_OK, UsageError, err, out, require_file
from sgdeploy.cli.targets import inventory_context


def register(sub: Subparsers) -> None:
    render = add_command(sub, "render", "print the systemd unit of a profile",
                         "Print the systemd unit of a profile.",
                         {0: "the unit printed", 1: "invalid profile (its findings on stderr)",
                          2: "usage"})
    render.add_argument("profile", metavar="PROFILE", help="the profile")
    render.add_argument("--host", metavar="H",
                        help="the host to render for (a member of a group)")
    render.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    render.add_argument("--sglang", metavar="VERSION", help=argparse.SUPPRESS)
    render.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: Jinja and pydantic load only for a unit to render
    from sgdeploy.deploy.render import render_unit
    from sgdeploy.profile.model import load_profile
    from sgdeploy.profile.validate import select_host, validate_loaded
    from sgdeploy.review import report
    from sgdeploy.sglang.catalog import load_catalog, nearest_version

    require_file(args.profile, "profile", "*.toml")
    inventory = inventory_context(args.inventory)
    loaded = load_profile(args.profile)
    result = validate_loaded(loaded, inventory, args.sglang)
    if not result.ok or loaded.model is None:
        sys.stderr.write(report.validation_text([result]))
        return EXIT_FAILED
    try:
        host = select_host(loaded.model.deploy.host, inventory, args.host)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    version = args.sglang or (host.sglang_version if host and host.sglang_version
                              else result.sglang_versions[0])
    try:
        unit = render_unit(loaded, load_catalog(nearest_version(version)),
                           host.name if host else None)
    except KeyError as exc:  # SGLang without a catalog: a flag the closest older catalog lacks
        err(f"sgdeploy render: {exc.args[0] if exc.args else exc} "
            f"(no catalog of SGLang {version} is bundled)\n")
        return EXIT_FAILED
    except ValueError as exc:  # the renderer refuses to write a secret into the unit
        err(f"sgdeploy render: {exc}\n")
        return EXIT_FAILED
    out(unit.text)
    if unit.daemon is not None:  # a client of the weight cache: its daemon's unit follows
        out(f"\n# ---- /etc/systemd/system/{unit.daemon.file_name}\n{unit.daemon.text}")
    return EXIT_OK
