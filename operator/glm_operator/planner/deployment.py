"""Reconcile one GLMDeployment as a pure decision.

`plan(stored, observed, catalogs)` takes the stored object, parsed once at the edge (planner/stored.py), what the
handler read from the API server (the owned
objects labelled for it, whether the LeaderWorkerSet API is served, the GLMImage its image needs) and the catalogs,
and returns an `Outcome`: the objects to apply, the owned objects to delete, the typed status and the events. The
kopf handler only gathers `Observed`, calls this, applies the outcome through `k8s/` and writes the status; every
branch here (blocked, waiting for an image, applied, degraded) has a unit test without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from glm_operator.api import GLMDeployment
from glm_operator.api.conditions import set_condition
from glm_operator.api.constants import ConditionType, EventReason, EventType, Reason
from glm_operator.api.v1alpha1 import GLMDeploymentStatus
from glm_operator.catalog.bundle import Catalogs
from glm_operator.planner.drift import needs_apply
from glm_operator.planner.storage import CREATE_ONLY_KINDS, StoragePlan, is_kept, storage_plan
from glm_operator.planner.stored import Stored, Unparsed, stored_conditions
from glm_operator.render.imagebuild import BuildSettings, glmimage_manifest, needs_build
from glm_operator.render.imagestate import image_gate
from glm_operator.render.plan import Plan, build_plan
from glm_operator.render.status import readiness
from glm_operator.render.storage import DownloadSettings
from glm_operator.render.workloads import render_objects, serving_selector
from glm_operator.rules.engine import Verdict, unparsed_condition, validated_condition

WORKLOAD_KINDS = frozenset({"Deployment", "StatefulSet", "LeaderWorkerSet"})
ConditionStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Event:
    """An Event to post on the GLMDeployment."""

    type: EventType
    reason: str  # a condition's `Reason`, an `ImageReason` or an `EventReason` (api/constants.py)
    message: str


@dataclass(frozen=True)
class Observed:
    """What the handler read from the API server before planning."""

    owned: tuple[dict[str, Any], ...] = ()  # every owned object labelled for this deployment, as listed
    lws_available: bool = False
    glmimage: dict[str, Any] | None = None  # the GLMImage `image_request` asked for, once it exists
    catalog_error: str | None = None  # why the cluster's catalog extension was refused (the last good one is used)


@dataclass(frozen=True)
class Outcome:
    """What to do: apply these objects, delete those, write this status, post these events."""

    status: GLMDeploymentStatus
    apply: tuple[dict[str, Any], ...] = ()
    delete: tuple[tuple[str, str, str], ...] = ()  # (apiVersion, kind, name) of owned objects no longer rendered
    events: tuple[Event, ...] = ()

    def status_patch(self) -> dict[str, Any]:
        """The status as a merge patch: the fields this reconcile decided (the canary's own stay untouched)."""
        return self.status.model_dump(mode="json", by_alias=True, exclude_unset=True)


@dataclass
class _Conditions:
    """The conditions being written, each through `set_condition` (transition times move only on a change)."""

    items: list[dict[str, Any]]
    generation: int | None

    def set(self, type_: ConditionType, status: ConditionStatus, reason: str, message: str) -> None:
        self.items = set_condition(self.items, type_.value, status, reason, message, self.generation)


@dataclass(frozen=True)
class _Desired:
    """What the status is built from: the stored object's name and generation, the rules' verdict, the conditions."""

    name: str
    generation: int | None
    verdict: Verdict
    conditions: _Conditions = field(compare=False)


def _judged(stored: Stored, catalogs: Catalogs) -> _Desired:
    """The Validated verdict on the stored object, with the conditions it is written into."""
    if isinstance(stored, Unparsed):
        verdict = unparsed_condition(list(stored.problems), stored.annotations)
        name, generation = stored.name, stored.generation
    else:
        verdict = validated_condition(stored, catalogs)
        name, generation = stored.metadata.name, stored.metadata.generation
    desired = _Desired(name, generation, verdict, _Conditions(stored_conditions(stored), generation))
    desired.conditions.set(ConditionType.VALIDATED, verdict.status, verdict.reason, verdict.message)
    return desired


def image_request(stored: Stored, catalogs: Catalogs, settings: BuildSettings) -> dict[str, Any] | None:
    """The GLMImage this deployment's image needs built (the handler creates it when absent), or None."""
    if not settings.enabled:
        return None  # the usual case: spare the reconcile a second run of the rules and the plan
    if isinstance(stored, Unparsed) or validated_condition(stored, catalogs).status != "True":
        return None
    plan = build_plan(stored, catalogs)
    if plan.vllm_version is None or not needs_build(
        settings, catalogs.images, plan.image, plan.platform, plan.vllm_version
    ):
        return None
    return glmimage_manifest(plan.platform, plan.vllm_version, plan.image, plan.patches, settings.builder)


def plan(stored: Stored, observed: Observed, catalogs: Catalogs, downloads: DownloadSettings | None = None) -> Outcome:
    """The whole decision of one reconcile."""
    desired = _judged(stored, catalogs)
    catalog_events = _catalog_condition(desired, observed.catalog_error)
    if isinstance(stored, Unparsed) or desired.verdict.status == "False":
        message = "not deployed: the rules refuse this spec (see Validated)"
        desired.conditions.set(ConditionType.PROGRESSING, "False", Reason.BLOCKED, message)
        return Outcome(
            status=_status(desired), events=(*catalog_events, Event(EventType.WARNING, Reason.BLOCKED, message))
        )
    outcome = _serving(stored, desired, observed, catalogs, downloads or DownloadSettings())
    return replace(outcome, events=(*catalog_events, *outcome.events))


def _serving(
    glmd: GLMDeployment, desired: _Desired, observed: Observed, catalogs: Catalogs, downloads: DownloadSettings
) -> Outcome:
    """A spec the rules let through: wait for its image or its weights, or apply its workloads."""
    serving = build_plan(glmd, catalogs)
    if observed.glmimage is not None:
        gate = image_gate(observed.glmimage, serving.image)
        desired.conditions.set(ConditionType.IMAGE_BUILDING, gate.status, gate.reason, gate.message)
        if gate.image_ref is None:
            return _waiting_for_image(desired, serving, gate.message, failed=gate.failed)
        serving = replace(serving, image_digest=gate.image_ref.rsplit("@", 1)[1])
    owner = {"apiVersion": glmd.api_version, "kind": glmd.kind, "name": glmd.metadata.name, "uid": glmd.metadata.uid}
    storage = storage_plan(serving, glmd, owner, observed.owned, downloads)
    if storage.waiting:
        return _downloading(desired, serving, storage, observed)
    return _applied(desired, glmd, serving, observed, owner, storage)


def _catalog_condition(desired: _Desired, error: str | None) -> tuple[Event, ...]:
    """A refused catalog extension is every deployment's business: its rules may be judged on old facts."""
    if error is None:
        desired.conditions.set(ConditionType.CATALOG, "True", Reason.CATALOG_OK, "catalogs loaded")
        return ()
    message = f"the catalog extension was refused, the last good catalogs are in use: {error}"
    desired.conditions.set(ConditionType.CATALOG, "False", Reason.CATALOG_INVALID, message)
    return (Event(EventType.WARNING, Reason.CATALOG_INVALID, message),)


def _status(desired: _Desired, **fields: Any) -> GLMDeploymentStatus:
    spec = desired.verdict.spec
    base: dict[str, Any] = {
        "observed_generation": desired.generation,
        "selector": serving_selector(desired.name),
        "remediations": desired.verdict.remediations,
        "conditions": desired.conditions.items,
    }
    if spec is not None:
        base |= {"parallelism": spec.parallelism.summary(), "gpus_per_replica": spec.parallelism.gpus()}
    return GLMDeploymentStatus.model_validate(base | fields)


def _waiting_for_image(desired: _Desired, serving: Plan, message: str, *, failed: bool) -> Outcome:
    """Nothing is rendered until the patched image is built and its digest is known."""
    reason = Reason.IMAGE_BUILD_FAILED if failed else Reason.WAITING_FOR_IMAGE
    desired.conditions.set(ConditionType.PROGRESSING, "False", reason, message)
    desired.conditions.set(
        ConditionType.READY, "False", reason, f"no workload until {serving.image} is built and pinned"
    )
    status = _status(desired, plan=serving.summary(), replicas=serving.replicas)
    events = (Event(EventType.WARNING, reason, message),) if failed else ()
    return Outcome(status=status, events=events)


def _stale(owned: tuple[dict[str, Any], ...], keep: set[tuple[str, str]]) -> tuple[tuple[str, str, str], ...]:
    """Owned objects no longer rendered, but never a retained claim (its weights outlive the spec that made it)."""
    return tuple(
        (o["apiVersion"], o["kind"], o["metadata"]["name"])
        for o in owned
        if (o["kind"], o["metadata"]["name"]) not in keep and not is_kept(o)
    )


def _to_apply(rendered: list[dict[str, Any]], owned: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    live = {(o["kind"], o["metadata"]["name"]): o for o in owned}
    out = []
    for obj in rendered:
        current = live.get((obj["kind"], obj["metadata"]["name"]))
        if obj["kind"] in CREATE_ONLY_KINDS:
            if current is None:  # created once: a Job's template and a bound claim's spec are immutable
                out.append(obj)
        elif needs_apply(obj, current):
            out.append(obj)
    return tuple(out)


def _downloading(desired: _Desired, serving: Plan, storage: StoragePlan, observed: Observed) -> Outcome:
    """The shared claim is being filled: apply the claim and Job only; workloads already running stay as they are."""
    assert storage.download is not None
    message = storage.download.message
    keep = {(o["kind"], o["metadata"]["name"]) for o in storage.objects}
    old_jobs = tuple(o for o in observed.owned if o["kind"] == "Job")  # downloads of an earlier model or revision
    reason = Reason.MODEL_DOWNLOAD_FAILED if storage.failed else Reason.MODEL_DOWNLOADING
    desired.conditions.set(ConditionType.PROGRESSING, "False" if storage.failed else "True", reason, message)
    desired.conditions.set(
        ConditionType.DEGRADED,
        "True" if storage.failed else "False",
        reason if storage.failed else Reason.AS_PLANNED,
        message if storage.failed else "no known degradation",
    )
    current = [o for o in observed.owned if o["kind"] in WORKLOAD_KINDS]
    state = readiness(current)
    if current:
        desired.conditions.set(ConditionType.READY, *state.condition(serving.replicas))
    else:
        desired.conditions.set(
            ConditionType.READY, "False", reason, f"no workload until the model is on the claim: {message}"
        )
    status = _status(desired, plan=serving.summary(), replicas=serving.replicas, ready_replicas=state.ready)
    event = Event(EventType.WARNING if storage.failed else EventType.NORMAL, reason, message)
    return Outcome(
        status=status,
        apply=_to_apply(list(storage.objects), observed.owned),
        delete=_stale(old_jobs, keep),
        events=(event,),
    )


def _applied(
    desired: _Desired,
    glmd: GLMDeployment,
    serving: Plan,
    observed: Observed,
    owner: dict[str, Any],
    storage: StoragePlan,
) -> Outcome:
    rendered = [*storage.objects, *render_objects(serving, glmd, owner, observed.lws_available)]
    keep = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    stale = _stale(observed.owned, keep)
    workloads = [o for o in rendered if o["kind"] in WORKLOAD_KINDS]
    kind = workloads[0]["kind"] if workloads else "none"
    applied = (
        f"{kind} for {serving.replicas} replica(s) of {serving.nodes_per_replica} node(s); image {serving.image}; "
        f"{storage.summary}"
    )
    desired.conditions.set(ConditionType.PROGRESSING, "True", Reason.APPLIED, applied)
    notes = "; ".join(serving.notes)
    desired.conditions.set(
        ConditionType.DEGRADED,
        "True" if notes else "False",
        Reason.PATCHES_NOT_LOADED if notes else Reason.AS_PLANNED,
        notes or "no known degradation",
    )
    # Readiness comes from the workloads as they stand; applying an unchanged object does not change it.
    current = [o for o in observed.owned if o["kind"] in WORKLOAD_KINDS and (o["kind"], o["metadata"]["name"]) in keep]
    state = readiness(current)
    desired.conditions.set(ConditionType.READY, *state.condition(serving.replicas))
    status = _status(desired, plan=serving.summary(), replicas=serving.replicas, ready_replicas=state.ready)
    events = [Event(EventType.NORMAL, EventReason.RECONCILED, f"{Reason.APPLIED}: {applied}")]
    if stale:
        removed = ", ".join(f"{k}/{n}" for _a, k, n in stale)
        events.append(
            Event(EventType.NORMAL, EventReason.PRUNED, f"removed objects the plan no longer renders: {removed}")
        )
    return Outcome(status=status, apply=_to_apply(rendered, observed.owned), delete=stale, events=tuple(events))
