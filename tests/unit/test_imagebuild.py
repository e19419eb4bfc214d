"""In-cluster image builds: settings, the GLMImage name, the build context and Job, and what a finished Job means."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from glm_operator.api.glmimage import Builder, GLMImage
from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.images import load_images
from glm_operator.render.dockerfile import PLUGIN_WHEEL, build_args, render_dockerfile
from glm_operator.render.imagebuild import (
    CONFIGMAP_LIMIT_BYTES,
    DEFAULT_BUILDKIT_IMAGE,
    BuildSettings,
    ImageBuildError,
    build_job,
    buildkitd_config,
    cache_ref,
    context_configmap,
    glmimage_manifest,
    image_name,
    needs_build,
    planned_image,
)
from glm_operator.render.imagestate import build_outcome, image_gate, image_status, parse_digest
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.wheel import build_plugin_wheel

REGISTRY = "registry.example.com/glmops"
REF = f"{REGISTRY}/vllm-openai:v0.33.0-glmops.1"
DIGEST = "sha256:" + "ab" * 32
IMAGES = load_images().with_patched_registry(REGISTRY)
ON = BuildSettings(enabled=True, registry=REGISTRY, namespace="glmops-system", push_secret="push")


def glmimage(builder: Builder = Builder.KANIKO, status: dict[str, Any] | None = None) -> GLMImage:
    body = glmimage_manifest("cuda", "0.33.0", REF, IMAGES.patches_for("cuda", "0.33.0"), builder)
    body["metadata"]["uid"] = "0123456789abcdef"
    body["status"] = status or {}
    return GLMImage.model_validate(body)


def container(job: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return result


@pytest.mark.parametrize(
    ("platform", "ref", "name"),
    [
        ("cuda", REF, "vllm-cuda-v0-33-0-glmops-1"),
        ("cuda", "other.example/x/vllm-openai:v0.33.0-glmops.1", "vllm-cuda-v0-33-0-glmops-1"),
        ("rocm", f"{REGISTRY}/vllm-openai-rocm:v0.30.0-glmops.1", "vllm-rocm-v0-30-0-glmops-1"),
    ],
)
def test_glmimage_name_follows_platform_and_tag_only(platform: str, ref: str, name: str) -> None:
    assert image_name(platform, ref) == name


@pytest.mark.parametrize(
    ("deployment", "wanted"),
    [
        (B().accelerator("H200").vllm("0.33.0"), REF),
        (B().accelerator("MI355X").vllm("0.30.0"), f"{REGISTRY}/vllm-openai-rocm:v0.30.0-glmops.1"),
        (B().image("vllm/vllm-openai:v0.33.0"), "vllm/vllm-openai:v0.33.0"),
    ],
)
def test_deployments_are_indexed_by_the_image_their_spec_resolves_to(deployment: B, wanted: str) -> None:
    catalogs = Catalogs(**{**Catalogs.packaged().__dict__, "images": IMAGES})
    assert planned_image(deployment.build()["spec"], catalogs) == wanted


@pytest.mark.parametrize(
    ("settings", "image", "version", "built"),
    [
        (ON, REF, "0.33.0", True),
        (BuildSettings(), REF, "0.33.0", False),
        (ON, "vllm/vllm-openai:v0.33.0", "0.33.0", False),
        (ON, f"{REF}@{DIGEST}", "0.33.0", False),
        (ON, f"{REGISTRY}/vllm-openai:v9.9.9-glmops.1", "9.9.9", False),
        (ON, "ghcr.io/glmops/vllm-openai:v0.33.0-glmops.1", "0.33.0", False),
    ],
    ids=["patched-in-registry", "disabled", "stock", "pinned-by-user", "unknown-version", "published-patched"],
)
def test_only_the_patched_image_in_the_configured_registry_is_built(
    settings: BuildSettings, image: str, version: str, built: bool
) -> None:
    assert needs_build(settings, IMAGES, image, "cuda", version) is built


def test_the_catalog_knows_the_registry_images_and_keeps_the_published_ones() -> None:
    moved = IMAGES.describe(REF)
    published = IMAGES.describe("ghcr.io/glmops/vllm-openai:v0.33.0-glmops.1")
    assert moved.known and moved.patched and moved.patches == IMAGES.patches_for("cuda", "0.33.0")
    assert published.known and published.patches == moved.patches


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"GLMOPS_IMAGE_BUILD_ENABLED": "true"}, "REGISTRY is empty"),
        (
            {
                "GLMOPS_IMAGE_BUILD_ENABLED": "1",
                "GLMOPS_IMAGE_BUILD_REGISTRY": "r/x",
                "GLMOPS_IMAGE_BUILD_BUILDER": "docker",
            },
            "docker",
        ),
        ({"GLMOPS_IMAGE_BUILD_POD_ANNOTATIONS": "not json"}, "GLMOPS_IMAGE_BUILD_"),
        ({"GLMOPS_IMAGE_BUILD_CACHE": "volume"}, "GLMOPS_IMAGE_BUILD_CACHE is 'volume'; use registry or off"),
        (
            {"GLMOPS_IMAGE_BUILD_REGISTRY_CA": "ca", "GLMOPS_IMAGE_BUILD_INSECURE": "true"},
            "set one of them",
        ),
    ],
)
def test_unusable_build_settings_stop_the_operator_with_the_variable_named(env: dict[str, str], error: str) -> None:
    with pytest.raises(ImageBuildError, match=error):
        BuildSettings.from_env(env)


def test_build_settings_come_from_the_environment() -> None:
    settings = BuildSettings.from_env(
        {
            "GLMOPS_IMAGE_BUILD_ENABLED": "true",
            "GLMOPS_IMAGE_BUILD_REGISTRY": "reg.local:5000/glmops/",
            "GLMOPS_IMAGE_BUILD_BUILDER": "buildkit",
            "GLMOPS_IMAGE_BUILD_NAMESPACE": "ops",
            "GLMOPS_IMAGE_BUILD_POD_ANNOTATIONS": '{"*": {"glmops.dev/fake-exit-code": "1"}}',
        }
    )
    assert (settings.registry, settings.builder, settings.namespace) == (
        "reg.local:5000/glmops",
        Builder.BUILDKIT,
        "ops",
    )
    assert settings.pod_annotations == {"*": {"glmops.dev/fake-exit-code": "1"}}
    assert not BuildSettings.from_env({}).enabled
    assert BuildSettings.from_env({}).cache and not BuildSettings.from_env({"GLMOPS_IMAGE_BUILD_CACHE": "off"}).cache


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_plugin_wheel(tmp_path_factory.mktemp("plugin"))


def test_build_context_holds_the_generated_dockerfile_and_the_plugin_wheel_it_copies(wheel: Path) -> None:
    dockerfile = render_dockerfile("cuda", IMAGES)
    cm = context_configmap(glmimage(), ON, dockerfile, wheel.read_bytes())
    assert wheel.name == PLUGIN_WHEEL, "the Dockerfile COPYs the wheel by this name"
    assert cm["data"]["Dockerfile"] == dockerfile and f"COPY {PLUGIN_WHEEL}" in dockerfile
    assert base64.b64decode(cm["binaryData"][PLUGIN_WHEEL]) == wheel.read_bytes()
    assert cm["metadata"]["namespace"] == "glmops-system"
    assert cm["metadata"]["labels"]["glmops.dev/image"] == "vllm-cuda-v0-33-0-glmops-1"
    assert (
        cm["metadata"]["ownerReferences"][0] | {"kind": "GLMImage", "uid": "0123456789abcdef"}
        == (cm["metadata"]["ownerReferences"][0])
    )


def test_a_build_context_too_large_for_a_configmap_is_refused_with_the_limit() -> None:
    with pytest.raises(ImageBuildError, match=str(CONFIGMAP_LIMIT_BYTES)):
        context_configmap(glmimage(), ON, "FROM x\n", b"\0" * CONFIGMAP_LIMIT_BYTES)


ARGS = build_args(IMAGES, "cuda", "0.33.0")


@pytest.mark.parametrize(
    ("builder", "expected_args"),
    [
        (
            Builder.KANIKO,
            [
                f"--destination={REF}",
                "--context=dir:///workspace",
                "--build-arg=VLLM_VERSION=0.33.0",
                f"--build-arg=GLMOPS_PATCHES={ARGS['GLMOPS_PATCHES']}",
                "--digest-file=/dev/termination-log",
            ],
        ),
        (
            Builder.BUILDKIT,
            [
                f"--output=type=image,name={REF},push=true",
                "--local=context=/workspace",
                "--opt=build-arg:VLLM_VERSION=0.33.0",
                f"--opt=build-arg:GLMOPS_PATCHES={ARGS['GLMOPS_PATCHES']}",
            ],
        ),
    ],
)
def test_build_job_pushes_the_target_with_the_catalog_build_args(builder: Builder, expected_args: list[str]) -> None:
    settings = BuildSettings(**{**ON.__dict__, "builder": builder})
    job = build_job(glmimage(builder), settings, ARGS)
    main = container(job)
    assert set(expected_args) <= set(main["args"])
    assert main["image"] == settings.builder_image
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "DOCKER_CONFIG", "value": "/etc/glmops/docker"} in main["env"]
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["docker-config"]["secret"] == {
        "secretName": "push",
        "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
    }
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == ON.deadline_seconds
    assert job["spec"]["ttlSecondsAfterFinished"] == ON.ttl_seconds
    assert job["metadata"]["name"] == "vllm-cuda-v0-33-0-glmops-1-build-01234567"


def test_buildkit_runs_rootless_and_reports_the_digest_through_the_termination_log() -> None:
    settings = BuildSettings(**{**ON.__dict__, "builder": Builder.BUILDKIT})
    main = container(build_job(glmimage(Builder.BUILDKIT), settings, ARGS))
    assert main["securityContext"]["runAsNonRoot"] is True and main["securityContext"]["runAsUser"] == 1000
    script = main["command"][2]
    assert "buildctl-daemonless.sh" in script and "containerimage.digest" in script
    assert script.endswith("> /dev/termination-log")


@pytest.mark.parametrize(
    ("builder", "flags"),
    [
        (Builder.KANIKO, ["--insecure-registry=reg.local:5000", "--skip-tls-verify-registry=reg.local:5000"]),
        (
            Builder.BUILDKIT,
            ["--output=type=image,name=reg.local:5000/g/vllm-openai:v1-glmops.1,push=true,registry.insecure=true"],
        ),
    ],
)
def test_an_insecure_registry_is_reached_over_plain_http_by_either_builder(builder: Builder, flags: list[str]) -> None:
    settings = BuildSettings(enabled=True, registry="reg.local:5000/g", builder=builder, insecure=True)
    body = glmimage(builder).model_dump(by_alias=True)
    body["spec"]["image"] = "reg.local:5000/g/vllm-openai:v1-glmops.1"
    main = container(build_job(GLMImage.model_validate(body), settings, ARGS))
    assert set(flags) <= set(main["args"])
    assert "DOCKER_CONFIG" not in json.dumps(main), "no push secret, no docker config"


def test_build_pod_carries_the_test_annotations_of_its_image_for_the_fake_kubelet() -> None:
    knob = {
        "*": {"glmops.dev/fake-run-ms": "10"},
        "vllm-cuda-v0-33-0-glmops-1": {"glmops.dev/fake-exit-code": "1"},
        "vllm-rocm-v0-33-0-glmops-1": {"glmops.dev/fake-exit-code": "2"},
    }
    settings = BuildSettings(**{**ON.__dict__, "pod_annotations": knob})
    template = build_job(glmimage(), settings, ARGS)["spec"]["template"]
    assert template["metadata"]["annotations"] == {"glmops.dev/fake-run-ms": "10", "glmops.dev/fake-exit-code": "1"}
    assert template["metadata"]["labels"]["glmops.dev/image"] == "vllm-cuda-v0-33-0-glmops-1"


@pytest.mark.parametrize(
    ("text", "digest"),
    [
        (DIGEST, DIGEST),
        (f"{DIGEST}\n", DIGEST),
        ("sha256:" + "AB" * 32, None),
        ("sha256:abc", None),
        ("error: push denied", None),
        ("", None),
        (None, None),
    ],
)
def test_only_a_sha256_digest_of_64_lowercase_hex_digits_is_accepted(text: str | None, digest: str | None) -> None:
    assert parse_digest(text) == digest


def job(condition: str | None, reason: str = "") -> dict[str, Any]:
    conds = [{"type": condition, "status": "True", "reason": reason}] if condition else []
    return {"metadata": {"name": "b"}, "status": {"conditions": conds}}


def pod(message: str, exit_code: int) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "message": message}
    return {"metadata": {}, "status": {"containerStatuses": [{"name": "build", "state": {"terminated": terminated}}]}}


@pytest.mark.parametrize(
    ("job_", "pods", "expected"),
    [
        (job(None), [], None),
        (job("Complete"), [pod(DIGEST, 0)], (True, "Built", DIGEST, "")),
        (job("Complete"), [pod("done", 0)], (False, "NoDigest", None, "")),
        (
            job("Failed", "BackoffLimitExceeded"),
            [pod("step 3: pip failed", 1)],
            (False, "BuildFailed", None, "step 3: pip failed"),
        ),
        (job("Failed", "DeadlineExceeded"), [], (False, "DeadlineExceeded", None, "")),
    ],
    ids=["running", "digest", "no-digest", "failed", "deadline"],
)
def test_a_finished_job_gives_the_digest_or_the_reason_and_log_tail(
    job_: dict[str, Any], pods: list[dict[str, Any]], expected: tuple[bool, str, str | None, str] | None
) -> None:
    outcome = build_outcome(job_, pods)
    got = None if outcome is None else (outcome.succeeded, outcome.reason, outcome.digest, outcome.log_tail)
    assert got == expected


def test_a_failed_build_keeps_the_end_of_a_long_log() -> None:
    log = "\n".join(f"line {i}" for i in range(2000))
    outcome = build_outcome(job("Failed", "BackoffLimitExceeded"), [pod(log, 2)])
    assert outcome is not None and outcome.log_tail.endswith("line 1999") and len(outcome.log_tail) <= 4003
    status = image_status({}, outcome, REF, 1)
    assert status["phase"] == "Failed" and "exit code 2" in status["conditions"][0]["message"]


def test_a_built_image_is_pinned_by_digest() -> None:
    outcome = build_outcome(job("Complete"), [pod(DIGEST, 0)])
    assert outcome is not None
    status = image_status({}, outcome, REF, 1)
    assert (status["phase"], status["imageRef"]) == ("Succeeded", f"{REF}@{DIGEST}")


@pytest.mark.parametrize(
    ("status", "gate"),
    [
        ({}, (None, "True", "Pending")),
        ({"phase": "Building", "job": "ops/b"}, (None, "True", "Building")),
        ({"phase": "Succeeded", "imageRef": f"{REF}@{DIGEST}"}, (f"{REF}@{DIGEST}", "False", "Built")),
        (
            {"phase": "Failed", "conditions": [{"type": "Built", "status": "False", "reason": "BuildFailed"}]},
            (None, "False", "BuildFailed"),
        ),
        (
            {"phase": "Failed", "conditions": [{"type": "Built", "status": "False", "reason": "DeadlineExceeded"}]},
            (None, "False", "DeadlineExceeded"),
        ),
    ],
    ids=["pending", "building", "built", "failed", "deadline"],
)
def test_deployments_wait_under_image_building_until_the_digest_is_known(
    status: dict[str, Any], gate: tuple[str | None, str, str]
) -> None:
    got = image_gate(glmimage(status=status).model_dump(by_alias=True, exclude_none=True), REF)
    assert (got.image_ref, got.status, got.reason) == gate


def test_a_failed_build_tells_the_deployment_the_log_tail_and_how_to_retry() -> None:
    outcome = build_outcome(job("Failed", "BackoffLimitExceeded"), [pod("ERROR: no space left on device", 1)])
    assert outcome is not None
    body = glmimage(status=image_status({}, outcome, REF, 1)).model_dump(by_alias=True, exclude_none=True)
    gate = image_gate(body, REF)
    assert "no space left on device" in gate.message and "kubectl delete glmimage" in gate.message


def test_an_image_built_for_another_registry_is_reported_not_taken_over() -> None:
    gate = image_gate(glmimage().model_dump(by_alias=True), "elsewhere.example/vllm-openai:v0.33.0-glmops.1")
    assert (gate.image_ref, gate.reason) == (None, "ImageConflict")


def test_a_pinned_plan_runs_its_image_by_digest_and_rolls_the_pods() -> None:
    from dataclasses import replace

    from glm_operator.api import GLMDeployment
    from glm_operator.render.plan import build_plan
    from glm_operator.render.workloads import render_objects

    catalogs = Catalogs(**{**Catalogs.packaged().__dict__, "images": IMAGES})
    glmd = GLMDeployment.model_validate(B().namespace("ns").vllm("0.33.0").build())
    plan = build_plan(glmd, catalogs)
    pinned = replace(plan, image_digest=DIGEST)
    owner = {"apiVersion": "glmops.dev/v1alpha1", "kind": "GLMDeployment", "name": "glm", "uid": "u"}
    deployment = next(o for o in render_objects(pinned, glmd, owner, False) if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"{REF}@{DIGEST}"
    assert pinned.command_hash != plan.command_hash
    assert pinned.summary()["imageDigest"] == DIGEST and pinned.summary()["image"] == REF


def test_buildkit_is_the_default_builder_at_the_release_the_real_build_test_runs() -> None:
    """The default builder image is BuildKit's rootless image of the pinned release that
    tests/integration/test_buildkit_build.py builds from its Go module; the chart's default is the same image."""
    repo = Path(__file__).parents[2]
    pin = re.search(r"^BUILDKIT_VERSION=(\S+)", (repo / "cluster" / "versions.env").read_text(), re.MULTILINE)
    assert pin is not None
    assert f"moby/buildkit:{pin[1]}-rootless" == DEFAULT_BUILDKIT_IMAGE
    assert BuildSettings().builder is Builder.BUILDKIT
    assert BuildSettings.from_env({}).builder is Builder.BUILDKIT
    values = yaml.safe_load((repo / "charts" / "glmops" / "values.yaml").read_text())["imageBuild"]
    assert (values["builder"], values["buildkitImage"]) == ("buildkit", DEFAULT_BUILDKIT_IMAGE)


@pytest.mark.parametrize(
    ("builder", "user", "escalation"),
    [(Builder.BUILDKIT, 1000, True), (Builder.KANIKO, 0, False)],
)
def test_the_build_container_allows_privilege_escalation_only_for_rootlesskits_id_mapping(
    builder: Builder, user: int, escalation: bool
) -> None:
    """Rootless BuildKit's newuidmap/newgidmap need their file capabilities, which no_new_privs would void
    (docs/image-builds.md); no builder gets a capability added or runs privileged."""
    settings = BuildSettings(enabled=True, registry=REGISTRY, builder=builder)
    container = build_job(glmimage(builder), settings, {})["spec"]["template"]["spec"]["containers"][0]
    security = container["securityContext"]
    assert security["runAsUser"] == user
    assert security["allowPrivilegeEscalation"] is escalation
    assert "capabilities" not in security and not security.get("privileged")


@pytest.mark.parametrize(
    ("ref", "cache"),
    [
        ("reg.local:5000/g/vllm-openai:v0.33.0-glmops.1", "reg.local:5000/g/vllm-openai:v0.33.0-glmops.1-buildcache"),
        ("reg.local:5000/g/vllm-openai", "reg.local:5000/g/vllm-openai:buildcache"),
        ("vllm-openai", "vllm-openai:buildcache"),
    ],
)
def test_the_layer_cache_lives_beside_the_image_in_its_repository(ref: str, cache: str) -> None:
    assert cache_ref(ref) == cache


@pytest.mark.parametrize(("insecure", "suffix"), [(False, ""), (True, ",registry.insecure=true")])
def test_buildkit_reads_and_writes_the_registry_cache_unless_it_is_off(insecure: bool, suffix: str) -> None:
    settings = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.BUILDKIT, insecure=insecure)
    args = container(build_job(glmimage(Builder.BUILDKIT), settings, ARGS))["args"]
    cache = f"type=registry,ref={cache_ref(REF)}{suffix}"
    assert f"--import-cache={cache}" in args
    assert f"--export-cache={cache},mode=max,ignore-error=true" in args
    off = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.BUILDKIT, cache=False)
    assert not any("cache" in a for a in container(build_job(glmimage(Builder.BUILDKIT), off, ARGS))["args"])
    kaniko = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.KANIKO)
    assert not any("cache" in a for a in container(build_job(glmimage(Builder.KANIKO), kaniko, ARGS))["args"])


@pytest.mark.parametrize("builder", list(Builder))
def test_a_registry_ca_is_mounted_into_the_build_and_trusted_for_that_registry_only(builder: Builder) -> None:
    settings = BuildSettings(enabled=True, registry=REGISTRY, builder=builder, registry_ca="registry-ca")
    image = glmimage(builder)
    job = build_job(image, settings, ARGS)
    main = container(job)
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["registry-ca"]["configMap"] == {
        "name": "registry-ca",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    assert {"name": "registry-ca", "mountPath": "/etc/glmops/registry-ca", "readOnly": True} in main["volumeMounts"]
    configmap = context_configmap(image, settings, "FROM x\n", b"wheel")
    if builder is Builder.KANIKO:
        assert "--registry-certificate=registry.example.com=/etc/glmops/registry-ca/ca.crt" in main["args"]
        assert "buildkitd.toml" not in configmap["data"]
        return
    assert configmap["data"]["buildkitd.toml"] == (
        '[registry."registry.example.com"]\n  http = false\n  ca = ["/etc/glmops/registry-ca/ca.crt"]\n'
    )
    flags = {e["name"]: e["value"] for e in main["env"]}["BUILDKITD_FLAGS"].split()
    assert flags == ["--oci-worker-no-process-sandbox", "--config=/etc/glmops/build/buildkitd.toml"]
    assert {"name": "context-src", "mountPath": "/etc/glmops/build", "readOnly": True} in main["volumeMounts"]


def test_without_a_registry_ca_the_build_keeps_the_daemons_defaults() -> None:
    settings = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.BUILDKIT)
    image = glmimage(Builder.BUILDKIT)
    main = container(build_job(image, settings, ARGS))
    assert {e["name"]: e["value"] for e in main["env"]}["BUILDKITD_FLAGS"] == "--oci-worker-no-process-sandbox"
    assert "registry-ca" not in json.dumps(main) and "/etc/glmops/build" not in json.dumps(main)
    assert set(context_configmap(image, settings, "FROM x\n", b"wheel")["data"]) == {"Dockerfile"}
    assert BuildSettings.from_env({"GLMOPS_IMAGE_BUILD_REGISTRY_CA": "ca"}).registry_ca == "ca"


MIRRORS = {"docker.io": ["mirror.example.com:5000"]}


def test_mirrors_reach_buildkits_daemon_configuration_plain_http_ones_too() -> None:
    image = glmimage(Builder.BUILDKIT)
    tls = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.BUILDKIT, mirrors=MIRRORS)
    assert buildkitd_config(image, tls) == '[registry."docker.io"]\n  mirrors = ["mirror.example.com:5000"]\n'
    plain = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.BUILDKIT, mirrors=MIRRORS, insecure=True)
    assert buildkitd_config(image, plain) == (
        '[registry."docker.io"]\n  mirrors = ["mirror.example.com:5000"]\n'
        '[registry."mirror.example.com:5000"]\n  http = true\n  insecure = true\n'
    )
    main = container(build_job(image, plain, ARGS))
    assert (
        "--config=/etc/glmops/build/buildkitd.toml" in {e["name"]: e["value"] for e in main["env"]}["BUILDKITD_FLAGS"]
    )
    both = BuildSettings(
        enabled=True, registry=REGISTRY, builder=Builder.BUILDKIT, mirrors=MIRRORS, registry_ca="registry-ca"
    )
    assert buildkitd_config(image, both) == (
        '[registry."docker.io"]\n  mirrors = ["mirror.example.com:5000"]\n'
        '[registry."registry.example.com"]\n  http = false\n  ca = ["/etc/glmops/registry-ca/ca.crt"]\n'
    )


def test_kaniko_mirrors_docker_hub_only() -> None:
    settings = BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.KANIKO, mirrors=MIRRORS)
    assert (
        "--registry-mirror=mirror.example.com:5000"
        in container(build_job(glmimage(Builder.KANIKO), settings, ARGS))["args"]
    )
    with pytest.raises(ImageBuildError, match="kaniko mirrors Docker Hub only"):
        BuildSettings(enabled=True, registry=REGISTRY, builder=Builder.KANIKO, mirrors={"ghcr.io": ["m.example.com"]})


def test_build_pods_go_where_the_settings_say_and_always_on_amd64() -> None:
    toleration = {"key": "builds", "operator": "Exists", "effect": "NoSchedule"}
    settings = BuildSettings.from_env(
        {
            "GLMOPS_IMAGE_BUILD_NODE_SELECTOR": '{"pool": "builds"}',
            "GLMOPS_IMAGE_BUILD_TOLERATIONS": json.dumps([toleration]),
            "GLMOPS_IMAGE_BUILD_REGISTRY_MIRRORS": json.dumps(MIRRORS),
        }
    )
    assert settings.mirrors == MIRRORS
    pod = build_job(glmimage(Builder.BUILDKIT), settings, ARGS)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "builds", "kubernetes.io/arch": "amd64"}
    assert pod["tolerations"] == [toleration]
    assert "tolerations" not in build_job(glmimage(Builder.BUILDKIT), ON, ARGS)["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"GLMOPS_IMAGE_BUILD_NODE_SELECTOR": '{"kubernetes.io/arch": "arm64"}'}, "drop that label"),
        ({"GLMOPS_IMAGE_BUILD_NODE_SELECTOR": '["pool"]'}, "GLMOPS_IMAGE_BUILD_NODE_SELECTOR must be a JSON object"),
        ({"GLMOPS_IMAGE_BUILD_TOLERATIONS": '[{"key": "a", "colour": "red"}]'}, "GLMOPS_IMAGE_BUILD_TOLERATIONS must"),
        ({"GLMOPS_IMAGE_BUILD_REGISTRY_MIRRORS": '{"docker.io": "m.example.com"}'}, "map a registry host to a list"),
        ({"GLMOPS_IMAGE_BUILD_REGISTRY_MIRRORS": "not json"}, "GLMOPS_IMAGE_BUILD_"),
    ],
)
def test_unusable_placement_or_mirror_settings_are_refused_naming_the_variable(env: dict[str, str], error: str) -> None:
    with pytest.raises(ImageBuildError, match=error):
        BuildSettings.from_env(env)


def test_the_build_containers_resources_default_to_room_for_a_vllm_base_and_can_be_set() -> None:
    default = container(build_job(glmimage(Builder.BUILDKIT), ON, ARGS))["resources"]
    assert default == {"requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "100Gi"}}
    small = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    settings = BuildSettings.from_env({"GLMOPS_IMAGE_BUILD_RESOURCES": json.dumps(small)})
    assert container(build_job(glmimage(Builder.KANIKO), settings, ARGS))["resources"] == small
    chart = yaml.safe_load((Path(__file__).parents[2] / "charts" / "glmops" / "values.yaml").read_text())
    assert chart["imageBuild"]["resources"] == default
    with pytest.raises(ImageBuildError, match="GLMOPS_IMAGE_BUILD_RESOURCES must be a JSON object"):
        BuildSettings.from_env({"GLMOPS_IMAGE_BUILD_RESOURCES": '{"request": {"cpu": "1"}}'})
    with pytest.raises(
        ImageBuildError, match=r"GLMOPS_IMAGE_BUILD_RESOURCES.requests must be a JSON object of strings"
    ):
        BuildSettings.from_env({"GLMOPS_IMAGE_BUILD_RESOURCES": '{"requests": {"cpu": 1}}'})
