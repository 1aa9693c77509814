"""The inventory (`inventory.toml`): GPU hosts, their facts, groups of them, SGLang's gateways in
front of them, and Kubernetes clusters (`[clusters.NAME]`) a profile is exported to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from sgdeploy.core.explain import problem, shaped, shown, toml_key
from sgdeploy.core.tomlfile import TomlDocument, did_you_mean, read_toml
from sgdeploy.host.sshconfig import OVERRIDE_FIELDS
from sgdeploy.profile.inventory_file import placed
from sgdeploy.profile.model import AbsolutePath, EnvName
from sgdeploy.sglang.gpus import compute_capability_for, gpu_model_for
from sgdeploy.sglang.target import HostTarget

ComputeCapability = Annotated[str, shaped(
    r"^\d{1,2}\.\d$", "a compute capability such as \"9.0\" (major.minor, as a string)",
    "write it in quotes as nvidia-smi --query-gpu=compute_cap --format=csv prints it, "
    "e.g. \"8.6\"")]
WorkerUrl = Annotated[str, shaped(
    r"^https?://[A-Za-z0-9_.:\[\]-]+(:\d+)?/?$",
    "a worker URL (http:// or https://, a host and a port, no path)",
    "write it as http://HOST:PORT, e.g. http://10.0.0.5:30000")]
GatewayUrl = Annotated[str, shaped(
    r"^https?://[A-Za-z0-9_.:\[\]-]+(:\d+)?(/[^\s]*)?$",
    "a gateway URL (http:// or https://, a host, an optional port and path)",
    "write it as http://HOST:PORT, e.g. http://10.0.0.2:30000")]
Address = Annotated[str, shaped(
    r"^[A-Za-z0-9_.:-]+$",
    "a host name, an IP address or an alias of the SSH configuration (letters, digits and _.:-)",
    "write the bare name or address: no user@, no spaces, no ssh options (the user goes into "
    "user = ..., the port into port = ...)")]
ProxyJump = Annotated[str, shaped(
    r"^[A-Za-z0-9_.:@\[\],-]+$", "a ProxyJump value ([user@]host[:port], several joined by ',')",
    "write it as ssh -J takes it, e.g. admin@bastion:22")]


class HostEntry(BaseModel):
    """`[hosts.NAME]`: how to reach a GPU host and what it has.

    `address` may be an alias of the SSH configuration; the connection settings left unset
    (None) come from it (see sgdeploy/host/sshconfig.py), those set here win.
    """

    model_config = ConfigDict(extra="forbid")

    address: Address = Field(min_length=1, max_length=253, examples=["10.0.0.5"])
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    strict_host_key_checking: bool | None = None
    proxy_jump: ProxyJump | None = None
    ssh_config: str | None = None
    # Run the commands that need root through `sudo -n` when `user` is not root (Ansible's
    # `become`). None: yes whenever the login is not root; false: never (the login must be root).
    become: bool | None = None
    gpu: str | None = None
    compute_capability: ComputeCapability | None = None
    # strict: `gpu_count = true` or `= "4"` is a mistake to say, not a number to guess
    gpu_count: int | None = Field(default=None, ge=1, le=1024, strict=True)
    gpu_memory_gib: float | None = Field(default=None, gt=0, strict=True)
    sglang_version: str | None = None
    # The gateway (`[gateways.NAME]`) that routes to this host's server, and the URL it knows
    # the server by (default http://<address>:<the profile's port>).
    gateway: str | None = None
    worker_url: WorkerUrl | None = None

    def ssh_overrides(self) -> dict[str, object]:
        """The connection settings this entry sets, by sshconfig.resolve's names."""
        return {name: getattr(self, name) for name in OVERRIDE_FIELDS}


HostName = Annotated[str, shaped(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", "a name for the inventory (letters, digits and ._-, "
    "starting with a letter or digit, at most 63 characters)", "rename it, e.g. gpu1 or h200-a")]


class GatewayEntry(BaseModel):
    """`[gateways.NAME]`: SGLang's gateway (the Shepherd Model Gateway, `smg`) in front of workers.

    Its API key is never written here: `api_key_env` names an environment variable, or
    `api_key_file` a file (relative to the inventory's folder), that holds it.
    """

    model_config = ConfigDict(extra="forbid")

    url: GatewayUrl
    api_key_env: EnvName | None = None
    api_key_file: str | None = Field(default=None, min_length=1)
    hosts: list[str] = Field(default_factory=list)  # hosts or groups this gateway fronts
    drain_timeout_s: float = Field(default=120.0, ge=0, le=86400)
    # At the drain timeout, with requests still running: put the worker back and refuse the host
    # (its server keeps serving them), or stop it anyway and cut them
    on_drain_timeout: Literal["refuse", "stop"] = "refuse"
    add_timeout_s: float = Field(default=60.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _one_key_source(self) -> GatewayEntry:
        if self.api_key_env and self.api_key_file:
            raise problem("both api_key_env and api_key_file are set", "keep one of them")
        return self


# --------------------------------------------------------------------------- Kubernetes clusters
DNS_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
DnsLabel = Annotated[str, shaped(
    DNS_LABEL, "a Kubernetes name (lower-case letters, digits and '-', starting with a letter, at "
    "most 63 characters)", "write it as kubectl shows it, e.g. default or llm-serving")]
DnsSubdomain = Annotated[str, shaped(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", "a Kubernetes object name (lower-case letters, "
    "digits, '-' and '.', at most 253 characters)", "write it as kubectl shows it, e.g. models")]
LabelValue = Annotated[str, shaped(
    r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$", "a Kubernetes label value (letters, digits "
    "and -_., at most 63 characters)", "write the value of the node label nvidia.com/gpu.product "
    "as kubectl get nodes -L nvidia.com/gpu.product shows it, e.g. NVIDIA-H100-80GB-HBM3")]
Image = Annotated[str, shaped(
    r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$", "a container image reference "
    "(registry/name:tag, no spaces, no credentials)",
    "write it as docker pull takes it, e.g. lmsysorg/sglang:v0.5.11-cu129")]
# An SGLang image's tag names its release: v0.5.11, v0.5.11-cu129, 0.5.4.post1-cu126.
_IMAGE_RELEASE = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?:[-_+].*)?$")


def image_sglang_version(image: str) -> str | None:
    """The SGLang release an image's tag names (`lmsysorg/sglang:v0.5.11-cu129` -> 0.5.11), or
    None."""
    name = image.split("@", 1)[0]
    tail = name.rsplit("/", 1)[-1]
    if ":" not in tail:
        return None
    match = _IMAGE_RELEASE.match(tail.rsplit(":", 1)[1])
    return match.group(1) if match else None


class ModelStorage(BaseModel):
    """`[clusters.NAME.models]`: where the pods find the model's files, mounted at `mount_path`."""

    model_config = ConfigDict(extra="forbid")

    pvc: DnsSubdomain | None = None  # a PersistentVolumeClaim of the namespace
    host_path: AbsolutePath | None = None  # a folder on every GPU node
    # where the pods see it; default: the folder of server.model_path (so the flag stays as written)
    mount_path: AbsolutePath | None = None
    read_only: bool = True

    @model_validator(mode="after")
    def _one_source(self) -> ModelStorage:
        if (self.pvc is None) == (self.host_path is None):
            raise problem("give exactly one of pvc and host_path",
                          "pvc = \"models\" (a PersistentVolumeClaim) or host_path = "
                          "\"/data/models\" (a folder on every GPU node)")
        return self


class ClusterEntry(BaseModel):
    """`[clusters.NAME]`: a Kubernetes cluster's GPU nodes, as `sgdeploy export` targets them.

    Validation treats it like a host: `gpu`, `compute_capability`, `gpu_count` (per node) and
    `gpu_memory_gib` are the facts the rules check, and the SGLang release is the image's (its tag,
    or `sglang_version`). The rest says how the manifests run it (docs/kubernetes.md).
    """

    model_config = ConfigDict(extra="forbid")

    image: Image = Field(max_length=512, examples=["lmsysorg/sglang:v0.5.11-cu129"])
    sglang_version: str | None = None  # default: the image's tag
    # the image's interpreter
    python: str = Field(default="python3", min_length=1, pattern=r"^[^\s]+$")
    gpu: str = Field(min_length=1)  # as nvidia-smi names it: "NVIDIA H100 80GB HBM3"
    compute_capability: ComputeCapability | None = None
    gpu_count: int = Field(ge=1, le=1024, strict=True)  # GPUs of one node
    gpu_memory_gib: float | None = Field(default=None, gt=0, strict=True)
    # node label nvidia.com/gpu.product; default: gpu, '-' for ' '
    gpu_product: LabelValue | None = None
    # GPU nodes a launch may use
    nodes: int | None = Field(default=None, ge=1, le=100000, strict=True)
    replicas: int = Field(default=1, ge=1, le=1000, strict=True)  # servers (or multi-node groups)
    namespace: DnsLabel = "default"
    shm_size_gib: int = Field(default=32, ge=1, le=4096, strict=True)  # /dev/shm of a pod
    models: ModelStorage | None = None
    gateway: str | None = None  # a [gateways.NAME] whose Deployment `export` writes too
    gateway_image: Image | None = Field(default=None, max_length=512)  # an image with smg in it

    @model_validator(mode="after")
    def _release_known(self) -> ClusterEntry:
        tagged = image_sglang_version(self.image)
        if self.sglang_version is None and tagged is None:
            raise problem(f"the image {self.image} names no SGLang release in its tag, and "
                          "sglang_version is not set", "pin a release tag "
                          "(lmsysorg/sglang:v0.5.11-cu129) or set sglang_version = \"0.5.11\": "
                          "validation checks the launch against it")
        if self.sglang_version is not None and tagged is not None and tagged != self.sglang_version:
            raise problem(f"sglang_version = \"{self.sglang_version}\" but the image's tag names "
                          f"{tagged}",
                          "drop sglang_version (the tag says it) or correct the image")
        if self.gateway is not None and self.gateway_image is None:
            raise problem(f"gateway = \"{self.gateway}\" without gateway_image",
                          "set gateway_image to an image that runs SGLang's gateway (smg)")
        return self

    @property
    def release(self) -> str:
        """The SGLang release of the image: `sglang_version`, else the tag's."""
        release = self.sglang_version or image_sglang_version(self.image)
        assert release is not None  # _release_known
        return release

    @property
    def product_label(self) -> str:
        """The value of the node label `nvidia.com/gpu.product` (GPU feature discovery's)."""
        return (
            self.gpu_product or re.sub(r"[^-A-Za-z0-9_.]", "-", self.gpu.strip()).strip("-_.")[:63]
        )


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ssh_config: str | None = None  # the SSH configuration of every host that names none
    hosts: dict[HostName, HostEntry] = Field(default_factory=dict)
    groups: dict[HostName, list[str]] = Field(default_factory=dict)
    gateways: dict[HostName, GatewayEntry] = Field(default_factory=dict)
    clusters: dict[HostName, ClusterEntry] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_key_inline(cls, data: object) -> object:
        gateways = data.get("gateways") if isinstance(data, dict) else None
        inline = [
            (name, key)
            for name, table in (gateways.items() if isinstance(gateways, dict) else ())
            if isinstance(table, dict)
            for key in ("api_key", "key", "token")
            if key in table
        ]
        if inline:
            raise ValidationError.from_exception_data("Inventory", [_located(
                ("gateways", name, key), "(hidden)",
                "a gateway's API key is never written in the inventory",
                "name an environment variable (api_key_env = \"NAME\") or a file "
                "(api_key_file = \"PATH\") that holds it") for name, key in inline])
        return data

    @model_validator(mode="after")
    def _facts_agree_with_the_gpu(self) -> Inventory:
        errors = [
            error
            for name, entry in self.hosts.items()
            for error in _contradictions(("hosts", name), entry)
        ]
        errors += [error for name, entry in self.clusters.items()
                   for error in _contradictions(("clusters", name), entry)]
        if errors:
            raise ValidationError.from_exception_data("Inventory", errors)
        return self

    @model_validator(mode="after")
    def _groups_name_hosts(self) -> Inventory:
        errors = [_located(("groups", group), group, f"group '{group}' has the same name as a host",
                           "rename the group or the host: deploy.host must say which it means")
                  for group in self.groups if group in self.hosts]
        errors += [_unknown_member(("groups", group, i), member, list(self.hosts))
                   for group, members in self.groups.items() for i, member in enumerate(members)
                   if member not in self.hosts]
        errors += [_located(("clusters", name), name, f"cluster '{name}' has the same name as a "
                            f"{'host' if name in self.hosts else 'group'}",
                            "rename the cluster: deploy.host must say which it means")
                   for name in self.clusters if name in self.hosts or name in self.groups]
        if errors:
            raise ValidationError.from_exception_data("Inventory", errors)
        return self

    @model_validator(mode="after")
    def _gateways_known(self) -> Inventory:
        errors = [
            _located(
                ("hosts", name, "gateway"),
                entry.gateway,
                "no gateway "
                f"'{entry.gateway}' in [gateways] (known: "
                f"{', '.join(self.gateways) or 'none'})",
                f"add [gateways.{entry.gateway}] or name one of [gateways]",
            )
            for name, entry in self.hosts.items()
            if entry.gateway and entry.gateway not in self.gateways
        ]
        errors += [
            _located(
                ("clusters", name, "gateway"),
                entry.gateway,
                "no gateway "
                f"'{entry.gateway}' in [gateways] (known: "
                f"{', '.join(self.gateways) or 'none'})",
                f"add [gateways.{entry.gateway}] or name one of [gateways]",
            )
            for name, entry in self.clusters.items()
            if entry.gateway and entry.gateway not in self.gateways
        ]
        claimed: dict[str, str] = {name: e.gateway for name, e in self.hosts.items() if e.gateway}
        for gateway, gw in self.gateways.items():
            for i, member in enumerate(gw.hosts):
                names = self.resolve(member)
                if names is None:
                    errors.append(_unknown_member(("gateways", gateway, "hosts", i), member,
                                                  [*self.hosts, *self.groups],
                                                  "neither a host nor a group"))
                    continue
                for host in names:
                    other = claimed.setdefault(host, gateway)
                    if other != gateway:
                        errors.append(_located(
                            ("gateways", gateway, "hosts", i), member, f"host '{host}' is fronted "
                            f"by gateway '{other}' already; a host has one gateway",
                            f"remove '{member}' from one of the two gateways"))
        if errors:
            raise ValidationError.from_exception_data("Inventory", errors)
        return self

    def gateway_of(self, host: str) -> str | None:
        """The name of the gateway that fronts `host`, if one does."""
        entry = self.hosts.get(host)
        if entry is not None and entry.gateway:
            return entry.gateway
        for name, gateway in self.gateways.items():
            if any(host in (self.resolve(member) or []) for member in gateway.hosts):
                return name
        return None

    def resolve(self, name: str) -> list[str] | None:
        """Host names for a host or group name; None if it is neither."""
        if name in self.hosts:
            return [name]
        if name in self.groups:
            return list(self.groups[name])
        return None


Loc = tuple[str | int, ...]


# A declared memory above the GPU model's largest size by more than this is no such GPU (less is
# allowed: a MIG slice, or memory the driver reserves).
MEMORY_SLACK = 1.1


def _contradictions(where: Loc, entry: HostEntry | ClusterEntry) -> list[InitErrorDetails]:
    """Facts the GPU model named in `gpu` rules out: another compute capability, more memory."""
    model = gpu_model_for(entry.gpu) if entry.gpu else None
    if model is None:
        return []
    found = []
    capability = entry.compute_capability
    if capability is not None and capability != model.compute_capability:
        found.append(_located((*where, "compute_capability"), capability,
                              f"{entry.gpu} is compute capability {model.compute_capability}, not "
                              f"{capability}",
                              f"write compute_capability = \"{model.compute_capability}\" or "
                              "correct gpu (nvidia-smi --query-gpu=name,compute_cap --format=csv)"))
    memory = entry.gpu_memory_gib
    if memory is not None and memory > max(model.memory_gib) * MEMORY_SLACK:
        sizes = " or ".join(f"{size} GiB" for size in model.memory_gib)
        found.append(_located((*where, "gpu_memory_gib"), memory,
                              f"{entry.gpu} has {sizes} of memory, not {memory:g} GiB",
                              "write the memory of one GPU in GiB (nvidia-smi "
                              "--query-gpu=memory.total --format=csv, MiB / 1024) or correct gpu"))
    return found


def _located(loc: Loc, value: object, message: str, hint: str) -> InitErrorDetails:
    return InitErrorDetails(type=problem(message, hint), loc=loc, input=value)


def _unknown_member(loc: Loc, member: str, known: list[str], what: str = "no host"
                    ) -> InitErrorDetails:
    """A group's or gateway's member that names nothing in the inventory."""
    near, named = did_you_mean(member, known), shown(member)
    if near:
        return _located(loc, member, f"{named} is {what} of this inventory; did you mean "
                        f"'{near}'?", f"write '{near}'")
    return _located(loc, member, f"{named} is {what} of this inventory (known: "
                    f"{', '.join(known) or 'none'})",
                    f"add [hosts.{toml_key([member])}], or correct the name")


def worker_url(entry: HostEntry, port: int) -> str:
    """The URL a gateway knows a host's server by: `worker_url`, else http://<address>:<port>."""
    if entry.worker_url:
        return entry.worker_url.rstrip("/")
    address = f"[{entry.address}]" if ":" in entry.address else entry.address
    return f"http://{address}:{port}"


def host_target(name: str, entry: HostEntry) -> HostTarget:
    """What validation knows of an inventory host: its declared facts, the GPU table filling in the
    compute capability of a GPU named without one."""
    capability = entry.compute_capability
    if capability is None and entry.gpu:
        capability = compute_capability_for(entry.gpu)
    return HostTarget(
        name=name,
        gpu=entry.gpu,
        compute_capability=capability,
        gpu_count=entry.gpu_count,
        gpu_memory_gib=entry.gpu_memory_gib,
        sglang_version=entry.sglang_version,
        address=entry.address,
    )


def cluster_target(name: str, entry: ClusterEntry) -> HostTarget:
    """What validation knows of a cluster: one of its GPU nodes as a host, with the image's
    SGLang."""
    return HostTarget(
        name=name,
        gpu=entry.gpu,
        compute_capability=entry.compute_capability or compute_capability_for(entry.gpu),
        gpu_count=entry.gpu_count,
        gpu_memory_gib=entry.gpu_memory_gib,
        sglang_version=entry.release,
    )


def load_inventory(path: str | Path) -> TomlDocument[Inventory]:
    document = read_toml(path, Inventory, what="inventory")
    if document.model is not None:
        _place_ssh_configs(document.model, Path(path).parent)
        _place_gateway_keys(document.model, Path(path).parent)
    return document


def _place_ssh_configs(inventory: Inventory, folder: Path) -> None:
    """Each host's `ssh_config`: its own or the inventory's, a relative path read from the
    inventory's folder (`~` stays for the connection to expand)."""
    for entry in inventory.hosts.values():
        entry.ssh_config = placed(entry.ssh_config or inventory.ssh_config, folder)


def _place_gateway_keys(inventory: Inventory, folder: Path) -> None:
    """A gateway's relative `api_key_file` is read from the inventory's folder."""
    for gateway in inventory.gateways.values():
        gateway.api_key_file = placed(gateway.api_key_file, folder)
