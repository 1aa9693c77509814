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


def speculative_algorithms(files: dict[str, str]) -> list[str] | None:
    """The members of `SpeculativeAlgorithm` but NONE: the names `from_string` takes (upper-cased)."""
    tree = _tree(files, SPEC_INFO)
    for node in tree.body if tree else ():
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
            names = [t.id for stmt in node.body if isinstance(stmt, ast.Assign) for t in stmt.targets
                     if isinstance(t, ast.Name) and t.id.isupper()]
            return sorted(n for n in names if n != "NONE") or None
    return None


def mamba_radix_cache(files: dict[str, str]) -> dict[str, list[bool]] | None:
    """Up to 0.5.13: arch -> [radix cache supported, extra_buffer supported], from the
    `_handle_mamba_radix_cache(...)` call each model branch of `ServerArgs` makes."""
    tree = _tree(files, SERVER_ARGS)
    if tree is None:
        return None
    found: dict[str, list[bool]] = {}
    for call, archs in _calls_under_arch_tests(tree, "_handle_mamba_radix_cache"):
        flags = {k.arg: k.value for k in call.keywords}
        cache, extra = (_literal_bool(flags.get(k)) for k in ("support_mamba_cache",
                                                              "support_mamba_cache_extra_buffer"))
        for arch in archs:
            if cache is not None and extra is not None:
                found.setdefault(arch, [cache, extra])
    return dict(sorted(found.items())) or None


def _calls_under_arch_tests(tree: ast.AST, name: str) -> Iterable[tuple[ast.Call, list[str]]]:
    """Each call of `name` with the architectures of the innermost `model_arch in [...]` branch
    around it. A branch may hold several architectures and call the handler only for some of
    them inside a nested test (0.5.10-0.5.13 share one branch between the Qwen3 MoE models and
    the Qwen3-Next/3.5 hybrids): the nested test is the one that names the models."""
    def walk(node: ast.AST, archs: list[str]) -> Iterable[tuple[ast.Call, list[str]]]:
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(name):
            yield node, archs
        if isinstance(node, ast.If):
            inner = _arch_test(node.test)
            for stmt in node.body:
                yield from walk(stmt, [a for a in inner if not archs or a in archs] if inner else archs)
            for stmt in node.orelse:  # an elif tests its own architectures
                yield from walk(stmt, archs)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, archs)

    yield from walk(tree, [])


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


def paged_topk_backends(files: dict[str, str]) -> list[str] | None:
    """The attention backends EAGLE-family decoding allows with speculative_eagle_topk > 1 and
    page_size > 1 (the first such check in source order; NGRAM's comes after it)."""
    for _, tree in _server_args_sources(files):
        for node, chain in _raises(tree):
            if not _message(node).startswith("speculative_eagle_topk > 1 with page_size > 1") or not chain:
                continue
            for cmp in ast.walk(chain[-1]):
                if not (isinstance(cmp, ast.Compare) and ast.unparse(cmp.left).endswith("attention_backend")):
                    continue
                right = cmp.comparators[0]
                if isinstance(cmp.ops[0], ast.NotEq) and isinstance(right, ast.Constant):
                    return [right.value]
                if isinstance(cmp.ops[0], ast.NotIn):
                    return sorted(_literal_strings(right, tree))
    return None


def _literal_strings(node: ast.expr, tree: ast.AST) -> list[str]:
    """A literal list/tuple, or the name of one assigned in the same module."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [str(v) for v in ast.literal_eval(node)]
    if isinstance(node, ast.Name):
        for assign in ast.walk(tree):
            if (isinstance(assign, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id
                                                       for t in assign.targets)
                    and isinstance(assign.value, ast.List | ast.Tuple | ast.Set)):
                return [str(v) for v in ast.literal_eval(assign.value)]
    return []


def mamba_extra_buffer_archs(files: dict[str, str]) -> list[str] | None:
    """From 0.5.14: the hybrid architectures that take the extra_buffer strategy (with the triton
    linear-attention backend): `_MAMBA_EXTRA_BUFFER_ARCHS`, or the list inside
    `ServerArgs._support_mamba_cache_extra_buffer` (0.5.14)."""
    for _, tree in _server_args_sources(files):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_MAMBA_EXTRA_BUFFER_ARCHS"
                                                     for t in node.targets)):
                return sorted({str(c.value) for c in ast.walk(node.value) if isinstance(c, ast.Constant)
                               and isinstance(c.value, str)})
            if isinstance(node, ast.FunctionDef) and node.name == "_support_mamba_cache_extra_buffer":
                for cmp in ast.walk(node):
                    if (isinstance(cmp, ast.Compare) and isinstance(cmp.ops[0], ast.In)
                            and isinstance(cmp.comparators[0], ast.List | ast.Tuple)):
                        return sorted(ast.literal_eval(cmp.comparators[0]))
    return None



# ------------------------------------------------------------------ registries built at import time
QUANTIZATION_INIT = "sglang/srt/layers/quantization/__init__.py"
_QUANTIZATION_TABLES = ("BASE_QUANTIZATION_METHODS", "QUANTIZATION_METHODS")


def _dict_keys(node: ast.expr) -> list[str]:
    keys = getattr(node, "keys", [])
    return [k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]


def _assigned_dict(tree: ast.Module, names: tuple[str, ...]) -> ast.Dict | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id in names for t in targets) and isinstance(
                getattr(node, "value", None), ast.Dict):
            return node.value  # type: ignore[return-value]
    return None


def _holds_on_cuda(test: ast.expr) -> bool:
    """`is_cuda()`, alone or as one term of an `or` (the other platforms' tests are false)."""
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name):
        return test.func.id == "is_cuda"
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        _holds_on_cuda(v) for v in test.values)


def _updates(body: list[ast.stmt]) -> Iterable[ast.expr]:
    for stmt in body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        func = call.func if isinstance(call, ast.Call) else None
        if (isinstance(func, ast.Attribute) and func.attr == "update" and call.args
                and isinstance(func.value, ast.Name) and func.value.id in _QUANTIZATION_TABLES):
            yield call.args[0]


def quantization_methods(files: dict[str, str]) -> list[str] | None:
    """The methods `_verify_quantization` takes on a CUDA host (`QUANTIZATION_METHODS`, built when
    the module loads): the base table and the updates under an `if` that holds on CUDA."""
    tree = _tree(files, QUANTIZATION_INIT)
    table = _assigned_dict(tree, _QUANTIZATION_TABLES) if tree else None
    if tree is None or table is None:
        return None
    keys = set(_dict_keys(table))
    for node in tree.body:
        if isinstance(node, ast.Expr):
            keys.update(k for update in _updates([node]) for k in _dict_keys(update))
        elif isinstance(node, ast.If) and _holds_on_cuda(node.test):
            keys.update(k for update in _updates(node.body) for k in _dict_keys(update))
    return sorted(keys)


MEGA_MOE_HOOK = "sglang/srt/arg_groups/mega_moe_hook.py"


def mega_moe_no_fallback_archs(files: dict[str, str]) -> list[str] | None:
    """The architectures whose MoE has no fused fallback under megamoe (`MEGA_MOE_NO_FALLBACK_ARCHS`,
    0.5.21+): validate_mega_moe_token_budget_for_model checks their per-rank token budget."""
    tree = _tree(files, MEGA_MOE_HOOK)
    if tree is None:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "MEGA_MOE_NO_FALLBACK_ARCHS" for t in node.targets)):
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # frozenset({...})
                value = value.args[0]
            if isinstance(value, ast.Set | ast.List | ast.Tuple):
                return sorted(e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return None


_DEEPEP_V2_CHECK = "validate_deepep_v2_model_architecture"


def deepep_v2_archs(files: dict[str, str]) -> list[str] | None:
    """The architectures SGLang itself validates for DeepEP v2: `_DEEPEP_V2_MODELS` (0.5.21+,
    where model packages may register more), else the tuple inside
    validate_deepep_v2_model_architecture."""
    tree = _tree(files, "sglang/srt/configs/moe_model_registry.py")
    table = _assigned_dict(tree, ("_DEEPEP_V2_MODELS",)) if tree else None
    if table is not None:
        return sorted(_dict_keys(table))
    for _, module in _server_args_sources(files):
        for func in ast.walk(module):
            if isinstance(func, ast.FunctionDef) and func.name == _DEEPEP_V2_CHECK:
                return _first_literal(func, module)
    return None


def _first_literal(func: ast.FunctionDef, module: ast.Module) -> list[str] | None:
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.List):
            return sorted(_literal_strings(node.value, module))
    return None


def mamba_state_archs(files: dict[str, str]) -> list[str] | None:
    """From 0.5.20: the architectures whose name alone gives them Mamba state: the
    `_MAMBA_RADIX_CACHE_ARCHS` branch and every registered linear-attention spec's arch_names."""
    found: set[str] = set()
    listed = False
    for _, tree in _server_args_sources(files):
        for node in ast.walk(tree):
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if isinstance(node, ast.Assign) and "_MAMBA_RADIX_CACHE_ARCHS" in names:
                listed = True
                found.update(c.value for c in ast.walk(node.value)
                             if isinstance(c, ast.Constant) and isinstance(c.value, str))
    if not listed:
        return None
    for path in sorted(p for p in files if p.startswith("sglang/srt/") and p.endswith(".py")):
        if "LinearAttnModelSpec(" not in files[path]:
            continue
        found.update(_spec_arch_names(ast.parse(files[path])))
    return sorted(found)


def mla_archs(files: dict[str, str]) -> list[str] | None:
    """Every architecture a branch of ModelConfig names before it sets `attention_arch =
    AttentionArch.MLA`: MLA is decided by the architecture (some branches look at the config
    too), so an architecture outside this list never uses MLA."""
    tree = _tree(files, MODEL_CONFIG)
    if tree is None:
        return None
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and any(
            isinstance(stmt, ast.Assign) and "AttentionArch.MLA" in ast.unparse(stmt.value) for stmt in node.body
        ):
            found.update(c.value for c in ast.walk(node.test)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value[:1].isupper())
    return sorted(found) or None


def _sets_mla(node: ast.If) -> bool:
    return any(isinstance(stmt, ast.Assign) and "AttentionArch.MLA" in ast.unparse(stmt.value) for stmt in node.body)


def _chains(tree: ast.Module) -> list[list[ast.If]]:
    """The if/elif chains that hold a branch setting `attention_arch = AttentionArch.MLA`, in order."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    heads: list[ast.If] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _sets_mla(node):
            while isinstance(parents.get(node), ast.If) and parents[node].orelse == [node]:  # type: ignore[attr-defined]
                node = parents[node]  # type: ignore[assignment]
            if node not in heads:
                heads.append(node)
    chains = []
    for head in heads:
        chain, link = [], head
        while True:
            chain.append(link)
            if len(link.orelse) == 1 and isinstance(link.orelse[0], ast.If):
                link = link.orelse[0]
            else:
                break
        chains.append(chain)
    return chains


def mla_archs_by_name(files: dict[str, str]) -> list[str] | None:
    """The architectures whose MLA the name alone settles: where the attention-arch chain of
    ModelConfig first names one, it is a disjunct of its own (`"X" in ...architectures`, no `and`
    with a config value) of a branch that sets `attention_arch = AttentionArch.MLA`. One a branch
    names together with a config value (Pixtral's `kv_lora_rank`, DeepseekVL2's `use_mla`) is left
    out: without config.json its MLA is unknown."""
    tree = _tree(files, MODEL_CONFIG)
    if tree is None:
        return None
    settled: set[str] = set()
    for chain in _chains(tree):
        first: dict[str, bool] = {}
        for node in chain:
            disjuncts = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) \
                else [node.test]
            for part in disjuncts:
                alone = isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.In)
                for c in ast.walk(part):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value[:1].isupper():
                        first.setdefault(c.value, alone and _sets_mla(node))
        settled.update(name for name, mla in first.items() if mla)
    return sorted(settled) or None


def deterministic_deepseek_archs(files: dict[str, str]) -> list[str] | None:
    """The architectures `_handle_deterministic_inference` counts as DeepSeek / absorbed-MLA models
    (`is_deepseek_model = model_arch in [...]`): their attention backend must be one of a shorter
    list, and fa4 needs SM100/SM110 (0.5.17+). Decided by `architectures[0]` alone."""
    for path in sorted(p for p in files if p.startswith("sglang/srt/") and p.endswith(".py")):
        if "is_deepseek_model = model_arch in" not in files[path]:
            continue
        for node in ast.walk(ast.parse(files[path])):
            targets = [getattr(t, "id", None) for t in getattr(node, "targets", [])]
            if isinstance(node, ast.Assign) and "is_deepseek_model" in targets and isinstance(node.value, ast.Compare):
                names = [c.value for c in ast.walk(node.value)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if names:
                    return sorted(names)
    return None


def _spec_arch_names(tree: ast.Module) -> Iterable[str]:
    """The arch_names of every `LinearAttnModelSpec(...)` call in a module."""
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "LinearAttnModelSpec":
            for kw in call.keywords:
                if kw.arg == "arch_names" and isinstance(kw.value, ast.List | ast.Tuple):
                    yield from (e.value for e in kw.value.elts if isinstance(e, ast.Constant))


# --------------------------------------------------------------------------- GPU generation gates
# Compute-capability majors a simulated host can have (SM7x .. SM12x).
MAJORS = (7, 8, 9, 10, 11, 12)
OTHER_DEVICES = ("hip", "gfx", "npu", "xpu", "musa", "hpu", "mps", "cpu")
UTILS = ("sglang/srt/utils/common.py", "sglang/srt/utils.py", "sglang/srt/layers/utils.py")
GATE_SOURCES = ("sglang/srt/layers/flashinfer_comm_fusion.py",)
# Each gate the SGD4xx rules follow, by the words of the refusal it raises (every spelling the
# releases used): its fact is the compute-capability majors on which SGLang lets it through.
SM_GATE_MESSAGES: dict[str, tuple[str, ...]] = {
    "trtllm_mha": ("TRTLLM MHA backend is only supported on",),  # any of the three fields, up to 0.5.9
    "trtllm_mha_prefill": ("TRTLLM MHA backend for prefill",),
    "trtllm_mha_decode": ("TRTLLM MHA backend for decode",),
    "trtllm_mla": ("TRTLLM MLA backend is only supported on",),
    "cutedsl_mla": ("CuteDSL MLA backend is only supported on",),
    "tokenspeed_mla": ("tokenspeed_mla backend is only supported on",),
    "kv_cache_nvfp4": ("--kv-cache-dtype=nvfp4 requires",),
    "kv_cache_mxfp8": ("--kv-cache-dtype mxfp8 requires",),
    "quantization_nvfp4_online": ("--quantization nvfp4_online is supported only",),
    "deepseek_v4_fp4_indexer": ("--enable-deepseek-v4-fp4-indexer requires",),
    "megamoe_a2a": ("--moe-a2a-backend megamoe needs",),
    "allreduce_fusion": ("FlashInfer allreduce fusion requires",),
    "allreduce_fusion_cutedsl": ("FlashInfer allreduce fusion cutedsl backend requires",),
}


def sm_predicates(files: dict[str, str]) -> dict[str, set[int]]:
    """is_sm90_supported, is_blackwell, ... -> the compute-capability majors each is true on."""
    out: dict[str, set[int]] = {}
    for path in UTILS:
        tree = _tree(files, path)
        for node in tree.body if tree else ():
            if isinstance(node, ast.FunctionDef) and node.name.startswith("is_"):
                majors = _capability_majors(node)
                if majors:
                    out.setdefault(node.name, majors)
            elif isinstance(node, ast.Assign):
                keyword = next((k for n in ast.walk(node.value) if isinstance(n, ast.Call)
                                for k in n.keywords if k.arg == "device_capability_majors"), None)
                if keyword is not None and isinstance(keyword.value, ast.List | ast.Tuple):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            out.setdefault(target.id, set(ast.literal_eval(keyword.value)))
        for node in tree.body if tree else ():  # `return is_sm100_supported() or is_sm120_supported()`
            if isinstance(node, ast.FunctionDef) and node.name.startswith("is_") and node.name not in out:
                names = [_predicate_name(c) for r in ast.walk(node) if isinstance(r, ast.Return) and r.value
                         for c in ast.walk(r.value) if isinstance(c, ast.Call)]
                known = [out[n] for n in names if n in out]
                if known and len(known) == len(names):
                    out[node.name] = set().union(*known)
    return out


def _capability_majors(func: ast.FunctionDef) -> set[int] | None:
    """`get_device_capability(...)[0] == N` / `in [..]` in a predicate's body."""
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and "get_device_capability" in ast.unparse(node.left):
            right = node.comparators[0]
            if isinstance(node.ops[0], ast.Eq) and isinstance(right, ast.Constant):
                return {int(right.value)}
            if isinstance(node.ops[0], ast.In) and isinstance(right, ast.List | ast.Tuple):
                return {int(v) for v in ast.literal_eval(right)}
    return None


def _predicate_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
    return name.lstrip("_") if name and name.lstrip("_").startswith("is_") else None


def _holds(node: ast.expr, major: int, predicates: dict[str, set[int]]) -> bool:
    """The condition on a host of this major, taking every other term of it as true (the gate's
    own option is set, the host is CUDA)."""
    if isinstance(node, ast.BoolOp):
        values = [_holds(v, major, predicates) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _holds(node.operand, major, predicates) if _mentions_sm(node.operand, predicates) else True
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.comparators[0], ast.Constant):
        left, limit = ast.unparse(node.left), node.comparators[0].value
        value = major if "get_device_capability" in left else major * 10 if "get_device_sm" in left else None
        if value is not None and isinstance(limit, int):
            return bool(_compare(node.ops[0], value, limit))
    name = _predicate_name(node)
    if name is not None:
        for candidate in (f"{name}_supported", name):
            if candidate in predicates:
                return major in predicates[candidate]
        if any(word in name for word in OTHER_DEVICES):
            return False  # an AMD, Ascend, Intel, ... probe: false on an NVIDIA host
    return True


def _compare(op: ast.cmpop, left: int, right: int) -> bool:
    table = {ast.GtE: left >= right, ast.Gt: left > right, ast.Lt: left < right, ast.LtE: left <= right,
             ast.Eq: left == right, ast.NotEq: left != right}
    return table.get(type(op), True)


def _mentions_sm(node: ast.expr, predicates: dict[str, set[int]]) -> bool:
    for sub in ast.walk(node):
        name = _predicate_name(sub) if isinstance(sub, ast.Call | ast.Attribute | ast.Name) else None
        if name and (f"{name}_supported" in predicates or name in predicates):
            return True
        if isinstance(sub, ast.Compare) and any(w in ast.unparse(sub.left) for w in ("get_device_capability",
                                                                                      "get_device_sm")):
            return True
    return False


def _raises(tree: ast.AST) -> Iterable[tuple[ast.stmt, list[ast.expr]]]:
    """Every raise/assert with the if-conditions that lead to it (an else branch as `not test`)."""
    def walk(node: ast.AST, chain: list[ast.expr]) -> Iterable[tuple[ast.stmt, list[ast.expr]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If):
                for stmt in child.body:
                    yield from walk_stmt(stmt, [*chain, child.test])
                for stmt in child.orelse:
                    yield from walk_stmt(stmt, [*chain, ast.UnaryOp(ast.Not(), child.test)])
            elif isinstance(child, ast.Raise):
                yield child, chain
            elif isinstance(child, ast.Assert):
                yield child, [*chain, ast.UnaryOp(ast.Not(), child.test)]
            elif not isinstance(child, ast.expr):
                yield from walk(child, chain)

    def walk_stmt(stmt: ast.stmt, chain: list[ast.expr]) -> Iterable[tuple[ast.stmt, list[ast.expr]]]:
        yield from walk(ast.Module(body=[stmt], type_ignores=[]), chain)

    yield from walk(tree, [])


def _message(node: ast.stmt) -> str:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) > 15:
            text = sub.value
            # adjacent literals ("a " "b") arrive as one constant; f-strings as a JoinedStr
            return text
        if isinstance(sub, ast.JoinedStr):
            return "".join(p.value if isinstance(p, ast.Constant) else "{}" for p in sub.values)
    return ""


def sm_gates(files: dict[str, str]) -> dict[str, dict[str, Any]] | None:
    """gate -> {"majors": the compute-capability majors SGLang lets it through on, "message"}."""
    predicates = sm_predicates(files)
    found: dict[str, dict[str, Any]] = {}
    sources = [tree for _, tree in _server_args_sources(files)]
    sources += [t for t in (_tree(files, p) for p in GATE_SOURCES) if t is not None]
    for tree in sources:
        for node, chain in _raises(tree):
            text = _message(node)
            gate = next((g for g, words in SM_GATE_MESSAGES.items() if any(text.startswith(w) for w in words)), None)
            if gate is None or gate in found or not any(_mentions_sm(t, predicates) for t in chain):
                continue
            allowed = [m for m in MAJORS if not all(_holds(t, m, predicates) for t in chain)]
            found[gate] = {"majors": allowed, "message": text}
    return dict(sorted(found.items())) or None


EXTRACTORS: dict[str, Callable[[dict[str, str]], Any]] = {
    "multimodal_archs": lambda f: module_list(f, MODEL_CONFIG, "multimodal_model_archs"),
    "breakable_prefill_graph_archs": lambda f: module_list(
        f, MODEL_CONFIG, "multimodal_breakable_cuda_graph_supported_model_archs"),
    "piecewise_prefill_graph_archs": lambda f: module_list(
        f, MODEL_CONFIG, "multimodal_piecewise_cuda_graph_supported_model_archs"),
    "encoder_disagg_archs": encoder_disagg_archs,
    "mixed_chunk_speculative_algorithms": mixed_chunk_algorithms,
    "speculative_algorithms": speculative_algorithms,
    "mamba_radix_cache_archs": mamba_radix_cache,
    "paged_topk_backends": paged_topk_backends,
    "mamba_extra_buffer_archs": mamba_extra_buffer_archs,
    "mamba_state_archs": mamba_state_archs,
    "mla_archs": mla_archs,
    "mla_archs_by_name": mla_archs_by_name,
    "deterministic_deepseek_archs": deterministic_deepseek_archs,
    "quantization_methods": quantization_methods,
    "deepep_v2_archs": deepep_v2_archs,
    "mega_moe_no_fallback_archs": mega_moe_no_fallback_archs,
}


# Checks and behaviours outside the check-site inventory (model loading, workers, the engine),
# which rules cite: `source:<name>` is true in the releases whose file (or, for a folder, any file
# under it) contains the text. A text no release has is recorded with no range (an absence the
# rules claim, such as an environment variable nobody reads).
SOURCE_TEXTS: dict[str, tuple[str, str | tuple[str, ...]]] = {
    "spec_v2_env": ("sglang/srt/environ.py", "SGLANG_ENABLE_SPEC_V2"),
    "unknown_speculative_algorithm": ("sglang/srt/speculative/spec_info.py", "Unknown speculative algorithm name"),
    "nccl_nvls_env": ("sglang/srt/entrypoints/engine.py", "NCCL_NVLS_ENABLE"),
    "context_length_above_derived": ("sglang/srt/configs/model_config.py",
                                     "is greater than the derived context_length"),
    "quantization_differs": ("sglang/srt/configs/model_config.py", "Quantization method specified in the model config"),
    "json_model_override_args": ("sglang/srt/configs/model_config.py", "json.loads(model_override_args)"),
    "ensure_divisibility": ("sglang/srt/distributed/utils.py", "is not divisible by"),
    "config_file_yaml_suffix": ("sglang/srt/", 'not in [".yaml", ".yml"]'),
    "media_url_domains": ("sglang/srt/", "allowed media domains cannot be empty"),
    "api_key_env": ("sglang/srt/", "SGLANG_API_KEY"),
    "encoder_url_receive": ("sglang/srt/disaggregation/", "/scheduler_receive_url"),
    "quantize_and_serve_disabled": ("sglang/srt/configs/model_config.py",
                                    "quantize_and_serve functionality is currently disabled"),
    # the MHA default on Blackwell narrowed from is_blackwell() to SM100/SM103 (0.5.7)
    "trtllm_mha_default_sm10x": ("sglang/srt/", "Use trtllm_mha for SM100/SM103"),
    # check_server_args skips the chunked-prefill/page-size assert on a PD decode server (0.5.3+)
    "chunked_prefill_decode_exempt": ("sglang/srt/", (
        'self.chunked_prefill_size > 0 and self.disaggregation_mode != "decode"',
        'cfg.chunked_prefill_size > 0 and cfg.disaggregation_mode != "decode"')),
    # the weight-cache daemon and its IPC loader (0.5.17+), checks made while loading weights
    "weight_cache_quant_allowlist": ("sglang/srt/weight_cache/protocol.py", "IPC_QUANT_ALLOWLIST = {"),
    "weight_cache_expandable_segments": ("sglang/srt/weight_cache/daemon.py", "expandable_segments"),
    "weight_cache_timeout_positive": ("sglang/srt/weight_cache/daemon.py", "weight-cache-timeout must be positive"),
    "weight_cache_socket_template_env": ("sglang/srt/environ.py", "SGLANG_WEIGHT_CACHE_SOCKET_TEMPLATE"),
    "weight_cache_device_uuid_placeholder": ("sglang/srt/weight_cache/protocol.py", "must contain '{{device_uuid}}'"),
    "weight_cache_config_mismatch": ("sglang/srt/weight_cache/ipc_loader.py", "Daemon config mismatch"),
    "weight_cache_daemon_mode_no_fallback": ("sglang/srt/weight_cache/ipc_loader.py",
                                             "In daemon mode, fallback to disk"),
    "weight_cache_socket_not_found": ("sglang/srt/weight_cache/ipc_loader.py", "Daemon socket not found"),
    "weight_cache_cpu_backup_off": ("sglang/srt/model_executor/",
                                    "Disabling weights CPU backup in zero-copy IPC mode"),
}


def source_texts(files: dict[str, str]) -> dict[str, bool | None]:
    """`source:<name>` -> True where the release's sources hold the text, else None."""
    out: dict[str, bool | None] = {}
    for name, (where, text) in SOURCE_TEXTS.items():
        paths = [where] if where.endswith(".py") else [p for p in files if p.startswith(where) and p.endswith(".py")]
        texts = (text,) if isinstance(text, str) else text
        out[f"source:{name}"] = True if any(t in files.get(p, "") for p in paths for t in texts) else None
    return out


def extract_facts(files: dict[str, str]) -> dict[str, Any]:
    """Every fact of one release (None where the release does not have it)."""
    facts = {name: extract(files) for name, extract in EXTRACTORS.items()}
    facts.update(source_texts(files))
    # one fact per gate, so that each keeps its own release ranges
    facts.update({f"sm_gate:{gate}": value for gate, value in (sm_gates(files) or {}).items()})
    return facts


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
