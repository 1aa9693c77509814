"""The command line: parse arguments, call one core function, print, map to an exit code.

Heavy dependencies (Jinja, Fabric) are imported inside the commands that need them, so that
`sgdeploy validate` starts fast.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sgdeploy import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad arguments or unreadable input: exit code 2."""


def _out(text: str) -> None:
    sys.stdout.write(text)


def _err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


# --------------------------------------------------------------------------- validate
def cmd_validate(args: argparse.Namespace) -> int:
    from sgdeploy import report
    from sgdeploy.inventory import inventory_path
    from sgdeploy.validate import InventoryContext, validate_paths

    paths = args.profiles or sorted(glob.glob("profiles/*.toml"))
    if not paths:
        raise UsageError("no profiles given and none found in profiles/*.toml")
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise UsageError(f"no such profile: {', '.join(missing)}")
    inv_path = inventory_path(args.inventory)
    if args.inventory and not inv_path.is_file():
        raise UsageError(f"no such inventory: {inv_path}")
    if args.sglang:
        _check_version(args.sglang)
    results = validate_paths(paths, InventoryContext.load(inv_path), args.sglang)
    formatter = {"text": report.validation_text, "json": report.validation_json,
                 "github": report.validation_github}[args.format]
    _out(formatter(results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _check_version(version: str) -> None:
    from sgdeploy.sglang.catalog import UnknownVersionError, load_catalog

    try:
        load_catalog(version)
    except (UnknownVersionError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_schema(args: argparse.Namespace) -> int:
    from sgdeploy.schema import profile_schema

    if args.sglang:
        _check_version(args.sglang)
    _out(json.dumps(profile_schema(args.sglang), indent=2) + "\n")
    return EXIT_OK


# --------------------------------------------------------------------------- render
def cmd_render(args: argparse.Namespace) -> int:
    from sgdeploy import report
    from sgdeploy.inventory import inventory_path
    from sgdeploy.render import render_unit
    from sgdeploy.sglang.catalog import load_catalog
    from sgdeploy.profile import load_profile
    from sgdeploy.validate import InventoryContext, select_host, validate_loaded

    if not Path(args.profile).is_file():
        raise UsageError(f"no such profile: {args.profile}")
    inventory = InventoryContext.load(inventory_path(args.inventory))
    loaded = load_profile(args.profile)
    result = validate_loaded(loaded, inventory, args.sglang)
    if not result.ok or loaded.model is None:
        sys.stderr.write(report.validation_text([result]))
        return EXIT_FAILED
    try:
        host = select_host(loaded.model.deploy.host, inventory, args.host)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    version = args.sglang or (host.sglang_version if host and host.sglang_version else result.sglang_versions[0])
    unit = render_unit(loaded, load_catalog(version), host.name if host else None)
    _out(unit.text)
    return EXIT_OK


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sgdeploy", description="Deploy SGLang to GPU hosts safely.")
    parser.add_argument("--version", action="version", version=f"sgdeploy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = sub.add_parser("validate", help="validate profiles offline against inventory facts")
    validate.add_argument("profiles", nargs="*", metavar="PROFILE")
    validate.add_argument("--inventory", metavar="FILE")
    validate.add_argument("--format", choices=["text", "json", "github"], default="text")
    validate.add_argument("--sglang", metavar="VERSION", help="validate against this SGLang version")
    validate.set_defaults(func=cmd_validate)

    render = sub.add_parser("render", help="print the systemd unit of a profile")
    render.add_argument("profile", metavar="PROFILE")
    render.add_argument("--host", metavar="H", help="the host to render for (a member of a group)")
    render.add_argument("--inventory", metavar="FILE")
    render.add_argument("--sglang", metavar="VERSION", help=argparse.SUPPRESS)
    render.set_defaults(func=cmd_render)

    schema = sub.add_parser("schema", help="print the JSON Schema of a profile")
    schema.add_argument("--sglang", metavar="VERSION", help="spell out [server] for this version")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except UsageError as exc:
        _err(f"sgdeploy {args.command}: error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_FAILED
