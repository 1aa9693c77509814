"""SGLang's own verdict on a launch, computed on the host by the SGLang that will run it.

This file is sent over SSH and run by the deployment's interpreter (`deploy.python`) under
the unit's user, working directory and environment; sgdeploy never imports it. It needs the
standard library and the installed SGLang only. It runs the stages `sglang serve` /
`python -m sglang.launch_server` run before any worker starts, through SGLang's own entry
points, whichever 0.5.x layout is installed:

1. parse    `prepare_server_args(argv)`: argparse (and, up to 0.5.18, `ServerArgs.__post_init__`,
            which resolves every default inside that call)
2. resolve  `ServerArgs.resolve_once()` where it exists (0.5.19 and later)
3. check    `ServerArgs.check_server_args()` (what `Engine` runs just before the workers start)

and prints one JSON line after a marker: accepted or refused, the stage, the exception type and
message, every field whose resolved value differs from what argparse produced, SGLang's warning
lines, the time each stage took, and whether this process touched the GPUs (CUDA initialised,
memory it holds as nvidia-smi sees it). It never starts a server, binds no port, and the hub
libraries are offline (set by the caller's environment).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
import io
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

MARKER = "@@sgdeploy:sglang-check@@"
MAX_WARNINGS = 40


class _Lines(logging.Handler):
    """SGLang's WARNING and ERROR records while it parses and resolves."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < MAX_WARNINGS:
            with contextlib.suppress(Exception):
                self.lines.append(f"{record.levelname}: {record.getMessage()}"[:500])


def _listen(lines: _Lines) -> None:
    """Route SGLang's log records to `lines` only (its basicConfig(force=True) replaces
    handlers)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler is not lines:
            root.removeHandler(handler)
    if lines not in root.handlers:
        root.addHandler(lines)


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON value for a resolved setting: nested configs become objects, the rest text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return jsonable(value.value, depth)
    if depth > 4:
        return repr(value)
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [jsonable(v, depth + 1) for v in items]
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    names = field_names(value) if not isinstance(value, type) else []
    if names:
        return {n: jsonable(getattr(value, n, None), depth + 1) for n in names}
    return repr(value)


def field_names(obj: Any) -> list[str]:
    """The settings of a ServerArgs: dataclass fields (<= 0.5.19) or msgspec struct fields."""
    if dataclasses.is_dataclass(obj):
        return [f.name for f in dataclasses.fields(obj)]
    struct = getattr(type(obj), "__struct_fields__", None)
    if struct:
        return list(struct)
    return [k for k in vars(obj) if not k.startswith("_")] if hasattr(obj, "__dict__") else []


def snapshot(obj: Any) -> dict[str, Any]:
    return {name: jsonable(getattr(obj, name, None)) for name in field_names(obj)}


def gpu_memory_of(pid: int) -> int | None:
    """MiB of GPU memory `pid` holds, as nvidia-smi reports it; None when it cannot be asked."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    held = 0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            with contextlib.suppress(ValueError):
                held += int(float(parts[1]))
    return held


def cuda_initialized() -> bool | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    with contextlib.suppress(Exception):
        return bool(torch.cuda.is_initialized())
    return None


def run(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"accepted": None, "stage": "import", "error_type": None, "error": None,
                           "sglang_version": None, "changed": {}, "warnings": [], "timings": {}}
    lines = _Lines()
    logging.getLogger().addHandler(lines)
    started = time.monotonic()
    mark = started

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        out["timings"][name] = round(now - mark, 3)
        mark = now

    try:
        # the host's own SGLang, imported when the check runs there
        import sglang
        from sglang.srt import server_args as module
    except BaseException as exc:
        out.update(error_type=type(exc).__name__, error=str(exc) or repr(exc))
        return out
    out["sglang_version"] = getattr(sglang, "__version__", None)
    with contextlib.suppress(Exception):  # the launchers load plugins before parsing
        # the host's own SGLang, imported when the check runs there
        from sglang.srt.plugins import load_plugins

        load_plugins()
    lap("import_s")
    server_args_type = module.ServerArgs
    seen: dict[str, Any] = {}
    post_init = getattr(server_args_type, "__post_init__", None)
    if post_init is not None:
        def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            _listen(lines)  # prepare_server_args has just run logging.basicConfig(force=True)
            if "raw" not in seen:
                # what argparse produced, before any default is resolved
                seen["raw"], seen["obj"] = snapshot(self), self
            return post_init(self, *args, **kwargs)

        server_args_type.__post_init__ = traced
    stage = "parse"
    argparse_text = io.StringIO()
    server_args = None
    try:
        with contextlib.redirect_stderr(argparse_text):
            server_args = module.prepare_server_args(list(argv))
        _listen(lines)
        lap("parse_s")
        seen.setdefault("raw", snapshot(server_args))
        if hasattr(server_args, "resolve_once"):
            stage = "resolve"
            server_args.resolve_once()
            lap("resolve_s")
        stage = "check"
        if hasattr(server_args, "check_server_args"):
            server_args.check_server_args()
        lap("check_s")
        out.update(accepted=True, stage="done")
    except SystemExit as exc:
        said = [ln for ln in argparse_text.getvalue().splitlines() if ln.strip()]
        out.update(
            accepted=False,
            stage="parse" if "raw" not in seen else "resolve",
            error_type="ArgumentError" if "raw" not in seen else "SystemExit",
            error=said[-1] if said else f"exit {exc.code}",
        )
    except BaseException as exc:
        if stage == "parse" and "raw" in seen:
            stage = "resolve"  # <= 0.5.19: __post_init__ runs inside prepare_server_args
        out.update(
            accepted=False, stage=stage, error_type=type(exc).__name__, error=str(exc) or repr(exc)
        )
    out["changed"] = _changes(
        server_args if server_args is not None else seen.get("obj"), seen.get("raw")
    )
    out["warnings"] = lines.lines
    out["timings"]["total_s"] = round(time.monotonic() - started, 3)
    return out


def _changes(server_args: Any, raw: dict[str, Any] | None) -> dict[str, list[Any]]:
    """{field: [value argparse gave, value SGLang resolved]} for every field resolution changed."""
    if server_args is None:
        return {}
    recorded = getattr(server_args, "_raw_input", None)  # 0.5.19+: the record keeps the raw input
    before = (
        {k: jsonable(v) for k, v in recorded.items()} if isinstance(recorded, dict) else (raw or {})
    )
    try:
        # the host's own SGLang, imported when the check runs there
        from sglang.srt.arg_groups.overrides import resolution_result
    except Exception:
        resolution_result = None
    changed = {}
    for name, asked in before.items():
        try:
            value = (
                resolution_result(server_args, name)
                if resolution_result
                else getattr(server_args, name)
            )
        except Exception:
            continue
        resolved = jsonable(value)
        if resolved != asked:
            changed[name] = [asked, resolved]
    return changed


def main() -> None:
    request = json.loads(base64.b64decode(sys.argv[1]))
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # SGLang's prints must not mix with the answer
        result = run(request["argv"])
        result["cuda_initialized"] = cuda_initialized()
        result["gpu_memory_mib"] = gpu_memory_of(os.getpid())
    real_stdout.write(MARKER + json.dumps(result, default=repr) + "\n")
    real_stdout.flush()
    sys.stderr.flush()
    # The answer is out and nothing here needs cleaning up: skip the interpreter's teardown of
    # torch, transformers and the rest of SGLang's imports (about 2 s on a GPU host), which
    # apply would otherwise wait for.
    os._exit(0)


if __name__ == "__main__":
    main()
