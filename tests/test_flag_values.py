"""Values SGLang's own parser takes or refuses, as sgdeploy.sglang.flags.value_problem judges them."""

from __future__ import annotations

import pytest

from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.flags import value_problem

VERSIONS = ("0.5.11", "0.5.23")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("value", "ok"), [
    (131072, True), ("131072", True), ("128k", True), ("1.5M", True), ("64Ki", True), (" 2Mi ", True),
    ("abc", False), ("1.5Ki", False), ("128K", False), ("", False), ("1e5", False),
])
def test_human_readable_int_follows_sglang(version: str, value: object, ok: bool) -> None:
    flag = load_catalog(version).get("context_length")
    assert flag is not None and flag.argparse_type == "human_readable_int"
    assert (value_problem(flag, value) is None) == ok


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("value", "ok"), [
    ("info", True), ("DEBUG", True), ("warning", True), ("warn", True), ("x", False), ("auto", False),
])
def test_log_level_is_a_python_logging_level(version: str, value: str, ok: bool) -> None:
    flag = load_catalog(version).get("log_level")
    assert flag is not None
    assert (value_problem(flag, value) is None) == ok


@pytest.mark.parametrize(("value", "ok"), [
    ({"decode": {"backend": "full", "max_bs": 64}}, True), ('{"prefill": {"max_bs": 512}}', True), ({}, True),
    ({"a": 1}, False), ({"decode": 1}, False), ({"decode": {"max_batch": 8}}, False), ([1], False),
])
def test_cuda_graph_config_phases_and_keys(value: object, ok: bool) -> None:
    flag = load_catalog("0.5.23").get("cuda_graph_config")
    assert flag is not None and flag.argparse_type == "parse_cuda_graph_config_arg"
    assert (value_problem(flag, value) is None) == ok
