#!/usr/bin/env python3
"""Every option of SGLang's real argparse parser, per release: its dest, nargs and choices.

Run with an oracle venv (../shared/oracle, SETUP*.md): it builds the parser the way `sglang
serve` does, on the oracle's simulated GPU (choices computed when modules load, such as the
quantization methods, are what a CUDA host gets), and prints one JSON object:
{option: [dest, nargs, choices]}. tests/fixtures/argparse-<version>.json keeps the result, and
tests/test_removed_claims.py holds every catalog option against it.

    /tmp/sgl-venv/bin/python bench/fidelity/parser_shapes.py > tests/fixtures/argparse-0.5.23.json
    /tmp/sgl-venv-0511/bin/python bench/fidelity/parser_shapes.py \
        > tests/fixtures/argparse-0.5.11.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ORACLE_DIR = Path(os.environ.get("SGDEPLOY_ORACLE_DIR",
                                  Path(__file__).resolve().parents[3] / "shared" / "oracle"))


def shapes() -> dict[str, list[Any]]:
    sys.path.insert(0, str(ORACLE_DIR))
    import sglang_oracle  # type: ignore[import-not-found]  # only in an oracle venv

    sglang_oracle._prepare_process(sglang_oracle.gpu_spec("H200"), 1, {}, quiet=True)
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    out: dict[str, list[Any]] = {}
    for action in parser._actions:
        choices = sorted(map(str, action.choices)) if action.choices is not None else None
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                out[option] = [action.dest, action.nargs, choices]
    return dict(sorted(out.items()))


def as_text(found: dict[str, list[Any]]) -> str:
    """One option a line, so that a release's change reads as a diff of lines."""
    lines = [f"{json.dumps(option)}: {json.dumps(shape)}" for option, shape in found.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


if __name__ == "__main__":
    sys.stdout.write(as_text(shapes()))
