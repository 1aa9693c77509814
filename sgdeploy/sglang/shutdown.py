"""What SGLang does when systemd stops its unit, and the environment that keeps the stop short.

systemd stops a unit by sending SIGTERM to every process of its control group at once
(`KillMode=control-group`, kept so that no scheduler outlives its unit). A scheduler dies of it
first; the main process's watchdog reports "Subprocess scheduler_0 ... crashed with exit code
-15", raises SIGQUIT, and from SGLang 0.5.13 on its crash diagnostics
(`TokenizerManager.dump_requests_before_crash`) begin with "Sleeping 5 seconds before crash
diagnostics to let GPU activity settle." before they find no live scheduler to py-spy or
core-dump. Every stop paid those 5 s (0.5.17 on an H100: tests/fixtures/h200-real/weight-cache;
0.5.11, without the diagnostics, stopped in 0.9 s), and every apply's downtime with it.

The diagnostics run only while SGLANG_PYSPY_DUMP_BEFORE_CRASH or
SGLANG_CUDA_COREDUMP_BEFORE_CRASH is on (both default to true). sgdeploy turns off whichever the
profile's `[env]` leaves unset: on a real crash with a scheduler still alive they would also hold
the exit for 5 s plus 60 s (SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS, waited whether or not
CUDA_ENABLE_USER_TRIGGERED_COREDUMP made a dump possible), and the rollback behind it. A profile
that sets either keeps SGLang's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping

from sgdeploy.sglang.versions import VersionRange, parse_version

CRASH_DIAGNOSTICS = VersionRange(since="0.5.13")
CRASH_DIAGNOSTICS_ENV = ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH")


def stop_environment(sglang_version: str | None, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The variables a unit of `sglang_version` adds so that its stop does not sleep: each crash
    diagnostic `env` (the profile's) does not set, off; none for a release unknown or before
    0.5.13."""
    if sglang_version is None or parse_version(sglang_version) not in CRASH_DIAGNOSTICS:
        return []
    return [(name, "0") for name in CRASH_DIAGNOSTICS_ENV if name not in env]
