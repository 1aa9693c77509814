"""`sgdeploy validate [PROFILE...]`: profiles checked offline against the inventory's facts."""

from __future__ import annotations

import argparse
import glob
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sgdeploy.cli.arguments import (
    INVENTORY_HELP,
    Subparsers,
    add_command,
    add_format_arguments,
    check_sglang_version,
)
from sgdeploy.cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, out, require_file

if TYPE_CHECKING:
    from sgdeploy.profile.validate import InventoryContext


def register(sub: Subparsers) -> None:
    validate = add_command(sub, "validate", "validate profiles offline against inventory facts",
                           "Validate launch profiles offline against the inventory's facts "
                           "(default: profiles/*.toml).",
                           {0: "all valid (warnings allowed, unless --strict)",
                            1: "a profile has an error (with --strict: also a warning or a check "
                            "that did not run)",
                            2: "usage or unreadable input"})
    validate.add_argument("profiles", nargs="*", metavar="PROFILE",
                          help="the profiles (default: profiles/*.toml)")
    validate.add_argument("--inventory", metavar="FILE",
                          help=INVENTORY_HELP + "; a missing file named here is exit 2")
    add_format_arguments(validate, ["text", "json", "github"],
                         "findings as file:line: lines and a count (text), one JSON document "
                         "(json), or GitHub Actions workflow commands (github); default text")
    validate.add_argument("--sglang", metavar="VERSION",
                          help="validate against this SGLang version")
    validate.add_argument("--cluster", metavar="NAME",
                          help="validate against this Kubernetes cluster of the inventory "
                          "([clusters.NAME]: its GPUs and its image's SGLang) instead of "
                          "deploy.host, as export does")
    validate.add_argument("--model-config", metavar="DIR",
                          help="the model's folder (or config.json) for the checks that read it; "
                          "wins over deploy.model_config")
    validate.add_argument("--changed", action="store_true",
                          help="the files given are those a change touched: validate the profiles "
                          "among them, and every profile when the inventory is one (deleted files "
                          "are skipped)")
    validate.add_argument("--strict", action="store_true",
                          help="also fail (exit 1) on warnings and on every check that did not "
                          "run for want of a fact (no host version, catalog, GPU facts or model "
                          "config)")
    validate.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: `sgdeploy --help` stays fast
    from sgdeploy.core.tomlfile import RULE_UNREADABLE
    from sgdeploy.profile.inventory_file import INVENTORY_ENV, inventory_path
    from sgdeploy.profile.validate import InventoryContext, validate_paths
    from sgdeploy.review import report

    inv_path = inventory_path(args.inventory)
    paths = _profiles(args, inv_path)
    if (args.inventory or os.environ.get(INVENTORY_ENV)) and not inv_path.is_file():
        raise UsageError(f"no such inventory: {inv_path}")
    if args.sglang:
        check_sglang_version(args.sglang)
    if args.model_config and not Path(args.model_config).exists():
        raise UsageError(f"no such model config: {args.model_config}")
    inventory = InventoryContext.load(inv_path)
    if args.cluster:
        _check_cluster(args.cluster, inventory)
    results = validate_paths(paths, inventory, args.sglang, args.model_config, args.cluster)
    formatter = {"text": report.validation_text, "json": report.validation_json,
                 "github": report.validation_github}[args.format]
    out(formatter(results))
    if any(d.rule == RULE_UNREADABLE for r in results for d in r.diagnostics):
        return EXIT_USAGE
    if args.strict and any(r.strict_failures for r in results):
        return EXIT_FAILED
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def _check_cluster(name: str, inventory: InventoryContext) -> None:
    """`--cluster NAME` names a cluster of a usable inventory, else UsageError."""
    # imported when the option is given: the suggestion is the inventory's own
    from sgdeploy.core.tomlfile import did_you_mean

    model = inventory.inventory
    if model is None:
        if inventory.document is None:
            raise UsageError(f"--cluster {name}: {inventory.unusable()}")
        return  # an invalid inventory: each profile's findings say where
    if name not in model.clusters:
        near = did_you_mean(name, list(model.clusters))
        raise UsageError(f"--cluster {name} is no cluster of {inventory.path}" + (
            f"; did you mean '{near}'?" if near else " (clusters: "
                                                     f"{', '.join(model.clusters) or 'none'})"))


def _profiles(args: argparse.Namespace, inventory: Path) -> list[str]:
    """The profiles to validate: those given (with --changed, those a change touched), or
    profiles/*.toml; each must exist."""
    every = sorted(glob.glob("profiles/*.toml"))
    if args.changed:
        # imported only with --changed: the rest of validate never needs it
        from sgdeploy.review.changes import profiles_to_check

        paths = profiles_to_check(args.profiles, inventory, every)
    else:
        paths = args.profiles or every
        if not paths:
            raise UsageError("no profiles given and none found in profiles/*.toml")
    for path in paths:
        require_file(path, "profile", "*.toml")
    return paths
