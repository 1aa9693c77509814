"""The GPU idle check that `HostSession.swap` runs on the host decides as `facts.gpus_idle` does."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from sgdeploy.host.facts import gpus_idle, idle_check_sh, parse_compute_apps, parse_query_gpu

GPUS = ("0, GPU-aaa, NVIDIA RTX A6000, 8.6, 49140, {m0}, 00000000:01:00.0\n"
        "1, GPU-bbb, NVIDIA RTX A6000, with a comma, 8.6, 49140, {m1}, 00000000:02:00.0\n")
MEMORY = (0, 1024, 1025, 40000, "[N/A]")
APPS = ("", "123, python3, 4000, GPU-aaa\n", "5, a, b, [N/A], GPU-bbb\n", "7, x, 10, GPU-zzz\n",
        "8, python3, 10, GPU-aaa\n9, python3, 10, GPU-bbb\n")
SELECTED = (None, (0,), (1,), (0, 1), ("GPU-bbb",), (2,), ("GPU-aaa", 0), ("GPU-ccc",))


def on_host(tmp_path: Path, cases: list[tuple[str, str]], selected: tuple[int | str, ...] | None) -> list[bool]:
    """The host check's verdict on each (gpus, apps) case, in one shell."""
    lines = [idle_check_sh(selected)]
    for i, (gpus, apps) in enumerate(cases):
        (tmp_path / f"g{i}").write_text(gpus)
        (tmp_path / f"a{i}").write_text(apps)
        lines.append(f'sgd_idle "{tmp_path}/g{i}" "{tmp_path}/a{i}" && echo idle || echo busy')
    out = subprocess.run(["sh", "-c", "\n".join(lines)], capture_output=True, text=True, check=True).stdout
    return [word == "idle" for word in out.split()]


@pytest.mark.parametrize("selected", SELECTED, ids=str)
def test_host_check_agrees_with_gpus_idle(tmp_path: Path, selected: tuple[int | str, ...] | None) -> None:
    cases = [(GPUS.format(m0=m0, m1=m1), apps) for m0, m1, apps in itertools.product(MEMORY, MEMORY[::2], APPS)]
    expected = [gpus_idle(parse_query_gpu(g), parse_compute_apps(a), selected).idle for g, a in cases]
    got = on_host(tmp_path, cases, selected)
    assert got == expected, [case for case, x, y in zip(cases, expected, got, strict=True) if x != y]


def test_no_query_output_is_busy_for_named_gpus(tmp_path: Path) -> None:
    assert on_host(tmp_path, [("", "")], (0,)) == [False]


def test_selectors_reach_the_shell_only_as_gpu_names() -> None:
    with pytest.raises(ValueError):
        idle_check_sh(["0; rm -rf /"])
