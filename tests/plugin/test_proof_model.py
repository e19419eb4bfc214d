"""The model the real-kernel proof of vllm-63170 writes (images/vllm-patches/proof/dsa_pp_real_gpu.py), built here
with this environment's transformers on the CPU: its config keeps every key vLLM reads, the DSA indexer exists exactly
on the layers vLLM's rule makes compute top-k, the weights are seeded std-0.02 draws, and one seed writes one set of
bytes."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from tests.plugin.conftest import REPO, run_vllm

sys.path.insert(0, str(REPO / "images" / "vllm-patches" / "proof"))

import dsa_pp_real as real  # noqa: E402
import dsa_pp_real_gpu as gpu  # noqa: E402


@pytest.fixture(scope="module")
def tiny8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny8")
    return gpu.build_model(real.model_config(real.variants()["tiny8"]), out, real.WEIGHT_SEED)


def test_the_written_config_keeps_what_vllm_reads(tiny8: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny8)
    assert config.model_type == "glm_moe_dsa" and config.architectures == ["GlmMoeDsaForCausalLM"]
    assert (config.index_topk_freq, config.index_skip_topk_offset, config.index_topk) == (4, 3, 512)
    assert config.first_k_dense_replace == config.num_hidden_layers == 8


def test_the_indexer_is_written_exactly_for_the_layers_that_compute_top_k(tiny8: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(tiny8 / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())  # noqa: SIM118
        std = float(f.get_tensor("model.layers.0.self_attn.q_a_proj.weight").float().std())
    with_indexer = sorted({int(k.split(".")[2]) for k in keys if ".self_attn.indexer." in k})
    assert with_indexer == real.variants()["tiny8"].computing_layers() == [0, 1, 2, 6]
    assert not any(".mlp.experts" in k for k in keys)  # dense MLPs only
    assert std == pytest.approx(0.02, rel=0.05)
    assert gpu.parameter_count(tiny8) == 44_645_888


def test_the_same_seed_writes_the_same_bytes(tiny8: Path, tmp_path: Path) -> None:
    again = gpu.build_model(real.model_config(real.variants()["tiny8"]), tmp_path, real.WEIGHT_SEED)
    digest = [hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest() for d in (tiny8, again)]
    assert digest[0] == digest[1]
    assert json.loads((again / "config.json").read_text())["index_topk_freq"] == 4


def test_vllm_0_26_reads_the_written_model_as_glm5_with_sparse_mla_and_the_reuse_rule(tiny8: Path) -> None:
    code = f"""
from vllm.config import ModelConfig
m = ModelConfig(model={str(tiny8)!r}, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=4096)
c = m.hf_config
result.update(arch=m.architectures, mla=m.is_deepseek_mla, head=m.get_head_size(),
              rule=[c.index_topk_freq, c.index_skip_topk_offset, c.index_topk])
"""
    out = run_vllm("0.26.0", code)
    assert not out.get("error"), out.get("stderr")
    assert out["arch"] == ["GlmMoeDsaForCausalLM"] and out["mla"] is True
    assert out["head"] == 576  # kv_lora_rank 512 + RoPE 64: what the sparse MLA backends take
    assert out["rule"] == [4, 3, 512]
