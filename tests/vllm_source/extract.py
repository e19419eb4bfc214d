"""Read each fact of `glm_operator.catalog.vllm_facts` out of one vLLM version's real source.

Each reader takes the version's `vllm/` package directory and returns `(value, where)` in the same shape as
the fact records them, so a test compares both. Readers use `ast` on the source (no vLLM import: its
dependencies are not needed), and run the two pure functions the rules mirror (the PP split and the DSA
top-k reuse expression) on our own inputs.
"""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

FUSED_CONFIG = "model_executor/layers/fused_moe/config.py"


class Source:
    """One version's `vllm/` package, parsed on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._trees: dict[str, ast.Module] = {}

    def tree(self, rel: str) -> ast.Module:
        if rel not in self._trees:
            path = self.root / rel
            if not path.is_file():
                raise LookupError(f"{rel} does not exist in {self.root}")
            self._trees[rel] = ast.parse(path.read_text(), filename=str(path))
        return self._trees[rel]

    def cls(self, rel: str, name: str) -> ast.ClassDef:
        for node in ast.walk(self.tree(rel)):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise LookupError(f"class {name} not found in {rel}")

    def method(self, rel: str, cls: str, name: str) -> ast.FunctionDef:
        for node in self.cls(rel, cls).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        raise LookupError(f"{cls}.{name} not found in {rel}")

    def function(self, rel: str, name: str) -> ast.FunctionDef:
        for node in self.tree(rel).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        raise LookupError(f"function {name} not found in {rel}")


def _return_expr(func: ast.FunctionDef) -> ast.expr:
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None]
    if len(returns) != 1:
        raise LookupError(f"{func.name} has {len(returns)} return statements, expected one")
    assert returns[0].value is not None
    return returns[0].value


def _text(node: ast.AST) -> str:
    return " ".join(ast.unparse(node).split())


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _literal_alias(src: Source, rel: str, name: str) -> tuple[frozenset[str], str]:
    for node in src.tree(rel).body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:  # type: ignore[union-attr]
            return frozenset(_strings(node.value)), f"{rel}:{node.lineno}"  # type: ignore[union-attr]
    raise LookupError(f"{name} not found in {rel}")


def all2all_backends(src: Source) -> tuple[Any, str]:
    return _literal_alias(src, "config/parallel.py", "All2AllBackend")


def moe_backends(src: Source) -> tuple[Any, str]:
    return _literal_alias(src, "config/kernel.py", "MoEBackend")


def kv_cache_dtypes(src: Source) -> tuple[Any, str]:
    return _literal_alias(src, "config/cache.py", "CacheDType")


def attention_backends(src: Source) -> tuple[Any, str]:
    """v1/attention/backends/registry.py: the members of AttentionBackendEnum (vLLM looks a name up upper-cased)."""
    rel = "v1/attention/backends/registry.py"
    enum = src.cls(rel, "AttentionBackendEnum")
    names = {
        target.id
        for node in enum.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    if not names:
        raise LookupError(f"AttentionBackendEnum in {rel} has no members")
    return frozenset(names), f"{rel}:{enum.lineno}"


def all2all_cli_removed(src: Source) -> tuple[Any, str]:
    rel = "engine/arg_utils.py"
    for node in ast.walk(src.tree(rel)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "remove"
            and "all2all_backend" in _text(node.func.value)
        ):
            return frozenset({_resolve_string(src, node.args[0])}), f"{rel}:{node.lineno}"
    return frozenset(), f"{rel} (no removal)"


def _resolve_string(src: Source, node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        pattern = re.compile(rf"^{node.id}\s*(?::[^=]*)?=\s*[\"']([^\"']+)[\"']", re.M)
        for path in sorted(src.root.rglob("*.py")):
            if match := pattern.search(path.read_text()):
                return match[1]
    raise LookupError(f"cannot resolve {_text(node)} to a string")


def all2all_rewritten(src: Source) -> tuple[Any, str]:
    rel = "config/parallel.py"
    for node in ast.walk(src.cls(rel, "ParallelConfig")):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and _text(node.test.left) == "self.all2all_backend"
            and isinstance(node.test.ops[0], ast.In)
            and any("allgather_reducescatter" in _strings(s) for s in node.body)
        ):
            return frozenset(_strings(node.test.comparators[0])), f"{rel}:{node.lineno}"
    raise LookupError("no rewrite of removed all-to-all backends in ParallelConfig")


def all2all_default(src: Source) -> tuple[Any, str]:
    rel = "config/parallel.py"
    for node in src.cls(rel, "ParallelConfig").body:
        if isinstance(node, ast.AnnAssign) and _text(node.target) == "all2all_backend" and node.value is not None:
            assert isinstance(node.value, ast.Constant)
            return node.value.value, f"{rel}:{node.lineno}"
    raise LookupError("ParallelConfig.all2all_backend has no default")


def moe_use_ep(src: Source) -> tuple[Any, str]:
    make = src.method(FUSED_CONFIG, "FusedMoEParallelConfig", "make")
    for node in ast.walk(make):
        if isinstance(node, ast.Assign) and _text(node.targets[0]) == "use_ep":
            return _text(node.value), f"{FUSED_CONFIG}:{node.lineno}"
    raise LookupError("FusedMoEParallelConfig.make does not assign use_ep")


def moe_all2all_kernels(src: Source) -> tuple[Any, str]:
    prop = src.method(FUSED_CONFIG, "FusedMoEParallelConfig", "use_all2all_kernels")
    return _text(_return_expr(prop)), f"{FUSED_CONFIG}:{prop.lineno}"


def moe_sequence_parallel(src: Source) -> tuple[Any, str]:
    rel = "config/parallel.py"
    prop = src.method(rel, "ParallelConfig", "use_sequence_parallel_moe")
    expr = _return_expr(prop)
    assert isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And), _text(expr)
    needs = {_text(v) for v in expr.values if not (isinstance(v, ast.Compare) and isinstance(v.ops[0], ast.In))}
    return frozenset(needs), f"{rel}:{prop.lineno}"


def _backends_of(src: Source, expr: ast.expr) -> frozenset[str]:
    """The all-to-all backend names a boolean of FusedMoEParallelConfig properties stands for."""
    names: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr.startswith("use_") and node.attr != "use_all2all_kernels":
            prop = src.method(FUSED_CONFIG, "FusedMoEParallelConfig", node.attr)
            inner = _return_expr(prop)
            names |= _strings(inner) if not _uses_props(inner) else _backends_of(src, inner)
    return frozenset(names)


def _uses_props(expr: ast.expr) -> bool:
    return any(
        isinstance(n, ast.Attribute)
        and n.attr.startswith("use_")
        and n.attr.endswith("_kernels")
        and n.attr != "use_all2all_kernels"
        for n in ast.walk(expr)
    )


def moe_batched_all2all(src: Source) -> tuple[Any, str]:
    """Before 0.34.0 a FusedMoEParallelConfig property; from 0.34.0 the `BatchedExperts` branch of
    `FusedMoEConfig.activation_format` (which also picks it for `--moe-backend batched_triton`, not a backend)."""
    try:
        prop = src.method(FUSED_CONFIG, "FusedMoEParallelConfig", "use_batched_activation_format")
    except LookupError:
        prop = src.method(FUSED_CONFIG, "FusedMoEConfig", "activation_format")
        for node in ast.walk(prop):
            if isinstance(node, ast.If) and any(
                isinstance(r, ast.Return) and r.value is not None and _text(r.value).endswith(".BatchedExperts")
                for r in node.body
            ):
                return _backends_of(src, node.test), f"{FUSED_CONFIG}:{prop.lineno}"
        raise LookupError("FusedMoEConfig.activation_format has no BatchedExperts branch") from None
    return _backends_of(src, _return_expr(prop)), f"{FUSED_CONFIG}:{prop.lineno}"


def moe_padded_all2all(src: Source) -> tuple[Any, str]:
    """The backends `FusedMoEConfig.activation_format` (from 0.34.0) gives padded standard rows, which only experts
    declaring `PaddedStandard` take: the Cutlass MXFP4 and Marlin experts are checked to declare `Standard`."""
    try:
        prop = src.method(FUSED_CONFIG, "FusedMoEConfig", "activation_format")
    except LookupError:
        return frozenset(), f"{FUSED_CONFIG} (no padded layout)"
    for rel, cls in (
        ("model_executor/layers/fused_moe/experts/cutlass_moe.py", "CutlassExpertsMxfp4"),
        ("model_executor/layers/fused_moe/experts/marlin_moe.py", "MarlinExperts"),
    ):
        declared = _text(_return_expr(src.method(rel, cls, "activation_format")))
        assert declared.endswith(".Standard"), f"{cls} now declares {declared}"
    for node in ast.walk(prop):
        if isinstance(node, ast.If) and any(
            isinstance(r, ast.Return) and r.value is not None and _text(r.value).endswith(".PaddedStandard")
            for r in node.body
        ):
            return _backends_of(src, node.test), f"{FUSED_CONFIG}:{node.lineno}"
    return frozenset(), f"{FUSED_CONFIG} (no padded layout)"


def _rejected(src: Source, rel: str, cls: str) -> tuple[Any, str]:
    func = src.method(rel, cls, "_supports_parallel_config")
    expr = _return_expr(func)
    if _text(expr).endswith("ep_size == 1"):
        return None, f"{rel}:{func.lineno}"
    assert isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not), _text(expr)
    return _backends_of(src, expr), f"{rel}:{func.lineno}"


def cutlass_mxfp4_rejected_all2all(src: Source) -> tuple[Any, str]:
    return _rejected(src, "model_executor/layers/fused_moe/experts/cutlass_moe.py", "CutlassExpertsMxfp4")


def marlin_rejected_all2all(src: Source) -> tuple[Any, str]:
    return _rejected(src, "model_executor/layers/fused_moe/experts/marlin_moe.py", "MarlinExpertsBase")


def cutlass_mxfp4_remaps(src: Source) -> tuple[Any, str]:
    rel = "model_executor/layers/fused_moe/experts/cutlass_moe.py"
    func = src.function(rel, "run_cutlass_moe_mxfp4")
    params = {a.arg for a in (*func.args.args, *func.args.kwonlyargs)}
    return "expert_map" in params, f"{rel}:{func.lineno}"


def marlin_needs_cuda(src: Source) -> tuple[Any, str]:
    rel = "model_executor/layers/fused_moe/experts/marlin_moe.py"
    func = src.method(rel, "MarlinExpertsBase", "_supports_current_device")
    calls = {n.func.attr for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    return "is_cuda" in calls, f"{rel}:{func.lineno}"


CT_MXFP4 = (
    "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a4_mxfp4.py"
)


def _ct_init(src: Source) -> ast.FunctionDef:
    return src.method(CT_MXFP4, "CompressedTensorsW4A4Mxfp4MoEMethod", "__init__")


def ct_mxfp4_experts(src: Source) -> tuple[Any, str]:
    init = _ct_init(src)
    chosen = sorted(
        (n for n in ast.walk(init) if isinstance(n, ast.Assign) and _text(n.targets[0]) == "self.experts_cls"),
        key=lambda n: n.lineno,
    )
    # A lower-case name is the MoE oracle's pick for an explicit --moe-backend (b12x, FlashInfer MoE-EP).
    return tuple(_text(n.value) for n in chosen if _text(n.value)[:1].isupper()), f"{CT_MXFP4}:{init.lineno}"


def ct_mxfp4_moe_backends_read(src: Source) -> tuple[Any, str]:
    """The names `__init__` tests `moe.moe_backend` for: compared by name, or passed to a predicate of the fused MoE
    package (`is_flashinfer_moe_ep_backend`, from 0.32.0), whose names are read from where it looks them up."""
    init = _ct_init(src)
    read: set[str] = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Compare) and _text(node.left) == "moe.moe_backend":
            for comparator in node.comparators:
                read |= _strings(comparator)
        elif isinstance(node, ast.Call) and [_text(a) for a in node.args] == ["moe.moe_backend"]:
            read |= _backend_predicate_names(src, _text(node.func))
    return frozenset(read), f"{CT_MXFP4}:{init.lineno}"


FLASHINFER_MOE_EP = "model_executor/layers/fused_moe/flashinfer_moe_ep.py"


def _backend_predicate_names(src: Source, name: str) -> frozenset[str]:
    """The backend names `name(moe_backend)` holds for: `return moe_backend in <dict>` in flashinfer_moe_ep.py,
    each key of the dict a name constant of config/kernel.py."""
    func = src.function(FLASHINFER_MOE_EP, name)
    expr = _return_expr(func)
    assert isinstance(expr, ast.Compare) and isinstance(expr.ops[0], ast.In), f"{name}: {_text(expr)}"
    table = _text(expr.comparators[0])
    for node in src.tree(FLASHINFER_MOE_EP).body:
        if isinstance(node, ast.Assign) and _text(node.targets[0]) == table and isinstance(node.value, ast.Dict):
            return frozenset(_kernel_constant(src, k) for k in node.value.keys if k is not None)
    raise LookupError(f"{table} (read by {name}) is not a dict in {FLASHINFER_MOE_EP}")


def _kernel_constant(src: Source, key: ast.expr) -> str:
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    for node in src.tree("config/kernel.py").body:
        if isinstance(node, ast.Assign) and _text(node.targets[0]) == _text(key):
            assert isinstance(node.value, ast.Constant), _text(node.value)
            return str(node.value.value)
    raise LookupError(f"{_text(key)} is not a constant of config/kernel.py")


MODELOPT = "model_executor/layers/quantization/modelopt.py"
NVFP4_ORACLE = "model_executor/layers/fused_moe/oracle/nvfp4.py"


def modelopt_nvfp4_min_capability(src: Source) -> tuple[Any, str]:
    """`ModelOptNvFp4Config.get_min_capability`'s constant, and whether the first `AVAILABLE_BACKENDS` list of
    `select_nvfp4_moe_backend` (its default order) names `NvFp4MoeBackend.MARLIN`."""
    func = src.method(MODELOPT, "ModelOptNvFp4Config", "get_min_capability")
    expr = _return_expr(func)
    assert isinstance(expr, ast.Constant) and isinstance(expr.value, int), _text(expr)
    select = src.function(NVFP4_ORACLE, "select_nvfp4_moe_backend")
    lists = sorted(
        (n for n in ast.walk(select) if isinstance(n, ast.Assign) and _text(n.targets[0]) == "AVAILABLE_BACKENDS"),
        key=lambda n: n.lineno,
    )
    if not lists or not isinstance(lists[0].value, ast.List):
        raise LookupError("select_nvfp4_moe_backend has no AVAILABLE_BACKENDS list")
    marlin = "NvFp4MoeBackend.MARLIN" in {_text(e) for e in lists[0].value.elts}
    # The dense NVFP4 layers have a Marlin kernel too (it logs the weight-only fallback).
    dense = src.method("model_executor/kernels/linear/nvfp4/marlin.py", "MarlinNvFp4LinearKernel", "is_supported")
    assert "is_fp4_marlin_supported()" in _text(dense), "MarlinNvFp4LinearKernel no longer gated on Marlin FP4"
    return (expr.value, marlin), f"{MODELOPT}:{func.lineno}, {NVFP4_ORACLE}:{lists[0].lineno}"


def aiter_switch_defaults(src: Source) -> tuple[Any, str]:
    rel = "envs.py"
    table = _env_table(src.tree(rel))
    values, where = [], []
    for name in ("VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_FP4BMM", "VLLM_ROCM_USE_AITER_FP8BMM"):
        key, lam = table[name]
        values.append((name, _parse_bool_switch(name, lam)))
        where.append(f"{rel}:{key.lineno}")
    return tuple(values), ", ".join(where)


def http_keep_alive(src: Source) -> tuple[Any, str]:
    """The default of `lambda: int(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "N"))`."""
    rel = "envs.py"
    key, lam = _env_table(src.tree(rel))["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]
    assert isinstance(lam, ast.Lambda), "VLLM_HTTP_TIMEOUT_KEEP_ALIVE: not a lambda"
    match = re.fullmatch(r"int\(os\.environ\.get\('VLLM_HTTP_TIMEOUT_KEEP_ALIVE', '(\d+)'\)\)", _text(lam.body))
    assert match, f"VLLM_HTTP_TIMEOUT_KEEP_ALIVE is read in a way glmops does not know: {_text(lam.body)}"
    return int(match[1]), f"{rel}:{key.lineno}"


NGRAM_CONFIG = "v1/worker/gpu/spec_decode/ngram/config.py"


def ngram_lookup_defaults(src: Source) -> tuple[Any, str]:
    """The (min, max) prompt-lookup defaults set when neither is given, inside the ngram-only branch
    (`SpeculativeConfig` before 0.34.0; from 0.34.0 `NgramSpeculatorConfig.configure`, whose base class sets
    both to 0 for every other method)."""
    rel = "config/speculative.py"
    for branch in ast.walk(src.tree(rel)):
        if isinstance(branch, ast.If) and "ngram" in _strings(branch.test):
            found = _both_unset_defaults(branch, "self")
            if found is not None:
                return found[0], f"{rel}:{found[1]}"
    if (src.root / NGRAM_CONFIG).is_file():
        configure = src.method(NGRAM_CONFIG, "NgramSpeculatorConfig", "configure")
        found = _both_unset_defaults(configure, "spec")
        if found is not None:
            return found[0], f"{NGRAM_CONFIG}:{found[1]}"
    raise LookupError(f"{rel}: no ngram branch defaulting both prompt-lookup bounds")


def _both_unset_defaults(scope: ast.AST, owner: str) -> tuple[tuple[Any, Any], int] | None:
    both_unset = f"{owner}.prompt_lookup_min is None and {owner}.prompt_lookup_max is None"
    for node in ast.walk(scope):
        if isinstance(node, ast.If) and _text(node.test) == both_unset:
            assigned = {
                _text(a.targets[0]): a.value.value
                for a in node.body
                if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)
            }
            return (assigned[f"{owner}.prompt_lookup_min"], assigned[f"{owner}.prompt_lookup_max"]), node.lineno
    return None


def _env_table(tree: ast.Module) -> dict[str, tuple[ast.expr, ast.expr]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if _text(target) == "environment_variables":
                return {
                    k.value: (k, v)
                    for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if isinstance(k, ast.Constant)
                }
    raise LookupError("envs.py has no environment_variables table")


def _parse_bool_switch(name: str, lam: ast.expr) -> bool:
    """The default of `lambda: os.getenv(NAME, "X").lower() in ("true", "1")`; anything else is an error."""
    assert isinstance(lam, ast.Lambda), f"{name}: not a lambda"
    body = lam.body
    text = _text(body)
    match = re.fullmatch(rf"os\.getenv\('{name}', '([^']*)'\)\.lower\(\) in \('true', '1'\)", text)
    if not match:
        raise AssertionError(f"{name} is no longer parsed as on for 'true'/'1' only: {text}")
    return match[1].lower() in ("true", "1")


def aiter_bmm_needs_master(src: Source) -> tuple[Any, str]:
    rel = "_aiter_ops.py"
    cls = next(
        n
        for n in ast.walk(src.tree(rel))
        if isinstance(n, ast.ClassDef)
        and any(isinstance(m, ast.FunctionDef) and m.name == "is_fp4bmm_enabled" for m in n.body)
    )
    funcs = [src.method(rel, cls.name, name) for name in ("is_fp4bmm_enabled", "is_fp8bmm_enabled")]
    needs = all("cls._AITER_ENABLED and" in _text(_return_expr(f)) for f in funcs)
    return needs, ", ".join(f"{rel}:{f.lineno}" for f in funcs)


def aiter_bmm_arch(src: Source) -> tuple[Any, str]:
    """Per BMM switch, the architecture its `is_*bmm_enabled` adds to the AITER switches: gfx950 for `on_gfx950()`
    (0.26.0-0.31.x) or `get_cdna_version() == 4` (from 0.32.0), None for no architecture test; any other test fails."""
    rel = "_aiter_ops.py"
    cls = next(
        n
        for n in ast.walk(src.tree(rel))
        if isinstance(n, ast.ClassDef)
        and any(isinstance(m, ast.FunctionDef) and m.name == "is_fp4bmm_enabled" for m in n.body)
    )
    values, where = [], []
    for name, method in (
        ("VLLM_ROCM_USE_AITER_FP4BMM", "is_fp4bmm_enabled"),
        ("VLLM_ROCM_USE_AITER_FP8BMM", "is_fp8bmm_enabled"),
    ):
        func = src.method(rel, cls.name, method)
        text = _text(_return_expr(func))
        rest = re.sub(r"cls\._AITER_ENABLED and cls\._FP[48]BMM_ENABLED", "", text).strip()
        arch = {"": None, "and on_gfx950()": "gfx950", "and (get_cdna_version() == 4)": "gfx950"}.get(rest, "?")
        assert arch != "?", f"{method} tests something glmops does not know: {text}"
        values.append((name, arch))
        where.append(f"{rel}:{func.lineno}")
    return tuple(values), ", ".join(where)


def mla_fp4bmm_needs_bf16(src: Source) -> tuple[Any, str]:
    rel = "model_executor/layers/attention/mla_attention.py"
    init = src.method(rel, "MLAAttention", "__init__")
    fp4 = fp8 = None
    for node in ast.walk(init):
        if isinstance(node, ast.Assign):
            target = _text(node.targets[0])
            if target == "self.is_aiter_triton_fp4_bmm_enabled":
                fp4 = node
            elif target == "self.is_aiter_triton_fp8_bmm_enabled":
                fp8 = node
    assert fp4 is not None and fp8 is not None, "MLAAttention no longer decides the AITER BMM paths in __init__"
    assert _text(fp8.value) == "rocm_aiter_ops.is_fp8bmm_enabled()", (
        f"the FP8 BMM path gained a condition: {_text(fp8.value)}"
    )
    dtype = [v for v in getattr(fp4.value, "values", []) if "dtype" in _text(v)]
    return (_text(dtype[0]) if dtype else None), f"{rel}:{fp4.lineno}"


# --- Behaviour of the pure functions the rules mirror -------------------------------------------------------------


def pp_split_function(src: Source) -> tuple[Callable[[int, int, str | None], list[int]], str]:
    """vLLM's own get_pp_indices, run on our inputs: (layers, pp, VLLM_PP_LAYER_PARTITION) -> stage sizes."""
    rel = "distributed/utils.py"
    func = src.function(rel, "get_pp_indices")
    module = ast.Module(body=[func], type_ignores=[])
    env = types.SimpleNamespace(VLLM_PP_LAYER_PARTITION=None)
    logger = types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None, debug=lambda *a, **k: None)
    namespace: dict[str, Any] = {"envs": env, "logger": logger}
    exec(compile(module, f"{rel}", "exec"), namespace)  # noqa: S102 - vLLM's own pure function, for comparison

    def split(layers: int, pp: int, partition: str | None) -> list[int]:
        env.VLLM_PP_LAYER_PARTITION = partition
        spans = [namespace["get_pp_indices"](layers, rank, pp) for rank in range(pp)]
        return [end - start for start, end in spans]

    return split, f"{rel}:{func.lineno}"


def pp_partition_checks(src: Source) -> tuple[Any, str]:
    split, where = pp_split_function(src)
    checks = set()
    for name, layers, pp, text in (("count", 78, 2, "26,26,26"), ("sum", 78, 2, "38,39"), ("positive", 78, 2, "0,78")):
        try:
            split(layers, pp, text)
        except ValueError:
            checks.add(name)
    return frozenset(checks), where


# The DSA modules, and (from 0.34.0) the shared `compute_skip_topk_layers` they call.
DSA_FILES = ("model_executor/models/deepseek_v2.py", "models/deepseek_v32", "model_executor/models/utils.py")


def dsa_reuse_rules(src: Source) -> Iterator[tuple[str, Callable[[int, int, int], bool], tuple[Any, Any]]]:
    """Every top-k reuse expression in the modules that run GLM-5.x: (where, skips(layer, freq, offset), defaults)."""
    for entry in DSA_FILES:
        path = src.root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else ([path] if path.exists() else [])
        for file in files:
            rel = str(file.relative_to(src.root))
            for func in (n for n in ast.walk(src.tree(rel)) if isinstance(n, ast.FunctionDef)):
                for node in ast.walk(func):
                    expr = _skip_expr(node)
                    if expr is not None:
                        yield f"{rel}:{node.lineno}", _skip_function(expr), _getattr_defaults(func)


def _is_reuse_expr(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Compare) and isinstance(expr.left, ast.BinOp) and isinstance(expr.left.op, ast.Mod)


def _skip_expr(node: ast.AST) -> ast.expr | None:
    """`skip_topk = <expr>` (each module before 0.34.0), or `if <expr>: skip_layers.add(layer)` (from 0.34.0)."""
    if isinstance(node, ast.Assign) and "skip_topk" in _text(node.targets[0]) and _is_reuse_expr(node.value):
        return node.value
    if (
        isinstance(node, ast.If)
        and _is_reuse_expr(node.test)
        and any(isinstance(s, ast.Expr) and re.fullmatch(r"skip\w*\.add\(.*\)", _text(s.value)) for s in node.body)
    ):
        return node.test
    return None


def _skip_function(expr: ast.expr) -> Callable[[int, int, int], bool]:
    names = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} - {"max"}
    role = {n: ("freq" if "freq" in n else "offset" if "offset" in n else "layer") for n in names}
    assert sorted(role.values()) == ["freq", "layer", "offset"], f"unexpected names in {_text(expr)}"
    code = compile(ast.Expression(body=expr), "<dsa>", "eval")

    def skips(layer: int, freq: int, offset: int) -> bool:
        values = {"layer": layer, "freq": freq, "offset": offset}
        return bool(eval(code, {"max": max}, {n: values[r] for n, r in role.items()}))  # noqa: S307 - vLLM's expression

    return skips


def _getattr_defaults(func: ast.FunctionDef) -> tuple[Any, Any]:
    found: dict[str, Any] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and _text(node.func) == "getattr" and len(node.args) == 3:
            key = node.args[1]
            if isinstance(key, ast.Constant) and key.value in ("index_topk_freq", "index_skip_topk_offset"):
                found[key.value] = ast.literal_eval(node.args[2])
    return found.get("index_topk_freq"), found.get("index_skip_topk_offset")


def dsa_topk_pattern(src: Source) -> tuple[Any, str]:
    """The letter of `index_topk_pattern` that makes a layer reuse the top-k, read where each DSA module decides it:
    `if <pattern> is None:` holds the frequency-and-offset rule, and its `elif 0 <= layer < len(<pattern>)` branch
    compares `<pattern>[layer] == "<letter>"` (so the pattern takes precedence, and a layer past its end keeps the
    module's default: compute)."""
    letters: set[str] = set()
    where: list[str] = []
    for rel, func in _dsa_functions(src):
        for node in ast.walk(func):
            if not (isinstance(node, ast.If) and _is_none_test(node.test)):
                continue
            name = _text(node.test.left)  # type: ignore[attr-defined]
            if "pattern" not in name or not any(_skip_expr(n) is not None for b in node.body for n in ast.walk(b)):
                continue
            assert len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If), f"{rel}:{node.lineno}: no elif"
            guard = node.orelse[0]
            assert re.fullmatch(rf"0 <= \w+ < len\({name}\)( and .*)?", _text(guard.test)), _text(guard.test)
            found = {
                c.comparators[0].value
                for c in ast.walk(guard)
                if isinstance(c, ast.Compare)
                and isinstance(c.left, ast.Subscript)
                and _text(c.left.value) == name
                and isinstance(c.ops[0], ast.Eq)
                and isinstance(c.comparators[0], ast.Constant)
            }
            assert len(found) == 1, f"{rel}:{guard.lineno}: {found}"
            letters |= found
            where.append(f"{rel}:{node.lineno}")
    if not where:
        raise LookupError("no index_topk_pattern branch in the modules that run GlmMoeDsaForCausalLM")
    assert len(letters) == 1, f"the DSA modules disagree on the reuse letter: {letters}"
    return letters.pop(), ", ".join(where)


def _is_none_test(test: ast.expr) -> bool:
    return isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Is) and _text(test.comparators[0]) == "None"


def _dsa_functions(src: Source) -> Iterator[tuple[str, ast.FunctionDef]]:
    for entry in DSA_FILES:
        path = src.root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else ([path] if path.exists() else [])
        for file in files:
            rel = str(file.relative_to(src.root))
            for func in (n for n in ast.walk(src.tree(rel)) if isinstance(n, ast.FunctionDef)):
                yield rel, func


# --- The DSA top-k across pipeline stages (vllm-63170) ------------------------------------------------------------

DSA_ENTRY = "models/deepseek_v32/__init__.py"
DSA_PLATFORMS = (("cuda", "current_platform.is_cuda()"), ("rocm", "current_platform.is_rocm()"))


def dsa_pp_topk_sent(src: Source) -> tuple[Any, str]:
    """The platforms whose GlmMoeDsaForCausalLM sends the shared top-k indices to the next pipeline stage: the
    module the DSA entry point imports under `current_platform.is_<platform>()` sets a buffer dict up with
    `pp_topk_buffers`, copies what it receives into place with `copy_pp_buffers` and returns the buffers in the
    `IntermediateTensors` it hands on."""
    sent: set[str] = set()
    where: list[str] = []
    for platform, test in DSA_PLATFORMS:
        rel = _dsa_module_for(src, test)
        line = _sends_topk(src, rel) if rel else None
        if line is not None:
            sent.add(platform)
            where.append(f"{rel}:{line}")
    return frozenset(sent), ", ".join(sorted(where)) or "models/deepseek_v32 (no top-k sent across stages)"


def _dsa_module_for(src: Source, test: str) -> str | None:
    if not (src.root / DSA_ENTRY).is_file():
        return None
    for branch in ast.walk(src.tree(DSA_ENTRY)):
        if isinstance(branch, ast.If) and _text(branch.test) == test:
            for node in branch.body:
                if isinstance(node, ast.ImportFrom) and any(
                    (a.asname or a.name) == "GlmMoeDsaForCausalLM" for a in node.names
                ):
                    module = (node.module or "").replace(".", "/")
                    return f"models/deepseek_v32/{module}.py" if node.level else f"{module.removeprefix('vllm/')}.py"
    return None


def _sends_topk(src: Source, rel: str) -> int | None:
    tree = src.tree(rel)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _text(node.value.func) == "pp_topk_buffers"
        ):
            buffers = _text(node.targets[0])
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
            copied = any(_text(c.func) == "copy_pp_buffers" and buffers in map(_text, c.args) for c in calls)
            handed_on = any(_text(c.func) == "IntermediateTensors" and f"{buffers}.items()" in _text(c) for c in calls)
            return node.lineno if copied and handed_on else None
    return None


# --- Source lines the start-up refusals cite (glm_operator.rules.startup) ------------------------------------------


def _one_line(lines: list[str], span: range, what: str, *needles: str) -> int:
    found = [n for n in span if all(needle in lines[n - 1] for needle in needles)]
    if len(found) != 1:
        raise LookupError(f"{len(found)} lines {what} (with {', '.join(needles)}), expected one")
    return found[0]


def get_pp_indices_lines(src: Source) -> tuple[int, ...]:
    """distributed/utils.py get_pp_indices: its def line, then the lines refusing an unparsable partition, a
    wrong entry count and a wrong sum."""
    rel = "distributed/utils.py"
    func = src.function(rel, "get_pp_indices")
    lines = (src.root / rel).read_text().splitlines()
    span = range(func.lineno, (func.end_lineno or func.lineno) + 1)
    return (
        func.lineno,
        _one_line(lines, span, "refusing an unparsable partition", "Invalid partition string"),
        _one_line(lines, span, "refusing the entry count", "raise ValueError", "len(partitions)", "pp_size"),
        _one_line(lines, span, "refusing the sum", "raise ValueError", "sum(partitions)", "num_hidden_layers"),
    )


def _kernel_raise(src: Source, function: str, message: str) -> tuple[int, ...]:
    """config/kernel.py: the `raise ValueError` line of `function` whose next line says `message`; none where
    the version has no such function."""
    rel = "config/kernel.py"
    try:
        func = src.function(rel, function)
    except LookupError:
        if f"def {function}" in (src.root / rel).read_text():
            raise  # defined, but not where it is looked for: the reader must follow it
        return ()
    lines = (src.root / rel).read_text().splitlines()
    span = range(func.lineno, (func.end_lineno or func.lineno) + 1)
    found = [n for n in span if "raise ValueError" in lines[n - 1] and message in lines[n]]
    if len(found) != 1:
        raise LookupError(f"{function}: {len(found)} refusals saying {message!r}, expected one")
    return (found[0],)


def moe_backend_model_line(src: Source) -> tuple[int, ...]:
    return _kernel_raise(src, "validate_flashinfer_moe_ep_model", "only supported for DeepSeek-V4")


def moe_backend_all2all_line(src: Source) -> tuple[int, ...]:
    return _kernel_raise(src, "bind_passthrough_all2all_backend", "dispatches and combines itself")


def _raise_saying(src: Source, rels: tuple[str, ...], message: str) -> tuple[str, int]:
    """The one `raise` line among `rels` whose next line says `message`: (file, line)."""
    found = []
    for rel in rels:
        path = src.root / rel
        if not path.is_file():
            continue
        lines = path.read_text().splitlines()
        found += [(rel, n) for n in range(1, len(lines)) if "raise " in lines[n - 1] and message in lines[n]]
    if len(found) != 1:
        raise LookupError(f"{len(found)} refusals saying {message!r} in {', '.join(rels)}, expected one")
    return found[0]


def speculative_tokens_line(src: Source) -> tuple[int, ...]:
    """config/speculative.py SpeculativeConfig._verify_args: the refusal of a config without a draft count."""
    return (_raise_saying(src, ("config/speculative.py",), "num_speculative_tokens must be provided with")[1],)


SPECULATIVE_DRAFT_FILES = ("config/speculative.py", "v1/worker/gpu/spec_decode/speculator_config.py")


def speculative_draft_line(src: Source) -> tuple[int, ...]:
    """The refusal of a draft count for a method that needs a draft checkpoint when none is given (in
    config/speculative.py, or from 0.34.0 in the speculator configs)."""
    return (_raise_saying(src, SPECULATIVE_DRAFT_FILES, "was provided but without speculative model")[1],)


def moonep_quantized_line(src: Source) -> tuple[int, ...]:
    """config/vllm.py VllmConfig: the refusal of the moonep all-to-all backend with a quantized model; none where
    the version has no moonep."""
    if "moonep" not in (src.root / "config/vllm.py").read_text():
        return ()
    return (_raise_saying(src, ("config/vllm.py",), "moonep all2all backend currently supports unquantized")[1],)


def kv_nvfp4_mla_line(src: Source) -> tuple[int, ...]:
    """config/vllm.py VllmConfig.validate_nvfp4_kv_cache_with_mla: the refusal of an nvfp4 KV cache for MLA."""
    return (_raise_saying(src, ("config/vllm.py",), "nvfp4 KV cache is not supported with MLA")[1],)


MXFP4_ORACLE = "model_executor/layers/fused_moe/oracle/mxfp4.py"
ORACLE_BASE = "model_executor/layers/fused_moe/oracle/base.py"


def mxfp4_oracle_experts_line(src: Source) -> tuple[int, ...]:
    """The MXFP4 oracle's refusal of a backend none of whose experts classes supports the deployment: the `raise`
    in oracle/mxfp4.py `_return_or_raise`, from 0.34.0 in oracle/base.py `MoEKernelOracle.return_or_raise`; none
    where the compressed-tensors MXFP4 method hands no --moe-backend to the oracle."""
    if not ct_mxfp4_moe_backends_read(src)[0]:
        return ()
    if (src.root / ORACLE_BASE).is_file() and "def return_or_raise" in (src.root / ORACLE_BASE).read_text():
        rel, func = ORACLE_BASE, src.method(ORACLE_BASE, "MoEKernelOracle", "return_or_raise")
    else:
        rel, func = MXFP4_ORACLE, src.function(MXFP4_ORACLE, "_return_or_raise")
    lines = (src.root / rel).read_text().splitlines()
    span = range(func.lineno, (func.end_lineno or func.lineno) + 1)
    return (_one_line(lines, span, "refusing unsupported experts", "raise ValueError(", "make_log_unsupported("),)


JSON_CONFIG_FLAGS = ("--kernel-config", "--attention-config", "--speculative-config")


def extra_args_json_lines(src: Source) -> tuple[int, ...]:
    """engine/arg_utils.py EngineArgs.add_cli_args: the lines adding --kernel-config, --attention-config and
    --speculative-config; then utils/argparse_utils.py FlexibleArgumentParser.parse_args: the line taking a dotted
    `--flag.key` into the flag's JSON."""
    cli = (src.root / "engine/arg_utils.py").read_text().splitlines()
    flags = tuple(_one_line(cli, range(1, len(cli) + 1), f"adding {f}", f'"{f}"') for f in JSON_CONFIG_FLAGS)
    parser = (src.root / "utils/argparse_utils.py").read_text().splitlines()
    dotted = 'processed_arg.startswith("-") and "." in processed_arg'
    return (*flags, _one_line(parser, range(1, len(parser) + 1), "reading a dotted --flag.key", dotted))


METRIC_FILES = ("v1/metrics/loggers.py", "v1/spec_decode/metrics.py")
_METRIC_KINDS = ("counter", "gauge", "histogram")


def _metric_kind(text: str) -> str | None:
    found = [kind for kind in _METRIC_KINDS if kind in text.lower()]
    return found[0] if len(found) == 1 else None


def _declared_metrics(src: Source) -> Iterator[tuple[str, str, str]]:
    """(name, type, file:line) of every `vllm:` metric the two metric modules declare: a call to a Counter, Gauge or
    Histogram class (vLLM's `self._counter_cls(name=...)`) with a literal name, or a (name, documentation) pair in
    a list assigned to a `counter...` variable (`SpecDecodingProm`'s `counter_specs`)."""
    for rel in METRIC_FILES:
        for node in ast.walk(src.tree(rel)):
            if isinstance(node, ast.Call) and (kind := _metric_kind(_text(node.func))):
                for keyword in node.keywords:
                    value = keyword.value
                    if (
                        keyword.arg == "name"
                        and isinstance(value, ast.Constant)
                        and str(value.value).startswith("vllm:")
                    ):
                        yield str(value.value), kind, f"{rel}:{value.lineno}"
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
                kind = _metric_kind(" ".join(_text(t) for t in node.targets))
                for item in node.value.elts:
                    if kind and isinstance(item, ast.Tuple) and isinstance(item.elts[0], ast.Constant):
                        name = str(item.elts[0].value)
                        if name.startswith("vllm:"):
                            yield name, kind, f"{rel}:{item.lineno}"


def prometheus_metrics(src: Source) -> tuple[Any, str]:
    """The metrics of the `prometheus-metrics` fact that this version declares, as `name (type)`, and where."""
    from glm_operator.catalog.vllm_facts import PROMETHEUS_METRICS

    read = {declared.split(" (")[0] for _first, value in PROMETHEUS_METRICS.since for declared in value}
    found = sorted({(rel_line, name, kind) for name, kind, rel_line in _declared_metrics(src) if name in read})
    if not found:
        raise LookupError(f"none of {sorted(read)} is declared in {', '.join(METRIC_FILES)}")
    ordered = sorted(found, key=lambda f: (f[0].split(":")[0], int(f[0].split(":")[1])))
    return frozenset(f"{name} ({kind})" for _where, name, kind in ordered), ", ".join(w for w, _n, _k in ordered)


LINE_READERS: dict[str, Callable[[Source], tuple[int, ...]]] = {
    "get-pp-indices": get_pp_indices_lines,
    "moe-backend-model": moe_backend_model_line,
    "moe-backend-all2all": moe_backend_all2all_line,
    "extra-args-json": extra_args_json_lines,
    "speculative-tokens": speculative_tokens_line,
    "speculative-draft": speculative_draft_line,
    "moonep-quantized": moonep_quantized_line,
    "kv-nvfp4-mla": kv_nvfp4_mla_line,
    "mxfp4-oracle-experts": mxfp4_oracle_experts_line,
}
