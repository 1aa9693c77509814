"""sgdeploy against a real SGLang server on a real H200 (bench/h200_real_deploy.sh): the journals,
endpoints and outputs it kept under tests/fixtures/h200-real/, replayed on a machine without a GPU.

The first real cold start found a defect the simulated host could not: SGLang 0.5.11 builds its
rope kernel with tvm_ffi at the first forward pass (CUDA graph capture), which runs `ninja` from
PATH; the unit had systemd's PATH, without the venv's bin directory, so the server died
(cold-no-ninja.*). The unit now puts the interpreter's bin directory first (test_render.py).
"""

from __future__ import annotations

from pathlib import Path

from sgdeploy.logs import read_log

REAL = Path(__file__).parent / "fixtures" / "h200-real"


def real_lines(name: str) -> list[str]:
    return (REAL / name).read_text(encoding="utf-8").splitlines()


def test_logcheck_names_the_missing_ninja_of_the_real_cold_start() -> None:
    lines = real_lines("cold-no-ninja.log")
    report = read_log(lines, None, "0.5.11")
    assert not report.ready
    assert report.failure is not None
    assert report.failure.kind == "graph_capture_failed"
    assert lines[report.failure.line - 1] == "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'"
    names = [p.name for p in report.phases]
    assert names[:4] == ["args_parsed", "dist_init", "weights_loaded", "kv_cache_allocated"]
    assert report.kv_cache_tokens == 801003


def test_the_journal_of_the_real_failure_is_read_as_the_plain_log() -> None:
    """`-o short-precise` (what `journalctl -u` shows a person) and `-o cat` give the same verdict."""
    journal = read_log(real_lines("cold-ninja-loop.journal"), None, "0.5.11")
    plain = read_log(real_lines("cold-ninja-loop.log"), None, "0.5.11")
    assert journal.failure is not None and plain.failure is not None
    assert journal.failure.kind == plain.failure.kind == "graph_capture_failed"
    assert journal.failure.message == plain.failure.message
    assert "Too many levels of symbolic links: 'ninja'" in plain.failure.message
