"""Facts the rules rely on, read from each SGLang wheel's sources with `ast` (never imported).

`build_catalogs.py` calls `extract_facts(files)` per release and `write_facts` once, which
writes `sgdeploy/sglang/catalogs/facts.json`: for each fact, the release ranges over which
its value stays the same (`since` inclusive, `until` exclusive, `null` = still so in the
newest bundled release). A fact absent from a release (the list did not exist yet) has no
range covering it. See docs/catalogs.md, "Facts".
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MODEL_CONFIG = "sglang/srt/configs/model_config.py"
SERVER_ARGS = "sglang/srt/server_args.py"
SPEC_INFO = "sglang/srt/speculative/spec_info.py"
ARG_GROUPS = "sglang/srt/arg_groups/"


def _tree(files: dict[str, str], path: str) -> ast.Module | None:
    text = files.get(path)
    return ast.parse(text) if text is not None else None


def module_list(files: dict[str, str], path: str, name: str) -> list[str] | None:
    """A module-level `NAME = [...]` of string literals, sorted (order carries no meaning)."""
    tree = _tree(files, path)
    if tree is None:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.List | ast.Tuple)):
            # string literals only: an element built at import time (an env variable) is not a fact
            return sorted(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return None


def _server_args_sources(files: dict[str, str]) -> Iterable[tuple[str, ast.Module]]:
    for path in sorted(files):
        if path == SERVER_ARGS or (path.startswith(ARG_GROUPS) and path.endswith(".py")):
            tree = _tree(files, path)
            if tree is not None:
                yield path, tree


def _raises_with(node: ast.If, words: str) -> bool:
    return any(isinstance(n, ast.Raise) and words in ast.unparse(n) for stmt in node.body for n in ast.walk(stmt))


def encoder_disagg_archs(files: dict[str, str]) -> list[str] | None:
    """The inline `model_arch not in [...]` list before 'not supported for encoder disaggregation'."""
    for _, tree in _server_args_sources(files):
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _raises_with(node, "not supported for encoder disaggregation"):
                for cmp in ast.walk(node.test):
                    if (isinstance(cmp, ast.Compare) and isinstance(cmp.ops[0], ast.NotIn)
                            and isinstance(cmp.comparators[0], ast.List | ast.Tuple | ast.Set)):
                        return sorted(ast.literal_eval(cmp.comparators[0]))
    return None


def mixed_chunk_algorithms(files: dict[str, str]) -> list[str] | None:
    """`SpeculativeAlgorithm.supports_mixed_chunk`: the algorithms that keep mixed chunked prefill."""
    tree = _tree(files, SPEC_INFO)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "supports_mixed_chunk":
            names = [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                     and isinstance(n.value, ast.Name) and n.value.id == "SpeculativeAlgorithm"]
            return sorted(set(names))
    return None


def mamba_radix_cache(files: dict[str, str]) -> dict[str, list[bool]] | None:
    """Up to 0.5.13: arch -> [radix cache supported, extra_buffer supported], from the
    `_handle_mamba_radix_cache(...)` call each model branch of `ServerArgs` makes."""
    tree = _tree(files, SERVER_ARGS)
    if tree is None:
        return None
    found: dict[str, list[bool]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        archs = _arch_test(node.test)
        for stmt in node.body:
            for call in ast.walk(stmt):
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("_handle_mamba_radix_cache"):
                    flags = {k.arg: k.value for k in call.keywords}
                    cache, extra = (_literal_bool(flags.get(k)) for k in ("support_mamba_cache",
                                                                          "support_mamba_cache_extra_buffer"))
                    for arch in archs:
                        if cache is not None and extra is not None:
                            found.setdefault(arch, [cache, extra])
    return dict(sorted(found.items())) or None


def _arch_test(test: ast.expr) -> list[str]:
    """`model_arch in [...]` / `model_arch == "X"` of an if/elif branch."""
    if isinstance(test, ast.Compare) and ast.unparse(test.left) == "model_arch":
        right = test.comparators[0]
        if isinstance(test.ops[0], ast.In) and isinstance(right, ast.List | ast.Tuple):
            return [v for v in ast.literal_eval(right) if isinstance(v, str)]
        if isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
            return [right.value]
    return []


def _literal_bool(node: ast.expr | None) -> bool | None:
    if node is None:
        return True  # the keyword's default in _handle_mamba_radix_cache
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, bool) else None


EXTRACTORS: dict[str, Callable[[dict[str, str]], Any]] = {
    "multimodal_archs": lambda f: module_list(f, MODEL_CONFIG, "multimodal_model_archs"),
    "breakable_prefill_graph_archs": lambda f: module_list(
        f, MODEL_CONFIG, "multimodal_breakable_cuda_graph_supported_model_archs"),
    "piecewise_prefill_graph_archs": lambda f: module_list(
        f, MODEL_CONFIG, "multimodal_piecewise_cuda_graph_supported_model_archs"),
    "encoder_disagg_archs": encoder_disagg_archs,
    "mixed_chunk_speculative_algorithms": mixed_chunk_algorithms,
    "mamba_radix_cache_archs": mamba_radix_cache,
}


def extract_facts(files: dict[str, str]) -> dict[str, Any]:
    """Every fact of one release (None where the release does not have it)."""
    return {name: extract(files) for name, extract in EXTRACTORS.items()}


def alias_facts(catalog: dict[str, Any]) -> dict[str, Any]:
    """key -> what the option does in this release: an alias's field and stored value, or
    'ignored' / 'refused' for a bare DeprecatedAction (from the catalog rows)."""
    out: dict[str, Any] = {}
    for row in catalog["flags"]:
        action = str(row.get("action") or "")
        if not action.split(".")[-1].startswith("Deprecated"):
            continue
        option = next((o for o in row["flags"] if o.startswith("--") and not o.startswith("--no-")), row["flags"][0])
        key = option.lstrip("-").replace("-", "_")
        if row.get("error_message"):
            out[key] = {"refused": row["error_message"]}
        elif action.endswith("DeprecatedAction"):
            out[key] = {"ignored": True}
        elif key != row["field"]:
            out[key] = {"field": row["field"], "stored": row.get("const")}
    return dict(sorted(out.items()))


def ranges(per_version: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive releases with the same value, as since/until ranges (None values dropped)."""
    out: list[dict[str, Any]] = []
    for index, (version, value) in enumerate(per_version):
        following = per_version[index + 1][0] if index + 1 < len(per_version) else None
        if value is None:
            continue
        if out and out[-1]["value"] == value and out[-1]["until"] == version:
            out[-1]["until"] = following
        else:
            out.append({"since": version, "until": following, "value": value})
    return out


def write_facts(path: Path, per_version: dict[str, dict[str, Any]], order: list[str]) -> None:
    """facts.json from each release's facts, releases in `order` (oldest first)."""
    names = sorted({name for facts in per_version.values() for name in facts})
    table = {name: ranges([(v, per_version.get(v, {}).get(name)) for v in order]) for name in names}
    path.write_text(json.dumps({"versions": order, "facts": table}, indent=1, sort_keys=True) + "\n")
