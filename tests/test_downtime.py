"""Where a restart's downtime went, on the host's clock: the swap's own timestamps (stop, stopped,
GPUs idle, started), journald's stamps of the server's first line and of its ready line. The
real flag change of tests/fixtures/h200-real/weight-cache/ gives the figures used here."""

from __future__ import annotations

import json

import pytest

from sgdeploy.deploy.journal import StartupResult, journal_entry
from sgdeploy.deploy.session import swap_times
from sgdeploy.deploy.downtime import downtime
from sgdeploy.review.report import downtime_text

# llama-20b's second run, client-flag-change-warm: Stopping 21:57:50.439, Stopped 21:57:55.817,
# Started 21:57:55.876, first line 21:58:03.044, ready 21:58:30.262
STOP, STOPPED, IDLE, STARTED = 1796507870.439, 1796507875.817, 1796507875.870, 1796507875.876
FIRST, READY = 1796507883.044, 1796507910.262


def test_journal_entries_carry_journald_s_stamp() -> None:
    line = json.dumps({"MESSAGE": "The server is fired up and ready to roll!",
                       "__REALTIME_TIMESTAMP": "1796507910261516", "__CURSOR": "s=1"})
    assert journal_entry(line) == ("The server is fired up and ready to roll!", 1796507910.261516)
    assert journal_entry(json.dumps({"MESSAGE": [104, 105]})) == ("hi", None)
    assert journal_entry("not json") is None and journal_entry(json.dumps({"X": 1})) is None


def test_the_swap_says_when_each_step_ended() -> None:
    out = f"@@installed@@\n@@kept@@\n@@end-kept@@\n@@times@@ {STOP} {STOPPED} {IDLE} {STARTED}\n"
    assert swap_times(out) == {"stop": STOP, "stopped": STOPPED, "gpus_idle": IDLE, "started": STARTED}
    assert swap_times("@@times@@ 1 2\n") == {} and swap_times("@@times@@ a b c d\n") == {}
    assert swap_times("@@installed@@\n") == {}


def test_downtime_spans_from_the_stop_to_the_ready_line() -> None:
    startup = StartupResult(True, host_times={"stop": STOP, "stopped": STOPPED, "gpus_idle": IDLE,
                                              "started": STARTED},
                            first_line_at=FIRST, ready_at=READY)
    spans = downtime(startup)
    assert spans == {"stop_s": 5.378, "gpu_release_s": 0.053, "unit_start_s": 0.006,
                     "to_first_line_s": 7.168, "to_ready_s": 27.218, "downtime_s": 39.823}
    assert downtime_text(spans) == ("downtime 39.8 s: old server's stop 5.4 s, GPUs released 0.1 s, "
                                    "systemd start 0.0 s, to SGLang's first line 7.2 s, to ready 27.2 s")


@pytest.mark.parametrize(("times", "ready", "expected"), [
    # a first start: nothing to stop, the downtime begins when the GPUs are free
    ({"gpus_idle": IDLE, "started": STARTED}, True, {"unit_start_s", "to_first_line_s", "to_ready_s",
                                                     "downtime_s"}),
    # a start that failed: the stop and the release are known, no ready line
    ({"stop": STOP, "stopped": STOPPED, "gpus_idle": IDLE, "started": STARTED}, False,
     {"stop_s", "gpu_release_s", "unit_start_s", "to_first_line_s"}),
    # GPUs freed late, started apart from the swap: only the server's own start
    ({}, True, {"to_ready_s"}),
])
def test_only_the_known_spans(times: dict[str, float], ready: bool, expected: set[str]) -> None:
    startup = StartupResult(ready, host_times=times, first_line_at=FIRST, ready_at=READY)
    assert set(downtime(startup)) == expected
