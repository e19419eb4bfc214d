"""The GLMImage planner: a build's first step and its outcome, decided without a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api.glmimage import Builder
from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.images import load_images
from glm_operator.planner.image import ImageObserved, needs_start, plan_follow, plan_start
from glm_operator.render.imagebuild import BuildSettings, glmimage_manifest

REGISTRY = "registry.example.com/glmops"
REF = f"{REGISTRY}/vllm-openai:v0.33.0-glmops.1"
DIGEST = "sha256:" + "cd" * 32
CATALOGS = Catalogs.packaged()
ON = BuildSettings(enabled=True, registry=REGISTRY, namespace="glmops-system", push_secret="push")


def body(status: dict[str, Any] | None = None) -> dict[str, Any]:
    images = load_images().with_patched_registry(REGISTRY)
    manifest = glmimage_manifest("cuda", "0.33.0", REF, images.patches_for("cuda", "0.33.0"), Builder.KANIKO)
    manifest["metadata"] |= {"uid": "0123456789abcdef", "generation": 1}
    manifest["status"] = status or {}
    return manifest


def built(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Built")


def test_an_image_already_in_the_registry_is_pinned_and_nothing_is_built() -> None:
    outcome = plan_start(body(), ImageObserved(digest=DIGEST, wheel=b"whl"), CATALOGS, ON)
    assert outcome.create == ()
    assert outcome.status["phase"] == "Succeeded" and outcome.status["imageRef"] == f"{REF}@{DIGEST}"
    assert built(outcome.status)["reason"] == "FoundInRegistry"


def test_a_missing_image_creates_its_context_and_job_and_says_building() -> None:
    outcome = plan_start(body(), ImageObserved(wheel=b"whl"), CATALOGS, ON)
    assert [o["kind"] for o in outcome.create] == ["ConfigMap", "Job"]
    assert outcome.status["phase"] == "Building" and outcome.status["attempts"] == 1
    assert outcome.status["job"] == f"glmops-system/{outcome.create[1]['metadata']['name']}"


def test_without_the_plugin_wheel_the_build_fails_with_the_reason_instead_of_starting() -> None:
    outcome = plan_start(body(), ImageObserved(wheel_error="no such file: /plugin/x.whl"), CATALOGS, ON)
    assert outcome.create == () and outcome.status["phase"] == "Failed"
    assert built(outcome.status)["reason"] == "ContextInvalid" and "no such file" in built(outcome.status)["message"]


def test_a_started_build_is_never_started_twice() -> None:
    started = body({"phase": "Building", "job": "glmops-system/b", "attempts": 1})
    assert not needs_start(started)
    assert plan_start(started, ImageObserved(wheel=b"whl"), CATALOGS, ON).status == {}


@pytest.mark.parametrize(
    "job, pods, phase",
    [
        (None, [], "Failed"),
        ({"metadata": {"name": "b"}, "status": {}}, [], None),
        (
            {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}},
            [
                {
                    "metadata": {},
                    "status": {
                        "containerStatuses": [
                            {"name": "build", "state": {"terminated": {"exitCode": 0, "message": DIGEST}}}
                        ]
                    },
                }
            ],
            "Succeeded",
        ),
    ],
    ids=["job-vanished", "running", "done"],
)
def test_following_a_build(job: dict[str, Any] | None, pods: list[dict[str, Any]], phase: str | None) -> None:
    status = plan_follow(body({"phase": "Building", "job": "glmops-system/b"}), job, pods, ON)
    assert status.get("phase") == phase
    if job is None:
        assert built(status)["reason"] == "JobMissing"
