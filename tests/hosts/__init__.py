"""Real systemd test hosts (systemd-nspawn) with a simulated SGLang and simulated GPUs.

    from tests.hosts import boot_hosts, HostSpec

    with boot_hosts([HostSpec.like("ct129"), "h200"]) as hs:
        hs.ssh("ct129", "systemctl is-system-running")
        print(hs.inventory_path)

See docs/test-hosts.md.
"""

from .machine import (
    FAILURES,
    PRESETS,
    Host,
    HostSet,
    HostSpec,
    SimSettings,
    boot_hosts,
    find_catalog,
    free_port,
    inventory_toml,
    skip_reason,
    start_hosts,
    teardown_run,
)
from .rootfs import ensure_rootfs, rootfs_path

__all__ = [
    "FAILURES",
    "PRESETS",
    "Host",
    "HostSet",
    "HostSpec",
    "SimSettings",
    "boot_hosts",
    "ensure_rootfs",
    "find_catalog",
    "free_port",
    "inventory_toml",
    "rootfs_path",
    "skip_reason",
    "start_hosts",
    "teardown_run",
]
