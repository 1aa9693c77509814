"""SGLang's own verdict on corpus cases, from ../shared/oracle, cached under .cache/fidelity/.

The oracle runs SGLang's real parser and resolution in a venv of its own (about 9 GB, see
../shared/oracle/SETUP*.md); nothing here imports SGLang. A verdict is cached by what decides
it (version, GPU, count, model, env, argv), so a corpus that grows only runs its new cases.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("SGDEPLOY_ORACLE_DIR", REPO.parent / "shared" / "oracle"))
CACHE_DIR = REPO / ".cache" / "fidelity"
# version -> (oracle script, default venv python); SGDEPLOY_ORACLE_PYTHON_<0_5_11> overrides.
ORACLES = {
    "0.5.23": ("sglang_oracle.py", "/tmp/sgl-venv/bin/python"),
    "0.5.11": ("sglang_oracle_0511.py", "/tmp/sgl-venv-0511/bin/python"),
}
CHUNK = 500
# What the project keeps of a verdict (the rest, such as every adjusted field, is large).
KEPT = ("accepted", "error_type", "error", "stage", "hook", "raised_at", "explicit_adjusted", "warnings",
        "startup_predictions", "notes")


def case_key(case: dict[str, Any]) -> str:
    decided_by = [case["version"], case["gpu"], case["gpu_count"], case["model"], case.get("env") or {},
                  case["argv"]]
    return hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()[:20]


def python_for(version: str) -> str:
    override = os.environ.get("SGDEPLOY_ORACLE_PYTHON_" + version.replace(".", "_"))
    return override or ORACLES[version][1]


def available(version: str) -> bool:
    return version in ORACLES and Path(python_for(version)).exists() and (ORACLE_DIR / ORACLES[version][0]).exists()


def _cache_file(version: str) -> Path:
    return CACHE_DIR / f"{version}.jsonl"


def load_cache(version: str) -> dict[str, dict[str, Any]]:
    path = _cache_file(version)
    if not path.exists():
        return {}
    verdicts = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            verdicts[entry["key"]] = entry["verdict"]
    return verdicts


def _store(version: str, entries: Iterable[tuple[str, dict[str, Any]]]) -> None:
    path = _cache_file(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for key, verdict in entries:
            handle.write(json.dumps({"key": key, "verdict": verdict}, sort_keys=True) + "\n")


def verdicts(version: str, cases: list[dict[str, Any]], jobs: int = 2, timeout: int = 120,
             run_missing: bool = True, cache: str | None = None,
             keep: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """case id -> SGLang's verdict; cases without one (oracle unavailable, not run) are left out.
    `cache` names another cache file (default: the version's), `keep` more of the oracle's fields."""
    name = cache or version
    cached = load_cache(name)
    missing = [c for c in cases if case_key(c) not in cached]
    if missing and run_missing:
        if not available(version):
            raise RuntimeError(f"no oracle for SGLang {version}: {python_for(version) if version in ORACLES else '-'} "
                               f"or {ORACLE_DIR} is missing (see ../shared/oracle/SETUP.md)")
        # In chunks of whole simulated hosts (one oracle zygote each), stored as each ends.
        missing.sort(key=lambda c: (c["gpu"], c["gpu_count"], json.dumps(c.get("env") or {}, sort_keys=True)))
        for start in range(0, len(missing), CHUNK):
            fresh = _run(version, missing[start:start + CHUNK], jobs, timeout, keep)
            # A crash or timeout of the oracle itself is asked again next time.
            _store(name, ((k, v) for k, v in fresh.items()
                             if v["accepted"] is not None or v["error_type"] == "OracleMissingDependency"))
            cached.update(fresh)
    return {c["id"]: cached[case_key(c)] for c in cases if case_key(c) in cached}


def _run(version: str, cases: list[dict[str, Any]], jobs: int, timeout: int,
         keep: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    script = ORACLE_DIR / ORACLES[version][0]
    with tempfile.TemporaryDirectory(prefix="sgd-fidelity-") as tmp:
        batch = Path(tmp) / "cases.jsonl"
        batch.write_text("".join(json.dumps({
            "id": case_key(c), "gpu": c["gpu"], "gpu_count": c["gpu_count"], "model": c["model"],
            "env": c.get("env") or {}, "argv": c["argv"]}) + "\n" for c in cases), encoding="utf-8")
        out = Path(tmp) / "verdicts.jsonl"
        subprocess.run([python_for(version), str(script), "--batch", str(batch), "--jobs", str(jobs),
                        "--timeout", str(timeout), "--out", str(out)], cwd=ORACLE_DIR, check=True,
                       stdout=subprocess.DEVNULL)
        results = {}
        for line in out.read_text(encoding="utf-8").splitlines():
            raw = json.loads(line)
            results[str(raw["id"])] = {k: raw.get(k) for k in (*KEPT, *keep)}
        return results
