"""Checks that a spec can run at all: GPUs, memory, formats, backends, versions, managed flags."""

from __future__ import annotations

import math
import re

from glm_operator.api.constants import VLLM_PORT
from glm_operator.catalog import vllm_facts as facts
from glm_operator.catalog.accelerators import ArchFamily
from glm_operator.rules.backends import (
    all2all_backends,
    attention_backends,
    kv_cache_dtypes,
    moe_backends,
    platform_of_all2all,
    platform_of_attention,
    platform_of_moe_backend,
)
from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding, Severity

GPU_MEMORY_UTILIZATION = 0.92  # vLLM's default --gpu-memory-utilization
KV_CACHE_RESERVE = 0.10  # share of each GPU kept free of weights for the KV cache
GIB = 1024**3

# Flags glmops renders from spec fields; setting them in extraArgs would contradict the checked spec.
MANAGED_FLAGS = {
    "--tensor-parallel-size": "spec.parallelism.tensor",
    "-tp": "spec.parallelism.tensor",
    "--pipeline-parallel-size": "spec.parallelism.pipeline",
    "-pp": "spec.parallelism.pipeline",
    "--data-parallel-size": "spec.parallelism.data",
    "-dp": "spec.parallelism.data",
    "--enable-expert-parallel": "spec.parallelism.expert",
    "-ep": "spec.parallelism.expert",
    "--no-enable-expert-parallel": "spec.parallelism.expert",
    "--moe-backend": "spec.engine.moeBackend",
    "--attention-backend": "spec.engine.attentionBackend",
    "--all2all-backend": "spec.engine.all2allBackend",
    "--kv-cache-dtype": "spec.engine.kvCacheDtype",
    "--speculative-config": "spec.engine.speculative",
    "-sc": "spec.engine.speculative",
    "--spec-method": "spec.engine.speculative",
    "--spec-tokens": "spec.engine.speculative",
    "--model": "spec.model.name",
    "--revision": "spec.model.revision",
}


def _f(rule: str, severity: Severity, field: str, value: object, problem: str, fix: str) -> Finding:
    return Finding(
        rule=f"feasibility/{rule}",
        severity=severity,
        field=field,
        value=str(value),
        problem=problem,
        fix=fix,
    )


def model_known(ctx: Context) -> list[Finding]:
    """The model is in the catalog (an alias resolves with a warning; an unknown model is a warning)."""
    name = ctx.spec.model.name
    if ctx.model is None:
        known = ", ".join(sorted(ctx.catalogs.models.models))
        return [
            _f(
                "model",
                "warning",
                "spec.model.name",
                name,
                "not in the model catalog, so checkpoint-specific rules are not evaluated",
                f"Use a catalogued checkpoint ({known}) or extend the catalog",
            )
        ]
    if ctx.model.via_alias:
        real = ctx.model.model.name
        return [
            _f(
                "model",
                "warning",
                "spec.model.name",
                name,
                f"no such Hugging Face repository; it is a common alias of {real}",
                f"glmops serves {real} under the name {name}; write {real} to silence this",
            )
        ]
    return []


def gpus_fit_nodes(ctx: Context) -> list[Finding]:
    """A replica uses at most one node, or a whole number of nodes."""
    p = ctx.spec.parallelism
    per_node = ctx.spec.accelerator.gpus_per_node or ctx.accelerator.gpus_per_node
    gpus = p.gpus()
    if gpus <= per_node or gpus % per_node == 0:
        return []
    return [
        _f(
            "gpus",
            "error",
            "spec.parallelism",
            p.summary(),
            f"a replica needs {gpus} GPUs, which is not a whole number of {per_node}-GPU {ctx.accelerator.name} nodes",
            f"Use at most {per_node} GPUs per replica or a multiple of {per_node}",
        )
    ]


def expert_needs_ranks(ctx: Context) -> list[Finding]:
    """Expert parallelism with tensor x data = 1 is silently turned off by vLLM (a warning)."""
    p = ctx.spec.parallelism
    if p.expert and not facts.expert_parallel_active(p.tensor, p.data, p.expert):
        return [
            _f(
                "expert-parallel",
                "warning",
                "spec.parallelism.expert",
                "true",
                "with tensor x data = 1 vLLM turns expert parallelism off without a word (FusedMoEParallelConfig.make)",
                "Set expert: false, or raise parallelism.data or parallelism.tensor to shard the experts",
            )
        ]
    return []


def pipeline_fits_layers(ctx: Context) -> list[Finding]:
    """No more pipeline stages than the model has layers."""
    pp = ctx.spec.parallelism.pipeline
    if ctx.model is not None and pp > ctx.model.model.layers:
        return [
            _f(
                "pipeline",
                "error",
                "spec.parallelism.pipeline",
                pp,
                f"more stages than {ctx.model.model.name} has layers ({ctx.model.model.layers})",
                "Use fewer pipeline stages",
            )
        ]
    return []


def format_on_architecture(ctx: Context) -> list[Finding]:
    """The checkpoint format runs on the accelerator architecture."""
    if ctx.model is None:
        return []
    fmt = ctx.catalogs.formats[ctx.model.model.format]
    family = ctx.accelerator.arch_family
    if family in fmt.warn:
        return [
            _f(
                "format",
                "warning",
                "spec.accelerator.type",
                ctx.accelerator.name,
                f"{ctx.model.model.name} is {fmt.description}: {fmt.warn[family]}",
                "Prefer an FP8 or BF16 checkpoint here",
            )
        ]
    if family not in fmt.supported:
        return [
            _f(
                "format",
                "error",
                "spec.accelerator.type",
                ctx.accelerator.name,
                f"{ctx.model.model.name} is {fmt.description}, which does not run on {family}: {fmt.why_not(family)}",
                f"Use an accelerator of {', '.join(fmt.supported)} or another checkpoint of {ctx.model.model.family}",
            )
        ]
    return []


def mxfp4_moe_layout(ctx: Context) -> list[Finding]:
    """Off SM100 the MXFP4 MoE runs on Marlin, which takes neither batched, padded (DeepEP v2 from 0.34.0) nor
    FlashInfer two-sided all-to-all."""
    p = ctx.spec.parallelism
    if (
        ctx.model is None
        or ctx.model.model.format != "compressed-tensors-mxfp4-w4a4"
        or ctx.platform != "cuda"
        or ctx.accelerator.arch_family == ArchFamily.SM100  # the Cutlass experts: rule vllm-58729
        or facts.ct_mxfp4_oracle_picks(ctx.spec.engine.moe_backend, ctx.version)  # not Marlin: checked by vLLM
        or not facts.all2all_kernels_built(p.tensor, p.data, p.expert)
    ):
        return []
    backend = facts.effective_all2all(ctx.spec.engine.all2all_backend, ctx.version)
    batched = backend in facts.MOE_BATCHED_ALL2ALL.at(ctx.version)
    padded = backend in facts.MOE_PADDED_ALL2ALL.at(ctx.version)
    if not batched and not padded and backend not in facts.MARLIN_REJECTED_ALL2ALL.at(ctx.version):
        return []
    one_sided = backend == "flashinfer_nvlink_one_sided"  # refused by the Marlin experts of 0.26.0
    layout = (
        "the batched activation format"
        if batched
        else "the padded rows"
        if padded
        else f"the FlashInfer {'one' if one_sided else 'two'}-sided layout"
    )
    return [
        _f(
            "moe-layout",
            "error",
            "spec.engine.all2allBackend",
            ctx.spec.engine.all2all_backend,
            f"on {ctx.accelerator.name} vLLM runs the MXFP4 MoE of {ctx.model.model.name} on its Marlin experts, which "
            f"cannot take {layout} of this all-to-all backend, so vLLM fails after loading every weight",
            "Use all2allBackend auto (allgather_reducescatter)",
        )
    ]


def mtp_needs_layers(ctx: Context) -> list[Finding]:
    """MTP speculative decoding only for models with MTP layers."""
    spec = ctx.spec.engine.speculative
    if spec is not None and spec.method == "mtp" and ctx.model is not None and ctx.model.model.mtp_layers == 0:
        return [
            _f(
                "mtp",
                "error",
                "spec.engine.speculative.method",
                "mtp",
                f"{ctx.model.model.name} has no MTP layers",
                "Remove spec.engine.speculative or use another method",
            )
        ]
    return []


def ngram_lookup(ctx: Context) -> list[Finding]:
    """Prompt-lookup bounds only with the ngram method, and the minimum no larger than the maximum."""
    spec = ctx.spec.engine.speculative
    if spec is None or (spec.prompt_lookup_min is None and spec.prompt_lookup_max is None):
        return []
    field = "spec.engine.speculative"
    if spec.method != "ngram":
        # vLLM zeroes both bounds for every other method (`ngram-lookup-defaults`), so a value here does nothing.
        name = "promptLookupMax" if spec.prompt_lookup_max is not None else "promptLookupMin"
        value = spec.prompt_lookup_max if spec.prompt_lookup_max is not None else spec.prompt_lookup_min
        return [
            _f(
                "ngram-lookup",
                "error",
                f"{field}.{name}",
                value,
                f"only the ngram method matches prompt n-grams; with {spec.method.value} vLLM ignores it",
                f"Remove {field}.{name}, or set {field}.method to ngram",
            )
        ]
    low, high = spec.prompt_lookup_min, spec.prompt_lookup_max
    if low is not None and high is not None and low > high:
        return [
            _f(
                "ngram-lookup",
                "error",
                f"{field}.promptLookupMin",
                low,
                f"larger than promptLookupMax ({high}): vLLM refuses to start",
                f"Set {field}.promptLookupMin to at most {high}",
            )
        ]
    return []


def weights_fit(ctx: Context) -> list[Finding]:
    """Weights per GPU fit the GPU memory with 10 % kept for the KV cache (at vLLM's 0.92 utilisation)."""
    if ctx.model is None:
        return []
    model, p = ctx.model.model, ctx.spec.parallelism
    weight = model.weight_gb * 1e9 / GIB
    expert_shards = p.tensor * p.pipeline * (p.data if p.expert else 1)
    per_gpu = weight * model.expert_fraction / expert_shards + weight * (1 - model.expert_fraction) / (
        p.tensor * p.pipeline
    )
    budget = ctx.accelerator.memory_gib * (GPU_MEMORY_UTILIZATION - KV_CACHE_RESERVE)
    if per_gpu <= budget:
        return []
    need = math.ceil(weight / budget)
    return [
        _f(
            "memory",
            "error",
            "spec.parallelism",
            p.summary(),
            f"{model.name} needs about {per_gpu:.0f} GiB of weights per GPU, more than the {budget:.0f} GiB a "
            f"{ctx.accelerator.memory_gib:g} GiB {ctx.accelerator.name} leaves beside the KV cache",
            f"Shard over at least {need} GPUs (tensor x pipeline) or use a smaller checkpoint",
        )
    ]


def _unknown_backend(ctx: Context, field: str, value: str, fix: str) -> Finding:
    return _f("backend", "error", field, value, f"not a value vLLM {ctx.version or ''} accepts".replace("  ", " "), fix)


def _backend_off_platform(ctx: Context, field: str, value: str, needs: str) -> Finding:
    return _f(
        "backend",
        "error",
        field,
        value,
        f"runs only on {needs.upper()}, and {ctx.accelerator.name} is {ctx.platform.upper()}",
        "Use auto or a backend of this platform",
    )


def backends_valid(ctx: Context) -> list[Finding]:
    """MoE, all-to-all, attention backends and KV cache dtype exist in the vLLM version and run on the platform."""
    engine, out = ctx.spec.engine, []
    checks = [
        (
            "spec.engine.moeBackend",
            engine.moe_backend.lower().replace("-", "_"),
            moe_backends(ctx.version),
            platform_of_moe_backend,
        ),
        ("spec.engine.all2allBackend", engine.all2all_backend, all2all_backends(ctx.version), platform_of_all2all),
        ("spec.engine.kvCacheDtype", engine.kv_cache_dtype, kv_cache_dtypes(ctx.version), lambda _n: None),
    ]
    for field, value, valid, platform_of in checks:
        if value != "auto" and value not in valid:
            out.append(_unknown_backend(ctx, field, value, f"Use one of: {', '.join(sorted(valid))}"))
        elif (needs := platform_of(value)) and needs != ctx.platform:
            out.append(_backend_off_platform(ctx, field, value, needs))
    attention, field = engine.attention_backend, "spec.engine.attentionBackend"
    known = attention_backends(ctx.version)
    if attention.lower() != "auto" and attention.upper() not in known:
        out.append(_unknown_backend(ctx, field, attention, f"Use auto or one of: {', '.join(sorted(known))}"))
    elif attention.lower() != "auto" and (needs := platform_of_attention(attention)) and needs != ctx.platform:
        out.append(_backend_off_platform(ctx, field, attention, needs))
    return out


def version_known(ctx: Context) -> list[Finding]:
    """The vLLM version is known for the image, matches it, and the image matches the platform."""
    engine, images = ctx.spec.engine, ctx.catalogs.images
    supported = ", ".join(images.versions)
    if engine.image is None:
        if engine.vllm_version and engine.vllm_version not in images.versions:
            return [
                _f(
                    "version",
                    "error",
                    "spec.engine.vllmVersion",
                    engine.vllm_version,
                    "glmops has no patched image for this vLLM version",
                    f"Use one of {supported}, or set spec.engine.image",
                )
            ]
        return []
    out = []
    if ctx.version is None:
        out.append(
            _f(
                "version",
                "warning",
                "spec.engine.image",
                engine.image,
                "the vLLM version of this image is unknown, so every version-bound rule assumes it is affected",
                "Set spec.engine.vllmVersion to the version the image runs",
            )
        )
    elif not ctx.image.known and str(ctx.version) not in images.versions:
        judge, newest = images.judged_as(ctx.version), images.newest_version()
        which = "the newest checked version" if judge == str(newest) else "the checked version below it"
        out.append(
            _f(
                "version",
                "warning",
                "spec.engine.image",
                engine.image,
                f"vLLM {ctx.version} is not a version glmops has checked ({supported}): the version-bound rules judge "
                f"it by what vLLM {judge} ({which}) does, read from {judge}'s source, and what changed since is not "
                "known",
                f"Prefer a checked version (the newest is {newest})",
            )
        )
    tag_version = ctx.image.version
    if engine.vllm_version and tag_version and engine.vllm_version != tag_version:
        out.append(
            _f(
                "version",
                "error",
                "spec.engine.vllmVersion",
                engine.vllm_version,
                f"contradicts the image, which runs vLLM {tag_version}",
                "Remove spec.engine.vllmVersion or make them agree",
            )
        )
    if ctx.image.platform and ctx.image.platform != ctx.platform:
        out.append(
            _f(
                "platform",
                "error",
                "spec.engine.image",
                engine.image,
                f"a {ctx.image.platform.upper()} image cannot drive {ctx.accelerator.name} ({ctx.platform.upper()})",
                f"Use a {ctx.platform.upper()} image",
            )
        )
    return out


# Flags that would move the server away from where the Service, the probes and the canary reach it, or
# make it answer them differently: admitted, the pod would never pass its gate and nothing would say why.
_GATE = "the Service, the probes and the canary reach vLLM"
_TLS = (f"{_GATE} over plain HTTP; TLS here makes every check fail", "Remove it; terminate TLS in front of the Service")
GATE_FLAGS = {
    "--port": (
        f"{_GATE} on port {VLLM_PORT}, which glmops renders; a second --port moves the server away from them",
        f"Remove it: vLLM serves on port {VLLM_PORT}; put a Service of your own in front to expose another port",
    ),
    "--host": (
        f"{_GATE} on the pod's IP; a --host other than every address hides the server from them",
        "Remove it: vLLM listens on every address of the pod",
    ),
    "--uds": (
        f"{_GATE} over TCP; a Unix socket leaves them nothing to connect to",
        "Remove it",
    ),
    "--ssl-keyfile": _TLS,
    "--ssl-certfile": _TLS,
    "--served-model-name": (
        "the canary asks for spec.model.name and refuses to judge a server that answers to another name",
        "Remove it: the server answers to spec.model.name, which clients use",
    ),
    "--api-key": (
        "the canary sends no key, so every check would be refused and no pod would ever become Ready",
        "Remove it; authenticate clients in front of the Service (a gateway or a mesh policy)",
    ),
}
_GATE_ENV = {"VLLM_API_KEY": "--api-key"}


def _flag_of(arg: str) -> str | None:
    """The flag an argument sets as vLLM reads it: `--api_key=x` and `--api-key x` both set --api-key."""
    if not arg.startswith("-"):
        return None
    flag = re.split(r"[=\s]", arg.strip(), maxsplit=1)[0]
    return flag.replace("_", "-") if flag.startswith("--") else flag


def _refused_flag(flag: str) -> str | None:
    """The managed or gate flag `flag` sets, also as an abbreviation (vLLM's argparse takes a unique prefix)."""
    if flag in MANAGED_FLAGS or flag in GATE_FLAGS:
        return flag
    if flag.startswith("--") and len(flag) >= 5:
        return next((f for f in (*MANAGED_FLAGS, *GATE_FLAGS) if f.startswith(flag)), None)
    return None


def managed_flags(ctx: Context) -> list[Finding]:
    """extraArgs does not set flags glmops renders from the spec, nor ones that would hide the server from its gate."""
    out = []
    for i, arg in enumerate(ctx.spec.engine.extra_args):
        flag = _flag_of(arg)
        refused = _refused_flag(flag) if flag else None
        if refused is None:
            continue
        where = f"spec.engine.extraArgs[{i}]"
        if refused in MANAGED_FLAGS:
            problem = "glmops renders this flag from the spec, where the rules can check it"
            if refused != flag:
                problem = f"vLLM reads it as {refused}; {problem.replace('this flag', 'that flag')}"
            out.append(_f("extra-args", "error", where, arg, problem, f"Set {MANAGED_FLAGS[refused]} instead"))
        else:
            problem, fix = GATE_FLAGS[refused]
            out.append(_f("extra-args", "error", where, arg, f"{refused}: {problem}", fix))
    for i, env in enumerate(ctx.spec.engine.env):
        if env.name in _GATE_ENV:
            problem, fix = GATE_FLAGS[_GATE_ENV[env.name]]
            fix = fix.replace("Remove it", f"Remove {env.name}")
            out.append(_f("extra-args", "error", f"spec.engine.env[{i}]", env.name, f"sets --api-key: {problem}", fix))
    return out


FEASIBILITY_CHECKS = (
    model_known,
    gpus_fit_nodes,
    expert_needs_ranks,
    mxfp4_moe_layout,
    pipeline_fits_layers,
    format_on_architecture,
    mtp_needs_layers,
    ngram_lookup,
    weights_fit,
    backends_valid,
    version_known,
    managed_flags,
)
