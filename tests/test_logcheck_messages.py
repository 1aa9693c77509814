"""What `logcheck` says: a long message cut at a word with an ellipsis, SGLang's own "Possible
solutions" kept with the failure, an empty log called empty, a path that is no log file named."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgdeploy import cli
from sgdeploy.core.files import path_problem
from sgdeploy.logs import read_log
from sgdeploy.logs.segment import MESSAGE_MAX, clip

LOGS = Path(__file__).parent / "logs"
FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def logcheck(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["logcheck", str(path)])
    out, err = capsys.readouterr()
    assert not err, err  # a report, never a traceback of sgdeploy's own
    return code, out


def test_a_long_message_ends_on_a_word_with_an_ellipsis() -> None:
    name = "fail-cuda-oom-load-tp2.log"
    lines = (LOGS / name).read_text(encoding="utf-8").splitlines()
    failure = read_log(["", *lines[1:]]).failure
    assert failure is not None and failure.message.endswith("…")
    kept = failure.message.removesuffix("…")
    whole = lines[failure.line - 1]
    assert len(failure.message) <= MESSAGE_MAX and whole.startswith(kept)
    assert whole[len(kept)] == " ", "cut between words"


def test_clip_keeps_short_text_and_a_word_without_spaces() -> None:
    assert clip("short") == "short"
    assert clip("x" * 500) == "x" * (MESSAGE_MAX - 1) + "…"
    assert clip("a " * 300) == ("a " * 300)[: MESSAGE_MAX - 2].rstrip() + "…"


@pytest.mark.parametrize("path", [LOGS / "fail-graph-capture.log",
                                  FIXTURES / "11218-compose-dp-capture-failed.log"],
                         ids=["plain", "docker-compose"])
def test_sglangs_possible_solutions_come_with_the_failure(capsys: pytest.CaptureFixture[str],
                                                          path: Path) -> None:
    code, out = logcheck(capsys, path)
    assert code == 1 and "failure: graph_capture_failed at line" in out
    shown = out[out.index("the log lines that explain it:"):]
    for text in ("Possible solutions:", "1. set --mem-fraction-static to a smaller value",
                 "4. disable CUDA graph by --disable-cuda-graph"):
        assert f"| {text}" in shown, out


def test_an_empty_log_is_called_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("")
    code, out = logcheck(capsys, tmp_path / "server.log")
    assert code == 1 and out.splitlines()[0].endswith(": NOT READY: the log is empty")
    assert "failure: incomplete: the log is empty" in out and "line 0" not in out


def test_a_blank_log_is_called_empty(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("\n\n\n")
    code, out = logcheck(capsys, tmp_path / "server.log")
    assert code == 1 and "NOT READY: the log is empty" in out and "3 line(s) are blank" in out


def test_a_directory_is_no_log_file(tmp_path: Path) -> None:
    problem = path_problem(tmp_path, "log file", "server.log")
    assert problem is not None and problem.message == f"{tmp_path} is a directory, not a log file"
    assert problem.hint == f"name a log file in it, e.g. {tmp_path}/server.log"
