"""Which upstream failure a simulated vLLM shows, from the way it was launched.

Written from the upstream reports, independently of glmops' admission rules (the simulator must
catch what the rules miss, so it must not share their code): the checkpoint and GPU, the vLLM
version and the patches in the image, and the `vllm serve` flags and environment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from glm_operator.catalog.models import ModelInfo, load_models
from glm_operator.catalog.versions import Version

FAULTS = ("none", "garbled", "null-content", "stale-topk", "mtp-zero")
SM100 = {"GB200", "B200", "GB300", "B300"}
# All-to-all layouts the Cutlass MXFP4 experts cannot take. Before 0.32.0 nothing checks and experts are misrouted
# anyway; 0.32.0+ fails closed at start (read from the 0.32.0/0.33.0 sources: the MXFP4 oracle validates the experts'
# parallel config after the weights are loaded), as does glmops' patch unless the MoE is moved to Marlin.
UNGUARDED_ALL2ALL = {
    "deepep_high_throughput",
    "flashinfer_nvlink_two_sided",
    "flashinfer_nvlink_one_sided",
    "flashinfer_all2allv",
}
MARLIN_REFUSES = {"flashinfer_nvlink_two_sided", "flashinfer_all2allv"}


@dataclass
class Launch:
    """What the simulated server was started with."""

    model: str = "zai-org/GLM-5.3"
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: bool = False
    all2all: str = "allgather_reducescatter"
    speculative: dict[str, object] | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpu: str = "H200"
    version: str = "0.33.0"
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
        elif flag in ("--speculative-config", "-sc"):
            launch.speculative = json.loads(value)
        else:
            step = 1
        i += step
    return launch


def fault_of(launch: Launch) -> str:
    """The failure signature this launch shows, or "none"."""
    catalog = load_models().lookup(launch.model)
    model = catalog.model if catalog else None
    version = Version.parse(launch.version)
    # vllm-58729: Cutlass MXFP4 experts index local weights with global expert ids under EP on SM100.
    if _mxfp4_ep_on_sm100(launch, model) and "moe-mxfp4-expert-map" not in launch.patches and version < V0_32:
        return "garbled"
    # vllm-63170: a pipeline stage starting on a top-k reuse layer reads stale indices.
    if (
        model
        and model.index_topk_freq > 1
        and launch.pipeline > 1
        and "dsa-pp-topk-handoff" not in launch.patches
        and _stale_stage(launch, model.layers, model)
    ):
        return "stale-topk"
    # vllm-52833: BF16 MLA weights re-quantized by AITER's FP4/FP8 BMM on gfx950: MTP drafts never accepted.
    if (
        model
        and "mla-attention" in model.bf16_modules
        and launch.gpu == "MI355X"
        and launch.speculative
        and launch.speculative.get("method") == "mtp"
        and version < Version.parse("0.33.0")
        and "rocm-mla-bf16-bmm" not in launch.patches
        and not (
            launch.env.get("VLLM_ROCM_USE_AITER_FP4BMM") == "0" and launch.env.get("VLLM_ROCM_USE_AITER_FP8BMM") == "0"
        )
    ):
        return "mtp-zero"
    return "none"


def startup_error(launch: Launch) -> str | None:
    """The error a launch stops with before it serves anything, or None when it starts."""
    catalog = load_models().lookup(launch.model)
    model = catalog.model if catalog else None
    if not _mxfp4_ep_on_sm100(launch, model) or launch.all2all not in UNGUARDED_ALL2ALL:
        return None
    if "moe-mxfp4-expert-map" in launch.patches:
        marlin = launch.env.get("GLMOPS_MOE_MXFP4_BACKEND", "").strip().lower() == "marlin"
        if marlin and launch.all2all not in MARLIN_REFUSES:
            return None
        return (
            f"UnsupportedMoEDeployment: --all2all-backend: {launch.all2all}: the MXFP4 MoE experts cannot take this "
            "all-to-all layout with expert parallelism (glmops patch moe-mxfp4-expert-map)"
        )
    if Version.parse(launch.version) >= V0_32:
        return f"ValueError: CutlassExpertsMxfp4 does not support this MoE deployment ({launch.all2all})"
    return None  # older versions start, and misroute (fault_of)


V0_32 = Version.parse("0.32.0")


def _mxfp4_ep_on_sm100(launch: Launch, model: ModelInfo | None) -> bool:
    return bool(
        model
        and model.format == "compressed-tensors-mxfp4-w4a4"
        and launch.gpu in SM100
        and launch.expert
        and launch.tensor * launch.data > 1
    )


def _stale_stage(launch: Launch, layers: int, model: ModelInfo) -> bool:
    text = launch.env.get("VLLM_PP_LAYER_PARTITION")
    pp = launch.pipeline
    if text:
        sizes = [int(x) for x in text.split(",")]
    else:
        sizes = [layers // pp] * pp
        for k in range(layers % pp):
            sizes[pp - 2 - k] += 1
    start = 0
    for size in sizes[:-1]:
        start += size
        if not model.computes_topk(start):
            return True
    return False
