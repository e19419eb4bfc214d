"""Admission webhooks: repair (mutating) and refuse (validating) GLMDeployments, via the rules engine.

The operator's webhook server answers both reviews itself (`answer`, set on the server by `settings.configure`):
kopf's per-call machinery around a handler (a memo, a diff of the old and new objects, a merge patch diffed back
into a JSON patch, a log line) cost more than the rules themselves (bench/RESULTS.md, admission). kopf still
registers the two webhooks, which is how it writes their configuration where it manages it (local runs), and its
handlers below run the same code where a server other than ours calls them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import kopf

from glm_operator.api import GROUP, PLURAL, VERSION
from glm_operator.api.constants import REPAIR_WEBHOOK_ID, VALIDATE_WEBHOOK_ID
from glm_operator.control.runtime import Runtime, runtime
from glm_operator.k8s.access import AccessCheckFailed, all_granted, denied
from glm_operator.k8s.metrics import record_admission
from glm_operator.k8s.webhooks import decide, large_review
from glm_operator.rules.access import new_access_needs
from glm_operator.rules.engine import REMEDIATIONS_ANNOTATION, Admission, admit
from glm_operator.rules.findings import clip

log = logging.getLogger(__name__)
OPERATIONS: list[Literal["CREATE", "UPDATE"]] = ["CREATE", "UPDATE"]


class Denied(Exception):
    """The review's answer is a refusal: `message` is what kubectl shows, `code` the status it carries, and the
    warnings kubectl prints beside it (a refused object's warnings still say what else to fix)."""

    def __init__(self, message: str, code: int, warnings: list[str] | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.warnings = message, code, list(warnings or [])


@dataclass
class Repair:
    """What the mutating webhook changes: the engine settings, the remediations record, and kubectl's warnings."""

    engine: dict[str, Any] | None = None
    record: str | None = None
    warnings: list[str] = field(default_factory=list)


def _as_judged(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without metadata.managedFields, which no rule reads: in a review it is as large as the rest of the
    object, and the engine would copy and check it for nothing (bench/RESULTS.md, admission)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


async def _admit(obj: dict[str, Any], context: Runtime) -> Admission:
    """Evaluate the rules once per object (a large review off the event loop, and not kept); an unexpected failure is
    a 4xx, never a 500."""
    obj = _as_judged(obj)
    catalogs = context.catalogs.get()
    key = None if large_review() else context.admissions.key(obj)
    if key is not None and (kept := context.admissions.get(key, catalogs)) is not None:
        return kept  # the mutating call's answer, for the validating call of the same object
    try:
        result = await decide(admit, obj, catalogs)
    except Exception as err:  # noqa: BLE001 (the API server must get a clear 4xx, not a stack trace)
        log.exception("rules engine failed on %s", obj.get("metadata", {}).get("name"))
        raise Denied(f"glmops could not evaluate this GLMDeployment: {clip(str(err))}", 422) from err
    if key is not None:
        context.admissions.put(key, catalogs, result)
    return result


def _expect(context: Runtime, result: Admission) -> None:
    """Keep a repair's answer for the object the API server makes of it, which the validating call then brings.

    The repair's last round judged that very object, so judging it again finds the same errors and warnings (the
    validating webhook reads only those). Where the API server's object differs (another webhook changed it,
    defaults were added), its digest differs too and the validating call judges it afresh."""
    if not large_review():
        context.admissions.put(context.admissions.key(result.patched), context.catalogs.get(), result)


# Both are coroutines on purpose: kopf runs plain functions in the thread pool its reconciles block in, so under
# load an API server's admission request waited 10-20 s behind them (bench/RESULTS.md, reconcile scale). The rules
# take about a millisecond; the catalogs are cached (a ConfigMap read every TTL).
async def repair_object(obj: dict[str, Any], context: Runtime) -> Repair:
    """Auto remedies for settings the user left unset, said in kubectl's warnings; nothing when any error stays."""
    result = await _admit(obj, context)
    repaired = [(f.rule, f.severity) for f in result.findings if f.severity == "remediated"]
    record_admission("repair", True, repaired if result.allowed and result.changes else ())
    if not result.allowed or not result.changes:
        return Repair()  # the validating webhook reports every problem in one message
    _expect(context, result)
    return Repair(
        engine=result.patched["spec"]["engine"],
        record=result.patched["metadata"].get("annotations", {}).get(REMEDIATIONS_ANNOTATION),
        warnings=[f"glmops repaired {f.message}" for f in result.findings if f.severity == "remediated"],
    )


async def validate_object(
    obj: dict[str, Any], old: dict[str, Any] | None, userinfo: Mapping[str, Any] | None, context: Runtime
) -> list[str]:
    """kubectl's warnings for a GLMDeployment that may serve; Denied, with every problem at once, for one that would
    serve wrong answers or exceed its author's rights."""
    result = await _admit(obj, context)
    warnings = [f.message for f in result.findings if f.severity == "warning"]
    needs = new_access_needs(obj, old, context.catalogs.get().access_policy.service_accounts)
    namespace = obj.get("metadata", {}).get("namespace") or ""
    user = dict(userinfo or {})
    try:
        # Rights granted a moment ago are remembered; only a need the API server must be asked about goes to a
        # thread (its SubjectAccessReviews block).
        asked = needs and not all_granted(needs, namespace, user)
        refused = await asyncio.to_thread(denied, needs, namespace, user) if asked else []
    except AccessCheckFailed as err:
        raise Denied(f"glmops could not check the author's rights, so refuses: {err}", 429, warnings) from err
    findings = [n.refusal(namespace, str(user.get("username") or "this user")) for n in refused]
    reported = [(f.rule, f.severity) for f in [*result.findings, *findings] if f.severity != "remediated"]
    record_admission("validate", result.allowed and not findings, reported)
    if not result.allowed or findings:
        raise Denied(result.rejection(extra=findings), 422, warnings)
    return warnings


def json_patch(obj: Mapping[str, Any], repair: Repair) -> list[dict[str, Any]]:
    """The JSON patch that puts `repair` into `obj`: the whole engine block, and the remediations record."""
    ops: list[dict[str, Any]] = []
    if repair.engine is not None:
        op = "replace" if "engine" in obj.get("spec", {}) else "add"
        ops.append({"op": op, "path": "/spec/engine", "value": repair.engine})
    if repair.record is not None:
        if isinstance(obj["metadata"].get("annotations"), dict):
            key = REMEDIATIONS_ANNOTATION.replace("~", "~0").replace("/", "~1")
            ops.append({"op": "add", "path": f"/metadata/annotations/{key}", "value": repair.record})
        else:
            record = {REMEDIATIONS_ANNOTATION: repair.record}
            ops.append({"op": "add", "path": "/metadata/annotations", "value": record})
    return ops


async def answer(review: Mapping[str, Any], webhook: str, context: Runtime) -> dict[str, Any]:
    """The AdmissionReview answer to `review` (checked by `k8s/admission_review.parse_review`) for `webhook`.

    Anything else raised is our bug: the server logs it, counts it as an error and answers 400 (docs/alerts.md)."""
    request = review["request"]
    obj = request["object"] if request.get("object") is not None else request["oldObject"]
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    warnings: list[str] = []
    try:
        if webhook == REPAIR_WEBHOOK_ID:
            repair = await repair_object(obj, context)
            warnings = repair.warnings
            if ops := json_patch(obj, repair):
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode("ascii")
        else:
            warnings = await validate_object(obj, request.get("oldObject"), request.get("userInfo"), context)
    except Denied as refusal:
        response.update(allowed=False, status={"message": refusal.message, "code": refusal.code})
        warnings = refusal.warnings
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}


async def repair(body: kopf.Body, patch: kopf.Patch, warnings: list[str], memo: kopf.Memo, **_: Any) -> None:
    """kopf's mutating handler: `repair_object`, as a merge patch."""
    try:
        result = await repair_object(dict(body), runtime(memo))
    except Denied as refusal:
        raise kopf.AdmissionError(refusal.message, code=refusal.code) from refusal
    if result.engine is not None:
        patch.spec["engine"] = result.engine
    if result.record is not None:
        patch.metadata["annotations"] = {REMEDIATIONS_ANNOTATION: result.record}
    warnings.extend(result.warnings)


async def validate(
    body: kopf.Body, userinfo: kopf.UserInfo, warnings: list[str], memo: kopf.Memo, **kwargs: Any
) -> None:
    """kopf's validating handler: `validate_object`."""
    old = kwargs.get("old")  # the stored object, on an update
    try:
        warnings.extend(await validate_object(dict(body), dict(old) if old else None, userinfo, runtime(memo)))
    except Denied as refusal:
        warnings.extend(refusal.warnings)
        raise kopf.AdmissionError(refusal.message, code=refusal.code) from refusal


# With GLMOPS_WEBHOOK=off (e.g. a cluster whose admission is served elsewhere) no webhook is
# registered: kopf refuses admission handlers without a server.
if os.environ.get("GLMOPS_WEBHOOK", "on") != "off":
    kopf.on.mutate(GROUP, VERSION, PLURAL, id=REPAIR_WEBHOOK_ID, operations=OPERATIONS)(repair)
    kopf.on.validate(GROUP, VERSION, PLURAL, id=VALIDATE_WEBHOOK_ID, operations=OPERATIONS)(validate)
