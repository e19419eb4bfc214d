"""GLMDeployment handlers: parse the body into the model, compute the plan summary, patch status."""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from glm_operator.api import GROUP, PLURAL, VERSION, GLMDeploymentSpec
from glm_operator.api.conditions import set_condition


@kopf.on.resume(GROUP, VERSION, PLURAL, id="glmops-observe")
@kopf.on.create(GROUP, VERSION, PLURAL, id="glmops-observe")
@kopf.on.update(GROUP, VERSION, PLURAL, id="glmops-observe", field="spec")
def observe(spec: kopf.Spec, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    """Record the parallelism summary and whether the spec parses; rules arrive with admission."""
    generation = meta.get("generation")
    conditions = list(status.get("conditions") or [])
    try:
        parsed = GLMDeploymentSpec.model_validate(spec)
    except ValidationError as err:
        patch.status["conditions"] = set_condition(
            conditions, "Validated", "False", "InvalidSpec", str(err), generation
        )
        raise kopf.PermanentError(f"spec does not parse: {err}") from err
    patch.status["observedGeneration"] = generation
    patch.status["parallelism"] = parsed.parallelism.summary()
    patch.status["gpusPerReplica"] = parsed.parallelism.gpus()
    patch.status["conditions"] = set_condition(
        conditions,
        "Validated",
        "Unknown",
        "RulesNotEvaluated",
        "The spec matches the schema; this operator version does not evaluate known-issue rules yet.",
        generation,
    )
