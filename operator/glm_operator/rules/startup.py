"""Start-up refusals: configurations vLLM refuses while it starts, refused here at admission instead.

docs/startup-refusals.md lists vLLM's start-up refusals that a GLMDeployment can reach and where each is
handled. Each check here cites the vLLM lines it mirrors (checked by tests/vllm_source/test_startup_refusals.py).
"""

from __future__ import annotations

from glm_operator.rules.context import Context
from glm_operator.rules.findings import Finding
from glm_operator.rules.partition import parse_partition

PP_ENV = "VLLM_PP_LAYER_PARTITION"

# vllm/distributed/utils.py, get_pp_indices: (def line, int() parse refusal, entry-count refusal, sum refusal).
# Every model builds its decoder layers through make_layers -> get_pp_indices, at any pipeline size.
GET_PP_INDICES_LINES: dict[str, tuple[int, int, int, int]] = {
    "0.26.0": (127, 149, 152, 154),
    "0.27.1": (127, 149, 152, 154),
    "0.30.0": (127, 149, 152, 154),
    "0.31.0": (128, 150, 153, 155),
    "0.32.0": (126, 147, 149, 151),
    "0.33.0": (198, 219, 221, 223),
    "0.34.0": (211, 232, 234, 236),
}


def _pp_checked_by_63170(ctx: Context) -> bool:
    """vllm-63170 already refuses a malformed partition for GLM-5.x DSA models under pipeline > 1."""
    assert ctx.model is not None
    return ctx.model.model.architecture == "GlmMoeDsaForCausalLM" and ctx.spec.parallelism.pipeline > 1


def pp_partition_valid(ctx: Context) -> list[Finding]:
    """An explicit VLLM_PP_LAYER_PARTITION vLLM's get_pp_indices accepts, at any pipeline size (pipeline 1 too)."""
    env = ctx.env(PP_ENV)
    if env is None or ctx.model is None:
        return []
    pp, layers = ctx.spec.parallelism.pipeline, ctx.model.model.layers
    if pp > layers or _pp_checked_by_63170(ctx):
        return []  # feasibility/pipeline, or vllm-63170, reports it
    try:
        parse_partition(env, layers, pp)
    except ValueError as err:
        where = GET_PP_INDICES_LINES.get(str(ctx.version)) if ctx.version is not None else None
        cite = f" (vllm/distributed/utils.py:{where[0]} get_pp_indices)" if where else ""
        return [
            Finding(
                rule="startup/pp-partition",
                severity="error",
                field=ctx.env_field(PP_ENV),
                value=env,
                problem=(
                    f"{PP_ENV} {err}{cite}; vLLM reads it whenever it builds the model's layers, pipeline {pp} included"
                ),
                fix=(
                    f"Remove {PP_ENV} from spec.engine.env, or give it {pp} comma-separated positive integers "
                    f"summing to {layers}"
                ),
            )
        ]
    return []


STARTUP_CHECKS = (pp_partition_valid,)
