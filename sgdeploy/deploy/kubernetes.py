"""A profile as Kubernetes manifests (`sgdeploy export PROFILE --to kubernetes`), built as data.

The same launch as the unit (`render`): the container runs the argv `render.launch_words` builds,
through the same redacting launcher, with the same `[secrets]` wiring (`secret_args.unit_parts`),
the profile's `[env]` as it is, and the start timeout, stop timeout and gateway drain the unit
and a drained rollout have. What differs is what a pod changes:

- the interpreter is the image's (`[clusters.NAME] python`, `python3` in SGLang's images), and the
  GPUs are the ones the device plugin gives the pod (`nvidia.com/gpu` limits: tp x pp (x dp) /
  nnodes), on nodes whose `nvidia.com/gpu.product` label is the cluster's GPU;
  `CUDA_VISIBLE_DEVICES` and the unit's PATH are not set;
- one node (`nnodes` 1): a Deployment of `replicas` servers, `Recreate` for one (its GPUs are not
  free for a second pod) and a surge-free rolling update for more, with a Service;
- several nodes: a LeaderWorkerSet (LWS) group of `nnodes` pods, restarted as one
  (`RecreateGroupOnPodRestart`), each taking `--node-rank` and rank 0's address for
  `--dist-init-addr` from LWS (`$(LWS_WORKER_INDEX)`, `$(LWS_LEADER_ADDRESS)`, expanded by the
  kubelet); the leader (rank 0) alone serves, and the Service and gateway find only it;
- readiness as sgdeploy judges it: a startup probe on the ready endpoint whose deadline covers
  `deploy.ready_timeout_s` (weights, KV cache, CUDA graph capture), readiness on that endpoint
  (`/ready` from SGLang 0.5.20, else `/health`), liveness on `/health` only once started and with a
  long tolerance, so that neither kills a server loading or capturing graphs;
- secrets only as references: `[secrets]` from a Secret (a file mounted where `secrets.file` says,
  or `secretKeyRef` for a release without `--config`), `deploy.env_file` as `envFrom` a Secret;
  a value in the manifests that is or holds a secret refuses the export (SGD801).

Every literal `$` is written `$$`: the kubelet expands `$(NAME)` in a container's command and env
values, as systemd expands `$NAME` in ExecStart=.
"""

from __future__ import annotations

import itertools
import json
import math
import posixpath
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sgdeploy import __version__
from sgdeploy.core.diagnostics import Diagnostic
from sgdeploy.core.yamltext import dump, dump_all
from sgdeploy.deploy.plan import DIST_INIT_PORT, health_path, server_port
from sgdeploy.deploy.render import STOP_TIMEOUT_S, launch_words
from sgdeploy.deploy.secret_args import EnvReference, unit_parts
from sgdeploy.profile.cluster import RULE_SECRET, model_mount_path, nnodes
from sgdeploy.profile.inventory import ClusterEntry, GatewayEntry
from sgdeploy.profile.model import LoadedProfile, Profile
from sgdeploy.sglang.catalog import Catalog
from sgdeploy.sglang.rules import gpus_per_node
from sgdeploy.sglang.secrets import SECRET_FIELDS, is_secret_name, launch_secrets, secret_in

APP = "sglang"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # NVIDIA GPU feature discovery's node label
GATEWAY_LABEL = "sgdeploy/gateway"  # on the pods that serve: the gateway finds its workers by it
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# a DNS-1035 label short enough for LWS's pods
NAME = re.compile(r"^[a-z]([-a-z0-9]{0,50}[a-z0-9])?$")

PROBE_PERIOD_S = 10
PROBE_TIMEOUT_S = 5
# /health asks the scheduler; under a long batch it may answer late: 10 x 30 s before a restart
LIVENESS_PERIOD_S = 30
LIVENESS_TIMEOUT_S = 20
LIVENESS_FAILURES = 10
DRAIN_SETTLE_S = 5  # the gateway sees the pod go (its watch) before the drain wait begins
SECRET_HINT = ("keep the value in a Kubernetes Secret: [secrets] and deploy.env_file become "
               "Secrets the manifests refer to (docs/kubernetes.md)")


class Expanded(str):
    """A word the kubelet must expand (`$(LWS_WORKER_INDEX)`): written without escaping its `$`."""


class SecretInManifest(ValueError):
    """A manifest would carry a secret: refused whatever validation said (SGD801 findings)."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(d.message for d in diagnostics))
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class NeededSecret:
    """A Secret the manifests read and `kubectl` must create first (sgdeploy never sees its
    values)."""

    name: str
    what: str
    create: str  # the kubectl command, from the same file the host had


@dataclass(frozen=True)
class Manifests:
    """The objects of one export, in the order `kubectl apply` should create them."""

    name: str
    namespace: str
    objects: list[dict[str, Any]]
    secrets: list[NeededSecret] = field(default_factory=list)

    @property
    def yaml(self) -> str:
        return dump_all(self.objects)

    @property
    def json(self) -> str:
        """A `v1` List of the objects, as `kubectl apply -f` takes JSON."""
        return (
            json.dumps({"apiVersion": "v1", "kind": "List", "items": self.objects}, indent=2) + "\n"
        )

    def files(self) -> list[tuple[str, str]]:
        """(file name, YAML) per object, numbered in apply order: `01-deployment-sglang.yaml`."""
        return [(f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml", dump(o))
                for i, o in enumerate(self.objects, start=1)]


@dataclass(frozen=True)
class Gateway:
    name: str
    entry: GatewayEntry
    image: str


def literal(word: str) -> str:
    """A command or env word as the kubelet must leave it: `$` written `$$`."""
    return word if isinstance(word, Expanded) else word.replace("$", "$$")


def check_name(name: str) -> None:
    """ValueError unless `name` can name the objects (and, for LWS, its pods)."""
    if not NAME.match(name):
        raise ValueError(f"{name!r} cannot name Kubernetes objects: lower-case letters, digits and "
                         "'-', starting with a letter, at most 52 characters")


# --------------------------------------------------------------------------- the launch
def pod_environment(profile: Profile) -> list[tuple[str, str]]:
    """The unit's environment less what belongs to a host: PYTHONUNBUFFERED and `[env]` as the
    profile has it; not the unit's PATH (the image has its own) nor CUDA_VISIBLE_DEVICES (the
    device plugin gives the pod its GPUs)."""
    return [("PYTHONUNBUFFERED", "1"), *profile.env.items()]


def multinode_server(
    server: dict[str, Any], catalog: Catalog
) -> tuple[dict[str, Any], dict[str, Expanded]]:
    """`[server]` as each pod of an LWS group runs it: node_rank and dist_init_addr set as
    `multinode.node_profiles` sets them for hosts, their words expanded from LWS's variables."""
    given = server.get("dist_init_addr")
    port = (
        given.rpartition(":")[2]
        if isinstance(given, str) and given.rpartition(":")[2].isdigit()
        else DIST_INIT_PORT
    )
    rank, address = catalog.flags["node_rank"].option, catalog.flags["dist_init_addr"].option
    words = {
        rank: Expanded("$(LWS_WORKER_INDEX)"),
        address: Expanded(f"$(LWS_LEADER_ADDRESS):{port}"),
    }
    return {**server, "node_rank": 0, "dist_init_addr": f"leader:{port}"}, words


@dataclass(frozen=True)
class Launch:
    """The container's command, environment and files for the server (and its init step)."""

    command: list[str]
    env: list[dict[str, Any]]
    env_from: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    init_command: list[str] | None


def launch(loaded: LoadedProfile, catalog: Catalog, cluster: ClusterEntry, name: str) -> Launch:
    profile = loaded.model
    assert profile is not None
    server, expanded = (
        (multinode_server(profile.server, catalog)) if nnodes(loaded) > 1 else (profile.server, {})
    )
    groups = launch_words(profile.model_copy(update={"server": server}), catalog)
    for group in groups[1:]:
        if group[0] in expanded:
            group[1:] = [expanded[group[0]]]
    groups[0][0] = cluster.python
    parts = unit_parts(profile, catalog, groups)
    secret_name = f"{name}-secrets"
    env: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []

    def word(w: str) -> str:
        return Expanded(f"$({w})") if isinstance(w, EnvReference) else literal(w)

    for group in parts.groups:  # a release without --config: `--api-key $(api_key)` from the Secret
        env += [{"name": w, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": w}}}
                for w in group if isinstance(w, EnvReference)]
    env += [{"name": key, "value": literal(value)} for key, value in pod_environment(profile)]
    secrets = profile.secrets
    # --config FILE: the Secret's file, where the host had it
    if secrets is not None and not parts.env_files:
        volumes.append(
            {"name": "secrets", "secret": {"secretName": secret_name, "defaultMode": 0o400}}
        )
        mounts.append(
            {
                "name": "secrets",
                "mountPath": secrets.file,
                "subPath": posixpath.basename(secrets.file),
                "readOnly": True,
            }
        )
    # the merged --config, written by the init container as ExecStartPre= does
    if parts.runtime_directory:
        volumes.append({"name": "run", "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": "run", "mountPath": f"/run/{parts.runtime_directory}"})
    env_from = ([{"secretRef": {"name": f"{name}-env"}}] if profile.deploy.env_file else [])
    first = parts.groups[0]
    command = [word(first[0]), *map(literal, parts.launcher), *map(word, first[1:]),
               *(word(w) for group in parts.groups[1:] for w in group)]
    init = None
    if parts.exec_start_pre:
        merge = [[cluster.python, *parts.exec_start_pre[0][1:]], *parts.exec_start_pre[1:]]
        init = [literal(w) for group in merge for w in group]
    return Launch(command, env, env_from, mounts, volumes, init)


# --------------------------------------------------------------------------- probes and drain
def probes(profile: Profile, version: str, port: int) -> dict[str, Any]:
    """startupProbe, readinessProbe and livenessProbe of a serving container."""
    ready = health_path(version, profile.server)
    start_failures = max(math.ceil(profile.deploy.ready_timeout_s / PROBE_PERIOD_S), 1)
    return {
        # failureThreshold x periodSeconds >= deploy.ready_timeout_s: loading, KV cache, CUDA graphs
        "startupProbe": _http_probe(ready, port, PROBE_PERIOD_S, PROBE_TIMEOUT_S, start_failures),
        "readinessProbe": _http_probe(ready, port, PROBE_PERIOD_S, PROBE_TIMEOUT_S, 3),
        "livenessProbe": _http_probe(
            "/health", port, LIVENESS_PERIOD_S, LIVENESS_TIMEOUT_S, LIVENESS_FAILURES
        ),
    }


def _http_probe(path: str, port: int, period: int, timeout: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


# Run by the preStop hook behind a gateway, under the image's interpreter: once the gateway has
# seen the pod go, wait while the server has requests running or waiting (SGLang's /v1/loads, or
# /get_load before it; the same count a drained rollout waits on), up to the drain timeout.
DRAIN_SCRIPT = (
    "import json,os,sys,time,urllib.request as "
    "u\ns=json.loads(sys.argv[1]);k=os.environ.get(s['env'])if s['env']else None\nif s['file']:\n "
    "try:\n  import yaml;d=yaml.safe_load(open(s['file']))or{};k=next((str(d[n])for n "
    "in('api-key','api_key')if n in d),k)\n except Exception:pass\nh={'Authorization':'Bearer "
    "'+k}if k else{}\ndef busy():\n for p in('/v1/loads?include=core','/get_load'):\n  try:\n   "
    "with u.urlopen(u.Request('http://127.0.0.1:%d%s'%(s['port'],p),headers=h),timeout=5)as "
    "r:d=json.load(r)\n   rows=d.get('loads')if isinstance(d,dict)else d\n   return "
    "sum(r['num_reqs']if isinstance(r.get('num_reqs'),int)else(r.get('num_running_reqs')or "
    "0)+(r.get('num_waiting_reqs')or 0)for r in rows)\n  except Exception:continue\n return "
    "0\ntime.sleep(s['settle']);end=time.monotonic()+s['timeout']\nwhile time.monotonic()<end and "
    "busy():time.sleep(1)\n"
)


def drain_hook(
    profile: Profile, catalog: Catalog, cluster: ClusterEntry, port: int, timeout_s: float
) -> dict[str, Any]:
    """The preStop hook of a worker behind a gateway (with the server's own API key, if it has
    one)."""
    secrets = profile.secrets
    keyed = secrets is not None and "api_key" in secrets.keys
    config = keyed and secrets is not None and "config" in catalog
    spec = {
        "port": port,
        "settle": DRAIN_SETTLE_S,
        "timeout": timeout_s,
        "file": secrets.file if config and secrets else None,
        "env": "api_key" if keyed and not config else None,
    }
    command = [cluster.python, "-c", DRAIN_SCRIPT, json.dumps(spec, sort_keys=True)]
    return {"preStop": {"exec": {"command": [literal(w) for w in command]}}}


# --------------------------------------------------------------------------- the objects
def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": name}


def _metadata(
    name: str, namespace: str, labels: dict[str, str], loaded: LoadedProfile
) -> dict[str, Any]:
    return {"name": name, "namespace": namespace,
            "labels": {**labels, "app.kubernetes.io/managed-by": "sgdeploy"},
            "annotations": {"sgdeploy/profile": loaded.name, "sgdeploy/version": __version__}}


def _storage(
    loaded: LoadedProfile, cluster: ClusterEntry
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model storage's volume and mount (none without `[clusters.NAME.models]`)."""
    storage, mount = cluster.models, model_mount_path(loaded, cluster)
    if storage is None or mount is None:
        return [], []
    source: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": storage.pvc, "readOnly": storage.read_only}}
        if storage.pvc
        else {"hostPath": {"path": storage.host_path, "type": "Directory"}}
    )
    return [{"name": "models", **source}], [
        {"name": "models", "mountPath": mount, "readOnly": storage.read_only}
    ]


def pod_spec(
    loaded: LoadedProfile,
    catalog: Catalog,
    cluster: ClusterEntry,
    name: str,
    serving: bool,
    gateway: Gateway | None,
) -> dict[str, Any]:
    """The pod of one server (or of one node of a multi-node launch; `serving`: it answers HTTP)."""
    profile = loaded.model
    assert profile is not None
    run = launch(loaded, catalog, cluster, name)
    port = server_port(profile.server)
    model_volumes, model_mounts = _storage(loaded, cluster)
    container: dict[str, Any] = {
        "name": APP,
        "image": cluster.image,
        "imagePullPolicy": "IfNotPresent",
        "command": run.command,
        "env": run.env,
        **({"envFrom": run.env_from} if run.env_from else {}),
        **(
            {"workingDir": profile.deploy.working_directory}
            if profile.deploy.working_directory
            else {}
        ),
        **(
            {"ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}]}
            if serving
            else {}
        ),
        "resources": {"limits": {GPU_RESOURCE: str(gpus_per_node(profile.server))}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *model_mounts, *run.mounts],
        **(probes(profile, catalog.version, port) if serving else {}),
    }
    grace = STOP_TIMEOUT_S
    if serving and gateway is not None:
        container["lifecycle"] = drain_hook(
            profile, catalog, cluster, port, gateway.entry.drain_timeout_s
        )
        grace += DRAIN_SETTLE_S + math.ceil(gateway.entry.drain_timeout_s)
    spec: dict[str, Any] = {
        # Service links would add *_PORT, *_SERVICE_HOST variables, some named SGLANG_...
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": {GPU_PRODUCT_LABEL: cluster.product_label},
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    }
    if run.init_command is not None:
        spec["initContainers"] = [{
            "name": "merge-config", "image": cluster.image, "imagePullPolicy": "IfNotPresent",
            "command": run.init_command, "volumeMounts": [*model_mounts, *run.mounts]}]
    spec["containers"] = [container]
    spec["volumes"] = [
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": f"{cluster.shm_size_gib}Gi"},
        },
        *model_volumes,
        *run.volumes,
    ]
    return spec


def _template(
    loaded: LoadedProfile,
    catalog: Catalog,
    cluster: ClusterEntry,
    name: str,
    labels: dict[str, str],
    serving: bool,
    gateway: Gateway | None,
) -> dict[str, Any]:
    pod_labels = {**labels, **({GATEWAY_LABEL: gateway.name} if serving and gateway else {})}
    return {"metadata": {"labels": pod_labels,
                         "annotations": {"sgdeploy/profile-sha256": loaded.sha256,
                                         "sgdeploy/sglang-version": catalog.version}},
            "spec": pod_spec(loaded, catalog, cluster, name, serving, gateway)}


def deployment(loaded: LoadedProfile, catalog: Catalog, cluster: ClusterEntry, name: str,
               gateway: Gateway | None) -> dict[str, Any]:
    labels = _labels(name)
    # one server a pod, and GPUs are the limit: no surge. One replica: Recreate frees its GPUs first
    strategy: dict[str, Any] = (
        {"type": "Recreate"}
        if cluster.replicas == 1
        else {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, cluster.namespace, labels, loaded),
        "spec": {
            "replicas": cluster.replicas,
            "selector": {"matchLabels": labels},
            "strategy": strategy,
            "template": _template(loaded, catalog, cluster, name, labels, True, gateway),
        },
    }


def leader_worker_set(loaded: LoadedProfile, catalog: Catalog, cluster: ClusterEntry, name: str,
                      gateway: Gateway | None) -> dict[str, Any]:
    labels = _labels(name)
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(name, cluster.namespace, labels, loaded),
        "spec": {
            "replicas": cluster.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "leaderWorkerTemplate": {
                "size": nnodes(loaded),
                # a node's failure fails the launch: the whole group starts again
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _template(loaded, catalog, cluster, name, labels, True, gateway),
                "workerTemplate": _template(loaded, catalog, cluster, name, labels, False, None),
            },
        },
    }


def service(
    loaded: LoadedProfile, cluster: ClusterEntry, name: str, multinode: bool
) -> dict[str, Any]:
    assert loaded.model is not None
    labels = _labels(name)
    # an LWS group's leader (rank 0) alone serves
    selector = {**labels, LWS_NAME_LABEL: name, LWS_INDEX_LABEL: "0"} if multinode else labels
    port = server_port(loaded.model.server)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, cluster.namespace, labels, loaded),
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def gateway_objects(loaded: LoadedProfile, cluster: ClusterEntry, gateway: Gateway, protected: bool
                    ) -> tuple[list[dict[str, Any]], list[NeededSecret]]:
    """SGLang's gateway (smg) as a Deployment that finds its workers by label
    (`--service-discovery`: the pods of this namespace labelled sgdeploy/gateway=NAME, ready ones
    only), a Service, and the right to watch pods. A rollout drains through it: a leaving pod is
    taken out of its rotation at once, and the pod's preStop hook waits for its requests
    (`drain_hook`)."""
    assert loaded.model is not None
    name, namespace = gateway.name, cluster.namespace
    url = urllib.parse.urlsplit(gateway.entry.url)
    port = url.port or (443 if url.scheme == "https" else 80)
    labels = {"app.kubernetes.io/name": "smg", "app.kubernetes.io/instance": name}
    command = ["smg", "launch", "--host", "0.0.0.0", "--port", str(port), "--service-discovery",
               "--selector", f"{GATEWAY_LABEL}={name}",
               "--service-discovery-port", str(server_port(loaded.model.server)),
               "--service-discovery-namespace", namespace]
    env: list[dict[str, Any]] = []
    needed = []
    if protected or gateway.entry.api_key_env or gateway.entry.api_key_file:
        secret = f"{name}-api-key"
        env.append(
            {
                "name": "SMG_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": "api-key"}},
            }
        )
        command += ["--api-key", Expanded("$(SMG_API_KEY)")]
        source = (
            f"--from-file=api-key={gateway.entry.api_key_file}"
            if gateway.entry.api_key_file
            else f'--from-literal=api-key="${gateway.entry.api_key_env}"'
            if gateway.entry.api_key_env
            else "--from-file=api-key=FILE"
        )
        needed.append(
            NeededSecret(
                secret,
                f"gateway {name}'s API key (smg --api-key; with [secrets] api_key, "
                "the servers' own key)",
                f"kubectl -n {namespace} create secret generic {secret} {source}",
            )
        )
    meta = {"namespace": namespace, "labels": {**labels, "app.kubernetes.io/"
                                                         "managed-by": "sgdeploy"}}
    container = {
        "name": "smg", "image": gateway.image, "imagePullPolicy": "IfNotPresent",
        "command": [literal(c) for c in command],
        **({"env": env} if env else {}),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "readinessProbe": _http_probe("/readiness", port, PROBE_PERIOD_S, PROBE_TIMEOUT_S, 3),
        "livenessProbe": _http_probe("/liveness", port, LIVENESS_PERIOD_S, PROBE_TIMEOUT_S, 3),
    }
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, **meta},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, **meta},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": name,
                        "enableServiceLinks": False,
                        "containers": [container],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, **meta},
            "spec": {
                "selector": labels,
                "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]
    return objects, needed


def _needed_secrets(
    loaded: LoadedProfile, catalog: Catalog, cluster: ClusterEntry, name: str
) -> list[NeededSecret]:
    profile = loaded.model
    assert profile is not None
    namespace, needed = cluster.namespace, []
    if profile.secrets is not None:
        secrets, secret = profile.secrets, f"{name}-secrets"
        if "config" in catalog:
            how = f"--from-file={secrets.file}"
            what = (f"[secrets] {', '.join(secrets.keys)}: the YAML file SGLang reads with "
                    f"--config, at {secrets.file}")
        else:
            how = f"--from-env-file={secrets.file}"
            what = (f"[secrets] {', '.join(secrets.keys)}: one key each (SGLang {catalog.version} "
                    "has no --config)")
        needed.append(NeededSecret(secret, what, f"kubectl -n {namespace} create secret generic "
                                                 f"{secret} {how}"))
    if profile.deploy.env_file:
        secret = f"{name}-env"
        needed.append(
            NeededSecret(
                secret,
                f"deploy.env_file's variables (envFrom), as {profile.deploy.env_file} has them",
                f"kubectl -n {namespace} create secret generic "
                f"{secret} --from-env-file={profile.deploy.env_file}",
            )
        )
    return needed


def manifests(loaded: LoadedProfile, catalog: Catalog, cluster: ClusterEntry, name: str,
              gateway: Gateway | None = None) -> Manifests:
    """Every object of an export of a validated profile; SecretInManifest when one holds a
    secret."""
    profile = loaded.model
    if profile is None:
        raise ValueError(f"{loaded.path} is not a valid profile")
    check_name(name)
    # what SGD021 refuses in [server] and [env] goes into no manifest either, whatever validation
    # said
    inline = [loaded.diagnostic(RULE_SECRET, f"{spot.dotted} {spot.what}: a manifest is stored and "
                                "shown in the cluster (kubectl get -o yaml), so sgdeploy writes no "
                                "secret into one",
                                dotted=spot.dotted, hint=SECRET_HINT)
              for spot in launch_secrets(profile.server, profile.env)]
    if inline:
        raise SecretInManifest(inline)
    multinode = nnodes(loaded) > 1
    workload = (leader_worker_set if multinode else deployment)(
        loaded, catalog, cluster, name, gateway
    )
    objects = [workload, service(loaded, cluster, name, multinode)]
    needed = _needed_secrets(loaded, catalog, cluster, name)
    if gateway is not None:
        protected = profile.secrets is not None and "api_key" in profile.secrets.keys
        extra, gateway_secrets = gateway_objects(loaded, cluster, gateway, protected)
        objects += extra
        needed += gateway_secrets
    found = [loaded.diagnostic(RULE_SECRET, f"{where} {what}: a manifest is stored and shown in "
                               "the cluster (kubectl get -o yaml), so sgdeploy writes no secret "
                               "into one", dotted=None,
                               hint=SECRET_HINT)
             for where, what in manifest_secrets(objects)]
    if found:
        raise SecretInManifest(found)
    return Manifests(name, cluster.namespace, objects, needed)


# --------------------------------------------------------------------------- the secret scan
def manifest_secrets(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(where, what) for every value of the objects that is or holds a secret: an env variable named
    like one with a literal value, a word after a secret option, a URL's password, a known token."""
    found = []
    for obj in objects:
        label = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        nodes = list(_nodes(obj, ""))
        # the name beside each env entry's value (`...env[2].value` -> its `name`)
        env_names = {
            f"{path}.value": node["name"]
            for path, node in nodes
            if ".env[" in path and isinstance(node, dict) and isinstance(node.get("name"), str)
        }
        for path, value in nodes:
            if not isinstance(value, str):
                continue
            env_name = env_names.get(path)
            if (
                value
                and env_name is not None
                and (is_secret_name(env_name) or env_name in SECRET_FIELDS)
            ):
                found.append(
                    (f"{label} {path.removesuffix('.value')} ({env_name})", "names a secret")
                )
            elif held := secret_in(value):
                found.append((f"{label} {path}", f"holds {held}"))
        for path, node in nodes:
            if isinstance(node, list) and path.rsplit(".", 1)[-1] == "command":
                words = [w for w in node if isinstance(w, str)]
                for option, value in itertools.pairwise(words):
                    if (
                        option.startswith("--")
                        and is_secret_name(option)
                        and not value.startswith("$(")
                    ):
                        found.append((f"{label} {path}", f"passes {option} a value"))
    return found


def _nodes(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every node of a manifest with its path (`spec.containers[0].env[2]`), a parent before its
    children."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _nodes(item, f"{path}[{i}]")
