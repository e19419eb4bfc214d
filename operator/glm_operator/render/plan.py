"""The serving plan of a GLMDeployment: image, topology, and the exact `vllm serve` command and env.

Pure: the spec (after admission's repairs) and the catalogs in, a Plan out. The workload builders
(render/workloads.py) turn a Plan into Kubernetes objects; the operator records its summary in status.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from glm_operator.api import GLMDeployment
from glm_operator.api.constants import ROCM_AITER_ENV, ROCM_AITER_RENDERED, VLLM_PORT
from glm_operator.catalog.bundle import Catalogs
from glm_operator.render.network import rdma_resource
from glm_operator.rules.context import resolve

HTTP_PORT = VLLM_PORT
MASTER_PORT = 29501
PLUGIN_NAME = "glmops_vllm_patches"
REASONING_PARSER = "glm45"
TOOL_CALL_PARSER = "glm47"
# Placeholders Kubernetes expands in args from the container's env ($(VAR) syntax).
LEADER_ADDRESS = "$(GLMOPS_LEADER_ADDRESS)"
NODE_RANK = "$(GLMOPS_NODE_RANK)"


@dataclass(frozen=True)
class Plan:
    """Everything the workload builders need, decided once."""

    name: str
    namespace: str
    image: str
    vllm_version: str | None
    platform: str
    patches: tuple[str, ...]
    model_repo: str
    served_name: str
    gpus_per_replica: int
    gpus_per_pod: int
    nodes_per_replica: int
    replicas: int
    accelerator: str
    resource_name: str
    node_selector: dict[str, list[str]]
    leader_args: list[str]
    worker_args: list[str] | None
    env: list[dict[str, str]]
    partition: str | None
    notes: list[str] = field(default_factory=list)
    # The digest of `image` once the operator built (or found) it: pods then run image@digest.
    image_digest: str | None = None
    # The RDMA device resource every pod requests (spec.network.rdma, else the cluster's default); None: none.
    rdma_resource: str | None = None
    # The checkpoint's size on disk from the model catalog (None for a model it does not know): sizes the cache.
    weight_gb: float | None = None

    @property
    def pinned_image(self) -> str:
        """What the pods run: the image pinned by digest when one is known."""
        return f"{self.image}@{self.image_digest}" if self.image_digest else self.image

    @property
    def multi_node(self) -> bool:
        return self.nodes_per_replica > 1

    @property
    def command_hash(self) -> str:
        """Changes whenever what a pod runs changes: image, arguments, environment."""
        body = json.dumps([self.pinned_image, self.leader_args, self.worker_args, self.env], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def summary(self) -> dict[str, object]:
        """The plan as recorded in status.plan."""
        summary: dict[str, object] = {
            "image": self.image,
            "vllmVersion": self.vllm_version or "unknown",
            "patches": list(self.patches),
            "pipelinePartition": self.partition or "",
            "nodesPerReplica": self.nodes_per_replica,
            "gpusPerPod": self.gpus_per_pod,
            "commandHash": self.command_hash,
        }
        if self.image_digest:
            summary["imageDigest"] = self.image_digest
        return summary


def _engine_flags(glmd: GLMDeployment) -> list[str]:
    spec = glmd.spec
    p, e = spec.parallelism, spec.engine
    flags = [
        "--tensor-parallel-size",
        str(p.tensor),
        "--pipeline-parallel-size",
        str(p.pipeline),
        "--data-parallel-size",
        str(p.data),
    ]
    if p.expert:
        flags.append("--enable-expert-parallel")
    for flag, value in (
        ("--moe-backend", e.moe_backend),
        ("--attention-backend", e.attention_backend),
        ("--all2all-backend", e.all2all_backend),
        ("--kv-cache-dtype", e.kv_cache_dtype),
    ):
        if value != "auto":
            flags += [flag, value]
    if e.speculative is not None:
        config: dict[str, object] = {"method": e.speculative.method.value}
        if e.speculative.num_speculative_tokens is not None:
            config["num_speculative_tokens"] = e.speculative.num_speculative_tokens
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if (lookup := getattr(e.speculative, key)) is not None:
                config[key] = lookup
        flags += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    return flags


def _env(glmd: GLMDeployment, platform: str, patches: tuple[str, ...]) -> tuple[list[dict[str, str]], list[str]]:
    env = [{"name": v.name, "value": v.value} for v in glmd.spec.engine.env]
    names = {v["name"] for v in env}
    notes = []
    if platform == "rocm" and ROCM_AITER_ENV not in names:
        # ROCm sparse MLA (DSA) runs on AITER kernels only.
        env.append({"name": ROCM_AITER_ENV, "value": ROCM_AITER_RENDERED})
        notes.append("VLLM_ROCM_USE_AITER=1: ROCm sparse attention needs AITER")
    if patches:
        plugins = glmd.spec.engine.env_value("VLLM_PLUGINS")
        if plugins is not None and PLUGIN_NAME not in plugins.split(","):
            notes.append(f"VLLM_PLUGINS={plugins!r} does not name {PLUGIN_NAME}: the image's patches will not load")
    return env, notes


def build_plan(glmd: GLMDeployment, catalogs: Catalogs) -> Plan:
    spec = glmd.spec
    ctx = resolve(spec, catalogs)
    acc = ctx.accelerator
    per_node = spec.accelerator.gpus_per_node or acc.gpus_per_node
    gpus = spec.parallelism.gpus()
    nodes = max(1, -(-gpus // per_node))
    gpus_per_pod = gpus if nodes == 1 else per_node
    model_repo = ctx.model.model.name if ctx.model else spec.model.name
    base = ["vllm", "serve", model_repo, "--served-model-name", spec.model.name]
    if spec.model.revision:
        base += ["--revision", spec.model.revision]
    base += _engine_flags(glmd)
    tail = [
        "--reasoning-parser",
        REASONING_PARSER,
        "--tool-call-parser",
        TOOL_CALL_PARSER,
        "--enable-auto-tool-choice",
        *spec.engine.extra_args,
    ]
    if nodes == 1:
        leader = [*base, "--port", str(HTTP_PORT), *tail]
        worker = None
    else:
        multi = [
            "--nnodes",
            str(nodes),
            "--node-rank",
            NODE_RANK,
            "--master-addr",
            LEADER_ADDRESS,
            "--master-port",
            str(MASTER_PORT),
            "--distributed-executor-backend",
            "mp",
        ]
        leader = [*base, *multi, "--port", str(HTTP_PORT), *tail]
        worker = [*base, *multi, "--headless", *tail]
    env, notes = _env(glmd, acc.platform, ctx.image.patches)
    return Plan(
        name=glmd.metadata.name,
        namespace=glmd.metadata.namespace if glmd.metadata.namespace is not None else "default",
        image=ctx.image.ref,
        vllm_version=str(ctx.version) if ctx.version else None,
        platform=acc.platform,
        patches=ctx.image.patches,
        model_repo=model_repo,
        weight_gb=ctx.model.model.weight_gb if ctx.model else None,
        served_name=spec.model.name,
        gpus_per_replica=gpus,
        gpus_per_pod=gpus_per_pod,
        nodes_per_replica=nodes,
        replicas=spec.replicas,
        accelerator=acc.name,
        resource_name=acc.resource_name,
        node_selector=acc.node_selector,
        leader_args=leader,
        worker_args=worker,
        env=env,
        partition=spec.engine.env_value("VLLM_PP_LAYER_PARTITION"),
        notes=notes,
        rdma_resource=rdma_resource(spec.network, catalogs.default_rdma_resource),
    )
