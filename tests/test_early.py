"""`EarlyStart`'s connection begun from the files as written: kept when validation makes the
same connection settings of them, replaced by one with the validated settings when not. The
connection itself is a seam here (the host tests connect for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sgdeploy.deploy import early
from sgdeploy.host.remote import ConnectError
from sgdeploy.host.sshconfig import SshEntry
from sgdeploy.profile import inventory_file

REPO = Path(__file__).resolve().parents[1]
PROFILE = str(REPO / "profiles" / "qwen36-mtp3.toml")
INVENTORY = str(REPO / "inventory.toml")


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, bool]]:
    calls: list[tuple[str, Any, bool]] = []

    def connect(name: str, entry: Any, began: Any = None) -> ConnectError:
        calls.append((name, entry, began is not None))
        if began is not None:
            began()
        return ConnectError(f"{name}: not connecting in this test")

    monkeypatch.setattr(early, "_connect", connect)
    return calls


def _start() -> early.EarlyStart:
    started = early.EarlyStart(PROFILE, INVENTORY, [], sglang_check=False)
    started.validated()
    started.take("ct129")
    return started


def test_the_connection_read_ahead_is_kept_when_validation_agrees(connects: list[tuple[str, Any, bool]]) -> None:
    _start()
    assert len(connects) == 1
    name, entry, read_ahead = connects[0]
    assert (name, read_ahead) == ("ct129", True) and isinstance(entry, SshEntry)


def test_it_connects_again_with_the_validated_settings_when_they_differ(
        connects: list[tuple[str, Any, bool]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory_file, "unvalidated_ssh_entry",
                        lambda path, name: SshEntry("somewhere-else", overrides=(("port", 2222),)))
    _start()
    assert [(name, read_ahead) for name, _, read_ahead in connects] == [("ct129", True), ("ct129", False)]
    validated = connects[1][1]
    assert SshEntry.of(validated) != connects[0][1] and validated.address != "somewhere-else"


def test_nothing_is_read_ahead_for_several_hosts(connects: list[tuple[str, Any, bool]]) -> None:
    started = early.EarlyStart(PROFILE, INVENTORY, ["ct129", "h200-01"], sglang_check=False)
    started.take("ct129")
    assert connects == []
