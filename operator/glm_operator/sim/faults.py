"""Which upstream failure a simulated vLLM shows, from the way it was launched.

Written from the upstream reports and vLLM's own sources, independently of glmops' admission rules (the simulator
must catch what the rules miss, so it must not share their code): the checkpoint and GPU, the vLLM version and the
patches in the image, and the `vllm serve` flags and environment. Each known failure is one row of `KNOWN_FAILURES`;
a row either stops the launch before it serves (`startup_error`: vLLM failing after loading every weight, or a glmops
patch refusing the launch) or lets it serve with a failure signature (`fault_of`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from glm_operator.catalog.accelerators import Accelerator, load_accelerators
from glm_operator.catalog.images import load_images
from glm_operator.catalog.models import ModelInfo, load_models
from glm_operator.catalog.versions import Version

FAULTS = ("none", "garbled", "null-content", "stale-topk", "mtp-zero", "repeat")
V0_27_1 = Version.parse("0.27.1")
V0_32 = Version.parse("0.32.0")
V0_33 = Version.parse("0.33.0")
V0_34 = Version.parse("0.34.0")
MXFP4_W4A4 = "compressed-tensors-mxfp4-w4a4"
MXFP4_PATCH = "moe-mxfp4-expert-map"
MXFP4_PATCH_BACKEND = "GLMOPS_MOE_MXFP4_BACKEND"
BMM_PATCH = "rocm-mla-bf16-bmm"
TOPK_PATCH = "dsa-pp-topk-handoff"

# config/parallel.py: removed --all2all-backend values fall back to the default, with a warning.
REMOVED_ALL2ALL = {"pplx": "allgather_reducescatter", "naive": "allgather_reducescatter"}
# fused_moe/config.py FusedMoEParallelConfig.use_*_kernels: the token layouts the MXFP4 experts care about.
LAYOUTS = {
    "deepep_high_throughput": "deepep-ht",
    "flashinfer_nvlink_two_sided": "fi-two-sided",
    "flashinfer_all2allv": "fi-two-sided",  # an alias of the two-sided kernels
    "flashinfer_nvlink_one_sided": "fi-one-sided",
    "deepep_low_latency": "batched",  # per-expert token batches (BatchedExperts activation format)
    "nixl_ep": "batched",
}
# From 0.34.0 FusedMoEConfig.activation_format gives DeepEP v2 padded rows (PaddedStandard), which standard-format
# experts (the CUTLASS MXFP4 and Marlin ones) do not take.
LAYOUTS_FROM_0_34 = {**LAYOUTS, "deepep_v2": "padded"}


@dataclass(frozen=True)
class Outcome:
    """What a launch does: stops with `error` before it serves, or serves showing `fault`."""

    fault: str = "none"
    error: str | None = None  # may name {backend}, the all-to-all backend vLLM builds


SERVES = Outcome()
GARBLED = Outcome("garbled")
_CUTLASS_REFUSES = "ValueError: CutlassExpertsMxfp4 does not support this MoE deployment since kernel does not support"
PATCH_REFUSES = Outcome(
    error=f"UnsupportedMoEDeployment: --all2all-backend: {{backend}}: the MXFP4 MoE experts cannot take this "
    f"all-to-all layout with expert parallelism (glmops patch {MXFP4_PATCH})"
)
# vllm-58729 (W4A4 MXFP4 experts under expert parallelism on SM100): by who runs the experts (rows) and the layout of
# the all-to-all kernels vLLM builds (None: no all-to-all kernels, or a layout the experts take).
MXFP4_EP_SM100: dict[str, dict[str | None, Outcome]] = {
    # CutlassExpertsMxfp4 ignores expert_map; nothing checks the layout: experts are misrouted, or it fails building
    # the kernel (standard-format experts given batched sizes; a one-sided dispatch with no MXFP4 payload).
    "stock < 0.32": {
        None: GARBLED,
        "batched": Outcome(
            error="ValueError: max_num_tokens and num_dispatchers should only be set for BatchedExperts "
            "activation format."
        ),
        "fi-one-sided": Outcome(
            error="NotImplementedError: flashinfer_nvlink_one_sided dispatch supports nvfp4, mxfp8, DeepSeek "
            "Blockwise FP8 and bf16 (quant_dtype=None) today; got quant_dtype='mxfp4'"
        ),
    },
    # The kernel remaps expert ids; the MXFP4 oracle validates the experts after the weights are loaded.
    "stock >= 0.32": {
        None: SERVES,
        **dict.fromkeys(
            ("deepep-ht", "fi-two-sided", "fi-one-sided"),
            Outcome(error=f"{_CUTLASS_REFUSES} parallel config (all2all_backend='{{backend}}', use_ep=True)."),
        ),
        "batched": Outcome(error=f"{_CUTLASS_REFUSES} ('batched_experts',) activation format."),
        "padded": Outcome(error=f"{_CUTLASS_REFUSES} ('padded_standard',) activation format."),
    },
    # glmops' patch refuses at model construction what the experts it runs cannot take.
    "patched, cutlass": {
        None: SERVES,
        **dict.fromkeys(("deepep-ht", "fi-two-sided", "fi-one-sided", "batched", "padded"), PATCH_REFUSES),
    },
    "patched, marlin": {None: SERVES, **dict.fromkeys(("fi-two-sided", "batched", "padded"), PATCH_REFUSES)},
    # 0.26.0's MarlinExperts refuse the one-sided layout too (marlin_moe.py:658), so the patch refuses it as well.
    "patched, marlin < 0.27.1": {
        None: SERVES,
        **dict.fromkeys(("fi-two-sided", "fi-one-sided", "batched"), PATCH_REFUSES),
    },
}
ROCM_MXFP4_MARLIN = Outcome(
    error="AttributeError: '_OpNamespace' '_C' object has no attribute 'gptq_marlin_repack' (the compressed-tensors "
    "MXFP4 MoE falls back to MarlinExperts on ROCm, and Marlin needs CUDA)"
)


@dataclass
class Launch:
    """What the simulated server was started with."""

    model: str = "zai-org/GLM-5.3"
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: bool = False
    all2all: str = "allgather_reducescatter"
    moe_backend: str = "auto"
    speculative: dict[str, object] | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpu: str = "H200"
    version: str = field(default_factory=lambda: load_images().default_version)
    patches: frozenset[str] = frozenset()


def parse_serve_args(args: list[str], env: dict[str, str], gpu: str, version: str, patches: set[str]) -> Launch:
    """Read a `vllm serve MODEL ...` command line as vLLM does (`_` and `-` interchangeable)."""
    args = list(args)
    if args[:2] == ["vllm", "serve"]:
        args = args[2:]
    launch = Launch(env=dict(env), gpu=gpu, version=version, patches=frozenset(patches))
    if args and not args[0].startswith("-"):
        launch.model = args.pop(0)
    i = 0
    while i < len(args):
        flag, _, inline = args[i].partition("=")
        flag = flag.replace("_", "-")
        value = inline or (args[i + 1] if i + 1 < len(args) else "")
        step = 1 if inline or flag in ("--enable-expert-parallel", "-ep") else 2
        if flag in ("--tensor-parallel-size", "-tp"):
            launch.tensor = int(value)
        elif flag in ("--pipeline-parallel-size", "-pp"):
            launch.pipeline = int(value)
        elif flag in ("--data-parallel-size", "-dp"):
            launch.data = int(value)
        elif flag in ("--enable-expert-parallel", "-ep"):
            launch.expert = True
        elif flag == "--all2all-backend":
            launch.all2all = value
        elif flag == "--moe-backend":
            launch.moe_backend = value.replace("-", "_")
        elif flag in ("--speculative-config", "-sc"):
            launch.speculative = json.loads(value)
        else:
            step = 1
        i += step
    return launch


@dataclass(frozen=True)
class Resolved:
    """A launch as vLLM resolves it: the checkpoint and GPU it names, and how its MoE is split."""

    launch: Launch
    model: ModelInfo | None
    gpu: Accelerator | None
    version: Version

    @property
    def use_ep(self) -> bool:
        """FusedMoEParallelConfig.make: EP needs more than one GPU per MoE (tp x dp; pp does not count)."""
        return self.launch.expert and self.launch.tensor * self.launch.data > 1

    @property
    def layout(self) -> str | None:
        """The token layout of the all-to-all kernels vLLM builds, as the MXFP4 experts see it (None: one they take,
        or no all-to-all kernels)."""
        layouts = LAYOUTS_FROM_0_34 if self.version >= V0_34 else LAYOUTS
        return layouts.get(self.all2all_kernels or "")

    @property
    def all2all_kernels(self) -> str | None:
        """The backend whose all-to-all kernels vLLM builds, or None (EP across tensor ranks only needs none)."""
        if not (self.use_ep and self.launch.data > 1):
            return None
        return REMOVED_ALL2ALL.get(self.launch.all2all, self.launch.all2all)


def resolve(launch: Launch) -> Resolved:
    catalog = load_models().lookup(launch.model)
    return Resolved(
        launch=launch,
        model=catalog.model if catalog else None,
        gpu=load_accelerators().accelerators.get(launch.gpu),
        version=Version.parse(launch.version),
    )


# compressed_tensors_moe_w4a4_mxfp4.py CompressedTensorsW4A4Mxfp4MoEMethod.__init__: these --moe-backend values go to
# select_mxfp4_moe_backend (fused_moe/oracle/mxfp4.py), which builds the experts only if their is_supported_config
# holds, before any weight loads; every other value gets CUTLASS on SM100, else Marlin. By first version.
ORACLE_MOE_BACKENDS = (
    ("0.30.0", ("b12x",)),
    ("0.32.0", ("flashinfer_moe_ep_cutedsl", "flashinfer_moe_ep_mega_deep_gemm")),  # is_flashinfer_moe_ep_backend
    ("0.34.0", ("deep_gemm",)),
)


def oracle_picks_experts(r: Resolved) -> bool:
    return any(
        r.version >= Version.parse(first) and r.launch.moe_backend in names for first, names in ORACLE_MOE_BACKENDS
    )


def mxfp4_oracle_experts(r: Resolved) -> Outcome | None:
    """The W4A4 MXFP4 experts the oracle picks for an explicit --moe-backend, and the two checks of their
    is_supported_config a launch here varies: the device (B12xExperts: SM120 family; FlashInferMoeEpExperts: capability
    10.0 or 10.3; DeepGemmFP4Experts: SM100 or SM120) and the parallel config (B12xExperts: ep_size 1;
    FlashInferMoeEpExperts: expert parallelism, no batched or padded layout; DeepGemmFP4Experts: no FlashInfer NVLink
    layout). The quantization scheme, activation and shape checks are not modelled."""
    if not (
        r.model and r.model.format == MXFP4_W4A4 and r.gpu and r.gpu.platform == "cuda" and oracle_picks_experts(r)
    ):
        return None
    backend, family, layout = r.launch.moe_backend, r.gpu.arch_family, r.layout
    if backend == "b12x":
        device, parallel = family == "sm120", not r.use_ep
    elif backend == "deep_gemm":
        device, parallel = family in ("sm100", "sm120"), layout not in ("fi-two-sided", "fi-one-sided")
    else:
        # 0.34.0 checks only use_ep there, but refuses the batched and padded formats as not `Standard`
        device, parallel = family == "sm100", r.use_ep and layout not in ("batched", "padded")
    if device and parallel:
        return SERVES
    why = "current device" if not device else "parallel config"
    return Outcome(
        error=f"ValueError: {backend} does not support this MoE deployment since kernel does not support {why}"
    )


def mxfp4_moe_on_rocm(r: Resolved) -> Outcome | None:
    """No CUTLASS or XPU experts on ROCm: the MoE method repacks for Marlin with a CUDA-only op, in every version."""
    # 0.32.0+ also validates MarlinExperts against the device, but only in make_mxfp4_moe_kernel, after that repack.
    if r.model and r.model.format == MXFP4_W4A4 and r.gpu and r.gpu.platform == "rocm":
        return ROCM_MXFP4_MARLIN
    return None


def marlin_refused_layouts(version: Version) -> tuple[str, ...]:
    """The all-to-all layouts MarlinExpertsBase._supports_parallel_config refuses: FlashInfer two-sided, and in
    0.26.0 one-sided as well (0.27.1 accepts one-sided)."""
    return ("fi-two-sided",) if version >= V0_27_1 else ("fi-two-sided", "fi-one-sided")


def mxfp4_marlin_under_ep(r: Resolved) -> Outcome | None:
    """Off SM100 the W4A4 MXFP4 method runs plain MarlinExperts (standard format, no FlashInfer two-sided), in every
    version and with or without glmops' patch (which only steps in where CUTLASS was picked)."""
    if not (r.model and r.model.format == MXFP4_W4A4 and r.gpu and r.gpu.platform == "cuda"):
        return None
    layout = r.layout
    if (
        r.gpu.arch_family == "sm100"
        or oracle_picks_experts(r)
        or layout not in ("batched", "padded", *marlin_refused_layouts(r.version))
    ):
        return None
    why = {
        "batched": "('batched_experts',) activation format",
        "padded": "('padded_standard',) activation format",
    }.get(layout or "", "parallel config")
    return Outcome(
        error=f"ValueError: MarlinExperts does not support this MoE deployment since kernel does not "
        f"support {why} (all2all_backend='{r.all2all_kernels}')"
    )


def mxfp4_experts_under_ep(r: Resolved) -> Outcome | None:
    """vllm-58729: the CUTLASS MXFP4 experts SM100 picks, under expert parallelism."""
    if not (r.model and r.model.format == MXFP4_W4A4 and r.gpu and r.gpu.arch_family == "sm100" and r.use_ep):
        return None
    if oracle_picks_experts(r):
        return None  # not CUTLASS: mxfp4_oracle_experts
    if MXFP4_PATCH in r.launch.patches:
        marlin = r.launch.env.get(MXFP4_PATCH_BACKEND, "").strip().lower() == "marlin"
        marlin_row = "patched, marlin" if r.version >= V0_27_1 else "patched, marlin < 0.27.1"
        row = MXFP4_EP_SM100[marlin_row if marlin else "patched, cutlass"]
    else:
        row = MXFP4_EP_SM100["stock < 0.32" if r.version < V0_32 else "stock >= 0.32"]
    backend = r.all2all_kernels
    outcome = row.get(r.layout, row[None])
    if outcome.error:
        return Outcome(error=outcome.error.format(backend=backend))
    return outcome


def pp_layer_split(layers: int, pp: int, partition: str | None) -> list[int]:
    """Layers per pipeline stage (distributed/utils.py get_pp_indices): VLLM_PP_LAYER_PARTITION when set, else an
    even split whose remainder goes one each to stages pp-2, pp-3, ... (the last stage holds the norm)."""
    if partition:
        return [int(x) for x in partition.split(",")]
    sizes = [layers // pp] * pp
    for k in range(layers % pp):
        sizes[pp - 2 - k] += 1
    return sizes


def stale_topk(r: Resolved) -> Outcome | None:
    """vllm-63170: a pipeline stage that starts on a top-k reuse layer (index_topk_pattern's S layers where the
    config has one, else the frequency-and-offset rule) reads stale indices, until 0.34.0's CUDA and
    ROCm DSA modules send the top-k with the hidden states (models/deepseek_v32/{nvidia,amd}/model.py
    pp_topk_buffers)."""
    model, pp = r.model, r.launch.pipeline
    if not model or pp == 1 or TOPK_PATCH in r.launch.patches:
        return None
    if r.version >= V0_34 and r.gpu and r.gpu.platform in ("cuda", "rocm"):
        return None
    sizes = pp_layer_split(model.layers, pp, r.launch.env.get("VLLM_PP_LAYER_PARTITION"))
    starts = [sum(sizes[:stage]) for stage in range(1, pp)]
    return Outcome("stale-topk") if any(not model.computes_topk(s) for s in starts) else None


def env_flag(env: dict[str, str], name: str, default: bool) -> bool:
    """A vLLM boolean switch (envs.py): on iff the value, lower-cased as given, is "true" or "1"."""
    return env.get(name, "True" if default else "False").lower() in ("true", "1")


def mtp_zero(r: Resolved) -> Outcome | None:
    """vllm-52833: on gfx950, AITER re-quantizes a BF16 kv_b_proj for its FP4/FP8 BMM and MTP accepts no draft.
    gfx942 runs the FP8 BMM the same way, but no report shows drafts lost there, so it serves here."""
    model, spec, env = r.model, r.launch.speculative or {}, r.launch.env
    method = str(spec.get("method", ""))
    if not (model and r.gpu and r.gpu.architecture == "gfx950" and (method == "mtp" or method.endswith("_mtp"))):
        return None
    if not (model.format == "bf16" or "mla-attention" in model.bf16_modules):
        return None  # an FP8 kv_b_proj is not this fault
    # The BMM switches default on below 0.33.0. The patch turns that default off for BF16 kv_b_proj layers, but keeps
    # a kernel the user switched on explicitly (patch_rocm_mla_bf16_bmm, ops_mla.bmm_flags).
    default = r.version < V0_33 and BMM_PATCH not in r.launch.patches
    bmm = env_flag(env, "VLLM_ROCM_USE_AITER_FP4BMM", default) or env_flag(env, "VLLM_ROCM_USE_AITER_FP8BMM", default)
    return Outcome("mtp-zero") if env_flag(env, "VLLM_ROCM_USE_AITER", False) and bmm else None


# Upstream issue -> its check. Startup errors win over faults; among faults the first row wins.
KNOWN_FAILURES: tuple[tuple[str, Callable[[Resolved], Outcome | None]], ...] = (
    ("rocm-mxfp4-marlin", mxfp4_moe_on_rocm),
    ("mxfp4-oracle-experts", mxfp4_oracle_experts),
    ("vllm-58729", mxfp4_experts_under_ep),
    ("mxfp4-marlin-layout", mxfp4_marlin_under_ep),
    ("vllm-63170", stale_topk),
    ("vllm-52833", mtp_zero),
)


def outcomes(launch: Launch) -> list[tuple[str, Outcome]]:
    """Every known failure this launch runs into, with its issue id, in table order."""
    resolved = resolve(launch)
    found = ((issue, check(resolved)) for issue, check in KNOWN_FAILURES)
    return [(issue, outcome) for issue, outcome in found if outcome is not None and outcome != SERVES]


def startup_error(launch: Launch) -> str | None:
    """The error a launch stops with before it serves anything, or None when it starts."""
    return next((o.error for _, o in outcomes(launch) if o.error), None)


def fault_of(launch: Launch) -> str:
    """The failure signature this launch shows once it serves, or "none"."""
    return next((o.fault for _, o in outcomes(launch) if o.error is None), "none")
