"""The cluster's image policy at admission on the real API server, as the chart passes it to the operator;
`glmctl validate --image-policy` with the same values decides the same."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import OperatorProcess
from tests.support.builders import GLMDeploymentBuilder as B
from tests.support.cluster import REPO, Cluster, Kubectl

pytestmark = pytest.mark.cluster


POLICY = {"allowCustomImages": True, "allowedRepositories": ["registry.example.com/team/"]}


@pytest.fixture(scope="module")
def policy_operator(cluster: Cluster, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The operator with an image policy, as the chart passes it, in place of the session's."""
    operator.stop()
    restricted = OperatorProcess(cluster, extra_env={"GLMOPS_IMAGE_POLICY": json.dumps(POLICY)}, name="operator-policy")
    try:
        restricted.start()
        yield restricted
    finally:
        restricted.stop()
        operator.start()


@pytest.mark.parametrize(
    "image, admitted",
    [
        ("registry.example.com/team/vllm-openai:v0.30.0", True),
        ("registry.example.com/team/vllm-openai@sha256:" + "e" * 64, True),
        ("registry.example.com/team-evil/vllm-openai:v0.30.0", False),
        ("registry.example.com/teamx:v0.30.0", False),
        ("vllm/vllm-openai:v0.30.0", True),  # catalogued: glmops knows what it runs
        (None, True),  # glmops picks the image
    ],
)
def test_the_image_policy_refuses_images_outside_its_repositories_as_glmctl_does(
    kubectl: Kubectl, namespace: str, policy_operator: OperatorProcess, tmp_path: Path, image: str | None,
    admitted: bool,
) -> None:  # fmt: skip
    builder = B("policy").accelerator("H200").tensor(8).vllm("0.30.0")
    obj = (builder.image(image) if image else builder).build()
    result = kubectl.apply(obj, "-n", namespace, check=False)
    assert (result.returncode == 0) is admitted, result.stderr
    if not admitted:
        assert 'admission webhook "glmops-validate.glmops.dev" denied the request' in result.stderr
        assert f"spec.engine.image: {image}: the cluster's image policy does not allow" in result.stderr
        assert "imagePolicy.allowedRepositories is [registry.example.com/team]" in result.stderr
        assert "(rule policy/image)" in result.stderr and "spec.engine.vllmVersion" in result.stderr
    # glmctl validate with the chart's values decides the same.
    values, manifest = tmp_path / "values.yaml", tmp_path / "glm.yaml"
    values.write_text(yaml.safe_dump({"imagePolicy": POLICY}))
    manifest.write_text(yaml.safe_dump(obj))
    glmctl = [str(REPO / ".venv/bin/python"), "-m", "glm_operator.cli.main", "validate"]
    offline = subprocess.run([*glmctl, "--image-policy", str(values), str(manifest)], capture_output=True, text=True)
    assert offline.returncode == (0 if admitted else 1), offline.stdout + offline.stderr
