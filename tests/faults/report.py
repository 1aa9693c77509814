"""pytest plugin: write what each fault test observed to a JSON report.

    pytest -p tests.faults.report --faults-report=FILE tests/test_faults.py tests/test_hostile_input.py

One entry per test: its id, the fault (first line of the test's docstring, plus the parameter),
what happened (the `observed` notes of tests.faults.observe), the outcome (passed, failed,
skipped, xfailed: a known bug, its reason) and the duration. `scripts/reliability` turns it into
the table of docs/reliability.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

_RESULTS: dict[str, dict[str, Any]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--faults-report", default=None, help="write the fault suite's JSON report here")


def _fault(item: pytest.Item) -> str:
    doc = (getattr(item, "obj", None).__doc__ or "").strip().splitlines()  # type: ignore[union-attr]
    text = doc[0].strip() if doc else item.name
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        text += f" [{callspec.id}]"
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    entry = _RESULTS.setdefault(item.nodeid, {
        "id": item.nodeid, "module": item.nodeid.split("::")[0], "fault": _fault(item),
        "outcome": "passed", "observed": [], "reason": None, "duration_s": 0.0})
    entry["duration_s"] = round(entry["duration_s"] + report.duration, 2)
    entry["observed"] = [v for k, v in item.user_properties if k == "observed"]
    if report.when == "call" or report.failed or report.skipped:
        if hasattr(report, "wasxfail"):
            entry["outcome"] = "xfailed" if report.skipped else "xpassed"
            entry["reason"] = report.wasxfail
        elif report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
            entry["reason"] = str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else None
        elif report.skipped:
            entry["outcome"] = "skipped"
            longrepr = report.longrepr
            entry["reason"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--faults-report")
    if not path:
        return
    Path(path).write_text(json.dumps({
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "exit_status": int(exitstatus),
        "tests": list(_RESULTS.values()),
    }, indent=2, ensure_ascii=False) + "\n")
