"""A profile on a Kubernetes cluster (`[clusters.NAME]` of the inventory): what its pods need that
a host does not, checked before any manifest is written (SGD802-SGD805).

Every rule of `sgdeploy validate` runs against the cluster as against a host (one GPU node is the
host: `inventory.cluster_target`); these add what only a pod changes: a launch group of `nnodes`
pods needs that many GPU nodes, the model comes from the cluster's storage, the files the launch
names must be in the pod, and the server must listen where the kubelet's probes and the Service
reach it. `sgdeploy.deploy.kubernetes` builds the manifests and refuses a secret in them (SGD801).
"""

from __future__ import annotations

import posixpath

from sgdeploy.core.diagnostics import Diagnostic, Severity
from sgdeploy.profile.inventory import ClusterEntry
from sgdeploy.profile.model import LoadedProfile
from sgdeploy.sglang.hostfiles import host_files
from sgdeploy.sglang.rules import gpus_per_node

RULE_SECRET = "SGD801"
RULE_TOO_SMALL = "SGD802"
RULE_MODEL_STORAGE = "SGD803"
RULE_FILE_NOT_IN_POD = "SGD804"
RULE_LOOPBACK = "SGD805"

# Where SGLang's image keeps the Hugging Face cache (it runs as root): a hub id's files go there.
HF_CACHE = "/root/.cache/huggingface"
# SGLang's own default --host: the pod's loopback, which neither the probes nor a Service reach.
SGLANG_DEFAULT_HOST = "127.0.0.1"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def nnodes(loaded: LoadedProfile) -> int:
    """The launch's node count (`server.nnodes`, 1 when unset or not a whole number)."""
    value = loaded.model.server.get("nnodes", 1) if loaded.model else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def model_mount_path(loaded: LoadedProfile, cluster: ClusterEntry) -> str | None:
    """Where the pods see the cluster's model storage: `models.mount_path`, else the folder of an
    absolute `server.model_path` (the flag then stays as written), else the image's HF cache."""
    if cluster.models is None:
        return None
    if cluster.models.mount_path:
        return cluster.models.mount_path
    model_path = loaded.model.server.get("model_path") if loaded.model else None
    if (
        isinstance(model_path, str)
        and model_path.startswith("/")
        and posixpath.dirname(model_path) != "/"
    ):
        return posixpath.dirname(model_path.rstrip("/"))
    return HF_CACHE


def _under(path: str, folder: str) -> bool:
    path, folder = posixpath.normpath(path), posixpath.normpath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def cluster_findings(loaded: LoadedProfile, name: str, cluster: ClusterEntry) -> list[Diagnostic]:
    """SGD802-SGD805 for a profile exported to cluster `name`."""
    profile = loaded.model
    assert profile is not None
    found: list[Diagnostic] = []
    server = profile.server
    nodes = nnodes(loaded)
    per_pod = gpus_per_node(server)
    if cluster.nodes is not None:
        fits = cluster.nodes * (cluster.gpu_count // per_pod)
        pods = cluster.replicas * nodes
        if nodes > cluster.nodes:
            found.append(loaded.diagnostic(
                RULE_TOO_SMALL, f"nnodes = {nodes} needs {nodes} GPU nodes at once, but cluster "
                f"{name} has {cluster.nodes} (clusters.{name}.nodes): the group's pods would never "
                "all be scheduled",
                dotted="server.nnodes", hint=f"lower nnodes, or raise clusters.{name}.nodes if the "
                                        "cluster has more"))
        elif per_pod <= cluster.gpu_count and pods > fits:  # more GPUs than a node has: SGD101
            found.append(loaded.diagnostic(
                RULE_TOO_SMALL, f"{pods} pod(s) of {per_pod} GPU(s) each ({cluster.replicas} "
                f"replica(s) x {nodes} node(s)) but cluster {name}'s {cluster.nodes} node(s) of "
                f"{cluster.gpu_count} GPUs hold {fits}: the rest stay "
                "Pending", dotted="server", severity=Severity.WARNING,
                hint=f"lower clusters.{name}.replicas, or raise clusters.{name}.nodes if the "
                "cluster has more"))
    mount = model_mount_path(loaded, cluster)
    model_path = server.get("model_path")
    if isinstance(model_path, str) and model_path.startswith("/"):
        if mount is None:
            found.append(loaded.diagnostic(
                RULE_MODEL_STORAGE, f"server.model_path is the folder {model_path}, but cluster "
                f"{name} has no model storage: the pod would not have "
                "it", dotted="server.model_path",
                hint=f"add [clusters.{name}.models] with pvc = \"NAME\" or host_path = \"/path\" "
                "holding the model"))
        elif not _under(model_path, mount):
            found.append(loaded.diagnostic(
                RULE_MODEL_STORAGE, f"server.model_path {model_path} is outside {mount}, where "
                f"cluster {name} mounts its model storage "
                "(clusters." + name + ".models.mount_path)", dotted="server.model_path",
                hint="mount the storage where the model is (mount_path), or leave mount_path out: "
                "it then is the model's folder"))
    found.extend(_files_not_in_pod(loaded, name, mount))
    host = server.get("host", SGLANG_DEFAULT_HOST)
    if isinstance(host, str) and host in LOOPBACK:
        said = (f"server.host = \"{host}\"" if "host" in server
                else f"server.host is not set (SGLang's default is {host})")
        found.append(loaded.diagnostic(
            RULE_LOOPBACK, f"{said}: in a pod the server would listen on the pod's loopback, which "
            "neither the kubelet's probes nor the Service "
            "reach", dotted="server.host" if "host" in server else "server",
            hint="set host = \"0.0.0.0\" (the pod's network is the pod's own)"))
    return found


def _files_not_in_pod(loaded: LoadedProfile, name: str, mount: str | None) -> list[Diagnostic]:
    """SGD804: files the launch opens at start, outside the model storage: only the image has
    them."""
    profile = loaded.model
    assert profile is not None
    named = [(f.key, f.path) for f in host_files(profile.server, profile.deploy.working_directory)]
    config = profile.server.get("config")
    if isinstance(config, str) and config:
        named.append(("config", config if config.startswith("/") else
                      posixpath.join(profile.deploy.working_directory or "/", config)))
    return [loaded.diagnostic(
        RULE_FILE_NOT_IN_POD, f"server.{key} names {path}, outside cluster {name}'s model storage"
        + (f" ({mount})" if mount else "") + ": the pod has it only if the image does",
        dotted=f"server.{key}", severity=Severity.WARNING,
        hint="put the file on the model storage and name it there, or build it into the image")
        for key, path in named if mount is None or not _under(path, mount)]
