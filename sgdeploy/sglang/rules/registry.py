"""The one registry of rules (`RULES`) and the checks made outside it (`STRUCTURAL_RULES`).

Ids are stable once published; docs/rules.md documents each with a bad and a good example.
Severity: an error is what makes SGLang refuse to start or a deployment that cannot work; a
warning is what SGLang will silently change or ignore.

Ranges of ids: SGD00x files and profile shape (sgdeploy.core.tomlfile), SGD01x flags against the
catalog, SGD02x values and secrets, SGD03x inventory, SGD1xx parallelism, SGD2xx speculative
decoding, SGD3xx encoder disaggregation, SGD4xx GPU generation, SGD5xx memory, scheduling and
serving, SGD6xx CUDA graphs, SGD7xx the live host, SGD8xx a Kubernetes cluster (`sgdeploy export`).
"""

from __future__ import annotations

from sgdeploy.core.diagnostics import Severity
from sgdeploy.sglang.rule import RuleRegistry

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

RULES = RuleRegistry()
rule = RULES.rule

# The findings that say a check did not run for want of a fact (no host version, no catalog, no
# inventory, an attention pick that cannot be followed, no model config or checkpoint size):
# `validate --strict` fails on them as on warnings.
UNCHECKED = frozenset({"SGD031", "SGD032", "SGD034", "SGD036", "SGD409", "SGD580"})

# Checks made outside the rule list (reading files, resolving the target host), documented with
# the others: id -> (name, summary).
STRUCTURAL_RULES = {
    "SGD001": ("toml-syntax", "The file is not valid TOML."),
    "SGD002": ("unknown-key", "A key the profile or inventory format does not have."),
    "SGD003": ("invalid-value", "A value of the wrong type or out of range, or a required key "
                                "missing."),
    "SGD004": ("unreadable-file", "The file is missing or not readable UTF-8."),
    "SGD005": ("utf8-bom", "The file starts with a UTF-8 byte-order mark: read without it, with a "
                           "warning."),
    "SGD030": ("unknown-host", "deploy.host names no host or group of the inventory."),
    "SGD031": ("no-host-version", "The host's SGLang version is unknown: validated against the "
                                  "newest catalog."),
    "SGD032": ("no-catalog-for-version", "No flag catalog is bundled for the host's SGLang "
                                         "version."),
    "SGD033": ("invalid-inventory", "The inventory file has errors."),
    "SGD034": ("no-inventory", "No inventory file: validated without host facts."),
    "SGD036": ("host-facts-missing", "The inventory lacks a host fact (GPU count, a GPU sgdeploy "
               "knows): the checks that need it did not run."),
    "SGD035": ("model-config-unreadable", "The model config named by --model-config or "
               "deploy.model_config cannot be read."),
    # Preflight checks against the live host (sgdeploy.deploy.preflight), before anything changes.
    "SGD701": ("python-missing", "deploy.python does not exist or does not run on the host."),
    "SGD702": ("sglang-missing", "SGLang is not installed for deploy.python."),
    "SGD703": ("no-catalog-for-host-version", "The host runs an SGLang version with no bundled "
                                              "catalog."),
    "SGD704": ("model-path-missing", "server.model_path has no config.json on the host, or the "
                "unit's user cannot read its config.json or weight files."),
    "SGD705": ("port-in-use", "Another process already listens on the server's port."),
    "SGD706": ("no-gpus", "nvidia-smi is missing or lists no GPU."),
    "SGD707": ("inventory-mismatch", "The host's GPUs or SGLang differ from what the inventory "
                                     "says."),
    "SGD708": ("nothing-to-adopt", "apply --adopt found no SGLang server outside the unit on the "
                                   "profile's port."),
    "SGD709": ("secrets-file", "The [secrets] file on the host is missing, readable by others, or "
                               "lacks a key."),
    "SGD710": ("gpus-held", "Processes outside the unit hold the GPUs the launch uses."),
    "SGD711": ("sglang-refuses", "SGLang on the host refuses the launch (its own parse, resolution "
                                 "and checks)."),
    "SGD712": ("sglang-check-unavailable", "SGLang's own check could not run on the host."),
    "SGD713": ("host-file-unusable", "A file the launch names (the SSL key and certificate, ...) "
               "is missing on the host or not readable by the unit's user."),
    "SGD715": ("service-user-missing", "The unit's user (deploy.user, or 'sglang' for a strict "
               "unit) does not exist on the host."),
    # What a pod of a Kubernetes cluster changes (sgdeploy.profile.cluster,
    # sgdeploy.deploy.kubernetes): checked by validate against a cluster target and by export before
    # it writes anything.
    "SGD801": ("secret-in-manifest", "A manifest would carry a secret's value: refused, whatever "
                                     "validation said."),
    "SGD802": ("cluster-too-small", "The cluster has fewer GPU nodes than a launch group (nnodes), "
               "or than all its replicas need."),
    "SGD803": ("model-path-outside-storage", "server.model_path is a folder the pod does not mount "
               "from the cluster's model storage."),
    "SGD804": ("file-not-in-pod", "A file the launch opens at start is outside the pod's model "
               "storage: only the image can have it."),
    "SGD805": ("server-on-loopback", "The server would listen on the pod's loopback, out of reach "
               "of the kubelet's probes and the Service."),
}
HOST_RULES = tuple(rule_id for rule_id in STRUCTURAL_RULES if rule_id.startswith("SGD7"))
CLUSTER_RULES = tuple(rule_id for rule_id in STRUCTURAL_RULES if rule_id.startswith("SGD8"))
