"""Reading the weights into the page cache before the stop: the host command, run here with sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sgdeploy.host.pagecache import parse_warmth, warm_command


def run(folder: Path | str) -> str:
    return subprocess.run(["sh", "-c", warm_command(str(folder))], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_weights_that_fit_are_read(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 4096)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"y" * 1024)
    warmth = parse_warmth(run(tmp_path))
    assert (warmth.outcome, warmth.bytes) == ("warmed", 5120)
    assert warmth.describe().startswith("read 0.0 GiB of weights into the page cache in ")


def test_nothing_to_read_is_said_plainly(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert parse_warmth(run(tmp_path)).describe() == "weights not read ahead: no weight files beside config.json"
    assert parse_warmth(run(tmp_path / "gone")).reason == "no model folder on the host"


def test_weights_larger_than_half_the_available_memory_are_left_alone() -> None:
    out = "bytes=900000000000\noutcome=skipped\nreason=838 GiB of weights do not fit in half of the 120 GiB available\n"
    warmth = parse_warmth(out)
    assert (warmth.outcome, warmth.bytes) == ("skipped", 900000000000)
    assert "do not fit" in warmth.describe()


def test_a_path_with_quotes_and_spaces_stays_one_argument(tmp_path: Path) -> None:
    odd = tmp_path / "it's a model"
    odd.mkdir()
    (odd / "w.safetensors").write_bytes(b"z" * 10)
    assert parse_warmth(run(odd)).bytes == 10


def test_no_answer_is_a_failure() -> None:
    assert parse_warmth("").outcome == "failed" and parse_warmth("").reason == "no answer from the host"


def test_apply_reports_and_keeps_how_the_read_went() -> None:
    """The read is wall time before the stop, not downtime: apply's summary says it, its JSON and
    the record keep it (`read_ahead`), and an apply that did not read ahead says nothing of it."""
    from sgdeploy.deploy.transaction import ApplyResult
    from sgdeploy.review.report import apply_text

    warmth = parse_warmth("bytes=38235123712\noutcome=warmed\nseconds=26.81\n")
    result = ApplyResult(0, "ready", "h200-03", "sglang", "ready", read_ahead=warmth)
    assert "before the stop: read 35.6 GiB of weights into the page cache in 26.8 s" in apply_text(result)
    assert result.as_dict()["read_ahead"] == {"outcome": "warmed", "bytes": 38235123712, "seconds": 26.81,
                                              "reason": ""}
    plain = ApplyResult(0, "ready", "h200-03", "sglang", "ready")
    assert plain.as_dict()["read_ahead"] is None and "before the stop" not in apply_text(plain)
