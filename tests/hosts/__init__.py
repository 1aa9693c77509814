"""Real systemd test hosts (systemd-nspawn) with a simulated SGLang and simulated GPUs.

    from tests.hosts import boot_hosts, HostSpec

    with boot_hosts([HostSpec.like("ct129"), "h200"]) as hs:
        hs.ssh("ct129", "systemctl is-system-running")
        print(hs.inventory_path)

See docs/test-hosts.md.
"""

import contextlib
from collections.abc import Iterator, Sequence

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


@contextlib.contextmanager
def booted_or_skipped(specs: Sequence[HostSpec | str]) -> Iterator[HostSet]:
    """Hosts for a pytest fixture: the test is skipped, with the reason, where this machine
    cannot boot test hosts; they are torn down afterwards."""
    import pytest  # only tests use this; `python -m tests.hosts` runs without pytest

    reason = skip_reason()
    if reason:
        pytest.skip(f"test hosts unavailable: {reason}")
    hs = start_hosts(specs, owner="pytest")
    try:
        yield hs
    finally:
        hs.close()

__all__ = [
    "FAILURES",
    "PRESETS",
    "Host",
    "HostSet",
    "HostSpec",
    "SimSettings",
    "boot_hosts",
    "booted_or_skipped",
    "ensure_rootfs",
    "find_catalog",
    "free_port",
    "inventory_toml",
    "rootfs_path",
    "skip_reason",
    "start_hosts",
    "teardown_run",
]
