"""The model catalog: what each GLM-5.x checkpoint is, so rules can reason about it."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

# index_topk_pattern letters: vLLM reuses the top-k on a layer whose letter is S (dsa-topk-pattern); checkpoints
# write F for the others.
REUSE_LETTER = "S"
COMPUTE_LETTER = "F"

CheckpointFormat = Literal["bf16", "fp8", "modelopt-nvfp4", "compressed-tensors-mxfp4-w4a4", "quark-mxfp4"]


class ModelInfo(BaseModel):
    """One checkpoint."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    name: str
    family: str
    architecture: str
    format: CheckpointFormat
    layers: int = Field(ge=1)
    first_k_dense_replace: int = Field(ge=0)
    index_topk: int = Field(ge=1)
    index_topk_freq: int = Field(ge=1)
    index_skip_topk_offset: int = Field(ge=0)
    # HF config `index_topk_pattern`: one letter per layer, S reuses the top-k, F computes it; when set it takes
    # precedence over index_topk_freq and index_skip_topk_offset (vllm_facts: dsa-topk-pattern).
    index_topk_pattern: str | None = None
    mtp_layers: int = Field(ge=0)
    weight_gb: float = Field(gt=0, alias="weightGB")
    expert_fraction: float = Field(ge=0, le=1)
    bf16_modules: tuple[str, ...] = ()
    # GSM8K accuracy a healthy deployment reaches, less vLLM CI's 0.08 margin (0.90 - 0.08 for GLM-5.x).
    gsm8k_threshold: float = Field(default=0.82, ge=0, le=1, alias="gsm8kThreshold")
    # GSM8K accuracy a healthy deployment of this model answers at: the canary's sequential test weighs the
    # answers between this level and the threshold.
    gsm8k_expected: float = Field(default=0.93, ge=0, le=1, alias="gsm8kExpected")
    aliases: tuple[str, ...] = ()

    def computes_topk(self, layer: int) -> bool:
        """Whether `layer` runs the DSA indexer (else it reuses the last computed top-k indices).

        vLLM's rule for GlmMoeDsa (vllm_facts: dsa-topk-pattern, dsa-topk-reuse): with an index_topk_pattern, a
        layer within it skips when its letter is S, and a layer past its end computes; without one, a layer skips
        when max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0.
        """
        if self.index_topk_pattern is not None:
            return not (0 <= layer < len(self.index_topk_pattern) and self.index_topk_pattern[layer] == REUSE_LETTER)
        return max(layer - self.index_skip_topk_offset + 1, 0) % self.index_topk_freq == 0

    @field_validator("index_topk_pattern")
    @classmethod
    def _pattern_letters(cls, value: str | None) -> str | None:
        if value is not None and set(value) - {REUSE_LETTER, COMPUTE_LETTER}:
            raise ValueError(
                f"indexTopkPattern: {value!r}: one letter per layer, {COMPUTE_LETTER} (computes the top-k) or "
                f"{REUSE_LETTER} (reuses it), as the checkpoint's config.json index_topk_pattern"
            )
        return value

    def mla_in_bf16(self) -> bool:
        """Whether the MLA `kv_b_proj` weight is BF16: a BF16 checkpoint, or one keeping MLA attention in BF16."""
        return self.format == "bf16" or "mla-attention" in self.bf16_modules

    def computing_layers(self) -> list[int]:
        return [i for i in range(self.layers) if self.computes_topk(i)]


class Lookup(BaseModel):
    """A resolved model name: the entry, and the alias it was reached through (if any)."""

    model: ModelInfo
    via_alias: str | None = None


class ModelCatalog(BaseModel):
    model_config = ConfigDict(frozen=True)

    models: dict[str, ModelInfo]

    def lookup(self, name: str) -> Lookup | None:
        if name in self.models:
            return Lookup(model=self.models[name])
        for model in self.models.values():
            if name in model.aliases:
                return Lookup(model=model, via_alias=name)
        lowered = {k.lower(): v for k, v in self.models.items()}
        if name.lower() in lowered:  # Hugging Face ids are case-insensitive
            return Lookup(model=lowered[name.lower()])
        return None


def parse_models(text: str) -> ModelCatalog:
    raw = yaml.safe_load(text) or {}
    entries = raw.get("models") or {}
    return ModelCatalog(models={n: ModelInfo.model_validate({"name": n, **b}) for n, b in entries.items()})


@cache
def load_models() -> ModelCatalog:
    return parse_models(resources.files("glm_operator.catalog").joinpath("data/models.yaml").read_text())
