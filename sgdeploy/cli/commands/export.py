"""`sgdeploy export PROFILE --to kubernetes`: the manifests of a profile for a Kubernetes cluster of
the inventory (`[clusters.NAME]`), validated against that cluster first (docs/kubernetes.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sgdeploy.cli.arguments import INVENTORY_HELP, Subparsers, add_command, add_json_argument
from sgdeploy.cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, err, out, require_file

if TYPE_CHECKING:
    from sgdeploy.deploy.kubernetes import Gateway
    from sgdeploy.profile.inventory import Inventory
    from sgdeploy.profile.model import LoadedProfile


def register(sub: Subparsers) -> None:
    export = add_command(sub, "export", "write a profile's manifests for a Kubernetes cluster",
                         "Write the Kubernetes manifests of a profile for a cluster of the "
                         "inventory ([clusters.NAME]): a Deployment, or a LeaderWorkerSet when "
                         "nnodes > 1, and a Service (and the gateway's Deployment), for kubectl "
                         "apply -f. Every validate rule runs against the cluster's GPUs and image "
                         "first.",
                         {0: "the manifests written", 1: "the profile fails validation for the "
                          "cluster, or a manifest would hold a secret (its findings on "
                          "stderr)", 2: "usage or unreadable input"})
    export.add_argument("profile", metavar="PROFILE", help="the profile")
    export.add_argument("--to", choices=["kubernetes"], default="kubernetes",
                        help="what to write (kubernetes, the only target so far)")
    export.add_argument("--cluster", metavar="NAME",
                        help="the cluster of the inventory (default: deploy.host, when it names "
                        "one)")
    export.add_argument("--gateway", metavar="NAME",
                        help="also write this [gateways.NAME] as a Deployment that finds the "
                        "servers by label (default: the cluster's gateway, if it names one)")
    export.add_argument("--name", metavar="NAME",
                        help="the name of the objects (default: deploy.unit)")
    export.add_argument("-o", "--output", metavar="DIR",
                        help="write one file per object into DIR (default: one YAML stream on "
                        "stdout)")
    export.add_argument("--model-config", metavar="DIR",
                        help="the model's folder (or config.json) for the checks that read it; "
                        "wins over deploy.model_config")
    export.add_argument("--inventory", metavar="FILE", help=INVENTORY_HELP)
    add_json_argument(export, "a v1 List of the objects as JSON on stdout (kubectl apply -f takes "
                              "it)")
    export.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported when the command runs: pydantic and the catalogs load only for an export
    from sgdeploy.cli.targets import inventory_context
    from sgdeploy.core.diagnostics import Severity, finding_line
    from sgdeploy.core.tomlfile import RULE_UNREADABLE
    from sgdeploy.deploy.kubernetes import SecretInManifest, check_name, manifests
    from sgdeploy.profile.model import load_profile
    from sgdeploy.profile.validate import validate_loaded
    from sgdeploy.review import report
    from sgdeploy.sglang.catalog import load_catalog

    require_file(args.profile, "profile", "*.toml")
    if args.model_config and not Path(args.model_config).exists():
        raise UsageError(f"no such model config: {args.model_config}")
    if args.output and Path(args.output).exists() and not Path(args.output).is_dir():
        raise UsageError(f"--output {args.output} is a file, not a folder")
    inventory = inventory_context(args.inventory)
    loaded = load_profile(args.profile)
    model = inventory.inventory
    if loaded.model is None or model is None:
        if inventory.document is None:
            raise UsageError(f"{inventory.unusable()}; an inventory with [clusters.NAME] is needed "
                             "to export")
        # its findings, located
        result = validate_loaded(loaded, inventory, None, args.model_config)
        sys.stderr.write(report.validation_text([result]))
        unreadable = any(d.rule == RULE_UNREADABLE for d in result.diagnostics)
        return EXIT_USAGE if unreadable else EXIT_FAILED
    cluster = _cluster(args.cluster, loaded, model, inventory.path)
    entry = model.clusters[cluster]
    name = args.name or loaded.model.deploy.unit
    try:
        check_name(name)
    except ValueError as exc:
        raise UsageError(f"{exc}{'' if args.name else ' (the unit name)'}: give --name "
                         "NAME") from None
    gateway = _gateway(args.gateway or entry.gateway, model, cluster, inventory.path)
    result = validate_loaded(loaded, inventory, None, args.model_config, cluster=cluster)
    if not result.ok:
        sys.stderr.write(report.validation_text([result]))
        return EXIT_FAILED
    for finding in result.diagnostics:
        if finding.severity is Severity.WARNING:
            err(finding_line(finding))
    try:
        written = manifests(loaded, load_catalog(result.sglang_versions[0]), entry, name, gateway)
    except SecretInManifest as exc:
        sys.stderr.write("".join(finding_line(d) + "\n" for d in exc.diagnostics))
        return EXIT_FAILED
    if args.output:
        folder = Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        for file_name, text in written.files():
            (folder / file_name).write_text(text, encoding="utf-8")
        err(f"wrote {len(written.objects)} manifest(s) to {folder}/ for cluster {cluster} "
            f"(namespace {written.namespace}): kubectl apply -f {folder}/")
    else:
        out(written.json if args.json else written.yaml)
    for secret in written.secrets:
        err(f"needs Secret {secret.name} ({secret.what}), before kubectl apply: {secret.create}")
    return EXIT_OK


def _cluster(wanted: str | None, loaded: LoadedProfile, model: Inventory, path: str) -> str:
    """The cluster an export is for: --cluster, else deploy.host when it names one."""
    # imported when the command runs: the suggestion is the inventory's own
    from sgdeploy.core.tomlfile import did_you_mean

    assert loaded.model is not None
    known = ", ".join(model.clusters) or "none"
    name = wanted or (
        loaded.model.deploy.host if loaded.model.deploy.host in model.clusters else None
    )
    if name is None:
        raise UsageError(f"deploy.host '{loaded.model.deploy.host}' is no cluster of {path}: name "
                         f"one with --cluster NAME (clusters: {known})")
    if name not in model.clusters:
        near = did_you_mean(name, list(model.clusters))
        raise UsageError(f"--cluster {name} is no cluster of {path}"
                         + (f"; did you mean '{near}'?" if near else f" (clusters: {known})"))
    return name


def _gateway(wanted: str | None, model: Inventory, cluster: str, path: str) -> Gateway | None:
    # imported when the command runs: the manifests' module
    from sgdeploy.deploy.kubernetes import Gateway

    if wanted is None:
        return None
    if wanted not in model.gateways:
        known = ", ".join(model.gateways) or "none"
        raise UsageError(f"--gateway {wanted} is no gateway of {path} (gateways: {known})")
    image = model.clusters[cluster].gateway_image
    if image is None:
        raise UsageError(f"cluster {cluster} has no gateway_image: set it in [clusters.{cluster}] "
                         "to an image that runs SGLang's gateway (smg)")
    return Gateway(wanted, model.gateways[wanted], image)
