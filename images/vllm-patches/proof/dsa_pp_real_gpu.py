"""The GPU side of dsa_pp_real.py: write the model with transformers, run vLLM once, describe the machine.

Imported by dsa_pp_real.py on the GPU machine, and run as `dsa_pp_real_gpu.py run JOB OUT` in a fresh process per
vLLM start (so every run gets clean GPUs and its own environment: partition, plugin allow-list). torch,
transformers, safetensors and vLLM are imported inside the functions that need them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# What the proof imports itself (vLLM's own, for its offline path: requirements-gpu.txt beside this file).
REQUIRED_MODULES = {
    "torch": "torch (the machine's CUDA build that vLLM's wheel pins)",
    "vllm": "vllm>=0.26.0",
    "transformers": "transformers with GlmMoeDsaConfig (vLLM 0.26.0 needs >=5.5.3)",
    "safetensors": "safetensors",
    "pydantic": "pydantic (glmops' model catalog; a vLLM dependency)",
    "yaml": "PyYAML (glmops' model catalog; a vLLM dependency)",
}


def missing_requirements(gpus_needed: int = 2) -> list[str]:
    """What this machine lacks to run the proof (or, with `gpus_needed` 1, its PP=1 runs), one line each."""
    missing = [f"missing: {why}" for mod, why in REQUIRED_MODULES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        return missing
    version = importlib.metadata.version("vllm")
    release = tuple(int(p) for p in version.split("+")[0].split(".")[:3] if p.isdigit())
    if release < (0, 26, 0):
        missing.append(f"vllm {version}: the proof needs 0.26.0 or later (GlmMoeDsaForCausalLM with top-k reuse)")
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < gpus_needed:
        missing.append(f"GPUs: {visible} visible, {gpus_needed} needed")
    from transformers import GlmMoeDsaConfig  # noqa: F401 - raises on a transformers without GLM-5 DSA

    return missing + _vllm_path_errors()


# vLLM's offline path for this model: what a run imports in its engine and worker processes.
VLLM_PATH = (
    "vllm.entrypoints.llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.model_executor.models.deepseek_v2",
    "vllm.v1.attention.backends.mla.flashmla_sparse",
)


def _vllm_path_errors() -> list[str]:
    """Import vLLM's offline path in a fresh process; the missing module, if any (install it and ask again)."""
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    proc = subprocess.run([sys.executable, "-c", code, *VLLM_PATH], capture_output=True, text=True, timeout=900)
    if proc.returncode == 0:
        return []
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return [f"vLLM's offline path does not import: {last}"]


def _versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("vllm", "torch", "transformers", "safetensors", "triton"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    # A copy of the tree without its .git (as sent to a GPU machine) names its commit in GLMOPS_COMMIT.
    out["glmops_commit"] = os.environ.get("GLMOPS_COMMIT") or None
    if out["glmops_commit"] is None:
        repo = Path(__file__).resolve().parents[3]
        try:
            commit = subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
            out["glmops_commit"] = commit.stdout.strip() or None
        except OSError:
            pass
    return out


def environment() -> dict[str, Any]:
    import torch

    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append(
            {
                "name": props.name,
                "memory_gib": round(props.total_memory / 2**30, 1),
                "capability": f"{props.major}.{props.minor}",
            }
        )
    driver = None
    try:
        smi = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(smi, capture_output=True, text=True, timeout=20).stdout.splitlines()[0].strip()
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    machine = {
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "cuda": torch.version.cuda,
        "driver": driver,
    }
    return {"machine": machine, "versions": _versions()}


def build_model(config: dict[str, Any], out: Path, seed: int) -> Path:
    """Write config.json and seeded bf16 safetensors with transformers' GlmMoeDsaForCausalLM (std 0.02 init).

    Reused when `out` already holds this exact config. Refuses a transformers whose config loses the reuse keys or
    disagrees with vLLM's rule about which layers have an indexer (their weights would not match vLLM's layers).
    """
    marker = out / ".glmops-proof.json"
    wanted = {"config": config, "seed": seed}
    if marker.is_file() and json.loads(marker.read_text()) == wanted:
        return out
    import torch
    from transformers import AutoConfig, GlmMoeDsaConfig, GlmMoeDsaForCausalLM

    torch.manual_seed(seed)
    hf_config = GlmMoeDsaConfig(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")})
    model = GlmMoeDsaForCausalLM(hf_config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # config.json as vLLM should read it: every key set here, whatever this transformers version serialises.
    saved = json.loads((out / "config.json").read_text())
    saved.update(config)
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    loaded = AutoConfig.from_pretrained(out)
    for key in (
        "index_topk",
        "index_topk_freq",
        "index_skip_topk_offset",
        "num_hidden_layers",
        "first_k_dense_replace",
    ):
        assert getattr(loaded, key, None) == config[key], f"config.json lost {key}: {getattr(loaded, key, None)}"
    freq, offset = config["index_topk_freq"], config["index_skip_topk_offset"]
    computes = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(config["num_hidden_layers"])]
    indexer_types = getattr(hf_config, "indexer_types", None)
    assert indexer_types in (None, computes), f"transformers' indexer_types {indexer_types} != vLLM's rule {computes}"
    marker.write_text(json.dumps(wanted))
    return out


def parameter_count(model_dir: Path) -> int:
    from safetensors import safe_open

    total = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                n = 1
                for dim in f.get_slice(key).get_shape():
                    n *= int(dim)
                total += n
    return total


def run_once(job: dict[str, Any]) -> dict[str, Any]:
    """One vLLM start: greedy generation with prompt logprobs for every prompt (token-id prompts, no tokenizer)."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.monotonic()
    llm = LLM(
        model=job["model_dir"],
        skip_tokenizer_init=True,
        pipeline_parallel_size=job["pp"],
        tensor_parallel_size=1,
        distributed_executor_backend="mp",
        dtype="bfloat16",
        enforce_eager=True,
        enable_prefix_caching=False,
        max_model_len=job["max_model_len"],
        gpu_memory_utilization=0.5,
        seed=0,
        attention_config={"backend": job["attention_backend"]},
    )
    loaded = time.monotonic()
    params = SamplingParams(
        temperature=0.0, max_tokens=job["generate"], prompt_logprobs=0, ignore_eos=True, detokenize=False
    )
    results = llm.generate([TokensPrompt(prompt_token_ids=p) for p in job["prompts"]], params)
    outputs = []
    for prompt, res in zip(job["prompts"], results, strict=True):
        logprobs = [entry[token].logprob for token, entry in zip(prompt[1:], res.prompt_logprobs[1:], strict=True)]
        outputs.append({"prompt_logprobs": logprobs, "token_ids": list(res.outputs[0].token_ids)})
    return {
        "outputs": outputs,
        "startup_seconds": round(loaded - started, 1),
        "generate_seconds": round(time.monotonic() - loaded, 1),
    }


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "run":
        sys.exit("usage: dsa_pp_real_gpu.py run JOB.json OUT.json")
    result = run_once(json.loads(Path(sys.argv[2]).read_text()))
    Path(sys.argv[3]).write_text(json.dumps(result))
