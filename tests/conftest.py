"""Shared pytest fixtures.

Test hosts (see docs/test-hosts.md): real systemd containers reachable over SSH on
127.0.0.1 (or, with ``HostSpec(private_network=True)``, at their own address on the run's
bridge, port 22), with a simulated SGLang and simulated GPUs.  Tests that use them are
skipped, with the reason, where they cannot run (not root, no systemd-nspawn).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.hosts import HostSet, HostSpec, SimSettings, booted_or_skipped, skip_reason, start_hosts


def _require_hosts() -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(f"test hosts unavailable: {reason}")


@pytest.fixture(scope="session")
def hosts() -> Iterator[HostSet]:
    """Two hosts for the whole session, shared by tests that do not change them:
    ``ct129`` (2x RTX A6000, SGLang 0.5.11) and ``h200`` (2x H200, SGLang 0.5.23).
    The simulated servers start in about 1.5 s and free GPU memory 1 s after exit."""
    fast = SimSettings(startup_s=1.5, release_delay_s=1.0)
    with booted_or_skipped([HostSpec.like("ct129", sim=fast), HostSpec.like("h200", sim=fast)]) as hs:
        yield hs


@pytest.fixture
def host_factory() -> Iterator[Callable[..., HostSet]]:
    """Boot fresh hosts for one test: ``host_factory("b200", HostSpec(...), ...)``.
    Each argument is a HostSpec or a preset name; all are torn down after the test."""
    _require_hosts()
    made: list[HostSet] = []

    def make(*specs: HostSpec | str) -> HostSet:
        hs = start_hosts(list(specs), owner="pytest")
        made.append(hs)
        return hs

    yield make
    for hs in made:
        hs.close()
