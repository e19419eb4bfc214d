"""The GLMImage planner: a build's first step and its outcome, decided without a cluster."""

from __future__ import annotations

from typing import Any

import pytest

from glm_operator.api.glmimage import Builder
from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.images import load_images
from glm_operator.planner.image import ImageObserved, needs_start, plan_follow, plan_start
from glm_operator.render.imagebuild import BuildSettings, glmimage_manifest
from glm_operator.render.imagestate import build_step, image_gate

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


# BuildKit's plain progress as buildctl prints it without a terminal (the shape test_buildkit_build reads for real).
BUILDKIT_LOG = """\
#1 [internal] load build definition from Dockerfile
#1 transferring dockerfile: 2.16kB done
#1 DONE 0.0s

#5 [1/3] FROM docker.io/vllm/vllm-openai:v0.33.0@sha256:0123
#5 resolve docker.io/vllm/vllm-openai:v0.33.0@sha256:0123 done
#5 DONE 0.1s

#7 [2/3] COPY glmops_vllm_patches-0.14.0-py3-none-any.whl /tmp/
#7 DONE 0.0s

#8 [3/3] RUN pip install --no-deps /tmp/glmops_vllm_patches-0.14.0-py3-none-any.whl
#8 0.512 Processing /tmp/glmops_vllm_patches-0.14.0-py3-none-any.whl
"""


@pytest.mark.parametrize(
    ("log", "step"),
    [
        (BUILDKIT_LOG, "[3/3] RUN pip install --no-deps /tmp/glmops_vllm_patches-0.14.0-py3-none-any.whl"),
        (
            BUILDKIT_LOG + "#8 DONE 2.1s\n",
            "[3/3] RUN pip install --no-deps /tmp/glmops_vllm_patches-0.14.0-py3-none-any.whl (done)",
        ),
        (BUILDKIT_LOG + "#8 DONE 2.1s\n\n#9 exporting to image\n#9 exporting layers\n", "exporting to image"),
        # The log's tail may begin inside a step: a line of a vertex whose opening line was cut off names it as it is.
        (
            "#8 0.512 Processing /tmp/x.whl\n#8 1.020 Installing collected packages\n",
            "step #8: Installing collected packages",
        ),
        (
            "INFO[0000] Retrieving image manifest vllm/vllm-openai:v0.33.0\nINFO[0004] RUN pip install --no-deps /w\n",
            "RUN pip install --no-deps /w",
        ),
        ("", None),
        ("error: something unrelated\n", None),
        ("#3 [1/3] RUN " + "x" * 400 + "\n", "[1/3] RUN " + "x" * 187 + "..."),
    ],
    ids=["running", "done", "next-vertex", "cut-off", "kaniko", "empty", "no-step", "clipped"],
)
def test_the_step_a_running_build_is_at_comes_from_the_end_of_its_log(log: str, step: str | None) -> None:
    assert build_step(log) == step


RUNNING_JOB: dict[str, Any] = {"metadata": {"name": "b"}, "status": {"active": 1}}


def test_a_running_build_writes_its_step_once_each_time_it_changes() -> None:
    building = {"phase": "Building", "job": "glmops-system/b"}
    status = plan_follow(body(building), RUNNING_JOB, [], ON, BUILDKIT_LOG)
    assert status == {"step": "[3/3] RUN pip install --no-deps /tmp/glmops_vllm_patches-0.14.0-py3-none-any.whl"}
    assert plan_follow(body({**building, **status}), RUNNING_JOB, [], ON, BUILDKIT_LOG) == {}  # unchanged: no write
    assert plan_follow(body(building), RUNNING_JOB, [], ON, None) == {}  # no log to read: nothing said


def test_a_finished_build_drops_its_step() -> None:
    done = {"metadata": {"name": "b"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    pods = [{"status": {"containerStatuses": [{"name": "build", "state": {"terminated": {"message": DIGEST}}}]}}]
    status = plan_follow(body({"phase": "Building", "step": "[3/3] RUN pip"}), done, pods, ON, BUILDKIT_LOG)
    assert status["phase"] == "Succeeded" and status["step"] is None


def test_a_deployment_waiting_on_a_build_is_told_the_step() -> None:
    image = body({"phase": "Building", "job": "glmops-system/b", "step": "[3/3] RUN pip install"})
    gate = image_gate(image, REF)
    assert gate.reason == "Building" and gate.message.endswith(", at [3/3] RUN pip install"), gate.message
