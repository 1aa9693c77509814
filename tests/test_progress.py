"""Apply's live progress counts down from the last good deployment's time to ready (#31 item 8)."""

from __future__ import annotations

import pytest

from sgdeploy.cli import progress as progress_module
from sgdeploy.cli.progress import Progress
from sgdeploy.deploy.records import recorded_startup_s


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_shows_the_time_left_by_the_last_good_deployment(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    progress = Progress(json_events=False)
    progress.live = True
    progress("expected", seconds=53.5, deployment="20261205T075324Z-408-32a5de21")
    progress("step", step="start", unit="sglang")
    progress("step", step="wait_ready", expected=["ready"])
    clock.now += 20
    progress("log", text="[2026-12-05 07:54:04] Load weight end. elapsed=2.92 s")
    err = capsys.readouterr().err
    assert "expected: ready about 54 s after the start, as the last good deployment " \
           "(20261205T075324Z-408-32a5de21) was" in err
    assert "] ~34 s left [2026-12-05 07:54:04] Load weight end." in err
    clock.now += 40
    progress("log", text="Capturing batches")
    assert "(past the last good deployment's time) Capturing batches" in capsys.readouterr().err
    progress("step", step="check_health")
    progress("log", text="after ready")
    assert "left" not in capsys.readouterr().err.split("check_health")[-1]


def test_no_count_down_without_a_last_good_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(json_events=False)
    progress.live = True
    progress("step", step="wait_ready", expected=["ready"])
    progress("log", text="Load weight end")
    assert "left" not in capsys.readouterr().err


@pytest.mark.parametrize(("meta", "expected"), [
    ('{"startup_s": 53.51}', 53.51), ('{"startup_s": 0}', None), ('{"startup_s": true}', None),
    ("[]", None), ("not json", None), ("", None)])
def test_the_recorded_startup_time(meta: str, expected: float | None) -> None:
    assert recorded_startup_s({"meta.json": meta}) == expected
    assert recorded_startup_s(None) is None
