"""The systemd sandbox of a `deploy.hardening = "strict"` unit, decided from the profile.

What the sandbox allows is data (`UnitSandbox`), so `plan` can show it and the renderer writes it
the same way each time; sgdeploy.sglang.sandbox knows where SGLang and its libraries write and
which device nodes CUDA opens. docs/hardening.md gives each setting with the failure seen
without it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from sgdeploy.profile.model import Profile
from sgdeploy.sglang.sandbox import (
    NVIDIA_DEVICE_GROUPS,
    RDMA_DEVICE_GROUPS,
    RDMA_DEVICE_PATHS,
    WrittenPath,
    cache_directory,
    cache_environment,
    read_paths,
    under_home,
    written_paths,
)

# NETLINK: getifaddrs (NCCL, gloo)
ADDRESS_FAMILIES = ("AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK")
# What every strict unit gets whatever the launch: no privileges, the kernel's and systemd's own
# state out of reach. Not here, on purpose: MemoryDenyWriteExecute (every JIT), SystemCallFilter,
# PrivateDevices, PrivateUsers (docs/hardening.md says why).
_LOCKED_DOWN = (
    ("NoNewPrivileges", "yes"), ("CapabilityBoundingSet", ""), ("AmbientCapabilities", ""),
    *((f"Protect{what}", "yes") for what in
      ("KernelTunables", "KernelModules", "KernelLogs", "ControlGroups", "Clock", "Hostname")),
    ("ProtectProc", "invisible"), ("RestrictNamespaces", "yes"), ("RestrictRealtime", "yes"),
    ("RestrictSUIDSGID", "yes"), ("LockPersonality", "yes"), ("RemoveIPC", "yes"),
    ("KeyringMode", "private"), ("SystemCallArchitectures", "native"),
    ("RestrictAddressFamilies", " ".join(ADDRESS_FAMILIES)),
)


@dataclass(frozen=True)
class UnitSandbox:
    """What a strict unit may write, read and open."""

    user: str
    cache_directory: str  # absolute; systemd creates it (CacheDirectory=) owned by `user`
    # besides the cache and runtime folders, with the key that names each
    writable: tuple[WrittenPath, ...]
    protect_home: str  # "yes", or "read-only" when the launch reads or writes under a home folder
    device_groups: tuple[str, ...]  # DeviceAllow=char-NAME rw
    device_paths: tuple[str, ...]  # DeviceAllow=PATH rw
    environment: tuple[tuple[str, str], ...]  # cache variables the profile's [env] does not set

    def describe(self) -> str:
        """What `plan` says of it: `strict sandbox: runs as sglang, writes only /var/cache/...`."""
        writes = ", ".join((self.cache_directory, *self.read_write_paths))
        return f"strict sandbox: runs as {self.user}, writes only {writes} (and its private /tmp)"

    def properties(self) -> tuple[tuple[str, str], ...]:
        """The unit's sandbox as systemd properties, in the order the unit file lists them; SGLang's
        own check on the host runs under the same ones (`systemd-run --property`)."""
        return (
            ("CacheDirectory", self.cache_directory_setting),
            ("CacheDirectoryMode", "0700"),
            ("UMask", "0077"),
            ("ProtectSystem", "strict"),
            *(("ReadWritePaths", f"-{path}") for path in self.read_write_paths),
            ("ProtectHome", self.protect_home),
            ("PrivateTmp", "yes"),
            ("DevicePolicy", "closed"),
            *(("DeviceAllow", f"char-{group} rw") for group in self.device_groups),
            *(("DeviceAllow", f"{path} rw") for path in self.device_paths),
            *_LOCKED_DOWN,
        )

    @property
    def read_write_paths(self) -> tuple[str, ...]:
        return tuple(w.path for w in self.writable)

    @property
    def cache_directory_setting(self) -> str:
        """CacheDirectory= takes the folder relative to /var/cache."""
        return self.cache_directory.removeprefix("/var/cache/")


def _multi_node(profile: Profile) -> bool:
    nnodes = profile.server.get("nnodes", 1)
    return (isinstance(nnodes, int) and nnodes > 1) or any(
        k.startswith("NCCL_IB_") for k in profile.env
    )


def unit_sandbox(profile: Profile) -> UnitSandbox | None:
    """The sandbox of the profile's unit; None when `deploy.hardening` is "none"."""
    deploy = profile.deploy
    if deploy.hardening != "strict":
        return None
    env = profile.env
    cache = cache_directory(deploy.unit)
    named = [*written_paths(profile.server, env),
             *(WrittenPath("deploy.writable_paths", path) for path in deploy.writable_paths)]
    first = {w.path: w for w in reversed(named)}  # a path named twice keeps its first key
    writes = tuple(first[path] for path in sorted(first) if not _within(path, cache))
    reads = read_paths(profile.server, deploy.python, deploy.working_directory,
                       (deploy.env_file, profile.secrets.file if profile.secrets else None))
    homes = any(under_home(p) for p in [*reads, *(w.path for w in writes)])
    rdma = _multi_node(profile)
    return UnitSandbox(
        user=deploy.run_as or "root",
        cache_directory=cache,
        writable=writes,
        protect_home="read-only" if homes else "yes",
        device_groups=NVIDIA_DEVICE_GROUPS + (RDMA_DEVICE_GROUPS if rdma else ()),
        device_paths=RDMA_DEVICE_PATHS if rdma else (),
        environment=tuple((k, v) for k, v in cache_environment(deploy.unit) if k not in env),
    )


def _within(path: str, folder: str) -> bool:
    return posixpath.commonpath([path, folder]) == folder
