"""What glmops' rules rely on in vLLM's own source, per supported vLLM version, each with where it was read.

Every fact here is read back from the real source of every version in the image catalog by
`tests/vllm_source/` (the PyPI wheels, unpacked by `hack/vllm-sources.sh`): a version added to the catalog
fails those tests until each fact has been checked for it, and a fact that moved fails where it moved.
`where` gives, per version, `file:line` relative to the `vllm/` package, read from
`data/vllm-fact-locations.yaml` (written from the source by `python -m tests.vllm_source.locate`; only the
values are written here by hand); `docs/rules.md` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Generic, TypeVar

import yaml

from glm_operator.catalog.versions import Version, newest_at

LOCATIONS_FILE = "vllm-fact-locations.yaml"


@cache
def fact_locations() -> Mapping[str, Mapping[str, str]]:
    """Fact id -> version -> where, as `python -m tests.vllm_source.locate` read it from each version's source."""
    text = resources.files("glm_operator.catalog").joinpath("data", LOCATIONS_FILE).read_text()
    raw = yaml.safe_load(text)["facts"]
    return {fact_id: {str(v): str(w) for v, w in per_version.items()} for fact_id, per_version in raw.items()}


@cache
def source_lines(name: str) -> Mapping[str, tuple[int, ...]]:
    """Version -> the vLLM lines a start-up refusal cites (`lines` in vllm-fact-locations.yaml; () where the
    version has no such check)."""
    text = resources.files("glm_operator.catalog").joinpath("data", LOCATIONS_FILE).read_text()
    raw = yaml.safe_load(text)["lines"][name]
    return {str(version): tuple(int(n) for n in found) for version, found in raw.items()}


T = TypeVar("T", covariant=True)


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One fact about vLLM: its value from each first version on, and where each version states it."""

    id: str
    claim: str
    since: tuple[tuple[str, T], ...]  # (first version it holds in, value), oldest first

    @property
    def where(self) -> Mapping[str, str]:
        """Version -> "file:line[, file:line]" (relative to the vllm package), from vllm-fact-locations.yaml."""
        return fact_locations()[self.id]

    def at(self, version: Version | None) -> T:
        """The value in `version`: the newest range starting at or before it (the oldest for older versions,
        the newest for an unknown version)."""
        return newest_at(self.since, version)


def _with(base: frozenset[str], *added: str, removed: tuple[str, ...] = ()) -> frozenset[str]:
    return (base | frozenset(added)) - frozenset(removed)


# --- Backend names (each release's config Literals) ---------------------------------------------------------------

_A2A = frozenset(
    {
        "naive",
        "pplx",
        "deepep_high_throughput",
        "deepep_low_latency",
        "deepep_v2",
        "mori_high_throughput",
        "mori_low_latency",
        "nixl_ep",
        "allgather_reducescatter",
        "flashinfer_all2allv",
        "flashinfer_nvlink_two_sided",
        "flashinfer_nvlink_one_sided",
    }
)
ALL2ALL_BACKENDS = Fact(
    id="all2all-backends",
    claim="The names `--all2all-backend` accepts (the `All2AllBackend` Literal).",
    since=(
        ("0.26.0", _A2A),
        ("0.31.0", _with(_A2A, "moonep")),
        ("0.32.0", _with(_A2A, "moonep", "passthrough")),
        ("0.34.0", _with(_A2A, "moonep", "passthrough", "mori")),
    ),
)
ALL2ALL_CLI_REMOVED = Fact(
    id="all2all-cli-removed",
    claim="Literal names the command line removes from `--all2all-backend`'s choices (set by vLLM itself).",
    since=(("0.26.0", frozenset[str]()), ("0.32.0", frozenset({"passthrough"}))),
)
ALL2ALL_REWRITTEN = Fact(
    id="all2all-rewritten",
    claim="All-to-all backends vLLM replaces by `allgather_reducescatter` with a warning.",
    since=(("0.26.0", frozenset({"pplx", "naive"})),),
)
ALL2ALL_DEFAULT = Fact(
    id="all2all-default",
    claim="The all-to-all backend when none is given (`ParallelConfig.all2all_backend`).",
    since=(("0.26.0", "allgather_reducescatter"),),
)

_MOE = frozenset(
    {
        "auto",
        "triton",
        "batched_triton",
        "deep_gemm",
        "deep_gemm_mega_moe",
        "cutlass",
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "flashinfer_cutedsl",
        "flashinfer_b12x",
        "marlin",
        "humming",
        "triton_unfused",
        "aiter",
        "flydsl",
        "hpc",
        "emulation",
    }
)
_MOE_030 = _with(
    _MOE,
    "b12x",
    "aiter_triton_mxfp4_bf16",
    "rdna3",
    "flashinfer_moe_ep_mega_deep_gemm",
    "flashinfer_moe_ep_mega_cutedsl",
)
_MOE_032 = _with(_MOE_030, "flashinfer_moe_ep_cutedsl", "aiter_mega_moe", removed=("flashinfer_moe_ep_mega_cutedsl",))
MOE_BACKENDS = Fact(
    id="moe-backends",
    claim="The names `--moe-backend` accepts (the `MoEBackend` Literal; `batched_triton` from 0.27.1).",
    since=(
        ("0.26.0", _with(_MOE, removed=("batched_triton",))),
        ("0.27.1", _MOE),
        ("0.30.0", _MOE_030),
        ("0.32.0", _MOE_032),
        ("0.33.0", _with(_MOE_032, "aiter_triton_mxfp4_mxfp4")),
    ),
)

_KV = frozenset(
    {
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
        "fp8_inc",
        "fp8_ds_mla",
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "int4_per_token_head",
        "int8_per_token_head",
        "fp8_per_token_head",
        "nvfp4",
    }
)
_KV_030 = _with(_KV, "nvfp4_ds_mla", "nvfp4_4over6")
KV_CACHE_DTYPES = Fact(
    id="kv-cache-dtypes",
    claim="The names `--kv-cache-dtype` accepts (the `CacheDType` Literal).",
    since=(
        ("0.26.0", _KV),
        ("0.30.0", _KV_030),
        ("0.32.0", _with(_KV_030, "ultraquant_4bit")),
        ("0.33.0", _with(_KV_030, "ultraquant_4bit", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact")),
    ),
)

_ATTN = frozenset(
    {
        "CPU_ATTN",
        "CUSTOM",
        "CUTLASS_MLA",
        "FLASHINFER",
        "FLASHINFER_MLA",
        "FLASHINFER_MLA_SPARSE",
        "FLASHINFER_MLA_SPARSE_DSV4",
        "FLASHINFER_MLA_SPARSE_SM120",
        "FLASHMLA",
        "FLASHMLA_SPARSE",
        "FLASHMLA_SPARSE_DSV4",
        "FLASH_ATTN",
        "FLASH_ATTN_DIFFKV",
        "FLASH_ATTN_MLA",
        "FLASH_ATTN_MLA_SPARSE",
        "FLEX_ATTENTION",
        "HPC_ATTN",
        "MINIMAX_M3_SPARSE",
        "NO_ATTENTION",
        "ROCM_AITER_FA",
        "ROCM_AITER_MLA",
        "ROCM_AITER_MLA_SPARSE",
        "ROCM_AITER_TRITON_MLA",
        "ROCM_AITER_UNIFIED_ATTN",
        "ROCM_ATTN",
        "ROCM_FLASHMLA_SPARSE_DSV4",
        "TOKENSPEED_MLA",
        "TORCH_SDPA",
        "TRITON_ATTN",
        "TRITON_ATTN_DIFFKV",
        "TRITON_MLA",
        "TURBOQUANT",
        "XPU_MLA_SPARSE",
    }
)
_ATTN_027 = _with(_ATTN, "CUTLASS_MSA", "TRITON_MSA")
_ATTN_030 = _with(
    _ATTN_027,
    "AMX_MLA",
    "B12X",
    "CPU_MLA",
    "FLASHINFER_MLA_SPARSE_DSV41",
    "FLASHINFER_MLA_SPARSE_SM90",
    "FLASHMLA_SPARSE_DSV41",
    "TRITON_FLASHINFER",
    "TRITON_FLASH_ATTN",
)
_ATTN_031 = _with(_ATTN_030, "FLASHMLA_MEGA_ATTN_DSV41")
_ATTN_032 = _with(_ATTN_031, "ROCM_SEGMENTED_ATTN", "ULTRAQUANT")
_ATTN_033 = _with(_ATTN_032, "FLASH_ATTN_MLA_SPARSE_FA4", "ROCM_FLASHMLA_SPARSE_DSV41", "ROCM_OCTAVE", "STEP5_DSA")
ATTENTION_BACKENDS = Fact(
    id="attention-backends",
    claim=(
        "The names `--attention-backend` accepts: the members of `AttentionBackendEnum`, looked up upper-cased "
        "(`auto` means none)."
    ),
    since=(
        ("0.26.0", _ATTN),
        ("0.27.1", _ATTN_027),
        ("0.30.0", _ATTN_030),
        ("0.31.0", _ATTN_031),
        ("0.32.0", _ATTN_032),
        ("0.33.0", _ATTN_033),
        ("0.34.0", _with(_ATTN_033, "FLASHINFER_TS", "KIMI_K3_KV_BALANCED_MLA")),
    ),
)

# --- Expert parallelism and the MoE all-to-all (vllm-58729) -------------------------------------------------------

_FUSED_CONFIG = "model_executor/layers/fused_moe/config.py"
MOE_USE_EP = Fact(
    id="moe-use-ep",
    claim=(
        "The MoE runs expert-parallel only when `--enable-expert-parallel` is set and data x prefill-context x "
        "tensor parallel > 1; otherwise the flag is silently ignored (`FusedMoEParallelConfig.make`)."
    ),
    since=(("0.26.0", "dp_size_ * pcp_size_ * tp_size_ > 1 and vllm_parallel_config.enable_expert_parallel"),),
)
MOE_ALL2ALL_KERNELS = Fact(
    id="moe-all2all-kernels",
    claim=(
        "All-to-all kernels (so any `--all2all-backend` other than passthrough) are used only with expert "
        "parallelism plus data or prefill-context parallelism or sequence-parallel MoE "
        "(`FusedMoEParallelConfig.use_all2all_kernels`)."
    ),
    since=(("0.26.0", "self.use_ep and (self.dp_size > 1 or self.pcp_size > 1 or self.is_sequence_parallel)"),),
)
MOE_SEQUENCE_PARALLEL_NEEDS = Fact(
    id="moe-sequence-parallel",
    claim=(
        "Sequence-parallel MoE (the third way to all-to-all kernels) needs expert parallelism, tensor > 1 and "
        "data > 1 besides an allowed backend (`ParallelConfig.use_sequence_parallel_moe`): without data "
        "parallelism it is off."
    ),
    since=(
        (
            "0.26.0",
            frozenset({"self.enable_expert_parallel", "self.tensor_parallel_size > 1", "self.data_parallel_size > 1"}),
        ),
    ),
)
MOE_BATCHED_ALL2ALL = Fact(
    id="moe-batched-all2all",
    claim=(
        "All-to-all backends whose kernels use the batched activation format "
        "(`FusedMoEParallelConfig.use_batched_activation_format`; from 0.34.0 the `BatchedExperts` branch of "
        "`FusedMoEConfig.activation_format`, where `deepep_v2` gets a padded standard layout instead)."
    ),
    since=(("0.26.0", frozenset({"deepep_low_latency", "nixl_ep"})),),
)
_NO_PADDED = f"{_FUSED_CONFIG} (no padded layout)"
MOE_PADDED_ALL2ALL = Fact(
    id="moe-padded-all2all",
    claim=(
        "All-to-all backends whose kernels hand the experts padded standard rows (`PaddedStandard` in "
        "`FusedMoEConfig.activation_format`, from 0.34.0), which only experts declaring that format take: the "
        "Cutlass MXFP4 and Marlin experts declare `Standard`, so vLLM refuses them after loading every weight."
    ),
    since=(("0.26.0", frozenset[str]()), ("0.34.0", frozenset({"deepep_v2"}))),
)
_CUTLASS = "model_executor/layers/fused_moe/experts/cutlass_moe.py"
CUTLASS_MXFP4_REJECTED_ALL2ALL = Fact(
    id="cutlass-mxfp4-rejected-all2all",
    claim=(
        "All-to-all backends `CutlassExpertsMxfp4._supports_parallel_config` rejects (None: it checks "
        "`ep_size == 1` instead, a check the compressed-tensors MXFP4 path never runs before 0.32.0)."
    ),
    since=(
        ("0.26.0", None),
        (
            "0.32.0",
            frozenset(
                {
                    "deepep_high_throughput",
                    "flashinfer_nvlink_two_sided",
                    "flashinfer_all2allv",
                    "flashinfer_nvlink_one_sided",
                }
            ),
        ),
    ),
)
CUTLASS_MXFP4_REMAPS = Fact(
    id="cutlass-mxfp4-remaps",
    claim="`run_cutlass_moe_mxfp4` takes `expert_map` (remaps global expert ids to local slots).",
    since=(("0.26.0", False), ("0.32.0", True)),
)
_MARLIN = "model_executor/layers/fused_moe/experts/marlin_moe.py"
MARLIN_REJECTED_ALL2ALL = Fact(
    id="marlin-rejected-all2all",
    claim=(
        "All-to-all backends `MarlinExpertsBase._supports_parallel_config` rejects (0.26.0 also rejects the "
        "FlashInfer NVLink one-sided kernels; 0.27.1 accepts them)."
    ),
    since=(
        ("0.26.0", frozenset({"flashinfer_nvlink_two_sided", "flashinfer_all2allv", "flashinfer_nvlink_one_sided"})),
        ("0.27.1", frozenset({"flashinfer_nvlink_two_sided", "flashinfer_all2allv"})),
    ),
)
MARLIN_NEEDS_CUDA = Fact(
    id="marlin-needs-cuda",
    claim="`MarlinExpertsBase._supports_current_device` requires CUDA (Marlin does not run on ROCm).",
    since=(("0.26.0", True),),
)
_CT_MXFP4 = (
    "model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w4a4_mxfp4.py"
)
CT_MXFP4_EXPERTS = Fact(
    id="ct-mxfp4-experts",
    claim=(
        "`CompressedTensorsW4A4Mxfp4MoEMethod.__init__` picks `CutlassExpertsMxfp4` where the device supports it "
        "(CUDA SM100), XPU experts on XPU, and otherwise `MarlinExperts` (so ROCm gets Marlin)."
    ),
    since=(("0.26.0", ("CutlassExpertsMxfp4", "XPUExpertsMxFp4", "MarlinExperts")),),
)
CT_MXFP4_MOE_BACKENDS_READ = Fact(
    id="ct-mxfp4-moe-backends-read",
    claim=(
        "The `--moe-backend` values for which `CompressedTensorsW4A4Mxfp4MoEMethod.__init__` hands the choice of "
        "experts to the MXFP4 oracle (`select_mxfp4_moe_backend`, which checks the experts it picks against the "
        "device and parallel config while the model is built) instead of picking the Cutlass experts unchecked: "
        "compared by name, or from 0.32.0 also through `is_flashinfer_moe_ep_backend` (the FlashInfer MoE-EP "
        "backends). `marlin` is not one of them, so it does not move this checkpoint off the Cutlass experts."
    ),
    since=(
        ("0.26.0", frozenset[str]()),
        ("0.30.0", frozenset({"b12x"})),
        ("0.32.0", frozenset({"b12x", "flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm"})),
        ("0.34.0", frozenset({"b12x", "deep_gemm", "flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm"})),
    ),
)

# --- NVFP4 below Blackwell -----------------------------------------------------------------------------------------

MODELOPT_NVFP4_HOPPER = Fact(
    id="modelopt-nvfp4-min-capability",
    claim=(
        "(`ModelOptNvFp4Config.get_min_capability`, whether the NVFP4 MoE oracle's default list in "
        "`select_nvfp4_moe_backend` has the Marlin experts): vLLM refuses a ModelOpt NVFP4 checkpoint only below "
        "this compute capability, and where no FP4 kernel runs (Hopper) it falls back to Marlin, weight-only "
        "W4A16; so glmops warns on sm90 instead of refusing (formats.yaml)."
    ),
    since=(("0.26.0", (75, True)),),
)

# --- ROCm AITER switches and the MLA BMM (vllm-52833) -------------------------------------------------------------

ENV_TRUE = ("true", "1")
"""vLLM reads a boolean AITER switch as on only when `value.lower()` is one of these (no strip)."""

AITER = "VLLM_ROCM_USE_AITER"
AITER_FP4BMM = "VLLM_ROCM_USE_AITER_FP4BMM"
AITER_FP8BMM = "VLLM_ROCM_USE_AITER_FP8BMM"
AITER_SWITCH_DEFAULTS = Fact(
    id="aiter-switch-defaults",
    claim=(
        "Defaults of the AITER switches glmops' rules read; each is parsed as "
        "`os.getenv(NAME, default).lower() in ('true', '1')` (`vllm/envs.py`)."
    ),
    since=(
        ("0.26.0", ((AITER, False), (AITER_FP4BMM, True), (AITER_FP8BMM, True))),
        ("0.33.0", ((AITER, False), (AITER_FP4BMM, False), (AITER_FP8BMM, False))),
    ),
)
AITER_BMM_NEEDS_MASTER = Fact(
    id="aiter-bmm-needs-master",
    claim=(
        "`rocm_aiter_ops.is_fp4bmm_enabled` / `is_fp8bmm_enabled` require the master switch `VLLM_ROCM_USE_AITER` "
        "(`_AITER_ENABLED`); FP4 also requires CDNA 4 (gfx950)."
    ),
    since=(("0.26.0", True),),
)
AITER_BMM_ARCH = Fact(
    id="aiter-bmm-arch",
    claim=(
        "The architecture each AITER BMM switch is further limited to (`rocm_aiter_ops.is_fp4bmm_enabled` / "
        "`is_fp8bmm_enabled`; None: none beyond AITER's own, which includes gfx942): the FP4 BMM runs on gfx950 "
        "(CDNA 4) only, the FP8 BMM wherever AITER runs, so on gfx942 (MI300X) a BF16 kv_b_proj is re-quantized "
        "for the FP8 BMM while that switch is on."
    ),
    since=(("0.26.0", ((AITER_FP4BMM, "gfx950"), (AITER_FP8BMM, None))),),
)
MLA_FP4BMM_NEEDS_BF16 = Fact(
    id="mla-fp4bmm-needs-bf16",
    claim=(
        "`MLAAttention` re-quantizes `kv_b_proj` for AITER's FP4 BMM when FP4 BMM is enabled and the weight is "
        "BF16 (any BF16 `kv_b_proj`: BF16 checkpoints as much as BF16-attention MXFP4 ones); the FP8 BMM path has "
        "no dtype condition and takes over when FP4 is off."
    ),
    since=(("0.26.0", "self.kv_b_proj.weight.dtype == torch.bfloat16"),),
)

# --- Pipeline parallelism and GLM-5.x sparse attention (vllm-63170) -----------------------------------------------

PP_DEFAULT_SPLIT = Fact(
    id="pp-default-split",
    claim=(
        "`get_pp_indices` splits layers as `glm_operator.rules.partition.vllm_default_split` does, and checks "
        "`VLLM_PP_LAYER_PARTITION` only for the number of entries and their sum (an entry of 0 or below is not "
        "refused at start-up)."
    ),
    since=(("0.26.0", frozenset({"count", "sum"})),),
)
DSA_TOPK_REUSE = Fact(
    id="dsa-topk-reuse",
    claim=(
        "A GLM-5.x DSA layer reuses the previous top-k indices when "
        "`max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0` (defaults: freq 1, offset 2), in "
        "every module that runs `GlmMoeDsaForCausalLM` (from 0.34.0 the DSA modules share "
        "`compute_skip_topk_layers`); this is `ModelInfo.computes_topk` negated."
    ),
    since=(("0.26.0", (1, 2)),),
)
DSA_TOPK_PATTERN = Fact(
    id="dsa-topk-pattern",
    claim=(
        "When the config has `index_topk_pattern` (not None) it takes precedence over `index_topk_freq` and "
        "`index_skip_topk_offset` in every module that runs `GlmMoeDsaForCausalLM`: a layer within the pattern "
        "reuses the previous top-k indices when its letter is this one, and a layer past its end computes them; "
        "this is how `ModelInfo.computes_topk` reads `indexTopkPattern`."
    ),
    since=(("0.26.0", "S"),),
)

_NO_TOPK_SENT = "models/deepseek_v32 (no top-k sent across stages)"
DSA_PP_TOPK_SENT = Fact(
    id="dsa-pp-topk-sent",
    claim=(
        "Platforms on which `GlmMoeDsaForCausalLM` hands the shared DSA top-k indices to the next pipeline stage "
        "(`pp_topk_buffers` set up, `copy_pp_buffers` on receipt, the buffers returned in `IntermediateTensors`), "
        "so a stage starting on a top-k reuse layer reads the previous stage's indices. XPU and CPU run the "
        "generic module, which does not."
    ),
    since=(("0.26.0", frozenset[str]()), ("0.34.0", frozenset({"cuda", "rocm"}))),
)

# --- The HTTP server the canaries talk to -------------------------------------------------------------------------

HTTP_KEEP_ALIVE_S = Fact(
    id="http-keep-alive",
    claim=(
        "Seconds the OpenAI server keeps an idle keep-alive connection open (`VLLM_HTTP_TIMEOUT_KEEP_ALIVE`, "
        "passed to uvicorn's `timeout_keep_alive`); the canary client drops its idle connections sooner."
    ),
    since=(("0.26.0", 5),),
)

# --- Speculative decoding ------------------------------------------------------------------------------------------

NGRAM_LOOKUP_DEFAULTS = Fact(
    id="ngram-lookup-defaults",
    claim=(
        "`SpeculativeConfig` sets (prompt_lookup_min, prompt_lookup_max) to this default only for the ngram "
        "methods and only when neither is given; one given fills the other, min above max is refused, and every "
        "other method sets both to 0 (so glmops refuses the bounds there); from 0.34.0 this lives in "
        "`NgramSpeculatorConfig.configure` and the base `SpeculatorConfig.configure`."
    ),
    since=(("0.26.0", (5, 5)),),
)

# --- vLLM's own Prometheus metrics ---------------------------------------------------------------------------------

_METRICS = frozenset(
    {
        "vllm:time_to_first_token_seconds (histogram)",
        "vllm:inter_token_latency_seconds (histogram)",
        "vllm:num_requests_running (gauge)",
        "vllm:num_requests_waiting (gauge)",
        "vllm:kv_cache_usage_perc (gauge)",
        "vllm:num_preemptions (counter)",
        "vllm:spec_decode_num_drafts (counter)",
        "vllm:spec_decode_num_draft_tokens (counter)",
        "vllm:spec_decode_num_accepted_tokens (counter)",
        "vllm:spec_decode_num_accepted_tokens_per_pos (counter)",
    }
)
PROMETHEUS_METRICS = Fact(
    id="prometheus-metrics",
    claim=(
        "The vLLM metrics glmops' dashboard and recording rules read, each `name (type)` as declared in "
        "`PrometheusStatLogger` (`v1/metrics/loggers.py`) and `SpecDecodingProm` (`v1/spec_decode/metrics.py`); "
        "prometheus_client serves a counter as `<name>_total` and a histogram as `<name>_bucket`, `_sum`, `_count`."
    ),
    since=(("0.26.0", _METRICS),),
)
_SAMPLE_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def served_metric_names(version: Version | None) -> frozenset[str]:
    """The series names vLLM's /metrics serves for PROMETHEUS_METRICS in `version` (what a query may name)."""
    out: set[str] = set()
    for declared in PROMETHEUS_METRICS.at(version):
        name, kind = declared.removesuffix(")").split(" (")
        out.update(name + suffix for suffix in _SAMPLE_SUFFIXES[kind])
    return frozenset(out)


FACTS: tuple[Fact[object], ...] = (
    ALL2ALL_BACKENDS,
    ALL2ALL_CLI_REMOVED,
    ALL2ALL_REWRITTEN,
    ALL2ALL_DEFAULT,
    MOE_BACKENDS,
    KV_CACHE_DTYPES,
    ATTENTION_BACKENDS,
    MOE_USE_EP,
    MOE_ALL2ALL_KERNELS,
    MOE_SEQUENCE_PARALLEL_NEEDS,
    MOE_BATCHED_ALL2ALL,
    MOE_PADDED_ALL2ALL,
    CUTLASS_MXFP4_REJECTED_ALL2ALL,
    CUTLASS_MXFP4_REMAPS,
    MARLIN_REJECTED_ALL2ALL,
    MARLIN_NEEDS_CUDA,
    CT_MXFP4_EXPERTS,
    CT_MXFP4_MOE_BACKENDS_READ,
    MODELOPT_NVFP4_HOPPER,
    AITER_SWITCH_DEFAULTS,
    AITER_BMM_NEEDS_MASTER,
    AITER_BMM_ARCH,
    MLA_FP4BMM_NEEDS_BF16,
    PP_DEFAULT_SPLIT,
    DSA_TOPK_REUSE,
    DSA_TOPK_PATTERN,
    DSA_PP_TOPK_SENT,
    HTTP_KEEP_ALIVE_S,
    NGRAM_LOOKUP_DEFAULTS,
    PROMETHEUS_METRICS,
)


# --- What the rules ask of these facts ----------------------------------------------------------------------------


def switch_is_on(value: str | None, default: bool) -> bool:
    """An AITER switch as vLLM reads it: the default when unset, else on only for `true`/`1` in any case."""
    return default if value is None else value.lower() in ENV_TRUE


def aiter_default(name: str, version: Version | None) -> bool:
    """The default of an AITER switch in `version` (an unknown version: on, if any supported version has it on)."""
    if version is None:
        return any(dict(values).get(name, False) for _first, values in AITER_SWITCH_DEFAULTS.since)
    return dict(AITER_SWITCH_DEFAULTS.at(version))[name]


def expert_parallel_active(tensor: int, data: int, expert: bool) -> bool:
    """MOE_USE_EP for glmops' spec (no prefill-context parallelism)."""
    return expert and tensor * data > 1


def all2all_kernels_built(tensor: int, data: int, expert: bool) -> bool:
    """MOE_ALL2ALL_KERNELS for glmops' spec: sequence-parallel MoE needs data > 1 too, so data > 1 decides."""
    return expert_parallel_active(tensor, data, expert) and data > 1


def ct_mxfp4_oracle_picks(moe_backend: str, version: Version | None) -> bool:
    """CT_MXFP4_MOE_BACKENDS_READ: the compressed-tensors MXFP4 MoE method hands this `--moe-backend` to the MXFP4
    oracle, which checks the experts it picks, instead of picking Cutlass or Marlin unchecked (an unknown version:
    assumed not, as the rules assume the older behaviour there)."""
    name = moe_backend.lower().replace("-", "_")
    return version is not None and name in CT_MXFP4_MOE_BACKENDS_READ.at(version)


def effective_all2all(name: str, version: Version | None) -> str:
    """The backend vLLM runs for a `--all2all-backend` value (`auto`: the default; removed names rewritten)."""
    if name == "auto":
        return ALL2ALL_DEFAULT.at(version)
    return ALL2ALL_DEFAULT.at(version) if name in ALL2ALL_REWRITTEN.at(version) else name
