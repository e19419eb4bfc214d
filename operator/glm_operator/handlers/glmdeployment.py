"""GLMDeployment handlers: parse the body, re-check the rules, compute the plan summary, patch status."""

from __future__ import annotations

from typing import Any

import kopf

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.conditions import set_condition
from glm_operator.handlers.admission import CATALOGS
from glm_operator.rules.engine import validated_condition


@kopf.on.resume(GROUP, VERSION, PLURAL, id="glmops-observe")
@kopf.on.create(GROUP, VERSION, PLURAL, id="glmops-observe")
@kopf.on.update(GROUP, VERSION, PLURAL, id="glmops-observe", field="spec")
def observe(body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    """Record the parallelism summary, the repairs admission made and whether the rules pass."""
    generation = meta.get("generation")
    verdict = validated_condition(dict(body), CATALOGS.get())
    patch.status["conditions"] = set_condition(
        list(status.get("conditions") or []), "Validated", verdict.status, verdict.reason, verdict.message, generation
    )
    patch.status["observedGeneration"] = generation
    patch.status["remediations"] = verdict.remediations
    if verdict.spec is not None:
        patch.status["parallelism"] = verdict.spec.parallelism.summary()
        patch.status["gpusPerReplica"] = verdict.spec.parallelism.gpus()
    if verdict.status == "False":
        raise kopf.PermanentError(verdict.message)
