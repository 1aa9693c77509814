"""The log reader against real SGLang logs pasted into public issues (tests/fixtures/logs/).

index.json gives, for each file, where it was published, the SGLang version when stated, and
the expected verdict, failure kind and root line (an honest reading of the log; `debatable`
marks labels one could argue), and its `split`: `dev` logs are the ones the reader is built
against, each checked here; `heldout` logs were set aside when they were collected (every third
new one) and are only measured, by bench/logs_bench.py, so that the agreement on logs the reader
was not tuned to stays known. Every log is also read line by line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sgdeploy.logs import FAILURE_KINDS, LogReader, read_log

CORPUS = Path(__file__).parent / "fixtures" / "logs"
INDEX: list[dict[str, Any]] = json.loads((CORPUS / "index.json").read_text(encoding="utf-8"))
DEV = [e for e in INDEX if e["split"] == "dev"]


def lines(name: str) -> list[str]:
    return (CORPUS / name).read_text(encoding="utf-8").splitlines()


def test_index_lists_every_log_once_with_its_source() -> None:
    names = [e["file"] for e in INDEX]
    assert sorted(names) == sorted(p.name for p in CORPUS.glob("*.log"))
    assert len(set(names)) == len(names)
    for e in INDEX:
        assert e["source"].startswith("https://github.com/"), e["file"]
        assert isinstance(e["wrappers"], list) and isinstance(e["multi_node"], bool), e["file"]
        assert e["note"] and isinstance(e["debatable"], bool), e["file"]
        assert e["split"] in ("dev", "heldout"), e["file"]
        if e["ready"] and e["kind"] is None:
            assert e["root_line"] is None, e["file"]
            continue
        assert e["kind"] in FAILURE_KINDS, e["file"]
        assert lines(e["file"])[e["root_line"] - 1].strip().startswith(e["root_text"][:60])


def test_corpus_covers_every_kind_successes_nodes_versions_and_wrappers() -> None:
    assert len(DEV) >= 40 and len(INDEX) - len(DEV) >= 8
    assert {e["kind"] for e in INDEX if e["kind"]} == set(FAILURE_KINDS)
    assert sum(e["ready"] for e in INDEX) >= 4
    assert any(e["multi_node"] for e in INDEX) and not all(e["multi_node"] for e in INDEX)
    versions = {e["sglang_version"][:3] for e in INDEX if e["sglang_version"]}
    assert {"0.4", "0.5"} <= versions
    assert any("0.1 era" in e["note"] or "0.3 era" in e["note"] for e in INDEX)  # unversioned old ones
    assert any(e["wrappers"] for e in INDEX) and any(not e["wrappers"] for e in INDEX)


@pytest.mark.parametrize("entry", DEV, ids=[e["file"] for e in DEV])
def test_real_log(entry: dict[str, Any]) -> None:
    report = read_log(lines(entry["file"]), None, entry.get("sglang_version"))
    failure = report.failure
    assert report.ready is entry["ready"]
    got = (failure.kind, failure.line) if failure else (None, None)
    assert got == (entry["kind"], entry["root_line"]), failure and failure.message
    json.dumps(report.as_json())


@pytest.mark.parametrize("entry", INDEX, ids=[e["file"] for e in INDEX])
def test_real_log_read_live_gives_the_same_report(entry: dict[str, Any]) -> None:
    reader = LogReader()
    for line in lines(entry["file"]):
        reader.feed(line)
    reader.finish()
    assert reader.report() == read_log(lines(entry["file"]))
