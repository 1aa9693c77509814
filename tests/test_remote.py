"""Unit tests of sgdeploy.remote that need no host."""

from __future__ import annotations

import pytest
from pytest_mock import MockerFixture

from sgdeploy.apply import probe_unit
from sgdeploy.inventory import HostEntry
from sgdeploy.remote import _dropped


@pytest.mark.parametrize(
    ("exc", "detail"),
    [(EOFError(), "(EOFError)"), (OSError(32, "Broken pipe"), "([Errno 32] Broken pipe)")],
)
def test_a_dropped_connection_always_says_why(exc: BaseException, detail: str) -> None:
    assert str(_dropped("ct129", exc)) == f"ct129: the SSH connection dropped {detail}"


class _DroppingRemote:
    """A connected host whose connection drops at the first command."""

    def __enter__(self) -> _DroppingRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, *args: object, **kwargs: object) -> None:
        raise _dropped("ct129", EOFError())


def test_probe_reports_a_dropped_connection(mocker: MockerFixture) -> None:
    mocker.patch("sgdeploy.apply.connect", return_value=_DroppingRemote())
    code, document = probe_unit("ct129", HostEntry(address="127.0.0.1"), "sglang", None)
    assert code == 2
    assert document["message"] == "ct129: the SSH connection dropped (EOFError); nothing was measured"
