"""Launches a unit cannot carry are refused before they are rendered: an empty model_path, a value
longer than Linux passes as one argument, a launch longer than systemd reads as one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgdeploy.profile.validate import InventoryContext, validate_file

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = ROOT / "tests" / "inventory.rules.toml"
HEAD = '[deploy]\nhost = "a6000"\npython = "/opt/sglang/bin/python3"\n\n[server]\n'


def _findings(tmp_path: Path, server: str) -> dict[str, tuple[str, int | None, str]]:
    path = tmp_path / "p.toml"
    path.write_text(HEAD + server, encoding="utf-8")
    result = validate_file(str(path), InventoryContext.load(INVENTORY))
    return {d.rule: (d.severity.value, d.line, d.message) for d in result.diagnostics}


def test_an_empty_model_path_is_refused_at_its_line(tmp_path: Path) -> None:
    severity, line, message = _findings(tmp_path, 'model_path = " "\n')["SGD016"]
    assert (severity, line) == ("error", 6) and "model_path is empty" in message


@pytest.mark.parametrize(("size", "refused"), [(131_071, False), (131_072, True)])
def test_one_argument_over_the_kernel_limit_is_refused(tmp_path: Path, size: int, refused: bool) -> None:
    found = _findings(tmp_path, f'model_path = "/m"\nserved_model_name = "{"q" * size}"\n')
    assert ("SGD029" in found) is refused
    if refused:
        assert found["SGD029"][:2] == ("error", 7) and "131,072 bytes" in found["SGD029"][2]


def test_a_launch_over_a_unit_file_line_is_refused(tmp_path: Path) -> None:
    names = ", ".join(f'"{"n" * 60_000}{i}"' for i in range(20))
    found = _findings(tmp_path, f'model_path = "/m"\nserved_model_name = [{names}]\n')
    assert found.get("SGD029", ("", None, ""))[0] == "error"
    assert "unit-file line" in found["SGD029"][2]


def test_a_gpu_listed_twice_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(HEAD.replace("[server]\n", "gpus = [0, 7, 7]\n\n[server]\n") + 'model_path = "/m"\n',
                    encoding="utf-8")
    result = validate_file(str(path), InventoryContext.load(INVENTORY))
    found = [(d.rule, d.line, d.message) for d in result.diagnostics if d.is_error]
    assert found == [("SGD003", 5, "deploy.gpus: GPU 7 is listed more than once")]
