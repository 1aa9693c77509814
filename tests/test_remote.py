"""Unit tests of sgdeploy.remote that need no host."""

from __future__ import annotations

import pytest

from sgdeploy.remote import _dropped


@pytest.mark.parametrize(
    ("exc", "detail"),
    [(EOFError(), "(EOFError)"), (OSError(32, "Broken pipe"), "([Errno 32] Broken pipe)")],
)
def test_a_dropped_connection_always_says_why(exc: BaseException, detail: str) -> None:
    assert str(_dropped("ct129", exc)) == f"ct129: the SSH connection dropped {detail}"
