"""vllm-63170 on real vLLM kernels, two GPUs: one command reproduces the stale DSA top-k under PP=2 and shows it gone.

    python images/vllm-patches/proof/dsa_pp_real.py --out images/vllm-patches/proof/results

On a machine without network, install the bundle `bundle.py` writes first. `--runs pp1-a pp1-b` needs one GPU (the
noise floor, results/pp1-one-gpu/); the PP=2 runs need two.

For each variant it writes a GLM-5 DSA model with `transformers` (seeded weights, std 0.02: vLLM's dummy weights are
too uniform to show the bug), then starts vLLM once per run, each in its own process, greedy, on prompts longer
than `index_topk` so prefill takes the sparse path:

- `pp1-a`, `pp1-b`: PP=1 twice; `pp1-a` is the reference, `pp1-b` measures the noise floor;
- `pp2-default`: PP=2 with vLLM's default split (stage 2 starts on a top-k reuse layer: the failure);
- `pp2-safe`: PP=2 with `VLLM_PP_LAYER_PARTITION` set to the partition glmops' admission proposes
  (`glm_operator.rules.partition.balanced_partition`, the call rule vllm-63170 makes);
- `pp2-plugin`: PP=2, default split, with the glmops plugin loaded through vLLM's own plugin loader (only its
  `dsa-pp-topk-handoff` patch switched on).

Variants: `tiny8` (8 layers: layers 0, 1, 2, 6 compute top-k, 3, 4, 5, 7 reuse; default split 4,4) and `glm78`
(GLM-5.x's real 78-layer pattern; default split 39,39). The layer count and the reuse rule (index_topk_freq,
index_skip_topk_offset) come from the model catalog's GLM-5.3 entry.

One JSON per variant (`<out>/<variant>.json`): per run the split, the maximum absolute difference of prompt
logprobs against `pp1-a`, whether the generated tokens are identical, the glmops log lines; the machine, its GPUs
and the versions; and the verdict of `dsa_pp_judge.py`. Runs already measured in `--work` are reused, so a variant
can be finished over several commands. `--check-env` only reports what the machine lacks.

The config fields, as vLLM 0.26.0 reads them (`vllm/model_executor/models/deepseek_v2.py`): `index_topk` makes a
layer sparse (`is_v32 = hasattr(config, "index_topk")`, :1075) and sizes the per-rank top-k buffer (:1359-1366);
`index_topk_freq`, `index_topk_pattern` and `index_skip_topk_offset` pick the reuse layers (getattr with defaults 1,
None and 2, :1082-1084; the rule at :1088); `index_n_heads` and `index_head_dim` shape the indexer (:662-663);
`first_k_dense_replace` and `n_routed_experts` choose dense or MoE MLPs (a layer is MoE only at or after
`first_k_dense_replace`, so setting it to the layer count keeps every MLP dense). `registry.py:116` sends
`GlmMoeDsaForCausalLM` to `deepseek_v2`; `models/deepseek_v32/nvidia/attention.py:210-217` repeats the rule.

This module imports only the standard library at the top: the pure parts (plan, config, comparison, JSON) run and
are tested anywhere; torch, transformers and vLLM are imported by `dsa_pp_real_gpu.py` on the GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
for _path in (REPO / "operator", REPO / "images" / "vllm-patches" / "src", HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

SCHEMA = "glmops/dsa-pp-proof/v1"
CATALOG_MODEL = "zai-org/GLM-5.3-BF16"  # GLM-5.x's layer count and top-k reuse rule
PATCH = "dsa-pp-topk-handoff"
PLUGIN_ENTRY_POINT = ("vllm.general_plugins", "glmops_vllm_patches", "glmops_vllm_patches:register")
RUN_NAMES = ("pp1-a", "pp1-b", "pp2-default", "pp2-safe", "pp2-plugin")
GPU_SCRIPT = HERE / "dsa_pp_real_gpu.py"  # run once per vLLM start, in its own process

# The model's shapes. Sparse MLA kernels take a 512 latent and 64 RoPE dims (576, as DeepSeek V3.2 and GLM-5);
# the indexer keeps GLM-5's 32 heads of 128; the rest is small. index_topk 512 < prompt length: sparse prefill.
SHAPES: dict[str, Any] = {
    "vocab_size": 8192,
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "q_lora_rank": 256,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "index_topk": 512,
    "index_n_heads": 32,
    "index_head_dim": 128,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "initializer_range": 0.02,
}
PROMPTS = {"count": 4, "length": 1536, "generate": 32, "seed": 20260617}
WEIGHT_SEED = 1234
MAX_MODEL_LEN = 4096
# Pinned, so every run uses the same sparse MLA kernels whatever vLLM would pick on the GPU (on Hopper it lists
# FLASH_ATTN_MLA_SPARSE first: vllm/platforms/cuda.py:135-143): DeepSeek's FlashMLA sparse kernels, which read the
# top-k indices the bug leaves stale. The offline bundle (bundle.py) carries no FlashAttention 3 for that reason.
ATTENTION_BACKEND = "FLASHMLA_SPARSE"


@dataclass(frozen=True)
class Variant:
    name: str
    layers: int
    index_topk_freq: int
    index_skip_topk_offset: int

    def computes_topk(self, layer: int) -> bool:
        return bool(self.rule().computes_topk(layer))

    def computing_layers(self) -> list[int]:
        return [layer for layer in range(self.layers) if self.computes_topk(layer)]

    def rule(self) -> Any:
        """The catalog's ModelInfo with this variant's layer count: its `computes_topk` is the rules' own."""
        return catalog_model().model_copy(update={"layers": self.layers})


def catalog_model() -> Any:
    from glm_operator.catalog.models import load_models

    entry = load_models().lookup(CATALOG_MODEL)
    assert entry is not None, f"{CATALOG_MODEL} is not in the model catalog"
    return entry.model


def variants() -> dict[str, Variant]:
    model = catalog_model()
    rule = (model.index_topk_freq, model.index_skip_topk_offset)
    return {"tiny8": Variant("tiny8", 8, *rule), "glm78": Variant("glm78", model.layers, *rule)}


@dataclass(frozen=True)
class RunSpec:
    """One vLLM start: its pipeline size, the partition it sets (None: vLLM's default) and whether the plugin loads."""

    name: str
    pp: int
    partition: list[int] | None = None
    plugin: bool = False
    split: list[int] = field(default_factory=list)
    stage_starts: list[int] = field(default_factory=list)
    starts_on_reuse: bool = False

    @property
    def partition_env(self) -> str | None:
        return ",".join(map(str, self.partition)) if self.partition else None


def proposed_partition(variant: Variant, pp: int = 2) -> list[int]:
    """The partition admission proposes for a stock image (rule vllm-63170's `_partition_finding`)."""
    from glm_operator.rules.partition import balanced_partition

    good = balanced_partition(variant.layers, pp, variant.computes_topk)
    assert good is not None, f"no safe split of {variant.layers} layers into {pp} stages"
    return good


def plan_runs(variant: Variant) -> list[RunSpec]:
    from glm_operator.rules.partition import stage_starts, vllm_default_split

    def spec(name: str, pp: int, partition: list[int] | None = None, plugin: bool = False) -> RunSpec:
        split = partition or vllm_default_split(variant.layers, pp)
        starts = stage_starts(split)
        reuse = any(not variant.computes_topk(s) for s in starts[1:])
        return RunSpec(name, pp, partition, plugin, split, starts, reuse)

    runs = [
        spec("pp1-a", 1),
        spec("pp1-b", 1),
        spec("pp2-default", 2),
        spec("pp2-safe", 2, proposed_partition(variant)),
        spec("pp2-plugin", 2, plugin=True),
    ]
    assert runs[2].starts_on_reuse and runs[4].starts_on_reuse and not runs[3].starts_on_reuse, runs
    return runs


def model_config(variant: Variant) -> dict[str, Any]:
    """config.json of the variant (the keys vLLM reads are set explicitly, whatever transformers' defaults are)."""
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        **SHAPES,
        "num_hidden_layers": variant.layers,
        "index_topk_freq": variant.index_topk_freq,
        "index_skip_topk_offset": variant.index_skip_topk_offset,
        "first_k_dense_replace": variant.layers,  # every MLP dense (deepseek_v2 builds MoE only past it)
        "n_routed_experts": 8,
        "moe_intermediate_size": 256,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "hidden_act": "silu",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "bfloat16",
    }


def prompt_token_ids(vocab: int = SHAPES["vocab_size"]) -> list[list[int]]:
    """Seeded random token ids (no tokenizer needed), longer than index_topk so prefill is sparse."""
    import random

    rng = random.Random(PROMPTS["seed"])
    return [[rng.randrange(2, vocab) for _ in range(PROMPTS["length"])] for _ in range(PROMPTS["count"])]


# ------------------------------------------------------------------------------------------------ comparison


def compare(reference: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """Prompt logprobs and generated tokens of `run` against `reference` (both as dsa_pp_real_gpu.run_once returns)."""
    per_prompt, identical, first_diff = [], True, None
    for ref, got in zip(reference["outputs"], run["outputs"], strict=True):
        a, b = ref["prompt_logprobs"], got["prompt_logprobs"]
        assert len(a) == len(b), "prompt logprobs of different lengths: not the same prompt"
        per_prompt.append(max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0))
        if ref["token_ids"] != got["token_ids"]:
            identical = False
            pairs = zip(ref["token_ids"], got["token_ids"], strict=False)
            at = next(
                (i for i, (x, y) in enumerate(pairs) if x != y), min(len(ref["token_ids"]), len(got["token_ids"]))
            )
            first_diff = at if first_diff is None else min(first_diff, at)
    return {
        "max_abs_logprob_diff": max(per_prompt),
        "per_prompt_max_abs_logprob_diff": per_prompt,
        "tokens_identical": identical,
        "first_differing_token": first_diff,
    }


def patch_lines(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if "glmops patch " in line]


def backend_lines(log: str) -> list[str]:
    """vLLM's log lines naming the attention backend it built (to show the pinned one ran)."""
    return [line.strip() for line in log.splitlines() if "Using " in line and "backend" in line.lower()]


def run_record(spec: RunSpec, raw: Mapping[str, Any] | None, reference: Mapping[str, Any] | None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "name": spec.name,
        "pp": spec.pp,
        "partition_env": spec.partition_env,
        "plugin": spec.plugin,
        "split": spec.split,
        "stage_starts": spec.stage_starts,
        "starts_on_reuse": spec.starts_on_reuse,
    }
    if raw is None:
        return {**record, "error": "not run"}
    record.update(
        seconds=raw.get("seconds"),
        startup_seconds=raw.get("startup_seconds"),
        generate_seconds=raw.get("generate_seconds"),
        glmops_log=patch_lines(raw.get("log", "")),
        backend_log=raw.get("backend_log", []),
    )
    if raw.get("error"):
        return {**record, "error": raw["error"]}
    if reference is not None and spec.name != "pp1-a":
        record.update(compare(reference, raw))
    return record


def result_document(
    variant: Variant, runs: Sequence[RunSpec], raws: Mapping[str, Mapping[str, Any]], env: Mapping[str, Any]
) -> dict[str, Any]:
    reference = raws.get("pp1-a")
    if reference is not None and reference.get("error"):
        reference = None
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "variant": variant.name,
        "model": {
            "catalog_rule_from": CATALOG_MODEL,
            "layers": variant.layers,
            "index_topk_freq": variant.index_topk_freq,
            "index_skip_topk_offset": variant.index_skip_topk_offset,
            "computing_layers": variant.computing_layers(),
            "proposed_partition": proposed_partition(variant),
            "weight_seed": WEIGHT_SEED,
            "weight_std": SHAPES["initializer_range"],
            "config": model_config(variant),
            "parameters": env.get("parameters", {}).get(variant.name),
        },
        "prompts": dict(PROMPTS),
        "attention_backend": ATTENTION_BACKEND,
        "machine": env.get("machine", {}),
        "versions": env.get("versions", {}),
        "runs": [run_record(spec, raws.get(spec.name), reference) for spec in runs],
    }
    from dsa_pp_judge import judge

    doc["verdict"] = asdict(judge(doc))
    return doc


# ------------------------------------------------------------------------------------------------ orchestration


def plugin_site(work: Path) -> Path:
    """A folder that makes the plugin source an installed distribution for importlib.metadata (no build, offline):
    vLLM's plugin loader then finds its entry point in every process it starts."""
    group, name, value = PLUGIN_ENTRY_POINT
    site = work / "plugin-site"
    info = site / "glmops_vllm_patches-0+proof.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: glmops-vllm-patches\nVersion: 0+proof\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {value}\n")
    link = site / "glmops_vllm_patches"
    if not link.exists():
        link.symlink_to(REPO / "images" / "vllm-patches" / "src" / "glmops_vllm_patches", target_is_directory=True)
    return site


def patch_switches(only: str = PATCH) -> dict[str, str]:
    """Every glmops patch switched off but `only` (the proof is about one patch; the others need more of vLLM)."""
    from glmops_vllm_patches.registry import PATCHES

    return {p.info.env_switch: "off" for p in PATCHES if p.info.name != only}


def run_env(spec: RunSpec, work: Path, base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in ("VLLM_PP_LAYER_PARTITION", "VLLM_PLUGINS")}
    env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"  # FlashInfer is not needed here
    if spec.partition_env:
        env["VLLM_PP_LAYER_PARTITION"] = spec.partition_env
    if spec.plugin:
        env["VLLM_PLUGINS"] = PLUGIN_ENTRY_POINT[1]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_site(work)), base.get("PYTHONPATH")]))
        env.update(patch_switches())
    else:
        env["VLLM_PLUGINS"] = ""  # an empty allow-list: no general plugin loads (vllm/plugins/__init__.py)
    return env


def run_in_subprocess(spec: RunSpec, model_dir: Path, work: Path, timeout: float) -> dict[str, Any]:
    out = work / f"{spec.name}.json"
    if out.is_file():
        cached: dict[str, Any] = json.loads(out.read_text())
        if not cached.get("error"):
            return cached
    job = {"model_dir": str(model_dir), "pp": spec.pp, "prompts": prompt_token_ids(), "generate": PROMPTS["generate"]}
    job_file = work / f"{spec.name}.job.json"
    job_file.write_text(json.dumps({**job, "max_model_len": MAX_MODEL_LEN, "attention_backend": ATTENTION_BACKEND}))
    log_file = work / f"{spec.name}.log"
    started = time.monotonic()
    cmd = [sys.executable, str(GPU_SCRIPT), "run", str(job_file), str(out)]
    env = run_env(spec, work, os.environ)
    with log_file.open("w") as log:
        # Its own session, so a hung start is stopped with the engine and worker processes vLLM started for it.
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -1  # the error below carries the end of its log
    text = log_file.read_text(errors="replace")
    result: dict[str, Any] = json.loads(out.read_text()) if rc == 0 and out.is_file() else {}
    if rc != 0 or not result:
        result = {"error": f"exit {rc}: " + "\n".join(text.splitlines()[-15:])}
    lines = patch_lines(text)
    result.update(seconds=round(time.monotonic() - started, 1), log="\n".join(lines), backend_log=backend_lines(text))
    out.write_text(json.dumps(result))
    return result


def run_variant(
    variant: Variant, out_dir: Path, work: Path, timeout: float, only: Iterable[str] = ()
) -> dict[str, Any]:
    import dsa_pp_real_gpu as gpu

    work = work / variant.name
    work.mkdir(parents=True, exist_ok=True)
    model_dir = gpu.build_model(model_config(variant), work / "model", WEIGHT_SEED)
    runs = plan_runs(variant)
    wanted = set(only) or {r.name for r in runs}
    raws: dict[str, dict[str, Any]] = {}
    env = gpu.environment()
    env["parameters"] = {variant.name: gpu.parameter_count(model_dir)}
    for spec in runs:
        if spec.name in wanted or (work / f"{spec.name}.json").is_file():
            print(f"[{variant.name}] {spec.name}: PP={spec.pp} split {spec.split}", flush=True)
            raws[spec.name] = run_in_subprocess(spec, model_dir, work, timeout)
        doc = result_document(variant, runs, raws, env)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{variant.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=["tiny8", "glm78", "all"], default="all")
    parser.add_argument(
        "--runs", nargs="*", default=[], choices=RUN_NAMES, help="run only these (others already in --work are kept)"
    )
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "glmops-dsa-proof")
    parser.add_argument("--timeout", type=float, default=480, help="seconds per vLLM start")
    parser.add_argument("--check-env", action="store_true", help="report what this machine lacks, run nothing")
    args = parser.parse_args(argv)
    import dsa_pp_real_gpu as gpu

    plans = plan_runs(next(iter(variants().values())))
    wanted = [spec for spec in plans if not args.runs or spec.name in args.runs]
    missing = gpu.missing_requirements(max((spec.pp for spec in wanted), default=1))
    if missing or args.check_env:
        print("\n".join(missing) or "everything the proof needs is here")
        return 1 if missing else 0
    chosen = variants() if args.variant == "all" else {args.variant: variants()[args.variant]}
    passed = True
    for variant in chosen.values():
        doc = run_variant(variant, args.out, args.work, args.timeout, args.runs)
        print(json.dumps(doc["verdict"], indent=2))
        passed &= bool(doc["verdict"]["passed"])
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
