"""The pure parts of the real-kernel proof of vllm-63170 (images/vllm-patches/proof/dsa_pp_real.py): the runs it
plans, the partition it takes from admission, the model config vLLM reads, the JSON it writes, and the judge.

The proof itself needs two GPUs; these run on the CPU with made-up vLLM outputs shaped as its GPU side returns them.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import tomllib
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from glm_operator.catalog.models import load_models
from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.proof import PROOF, load_proof_module

judge_mod = load_proof_module("dsa_pp_judge")
real = load_proof_module("dsa_pp_real")
VARIANTS = real.variants()


def test_importing_the_proof_needs_neither_torch_nor_vllm() -> None:
    assert not {"torch", "vllm", "transformers"} & set(sys.modules)


def test_the_variants_take_glm5s_layer_count_and_reuse_rule_from_the_model_catalog() -> None:
    glm53 = load_models().lookup("zai-org/GLM-5.3-BF16")
    assert glm53 is not None
    assert VARIANTS["glm78"].layers == glm53.model.layers == 78
    for variant in VARIANTS.values():
        assert (variant.index_topk_freq, variant.index_skip_topk_offset) == (4, 3)
    assert VARIANTS["tiny8"].computing_layers() == [0, 1, 2, 6]
    assert VARIANTS["glm78"].computing_layers() == [0, 1, 2, *range(6, 78, 4)]


@pytest.mark.parametrize(
    ("variant", "default", "safe"),
    [("tiny8", [4, 4], [2, 6]), ("glm78", [39, 39], [38, 40])],
)
def test_the_plan_runs_pp1_twice_the_default_split_the_safe_partition_and_the_plugin(
    variant: str, default: list[int], safe: list[int]
) -> None:
    runs = {r.name: r for r in real.plan_runs(VARIANTS[variant])}
    assert list(runs) == ["pp1-a", "pp1-b", "pp2-default", "pp2-safe", "pp2-plugin"]
    assert [runs[n].pp for n in runs] == [1, 1, 2, 2, 2]
    assert runs["pp2-default"].split == default and runs["pp2-default"].partition_env is None
    assert runs["pp2-default"].starts_on_reuse and not runs["pp2-default"].plugin
    assert runs["pp2-safe"].split == safe and runs["pp2-safe"].partition_env == ",".join(map(str, safe))
    assert not runs["pp2-safe"].starts_on_reuse
    assert (
        runs["pp2-plugin"].plugin and runs["pp2-plugin"].split == default and runs["pp2-plugin"].partition_env is None
    )


def test_the_78_layer_safe_partition_is_exactly_what_admission_sets_on_a_stock_0_26_image() -> None:
    obj = B().model("zai-org/GLM-5.3-BF16").accelerator("H200").tensor(4).pipeline(2).image("vllm/vllm-openai:v0.26.0")
    result = admit(obj.build(), Catalogs.packaged())
    (value,) = [e["value"] for e in result.patched["spec"]["engine"]["env"] if e["name"] == "VLLM_PP_LAYER_PARTITION"]
    runs = {r.name: r for r in real.plan_runs(VARIANTS["glm78"])}
    assert runs["pp2-safe"].partition_env == value == "38,40"


@pytest.mark.parametrize("variant", ["tiny8", "glm78"])
def test_the_config_sets_every_key_vllm_reads_for_the_dsa_model(variant: str) -> None:
    config = real.model_config(VARIANTS[variant])
    assert config["architectures"] == ["GlmMoeDsaForCausalLM"] and config["model_type"] == "glm_moe_dsa"
    assert config["num_hidden_layers"] == VARIANTS[variant].layers
    assert (config["index_topk_freq"], config["index_skip_topk_offset"]) == (4, 3)
    assert config["kv_lora_rank"] + config["qk_rope_head_dim"] == 576  # the sparse MLA kernels' head size
    assert config["index_head_dim"] == 128 and config["index_topk"] == 512
    assert config["first_k_dense_replace"] == config["num_hidden_layers"]  # dense MLPs only
    assert config["initializer_range"] == 0.02
    json.dumps(config)


def test_prompts_are_seeded_token_ids_longer_than_index_topk() -> None:
    prompts = real.prompt_token_ids()
    assert prompts == real.prompt_token_ids()
    assert len(prompts) == real.PROMPTS["count"] and len({tuple(p) for p in prompts}) == len(prompts)
    assert all(len(p) > real.SHAPES["index_topk"] for p in prompts)
    assert all(2 <= t < real.SHAPES["vocab_size"] for p in prompts for t in p)


def test_the_plugin_loads_through_vllms_entry_point_with_only_the_dsa_patch_on(tmp_path: Path) -> None:
    pyproject = tomllib.loads((PROOF.parent / "pyproject.toml").read_text())
    group, name, value = real.PLUGIN_ENTRY_POINT
    assert pyproject["project"]["entry-points"][group] == {name: value}
    spec = {r.name: r for r in real.plan_runs(VARIANTS["tiny8"])}
    plugin_env = real.run_env(spec["pp2-plugin"], tmp_path, {"VLLM_PP_LAYER_PARTITION": "1,7"})
    assert plugin_env["VLLM_PLUGINS"] == name and "VLLM_PP_LAYER_PARTITION" not in plugin_env
    assert plugin_env["GLMOPS_PATCH_NULL_CONTENT_METRICS"] == "off"
    assert "GLMOPS_PATCH_DSA_PP_TOPK_HANDOFF" not in plugin_env
    site = Path(plugin_env["PYTHONPATH"])
    entry = (site / "glmops_vllm_patches-0+proof.dist-info" / "entry_points.txt").read_text()
    assert f"[{group}]\n{name} = {value}" in entry
    assert (site / "glmops_vllm_patches" / "plugin.py").is_file()
    safe_env = real.run_env(spec["pp2-safe"], tmp_path, {})
    assert safe_env["VLLM_PP_LAYER_PARTITION"] == "2,6" and safe_env["VLLM_PLUGINS"] == ""
    assert safe_env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"


# ------------------------------------------------------------------------------------- JSON and judge


def _raw(shift: float, tokens_from: int | None = None, log: str = "") -> dict[str, Any]:
    outputs = []
    for p in range(4):
        logprobs = [-1.0 - 0.001 * i - p for i in range(600)]
        tokens = [10 + i for i in range(8)]
        if tokens_from is not None:
            tokens = tokens[:tokens_from] + [99] * (8 - tokens_from)
        outputs.append(
            {"prompt_logprobs": [x + shift * ((i % 7) / 6) for i, x in enumerate(logprobs)], "token_ids": tokens}
        )
    return {"outputs": outputs, "seconds": 30.0, "log": log}


PLUGIN_LOG = (
    "(Worker_PP0 pid=1) INFO glmops patch dsa-pp-topk-handoff (vllm-63170) applied: wrapped __init__/forward\n"
    "(Worker_PP1 pid=2) INFO glmops patch dsa-pp-topk-handoff: layers [4, 8): receives top-k rows"
)
ENV = {
    "machine": {"gpus": [{"name": "NVIDIA H200", "memory_gib": 139.8, "capability": "9.0"}] * 2, "cuda": "13.0"},
    "versions": {"vllm": "0.26.0", "torch": "2.11.0+cu130"},
    "parameters": {"tiny8": 1000},
}


def document(**raws: dict[str, Any]) -> dict[str, Any]:
    base = {
        "pp1-a": _raw(0.0),
        "pp1-b": _raw(0.016),
        "pp2-default": _raw(1.24, tokens_from=0),
        "pp2-safe": _raw(0.012),
        "pp2-plugin": _raw(0.014, log=PLUGIN_LOG),
    }
    base.update(raws)
    variant = VARIANTS["tiny8"]
    return real.result_document(variant, real.plan_runs(variant), base, ENV)


def test_a_result_like_the_issues_passes_and_the_json_says_what_was_run_where() -> None:
    doc = json.loads(json.dumps(document()))
    assert doc["verdict"]["passed"], doc["verdict"]["problems"]
    assert doc["schema"] == judge_mod.SCHEMA and doc["variant"] == "tiny8"
    assert doc["machine"]["gpus"][0]["name"] == "NVIDIA H200" and doc["versions"]["vllm"] == "0.26.0"
    assert doc["model"]["computing_layers"] == [0, 1, 2, 6] and doc["model"]["proposed_partition"] == [2, 6]
    runs = {r["name"]: r for r in doc["runs"]}
    assert "max_abs_logprob_diff" not in runs["pp1-a"]
    assert runs["pp1-b"]["max_abs_logprob_diff"] == pytest.approx(0.016)
    assert runs["pp2-default"]["max_abs_logprob_diff"] == pytest.approx(1.24)
    assert runs["pp2-default"]["tokens_identical"] is False and runs["pp2-default"]["first_differing_token"] == 0
    assert runs["pp2-safe"]["tokens_identical"] is True and runs["pp2-safe"]["partition_env"] == "2,6"
    assert runs["pp2-plugin"]["glmops_log"] == PLUGIN_LOG.splitlines()
    assert doc["verdict"]["runs"] == {
        "pp1-a": "reference",
        "pp1-b": "noise",
        "pp2-default": "differs",
        "pp2-safe": "same",
        "pp2-plugin": "same",
    }


FAILING = {
    "the failure is not reproduced": ({"pp2-default": _raw(0.02)}, "pp2-default: expected to differ"),
    "the plugin does not fix it": ({"pp2-plugin": _raw(1.1, log=PLUGIN_LOG)}, "pp2-plugin: expected to match"),
    "the plugin run changes tokens": ({"pp2-plugin": _raw(0.01, 5, PLUGIN_LOG)}, "pp2-plugin: generated tokens differ"),
    "the safe partition does not fix it": ({"pp2-safe": _raw(0.9, 3)}, "pp2-safe: expected to match"),
    "the plugin never loaded": ({"pp2-plugin": _raw(0.014)}, "the plugin did not patch this vLLM"),
    "the plugin loaded where it must not": ({"pp2-safe": _raw(0.01, log=PLUGIN_LOG)}, "pp2-safe: glmops patches"),
    "the safe partition misses only in tokens": ({"pp2-safe": _raw(0.012, 3)}, "pp2-safe: generated tokens differ"),
    "the noise swamps the signal": ({"pp1-b": _raw(0.2)}, "is too high (above 0.1)"),
    "a run failed": ({"pp2-plugin": {"error": "exit 1: CUDA out of memory", "log": ""}}, "CUDA out of memory"),
}


@pytest.mark.parametrize("case", sorted(FAILING))
def test_a_result_that_does_not_prove_the_fix_fails_and_says_why(case: str) -> None:
    raws, reason = FAILING[case]
    verdict = document(**raws)["verdict"]
    assert not verdict["passed"]
    assert any(reason in problem for problem in verdict["problems"]), verdict["problems"]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda d: d["versions"].update(vllm="0.25.1"), "needs 0.26.0 or later"),
        (lambda d: d["machine"].update(gpus=d["machine"]["gpus"][:1]), "PP=2 needs two"),
        (lambda d: d["runs"].pop(), "pp2-plugin: absent"),
        (lambda d: d["runs"][3].update(split=[1, 7], stage_starts=[0, 1]), "not the partition admission proposes"),
        (lambda d: d["runs"][2].update(split=[6, 2], stage_starts=[0, 6]), "makes it a 'same' run"),
        (lambda d: d.update(schema="other"), "schema"),
    ],
)
def test_the_judge_reads_the_machine_and_the_splits_from_the_file_not_from_its_verdict(edit: Any, reason: str) -> None:
    doc = copy.deepcopy(document())
    edit(doc)
    verdict = judge_mod.judge(doc)
    assert not verdict.passed
    assert any(reason in problem for problem in verdict.problems), verdict.problems


def test_the_judge_command_exits_0_on_a_passing_file_and_1_on_a_failing_one(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(document()))
    bad.write_text(json.dumps(document(**{"pp2-default": _raw(0.0)})))
    assert judge_mod.main([str(good)]) == 0
    assert judge_mod.main([str(good), str(bad)]) == 1
    assert judge_mod.main([]) == 1


def test_where_pp1_itself_does_not_reproduce_its_tokens_the_logprobs_alone_decide() -> None:
    # As measured on an H200 (results/pp1-one-gpu/): two PP=1 runs part within the first ten greedy tokens.
    noisy = {"pp1-b": _raw(0.02, 4), "pp2-safe": _raw(0.03, 2), "pp2-plugin": _raw(0.025, 6, PLUGIN_LOG)}
    verdict = document(**noisy)["verdict"]
    assert verdict["passed"], verdict["problems"]
    assert verdict["tokens_reproducible"] is False and verdict["noise_floor"] == pytest.approx(0.02)
    stale = document(**{**noisy, "pp2-safe": _raw(0.4, 2)})["verdict"]
    assert not stale["passed"] and any("pp2-safe: expected to match" in p for p in stale["problems"])
    assert document()["verdict"]["tokens_reproducible"] is True


RESULTS = sorted((PROOF / "results").glob("*.json"))
PARTIAL = sorted((PROOF / "results" / "pp1-one-gpu").glob("*.json"))


@pytest.mark.parametrize("path", PARTIAL, ids=[p.name for p in PARTIAL])
def test_a_committed_pp1_only_result_never_passes_and_says_what_awaits_two_gpus(path: Path) -> None:
    doc = json.loads(path.read_text())
    verdict = judge_mod.judge(doc)
    assert doc["verdict"] == json.loads(json.dumps(asdict(verdict)))  # recorded as the judge decides today
    assert not verdict.passed
    assert "1 GPU(s): PP=2 needs two" in verdict.problems
    assert {f"{name}: not run" for name in ("pp2-default", "pp2-safe", "pp2-plugin")} <= set(verdict.problems)
    runs = {run["name"]: run for run in doc["runs"]}
    assert runs["pp1-b"]["max_abs_logprob_diff"] == verdict.noise_floor < judge_mod.NOISE_MAX
    for name in ("pp1-a", "pp1-b"):
        assert runs[name]["backend_log"], f"{name}: no attention backend logged"
        assert FLASHMLA in runs[name]["backend_log"][0], runs[name]["backend_log"]


FLASHMLA = "FLASHMLA_SPARSE"


def test_the_pp1_runs_one_gpu_allows_ask_for_one_gpu_and_the_proof_for_two(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    side = ModuleType("dsa_pp_real_gpu")
    side.missing_requirements = lambda gpus: asked.append(gpus) or []
    monkeypatch.setitem(sys.modules, "dsa_pp_real_gpu", side)
    assert real.main(["--check-env", "--runs", "pp1-a", "pp1-b"]) == 0
    assert real.main(["--check-env"]) == 0
    assert real.main(["--check-env", "--runs", "pp1-b", "pp2-safe"]) == 0
    assert asked == [1, 2, 2]
    with pytest.raises(SystemExit):
        real.main(["--check-env", "--runs", "pp3"])


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_every_committed_result_passes_the_judge_as_recorded(path: Path) -> None:
    doc = json.loads(path.read_text())
    verdict = judge_mod.judge(doc)
    assert doc["verdict"]["passed"] == verdict.passed and verdict.passed, verdict.problems


def test_docs_show_measured_figures_only_from_result_files_and_mark_the_place_until_there_are_some() -> None:
    from glmops_vllm_patches.docs import render_proof_md

    empty = render_proof_md([])
    assert "**Not measured yet.**" in empty and "1.24" not in empty
    text = render_proof_md([json.loads(json.dumps(document()))], ["pyzmq", "msgspec"])
    assert "Not measured yet" not in text and "`pyzmq`, `msgspec`" in text
    assert "2 x NVIDIA H200 (CUDA 13.0" in text and "vLLM 0.26.0, torch 2.11.0+cu130" in text
    assert "Noise floor (PP=1 twice): 0.016. Verdict: **pass**." in text
    assert "| pp2-default | 4,4 | 4 (reuse) | no | 1.24 | differ from token 0 |" in text
    assert "| pp2-safe | 2,6 | 2 (computes) | no | 0.012 | identical |" in text
    assert "| pp2-plugin | 4,4 | 4 (reuse) | yes | 0.014 | identical |" in text
    failing = render_proof_md([document(**{"pp2-default": _raw(0.0)})])
    assert "Verdict: **FAIL**" in failing and "pp2-default: expected to differ" in failing


def test_docs_show_pp1_figures_from_one_gpu_apart_from_the_proof_which_stays_not_measured() -> None:
    from glmops_vllm_patches.docs import render_proof_md

    one_gpu = copy.deepcopy(ENV)
    one_gpu["machine"].update(gpus=one_gpu["machine"]["gpus"][:1], driver="580.159.04")
    variant = VARIANTS["tiny8"]
    partial = real.result_document(
        variant, real.plan_runs(variant), {"pp1-a": _raw(0.0), "pp1-b": _raw(0.0216, 4)}, one_gpu
    )
    assert not partial["verdict"]["passed"]
    text = render_proof_md([], [], [json.loads(json.dumps(partial))])
    assert "### Measured so far: PP=1 on one GPU" in text and "**Not measured yet.**" in text
    row = next(line for line in text.splitlines() if line.startswith("| `tiny8`"))
    assert "| 1 x NVIDIA H200 (driver 580.159.04) | 0.26.0, 2.11.0+cu130 | 0.0216 |" in row
    assert "| no (from token 4) | 0.0648 | 0.25 | 30 / 30 |" in row
    assert "Measured so far" not in render_proof_md([], [])


def test_the_offline_wheel_list_holds_the_proofs_own_imports_and_leaves_torch_and_vllm_to_their_own_step() -> None:
    lines = (PROOF / "requirements-gpu.txt").read_text().splitlines()
    names = {line.split("#")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower() for line in lines}
    assert {"transformers", "safetensors", "pydantic", "pyyaml"} <= names
    assert not {"torch", "vllm"} & names
    assert "pip install --no-index --find-links wheels --no-deps vllm==0.26.0" in "\n".join(lines)


# ---------------------------------------------------------------- orchestration, with a stand-in for vLLM

# Stands in for `dsa_pp_real_gpu.py run JOB OUT`: answers as the issue's measurements did, from what the run's
# environment says (partition, plugin allow-list), and counts its starts. FAKE_FAIL / FAKE_HANG name a run to break.
FAKE_VLLM = r"""
import json, os, subprocess, sys, time
from pathlib import Path
job_file, out = Path(sys.argv[2]), Path(sys.argv[3])
job, name = json.loads(job_file.read_text()), job_file.name.split(".")[0]
with open(job_file.parent / "starts.txt", "a") as f:
    f.write(name + "\n")
if os.environ.get("FAKE_HANG") == name:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (job_file.parent / "grandchild.pid").write_text(str(child.pid))
    time.sleep(60)
if os.environ.get("FAKE_FAIL") == name:
    sys.exit("RuntimeError: CUDA error: out of memory")
plugin = os.environ["VLLM_PLUGINS"] == "glmops_vllm_patches"
if plugin:
    print("(EngineCore pid=1) INFO glmops patch dsa-pp-topk-handoff (vllm-63170) applied: wrapped")
    print("(Worker_PP1 pid=3) INFO glmops patch dsa-pp-topk-handoff: layers [4, 8): receives top-k rows")
stale = job["pp"] == 2 and not plugin and "VLLM_PP_LAYER_PARTITION" not in os.environ
shift = {"pp1-a": 0.0, "pp1-b": 0.016}.get(name, 1.24 if stale else 0.012)
outputs = [
    {"prompt_logprobs": [-1.0 + (shift if i == 5 else 0.0) for i in range(len(p) - 1)],
     "token_ids": [7] * job["generate"] if not stale else [8] * job["generate"]}
    for p in job["prompts"]
]
out.write_text(json.dumps({"outputs": outputs}))
"""


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    monkeypatch.setattr(real, "GPU_SCRIPT", script)
    side = ModuleType("dsa_pp_real_gpu")
    side.build_model = lambda config, out, seed: out
    side.environment = lambda: copy.deepcopy({k: v for k, v in ENV.items() if k != "parameters"})
    side.parameter_count = lambda model_dir: 1000
    monkeypatch.setitem(sys.modules, "dsa_pp_real_gpu", side)
    for name in ("FAKE_FAIL", "FAKE_HANG", "VLLM_PP_LAYER_PARTITION", "VLLM_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _starts(work: Path) -> list[str]:
    return (work / "tiny8" / "starts.txt").read_text().split()


def test_one_command_runs_each_start_in_its_own_environment_and_writes_a_passing_json(fake_gpu: Path) -> None:
    out, work = fake_gpu / "results", fake_gpu / "work"
    doc = real.run_variant(VARIANTS["tiny8"], out, work, timeout=120)
    assert doc["verdict"]["passed"], doc["verdict"]["problems"]
    assert json.loads((out / "tiny8.json").read_text()) == json.loads(json.dumps(doc))
    runs = {r["name"]: r for r in doc["runs"]}
    assert runs["pp2-default"]["max_abs_logprob_diff"] == pytest.approx(1.24)
    assert runs["pp2-plugin"]["glmops_log"][0].endswith(
        "glmops patch dsa-pp-topk-handoff (vllm-63170) applied: wrapped"
    )
    assert _starts(work) == ["pp1-a", "pp1-b", "pp2-default", "pp2-safe", "pp2-plugin"]


def test_a_failed_run_fails_the_verdict_and_a_second_command_reruns_only_what_is_missing(
    fake_gpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, work = fake_gpu / "results", fake_gpu / "work"
    monkeypatch.setenv("FAKE_FAIL", "pp2-plugin")
    doc = real.run_variant(VARIANTS["tiny8"], out, work, timeout=120)
    assert not doc["verdict"]["passed"]
    assert any("CUDA error: out of memory" in p for p in doc["verdict"]["problems"])
    monkeypatch.delenv("FAKE_FAIL")
    doc = real.run_variant(VARIANTS["tiny8"], out, work, timeout=120, only=["pp2-plugin"])
    assert doc["verdict"]["passed"], doc["verdict"]["problems"]
    assert _starts(work) == ["pp1-a", "pp1-b", "pp2-default", "pp2-safe", "pp2-plugin", "pp2-plugin"]


def test_a_hung_start_is_stopped_with_the_processes_it_started(fake_gpu: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = fake_gpu / "work"
    monkeypatch.setenv("FAKE_HANG", "pp1-a")
    doc = real.run_variant(VARIANTS["tiny8"], fake_gpu / "results", work, timeout=3, only=["pp1-a"])
    assert doc["runs"][0]["error"].startswith("exit -1")
    pid = int((work / "tiny8" / "grandchild.pid").read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
