"""What a build Job's outcome means: GLMImage status, and the ImageBuilding condition of its users.

Pure: the Job and its pods (as the API returns them) in, status fields out. The builder writes the
digest to the termination log; on failure the kubelet puts the log's tail there instead
(terminationMessagePolicy FallbackToLogsOnError), so the pod's status holds all we need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from glm_operator.api.conditions import set_condition
from glm_operator.api.constants import ImageConditionType, ImageReason
from glm_operator.api.glmimage import DIGEST_PATTERN, ImagePhase
from glm_operator.render.imagebuild import BUILD_CONTAINER

LOG_TAIL_CHARS = 4000
STEP_CHARS = 200
_DIGEST = re.compile(DIGEST_PATTERN)
# BuildKit's plain progress (what buildctl prints without a terminal): `#<vertex> <name>` opens a step, later lines of
# the same vertex are its output, its progress or its end (`#<vertex> DONE 1.2s`, `CACHED`, `ERROR: ...`).
_BUILDKIT_LINE = re.compile(r"^#(\d+) (.*)$")
_BUILDKIT_END = re.compile(r"^(DONE \d|CACHED$|ERROR[: ]|CANCELED)")
_BUILDKIT_OUTPUT = re.compile(r"^\d+\.\d+ ")  # a step's own output, after the seconds since it began
# kaniko's log: `INFO[0003] RUN pip install ...`.
_KANIKO_LINE = re.compile(r"^INFO\[\d+\] (.+)$")


@dataclass(frozen=True)
class BuildOutcome:
    """A finished build: the digest on success, the reason and log tail on failure."""

    succeeded: bool
    reason: str
    message: str
    digest: str | None = None
    log_tail: str = ""


def parse_digest(text: str | None) -> str | None:
    """The digest a builder wrote (`sha256:` and 64 lowercase hex digits), or None for anything else."""
    candidate = (text or "").strip()
    return candidate if _DIGEST.fullmatch(candidate) else None


def build_step(log: str) -> str | None:
    """The step a running build is at, read from the end of its log: BuildKit's `[2/3] RUN ...` (with `done` once
    it ended and nothing newer began; `step #8: <its last output>` when the step's first line is older than the
    tail read), or kaniko's last line; None when the log says nothing yet."""
    names: dict[str, str] = {}
    last: tuple[str, str] | None = None
    kaniko: str | None = None
    for line in log.splitlines():
        line = line.rstrip()
        if found := _BUILDKIT_LINE.match(line):
            vertex, text = found[1], found[2]
            if vertex not in names and not _BUILDKIT_OUTPUT.match(text) and not _BUILDKIT_END.match(text):
                names[vertex] = text
            last = (vertex, text)
        elif found := _KANIKO_LINE.match(line):
            kaniko = found[1]
    if last is not None:
        vertex, text = last
        if vertex not in names:
            step = f"step #{vertex}: {_BUILDKIT_OUTPUT.sub('', text)}"
        else:
            step = names[vertex] + (" (done)" if _BUILDKIT_END.match(text) else "")
    elif kaniko is not None:
        step = kaniko
    else:
        return None
    return step if len(step) <= STEP_CHARS else step[: STEP_CHARS - 3] + "..."


def tail(text: str, chars: int = LOG_TAIL_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= chars else "..." + text[-chars:]


def _condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    conds = (job.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == type_ and c.get("status") == "True"), None)


def _terminated(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The build container's terminated state from the newest pod that has one."""
    newest = sorted(pods, key=lambda p: p.get("metadata", {}).get("creationTimestamp") or "", reverse=True)
    for pod in newest:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            state = (status.get("state") or {}).get("terminated")
            if status.get("name") == BUILD_CONTAINER and state:
                return dict(state)
    return {}


def build_outcome(job: dict[str, Any], pods: list[dict[str, Any]]) -> BuildOutcome | None:
    """The outcome of a finished build Job; None while it still runs."""
    name = job.get("metadata", {}).get("name", "")
    terminated = _terminated(pods)
    message = str(terminated.get("message") or "")
    if _condition(job, "Complete") is not None:
        digest = parse_digest(message)
        if digest is None:
            shown = tail(message, 200) or "nothing"
            return BuildOutcome(
                False,
                ImageReason.NO_DIGEST,
                f"Job {name} succeeded but the builder reported {shown!r}, not a sha256 digest",
            )
        return BuildOutcome(True, ImageReason.BUILT, f"Job {name} pushed the image", digest=digest)
    failed = _condition(job, "Failed")
    if failed is None:
        return None
    deadline = failed.get("reason") == "DeadlineExceeded"
    reason = ImageReason.DEADLINE_EXCEEDED if deadline else ImageReason.BUILD_FAILED
    exit_code = terminated.get("exitCode")
    detail = f"exit code {exit_code}" if exit_code is not None else str(failed.get("message") or failed.get("reason"))
    return BuildOutcome(False, reason, f"Job {name} failed ({detail})", log_tail=tail(message))


def image_status(status: dict[str, Any], outcome: BuildOutcome, image: str, generation: int | None) -> dict[str, Any]:
    """The GLMImage status fields for a finished build (or a digest found in the registry)."""
    conditions = list(status.get("conditions") or [])
    if outcome.succeeded and outcome.digest:
        conditions = set_condition(
            conditions, ImageConditionType.BUILT, "True", outcome.reason, outcome.message, generation
        )
        return {
            "phase": ImagePhase.SUCCEEDED.value,
            "digest": outcome.digest,
            "imageRef": f"{image.split('@', 1)[0]}@{outcome.digest}",
            "observedGeneration": generation,
            "conditions": conditions,
        }
    message = f"{outcome.message}: {outcome.log_tail}" if outcome.log_tail else outcome.message
    conditions = set_condition(
        conditions, ImageConditionType.BUILT, "False", outcome.reason, message[:32768], generation
    )
    return {
        "phase": ImagePhase.FAILED.value,
        "logTail": outcome.log_tail or None,
        "observedGeneration": generation,
        "conditions": conditions,
    }


@dataclass(frozen=True)
class ImageGate:
    """Whether a GLMDeployment may render its workload yet, and its ImageBuilding condition."""

    image_ref: str | None  # ref@sha256:... once built; None while waiting or after a failure
    status: Literal["True", "False"]
    reason: str
    message: str

    @property
    def failed(self) -> bool:
        return self.image_ref is None and self.status == "False"


def image_gate(glmimage: dict[str, Any], wanted: str) -> ImageGate:
    """The ImageBuilding condition of a deployment that runs `wanted`, built by `glmimage`."""
    name = glmimage.get("metadata", {}).get("name", "")
    spec, status = glmimage.get("spec") or {}, glmimage.get("status") or {}
    if spec.get("image") != wanted:
        return ImageGate(
            None,
            "False",
            ImageReason.IMAGE_CONFLICT,
            f"GLMImage {name} builds {spec.get('image')}, not {wanted}: the image build registry changed? "
            f"Delete glmimage/{name} once no deployment runs it, and it is built again for {wanted}",
        )
    phase = status.get("phase") or ImagePhase.PENDING.value
    if phase == ImagePhase.SUCCEEDED.value and status.get("imageRef"):
        return ImageGate(
            status["imageRef"], "False", ImageReason.BUILT, f"pinned {status['imageRef']} (GLMImage {name})"
        )
    if phase == ImagePhase.FAILED.value:
        conditions: list[dict[str, Any]] = status.get("conditions") or []
        built: dict[str, Any] = next((c for c in conditions if c.get("type") == ImageConditionType.BUILT), {})
        reason = built.get("reason") or ImageReason.BUILD_FAILED
        what = built.get("message") or "the build failed"
        return ImageGate(
            None,
            "False",
            ImageReason.BUILD_FAILED if reason in (ImageReason.BUILD_FAILED, ImageReason.NO_DIGEST) else reason,
            f"building {wanted} failed ({reason}): {what}. Fix the cause, then `kubectl delete glmimage {name}` "
            "to build again",
        )
    if phase == ImagePhase.BUILDING.value:
        step = f", at {status['step']}" if status.get("step") else ""
        return ImageGate(
            None, "True", ImageReason.BUILDING, f"Job {status.get('job', '')} builds {wanted} (GLMImage {name}){step}"
        )
    return ImageGate(None, "True", ImageReason.PENDING, f"waiting for GLMImage {name} to start building {wanted}")
