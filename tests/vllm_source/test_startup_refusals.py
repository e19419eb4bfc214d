"""Start-up refusals (glm_operator.rules.startup) held to each supported version's real vLLM source."""

from __future__ import annotations

import ast
import itertools
import re
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import pytest

from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.images import load_images
from glm_operator.catalog.versions import Version
from glm_operator.catalog.vllm_facts import source_lines
from glm_operator.rules.backends import all2all_backends
from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import evaluate
from glm_operator.rules.partition import parse_partition
from glm_operator.rules.startup import (
    GET_PP_INDICES_LINES,
    JSON_FLAG_ALIASES,
    JSON_FLAGS,
    KV_NVFP4_MLA,
    MODEL_RESTRICTED_MOE,
    MOONEP_QUANTIZED,
    MXFP4_ORACLE_EXPERTS,
    SELF_DISPATCHING_MOE,
    SPECULATIVE_DRAFT,
    SPECULATIVE_TOKENS,
    mxfp4_oracle_file,
    speculative_draft_file,
)
from tests.support.builders import GLMDeploymentBuilder as B
from tests.vllm_source import extract
from tests.vllm_source.test_source_facts import source

VERSIONS = load_images().versions
CATALOGS = Catalogs.packaged()

# Partitions as a person might write them, for pipeline sizes 1-4 on a 78-layer model.
TEXTS = (
    "78",
    "38,40",
    "39,39",
    "26,26,26",
    "18,20,20,20",
    "38,41",
    "0,78",
    "-1,79",
    "",
    "a,b",
    "38, 40",
    "38.0,40",
    "+38,40",
    "38,40,",
    "1_8,20,20,20",
    "78,0",
    "20,20,20,18",
    "77",
)


def test_every_supported_version_has_its_get_pp_indices_lines_read() -> None:
    assert set(VERSIONS) <= set(GET_PP_INDICES_LINES)


@pytest.mark.parametrize("version", VERSIONS)
def test_get_pp_indices_lines_are_where_vllm_refuses(version: str) -> None:
    src = source(version)
    func = src.function("distributed/utils.py", "get_pp_indices")
    lines = Path(src.root / "distributed/utils.py").read_text().splitlines()
    define, parse, count, total = GET_PP_INDICES_LINES[version]
    assert func.lineno == define
    assert "Invalid partition string" in lines[parse - 1]
    assert "len(partitions)" in lines[count - 1] and "pp_size" in lines[count - 1]
    assert "sum(partitions)" in lines[total - 1] and "num_hidden_layers" in lines[total - 1]


@pytest.mark.parametrize("version", VERSIONS)
def test_make_layers_reads_the_partition_at_every_pipeline_size(version: str) -> None:
    """make_layers calls get_pp_indices with no pipeline-size guard, so pipeline 1 reads the variable too."""
    src = source(version)
    func = src.function("model_executor/models/utils.py", "make_layers")
    calls = [n for n in func.body if "get_pp_indices(" in (ast.unparse(n))]
    assert calls, "make_layers no longer calls get_pp_indices at its top level"


@pytest.mark.parametrize("version", VERSIONS)
def test_glmops_refuses_every_partition_vllm_refuses(version: str) -> None:
    """Differential: vLLM's own get_pp_indices against parse_partition over a grid of texts and pipeline sizes."""
    split, _ = extract.pp_split_function(source(version))
    grid = list(itertools.product(TEXTS, range(1, 5)))
    vllm_refused = 0
    for text, pp in grid:
        try:
            split(78, pp, text)
            vllm_ok = True
        except ValueError:
            vllm_ok = False
            vllm_refused += 1
        try:
            sizes = parse_partition(text, 78, pp)
            glmops_ok = True
        except ValueError:
            glmops_ok = False
        if not vllm_ok:
            assert not glmops_ok, f"vLLM {version} refuses {text!r} at pipeline {pp}; glmops accepts it"
        elif glmops_ok:
            assert sizes == split(78, pp, text)
        else:  # glmops is stricter only where a stage gets fewer than one layer
            assert any(s < 1 for s in split(78, pp, text)), f"glmops refuses {text!r} at pipeline {pp}; vLLM runs it"
    assert vllm_refused > len(grid) // 2  # the grid exercises the refusals, not only the accepted splits


def _kernel_checks(version: str) -> tuple[Any, Any, str]:
    """vLLM's own validate_flashinfer_moe_ep_model and bind_passthrough_all2all_backend, run on our inputs."""
    src = source(version)
    rel = "config/kernel.py"
    keep: list[ast.stmt] = []
    for node in src.tree(rel).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if any(n.startswith(("FLASHINFER_MOE_EP", "PASSTHROUGH")) for n in names):
            keep.append(node)
        if isinstance(node, ast.FunctionDef) and node.name in (
            "validate_flashinfer_moe_ep_model",
            "bind_passthrough_all2all_backend",
        ):
            keep.append(node)
    logger = types.SimpleNamespace(info_once=lambda *a, **k: None, info=lambda *a, **k: None)
    namespace: dict[str, Any] = {"Iterable": Iterable, "Final": Final, "logger": logger}
    exec(compile(ast.Module(body=keep, type_ignores=[]), rel, "exec"), namespace)  # noqa: S102 - vLLM's own checks
    return namespace["validate_flashinfer_moe_ep_model"], namespace.get("bind_passthrough_all2all_backend"), rel


@pytest.mark.parametrize("version", [v for v in VERSIONS if v in MODEL_RESTRICTED_MOE])
def test_kernel_config_lines_are_where_vllm_refuses(version: str) -> None:
    lines = (source(version).root / "config/kernel.py").read_text().splitlines()
    _names, line = MODEL_RESTRICTED_MOE[version]
    assert "raise ValueError" in lines[line - 1] and "only supported for DeepSeek-V4" in lines[line]
    if version in SELF_DISPATCHING_MOE:
        _names, line = SELF_DISPATCHING_MOE[version]
        assert "raise ValueError" in lines[line - 1] and "dispatches and combines itself" in lines[line]


def test_versions_without_the_kernel_checks_have_none() -> None:
    for version in VERSIONS:
        text = (source(version).root / "config/kernel.py").read_text()
        assert ("def validate_flashinfer_moe_ep_model" in text) == (version in MODEL_RESTRICTED_MOE), version
        assert ("def bind_passthrough_all2all_backend" in text) == (version in SELF_DISPATCHING_MOE), version


@pytest.mark.parametrize("version", VERSIONS)
def test_glmops_refuses_every_moe_backend_the_kernel_config_refuses_for_glm5(version: str) -> None:
    """Differential: every MoE backend name of the version x every all2all backend, for GlmMoeDsaForCausalLM."""
    text = (source(version).root / "config/kernel.py").read_text()
    if "def validate_flashinfer_moe_ep_model" not in text:
        pytest.skip(f"vLLM {version} has no kernel-config MoE backend refusal")
    validate, bind, _ = _kernel_checks(version)
    backends = sorted(facts.MOE_BACKENDS.at(Version.parse(version)))
    all2alls = sorted(all2all_backends(Version.parse(version)))
    checked = refused = 0
    for backend, all2all in itertools.product(backends, all2alls):
        parallel = types.SimpleNamespace(all2all_backend="allgather_reducescatter" if all2all == "auto" else all2all)
        try:
            validate(backend, ["GlmMoeDsaForCausalLM"])
            if bind is not None:
                bind(backend, parallel)
            vllm_ok = True
        except ValueError:
            vllm_ok = False
            refused += 1
        spec = B().model("zai-org/GLM-5.3").accelerator("B200").image(f"vllm/vllm-openai:v{version}")
        obj = spec.set("spec.engine.moeBackend", backend).set("spec.engine.all2allBackend", all2all).build()
        glmops = {f.rule for f in evaluate(obj, CATALOGS) if f.severity == "error" and f.rule.startswith("startup/moe")}
        assert bool(glmops) == (not vllm_ok), f"{version} moeBackend {backend} all2all {all2all}: glmops {glmops}"
        checked += 1
    assert refused > 0 and checked == len(backends) * len(all2alls)


@pytest.mark.parametrize("version", VERSIONS)
def test_json_config_flags_and_their_managed_keys_exist(version: str) -> None:
    """The JSON flags startup/extra-args-json reads are vLLM CLI flags, and their managed keys config fields."""
    src = source(version)
    cli = (src.root / "engine/arg_utils.py").read_text()
    for flag in JSON_FLAGS:
        assert f'"{flag}"' in cli, f"{flag} is not a vLLM {version} flag"
    for alias, flag in JSON_FLAG_ALIASES.items():
        assert f'"{alias}"' in cli, f"{alias} ({flag}) is not a vLLM {version} flag"
    fields = {
        "--kernel-config": ("config/kernel.py", "KernelConfig"),
        "--attention-config": ("config/attention.py", "AttentionConfig"),
    }
    for flag, (rel, cls) in fields.items():
        declared = {
            n.target.id
            for n in src.cls(rel, cls).body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
        for key in JSON_FLAGS[flag]:
            assert key in declared, f"{cls} of vLLM {version} has no field {key}"
    parser = (src.root / "utils/argparse_utils.py").read_text()
    assert 'processed_arg.startswith("-") and "." in processed_arg' in parser  # the dotted spelling


def test_the_located_json_flag_lines_are_the_flags_the_refusal_reads() -> None:
    assert set(extract.JSON_CONFIG_FLAGS) == set(JSON_FLAGS)


def _located(name: str, version: str) -> tuple[int, ...]:
    return tuple(source_lines(name).get(version, ()))


def _window(version: str, rel: str, line: int, before: int) -> str:
    """The `before` lines above `line` of `rel` and the line itself, as one text."""
    lines = (source(version).root / rel).read_text().splitlines()
    return "\n".join(lines[max(0, line - 1 - before) : line])


@pytest.mark.parametrize("version", VERSIONS)
def test_speculative_refusals_are_where_vllm_refuses(version: str) -> None:
    """The draft count is required, and the target model is taken as the draft only when a count is given."""
    text = (source(version).root / "config/speculative.py").read_text()
    (tokens,) = _located(SPECULATIVE_TOKENS.cites, version)
    lines = text.splitlines()
    assert "raise ValueError" in lines[tokens - 1] and "num_speculative_tokens must be provided" in lines[tokens]
    assert "if self.num_speculative_tokens is None:" in lines[tokens - 2]
    guard = re.search(r"if self\.model is None and \(?\s*self\.num_speculative_tokens is not None", text)
    assert guard, f"vLLM {version} no longer takes the draft only when a count is given"
    (draft,) = _located(SPECULATIVE_DRAFT.cites, version)
    rel = speculative_draft_file(Version.parse(version))
    assert "without speculative model" in _window(version, rel, draft + 1, 0), (version, rel, draft)


@pytest.mark.parametrize("version", VERSIONS)
def test_moonep_refusal_is_where_vllm_refuses_a_quantized_model(version: str) -> None:
    found = _located(MOONEP_QUANTIZED.cites, version)
    has_moonep = "moonep" in facts.ALL2ALL_BACKENDS.at(Version.parse(version))
    assert bool(found) == has_moonep, f"vLLM {version}: moonep {has_moonep}, refusal located {found}"
    if found:
        above = _window(version, "config/vllm.py", found[0], 6)
        assert 'all2all_backend == "moonep"' in above and "quantization is not None" in above


@pytest.mark.parametrize("version", VERSIONS)
def test_nvfp4_kv_refusal_is_where_vllm_refuses_it_for_mla_and_glm5_is_mla(version: str) -> None:
    (line,) = _located(KV_NVFP4_MLA.cites, version)
    above = _window(version, "config/vllm.py", line, 8)
    assert "use_mla" in above
    if 'cache_dtype == "nvfp4"' in above:  # before the _ds_mla and 4over6 layouts: plain nvfp4 is the only one
        names = {n for n in facts.KV_CACHE_DTYPES.at(Version.parse(version)) if n.startswith("nvfp4")}
        assert names == {"nvfp4"}, f"vLLM {version} refuses only plain nvfp4 for MLA, and has {sorted(names)}"
    else:
        assert 'startswith("nvfp4")' in above and 'endswith("_ds_mla")' in above
    convertor = (source(version).root / "transformers_utils/model_arch_config_convertor.py").read_text()
    mla = convertor[convertor.index("def is_deepseek_mla") :][:3000]
    assert '"glm_moe_dsa"' in mla, f"vLLM {version} no longer treats GLM-5.x (glm_moe_dsa) as MLA"


FUSED_MOE = "model_executor/layers/fused_moe"
# Each experts class the rule mirrors: (file, class, markers its _supports_current_device must hold, markers its
# _supports_parallel_config must hold): the device and parallel conditions startup/mxfp4-oracle-experts refuses on.
ORACLE_EXPERTS = {
    "b12x": ("b12x.py", "B12xExperts", ("is_device_capability_family(120)",), ("not moe_parallel_config.use_ep",)),
    "flashinfer_moe_ep": (
        "experts/flashinfer_moe_ep.py",
        "FlashInferMoeEpExperts",
        ("supports_current_device()",),
        ("moe_parallel_config.use_ep",),
    ),
    "deep_gemm": (
        "experts/deep_gemm_moe.py",
        "DeepGemmFP4Experts",
        ("is_device_capability_family(100)", "is_device_capability_family(120)"),
        ("use_fi_nvl_two_sided_kernels", "use_fi_nvl_one_sided_kernels"),
    ),
}


def _experts_for(names: Iterable[str]) -> set[str]:
    return {"flashinfer_moe_ep" if n.startswith("flashinfer_moe_ep") else n for n in names}


@pytest.mark.parametrize("version", VERSIONS)
def test_mxfp4_oracle_refusal_is_where_the_oracle_raises(version: str) -> None:
    v = Version.parse(version)
    found = _located(MXFP4_ORACLE_EXPERTS.cites, version)
    read = facts.CT_MXFP4_MOE_BACKENDS_READ.at(v)
    assert bool(found) == bool(read), f"vLLM {version}: backends read {sorted(read)}, refusal located {found}"
    if not found:
        return
    window = _window(version, mxfp4_oracle_file(v), found[0], 20)
    assert "raise ValueError(" in window.splitlines()[-1] and "make_log_unsupported(" in window.splitlines()[-1]
    assert "def _return_or_raise(" in window or "def return_or_raise(" in window
    oracle = (source(version).root / FUSED_MOE / "oracle/mxfp4.py").read_text()
    select = oracle[oracle.index("def select_mxfp4_moe_backend(") :]
    select = select[: select.index("\ndef ")]
    assert 'runner_backend != "auto"' in select and "return_or_raise(" in select, version


@pytest.mark.parametrize("version", VERSIONS)
def test_mxfp4_oracle_experts_still_check_what_the_rule_mirrors(version: str) -> None:
    v = Version.parse(version)
    root = source(version).root
    oracle = (root / FUSED_MOE / "oracle/mxfp4.py").read_text()
    for name in _experts_for(facts.CT_MXFP4_MOE_BACKENDS_READ.at(v)):
        rel, cls, device, parallel = ORACLE_EXPERTS[name]
        assert f"import {cls}" in oracle or f"{cls}," in oracle, f"vLLM {version}: the oracle no longer maps to {cls}"
        src = source(version)
        text = (root / FUSED_MOE / rel).read_text()
        for method, markers in (("_supports_current_device", device), ("_supports_parallel_config", parallel)):
            body = ast.get_source_segment(text, src.method(f"{FUSED_MOE}/{rel}", cls, method)) or ""
            for marker in markers:
                assert marker in body, f"vLLM {version}: {cls}.{method} no longer has {marker!r}"
        if name == "flashinfer_moe_ep":
            helper = (root / FUSED_MOE / "flashinfer_moe_ep.py").read_text()
            assert "_SUPPORTED_CAPABILITIES = frozenset({(10, 0), (10, 3)})" in helper, version
    if "b12x" in facts.CT_MXFP4_MOE_BACKENDS_READ.at(v):
        mapping = oracle[oracle.index("def backend_to_kernel_cls") :][:600]
        assert "if backend in B12X_BACKENDS:" in mapping and "return [B12xExperts]" in mapping, version
