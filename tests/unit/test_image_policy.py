"""The cluster's image policy: repository prefixes at path boundaries, catalogued images, and the same
decision from the webhook's rules and `glmctl validate --image-policy`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from glm_operator.catalog.bundle import Catalogs
from glm_operator.catalog.image_policy import ImagePolicy, PolicyError, repository, repository_prefix
from glm_operator.cli.main import main
from glm_operator.k8s.catalog import CatalogSource
from glm_operator.rules.engine import admit
from tests.support.builders import GLMDeploymentBuilder as B

TEAM = ImagePolicy.from_values({"allowedRepositories": ["registry.example.com/team/"]})
CLOSED = ImagePolicy.from_values({"allowCustomImages": False})
CATALOGS = Catalogs.packaged()


@pytest.mark.parametrize(
    "ref, expected",
    [
        ("vllm/vllm-openai:v0.30.0", "docker.io/vllm/vllm-openai"),
        ("docker.io/vllm/vllm-openai", "docker.io/vllm/vllm-openai"),
        ("ubuntu", "docker.io/library/ubuntu"),
        ("docker.io/ubuntu:22.04", "docker.io/library/ubuntu"),
        ("localhost:5000/team/vllm:v1", "localhost:5000/team/vllm"),
        ("Registry.Example.com/team/vllm@sha256:" + "a" * 64, "registry.example.com/team/vllm"),
        ("registry.example.com/team/vllm:v1@sha256:" + "b" * 64, "registry.example.com/team/vllm"),
        ("registry.example.com/team/../evil/vllm", None),  # not a reference: cannot be matched
        ("registry.example.com/team//vllm", None),
        ("registry.example.com/team/vllm@sha256:short", None),
        ("registry.example.com/Team/vllm", None),  # repositories are lower case
        ("registry.example.com/team/vllm:bad tag", None),
    ],
)
def test_an_image_reference_is_read_as_docker_pull_reads_it(ref: str, expected: str | None) -> None:
    assert repository(ref) == expected


@pytest.mark.parametrize(
    "allowed, ref, allows",
    [
        (["registry.example.com/team/"], "registry.example.com/team/vllm:v0.30.0", True),
        (["registry.example.com/team"], "registry.example.com/team/sub/vllm@sha256:" + "c" * 64, True),
        (["registry.example.com/team/"], "registry.example.com/team-evil/vllm:v0.30.0", False),
        (["registry.example.com/team/"], "registry.example.com/teamx:v1", False),
        (["registry.example.com/team/"], "registry.example.com.evil.io/team/vllm:v1", False),
        (["registry.example.com/team/"], "evil.io/registry.example.com/team/vllm:v1", False),
        (["registry.example.com/team/"], "registry.example.com/team:v1", True),  # the repository itself
        (["registry.example.com/team/"], "registry.example.com:5000/team/vllm:v1", False),  # another port
        (["registry.example.com"], "registry.example.com/anything/vllm:v1", True),  # a whole registry
        (["registry.example.com"], "registry.example.company/x:v1", False),
        (["vllm"], "vllm/vllm-openai:v0.30.0", True),  # Docker Hub namespace
        (["docker.io/vllm/"], "vllm/vllm-openai:v0.30.0", True),
        (["vllm"], "vllm-evil/vllm-openai:v0.30.0", False),
        (["docker.io/library/ubuntu"], "ubuntu:22.04", True),
        (["docker.io/vllm"], "docker.io/vllmx/vllm-openai:v1", False),
        (["registry.example.com/team/"], "registry.example.com/team/../evil:v1", False),
        (["REGISTRY.example.com/team"], "registry.EXAMPLE.com/team/vllm:v1", True),  # hosts ignore case
        ([], "anything.example/at/all:v1", True),
    ],
)
def test_allowed_repositories_match_at_a_path_boundary(allowed: list[str], ref: str, allows: bool) -> None:
    assert ImagePolicy.from_values({"allowedRepositories": allowed}).allows_custom(ref) is allows


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"allowedRepositories": ["registry.example.com/team:v1"]}, "has no tag or digest"),
        ({"allowedRepositories": ["registry.example.com/team@sha256:" + "a" * 64]}, "has no tag or digest"),
        ({"allowedRepositories": ["registry.example.com/../x"]}, "not a registry or repository prefix"),
        ({"allowedRepositories": [""]}, "not a registry or repository prefix"),
        ({"allowedRepositories": "registry.example.com"}, "expected a list"),
        ({"allowCustomImages": "no"}, "expected true or false"),
        ({"allowedRepos": []}, "expected a mapping with allowCustomImages"),
    ],
)
def test_a_malformed_policy_is_refused_naming_the_setting(values: dict[str, object], fragment: str) -> None:
    with pytest.raises(PolicyError, match=fragment):
        ImagePolicy.from_values(values)


def test_the_operator_reads_the_policy_from_the_charts_json_and_defaults_to_open() -> None:
    assert ImagePolicy.from_env({}) == ImagePolicy(True, ())
    env = {"GLMOPS_IMAGE_POLICY": json.dumps({"allowCustomImages": True, "allowedRepositories": ["vllm/"]})}
    assert ImagePolicy.from_env(env).allowed_repositories == ("docker.io/vllm",)
    with pytest.raises(PolicyError, match="GLMOPS_IMAGE_POLICY: not JSON"):
        ImagePolicy.from_env({"GLMOPS_IMAGE_POLICY": "{"})
    assert repository_prefix("localhost:5000") == "localhost:5000"


def _errors(obj: dict[str, object], policy: ImagePolicy) -> list[str]:
    result = admit(obj, replace(CATALOGS, image_policy=policy))
    return [f.message for f in result.errors if f.rule == "policy/image"]


@pytest.mark.parametrize(
    "builder, policy, refused",
    [
        (B().accelerator("H200").tensor(8).vllm("0.30.0"), CLOSED, False),  # glmops picks the image
        (B().accelerator("H200").tensor(8), CLOSED, False),  # glmops pins its default
        (B().accelerator("H200").tensor(8).image("vllm/vllm-openai:v0.30.0"), CLOSED, False),  # catalogued
        (B().accelerator("H200").tensor(8).image("vllm/vllm-openai:v0.30.0"), TEAM, False),
        (B().accelerator("H200").tensor(8).image("registry.example.com/team/vllm:v0.30.0"), CLOSED, True),
        (B().accelerator("H200").tensor(8).image("registry.example.com/team/vllm:v0.30.0"), TEAM, False),
        (B().accelerator("H200").tensor(8).image("registry.example.com/team-evil/vllm:v0.30.0"), TEAM, True),
        (B().accelerator("H200").tensor(8).image("registry.example.com/team-evil/vllm:v0.30.0"), ImagePolicy(), False),
    ],
)
def test_admission_refuses_only_user_named_images_the_policy_does_not_allow(
    builder: B, policy: ImagePolicy, refused: bool
) -> None:
    assert bool(_errors(builder.build(), policy)) is refused


def test_the_refusal_names_the_field_the_policy_and_the_fix() -> None:
    obj = B().accelerator("H200").tensor(8).image("registry.example.com/team-evil/vllm:v0.30.0").build()
    (message,) = _errors(obj, TEAM)
    assert message.startswith("spec.engine.image: registry.example.com/team-evil/vllm:v0.30.0: ")
    assert "imagePolicy.allowedRepositories is [registry.example.com/team]" in message
    assert "(rule policy/image)" in message and "set spec.engine.vllmVersion" in message
    assert "an image under one of registry.example.com/team" in message
    (closed,) = _errors(obj, CLOSED)
    assert "imagePolicy.allowCustomImages is false" in closed and "image under" not in closed


def test_images_glmops_builds_into_its_registry_are_always_allowed() -> None:
    source = CatalogSource(None, patched_registry="registry.example.com/glmops", image_policy=CLOSED)
    catalogs = source.get()
    built = catalogs.images.patched_ref("cuda", "0.30.0")
    assert built.startswith("registry.example.com/glmops/")
    assert admit(B().accelerator("H200").tensor(8).image(built).build(), catalogs).allowed
    assert catalogs.image_policy is CLOSED


VALUES = """
imagePolicy:
  allowCustomImages: true
  allowedRepositories: [registry.example.com/team/]
replicas: 1
"""


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/team/vllm:v0.30.0",
        "registry.example.com/team-evil/vllm:v0.30.0",
        "registry.example.com/team/vllm@sha256:" + "d" * 64,
        "vllm/vllm-openai:v0.30.0",
        "quay.io/other/vllm:v0.30.0",
    ],
)
def test_glmctl_validate_with_the_charts_values_decides_as_the_webhook(
    image: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)
    obj = B().accelerator("H200").tensor(8).vllm("0.30.0").image(image).build()
    manifest = tmp_path / "glm.yaml"
    manifest.write_text(yaml.safe_dump(obj))
    # The webhook's decision: the policy as the operator reads it from the chart's env.
    env = {"GLMOPS_IMAGE_POLICY": json.dumps(yaml.safe_load(VALUES)["imagePolicy"])}
    server = admit(obj, replace(CATALOGS, image_policy=ImagePolicy.from_env(env)))
    code = main(["validate", "-o", "json", "--image-policy", str(values), str(manifest)])
    (result,) = json.loads(capsys.readouterr().out)
    assert result["allowed"] is server.allowed and code == (0 if server.allowed else 1)
    assert [f["message"] for f in result["findings"]] == [f.message for f in server.findings]


def test_glmctl_validate_refuses_a_malformed_policy_file_as_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("imagePolicy: {allowedRepositories: ['registry.example.com/x:v1']}\n")
    manifest = tmp_path / "glm.yaml"
    manifest.write_text(yaml.safe_dump(B().build()))
    assert main(["validate", "--image-policy", str(values), str(manifest)]) == 2
    assert "has no tag or digest" in capsys.readouterr().err
