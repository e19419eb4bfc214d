"""Admission webhooks: repair (mutating) and refuse (validating) GLMDeployments, via the rules engine."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Literal

import kopf

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.constants import REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID
from glm_operator.handlers.runtime import runtime
from glm_operator.k8s.access import AccessCheckFailed, denied
from glm_operator.k8s.metrics import record_admission
from glm_operator.k8s.webhooks import decide, large_review
from glm_operator.rules.access import new_access_needs
from glm_operator.rules.engine import REMEDIATIONS_ANNOTATION, Admission, admit
from glm_operator.rules.findings import clip

log = logging.getLogger(__name__)
OPERATIONS: list[Literal["CREATE", "UPDATE"]] = ["CREATE", "UPDATE"]


async def _admit(body: kopf.Body, memo: kopf.Memo) -> Admission:
    """Evaluate the rules once per object (a large review off the event loop, and not kept); an unexpected failure is
    a 4xx, never a 500."""
    context = runtime(memo)
    obj, catalogs = dict(body), context.catalogs.get()
    key = None if large_review() else context.admissions.key(obj)
    if key is not None and (kept := context.admissions.get(key, catalogs)) is not None:
        return kept  # the mutating call's answer, for the validating call of the same object
    try:
        result = await decide(admit, obj, catalogs)
    except Exception as err:  # noqa: BLE001 (the API server must get a clear 4xx, not a stack trace)
        log.exception("rules engine failed on %s", body.get("metadata", {}).get("name"))
        raise kopf.AdmissionError(f"glmops could not evaluate this GLMDeployment: {clip(str(err))}", code=422) from err
    if key is not None:
        context.admissions.put(key, catalogs, result)
    return result


def _expect(memo: kopf.Memo, result: Admission) -> None:
    """Keep a repair's answer for the object the API server makes of it, which the validating call then brings.

    The repair's last round judged that very object, so judging it again finds the same errors and warnings (the
    validating webhook reads only those). Where the API server's object differs (another webhook changed it,
    defaults were added), its digest differs too and the validating call judges it afresh."""
    context = runtime(memo)
    if not large_review():
        context.admissions.put(context.admissions.key(result.patched), context.catalogs.get(), result)


# The admission handlers are coroutines on purpose: kopf runs plain functions in the thread pool its reconciles
# block in, so under load an API server's admission request waited 10-20 s behind them (bench/RESULTS.md,
# reconcile scale). The rules take about a millisecond; the catalogs are cached (a ConfigMap read every TTL).
async def repair(body: kopf.Body, patch: kopf.Patch, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    """Apply Auto remedies to settings the user left unset, and say so in kubectl's warnings."""
    result = await _admit(body, memo)
    repaired = [(f.rule, f.severity) for f in result.findings if f.severity == "remediated"]
    record_admission("repair", True, repaired if result.allowed and result.changes else ())
    if not result.allowed or not result.changes:
        return  # the validating webhook reports every problem in one message
    _expect(memo, result)
    patch.spec["engine"] = result.patched["spec"]["engine"]
    record = result.patched["metadata"].get("annotations", {}).get(REMEDIATIONS_ANNOTATION)
    if record is not None:
        patch.metadata["annotations"] = {REMEDIATIONS_ANNOTATION: record}
    warnings.extend(f"glmops repaired {f.message}" for f in result.findings if f.severity == "remediated")


async def validate(
    body: kopf.Body, userinfo: kopf.UserInfo, warnings: list[str], memo: kopf.Memo, **kwargs: Any
) -> None:
    """Refuse a GLMDeployment that would serve wrong answers or exceed its author's rights, every problem at once."""
    result = await _admit(body, memo)
    warnings.extend(f.message for f in result.findings if f.severity == "warning")
    old = kwargs.get("old")  # the stored object, on an update
    policy = runtime(memo).catalogs.get().access_policy
    needs = new_access_needs(dict(body), dict(old) if old else None, policy.service_accounts)
    namespace = body.get("metadata", {}).get("namespace") or ""
    user = dict(userinfo or {})
    try:
        refused = await asyncio.to_thread(denied, needs, namespace, user) if needs else []
    except AccessCheckFailed as err:
        raise kopf.AdmissionError(f"glmops could not check the author's rights, so refuses: {err}", code=429) from err
    findings = [n.refusal(namespace, str(user.get("username") or "this user")) for n in refused]
    reported = [(f.rule, f.severity) for f in [*result.findings, *findings] if f.severity != "remediated"]
    record_admission("validate", result.allowed and not findings, reported)
    if not result.allowed or findings:
        raise kopf.AdmissionError(result.rejection(extra=findings), code=422)


# With GLMOPS_WEBHOOK=off (e.g. a cluster whose admission is served elsewhere) no webhook is
# registered: kopf refuses admission handlers without a server.
if os.environ.get("GLMOPS_WEBHOOK", "on") != "off":
    kopf.on.mutate(GROUP, VERSION, PLURAL, id=REPAIR_WEBHOOK_ID, operations=OPERATIONS)(repair)
    kopf.on.validate(GROUP, VERSION, PLURAL, id=VALIDATE_WEBHOOK_ID, operations=OPERATIONS)(validate)
