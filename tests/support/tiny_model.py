"""Build the tiny model the real-vLLM tests serve on the CPU: same bytes every run (fixed seeds, fixed corpus).

A byte-level BPE tokenizer trained on a fixed corpus (the canary's own prompts and a few sentences), a chat
template that opens a `<think>` reasoning block for the assistant as GLM-5.x's does, and a two-layer
Llama-shaped model with random weights. The reasoning-end token's output row is pushed far down, so the model
never closes the block: served with a reasoning parser, every chat answer is reasoning only with content null,
the null-content signature of vllm-58729. Its answers are wrong, so smoke, GSM8K and copy must fail on it.

Runs in the real-vLLM environment (torch, safetensors, tokenizers): `python tests/support/tiny_model.py DIR`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SPECIALS = ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>", THINK_OPEN, THINK_CLOSE]
VOCAB = 1024
HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 128, 2, 2, 1, 256  # head_dim 64: vLLM CPU attention takes no 16
MAX_LEN = 8192
SEED = 20261130
# GLM-5.x's template shape: role markers, and the assistant turn starts inside a reasoning block.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n<think>{% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 2+2? What is 3+5? What is 10-7? What is 6*7? Question: Answer: ####",
    "Copy the following list exactly, one item per line, in the same order, and write nothing else:",
    "Name a primary colour. What is the capital of France? Say hello in Spanish.",
    "Water boils at one hundred degrees Celsius at sea level. The Earth orbits the Sun once every year.",
    "amber basil cedar delta ember fjord garnet harbor indigo juniper kelp lotus maple nickel onyx pepper",
    "0123456789 + - * / = ( ) . , ; : ? ! ' \" \n",
]


def build(out: Path) -> None:
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 20, trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()
    eos = tokenizer.token_to_id("<|endoftext|>")
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": None,
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "unk_token": None,
                "model_max_length": MAX_LEN,
                "chat_template": CHAT_TEMPLATE,
                "added_tokens_decoder": {
                    str(tokenizer.token_to_id(t)): {"content": t, "special": t.startswith("<|")} for t in SPECIALS
                },
            },
            indent=2,
        )
    )
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "max_position_embeddings": MAX_LEN,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "bos_token_id": eos}))
    (out / "model.safetensors").unlink(missing_ok=True)
    save_file(_weights(vocab, tokenizer.token_to_id(THINK_CLOSE)), str(out / "model.safetensors"))


def _weights(vocab: int, never: int) -> dict[str, Any]:
    import torch as t

    gen = t.Generator().manual_seed(SEED)

    def rand(*shape: int) -> t.Tensor:
        return (t.randn(*shape, generator=gen) * 0.5).to(t.bfloat16)

    head_dim, kv = HIDDEN // HEADS, KV_HEADS * (HIDDEN // HEADS)
    w: dict[str, t.Tensor] = {"model.embed_tokens.weight": rand(vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w |= {
            p + "self_attn.q_proj.weight": rand(HEADS * head_dim, HIDDEN),
            p + "self_attn.k_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.v_proj.weight": rand(kv, HIDDEN),
            p + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * head_dim),
            p + "mlp.gate_proj.weight": rand(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": rand(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": rand(HIDDEN, INTERMEDIATE),
            p + "input_layernorm.weight": t.ones(HIDDEN, dtype=t.bfloat16),
            p + "post_attention_layernorm.weight": t.ones(HIDDEN, dtype=t.bfloat16),
        }
    w["model.norm.weight"] = t.ones(HIDDEN, dtype=t.bfloat16)
    head = rand(vocab, HIDDEN)
    # A zero row gives the reasoning-end token logit 0, which at temperature 0 never beats the best of about
    # 1,000 random logits: the reasoning block is never closed.
    head[never] = 0
    w["lm_head.weight"] = head
    return w


if __name__ == "__main__":
    build(Path(sys.argv[1]))
