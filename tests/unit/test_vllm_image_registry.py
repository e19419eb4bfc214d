"""The chart's vllmImages.registry as the operator reads it: glmops' patched images in the cluster's own registry."""

from __future__ import annotations

import pytest

from glm_operator.catalog.images import load_images
from glm_operator.control.runtime import Runtime
from glm_operator.render.imagebuild import ImageBuildError


def test_vllm_image_registry_moves_the_patched_images_a_deployment_without_an_image_runs() -> None:
    images = Runtime.from_env({"GLMOPS_VLLM_IMAGE_REGISTRY": "registry.example.com/glmops/"}).catalogs.get().images
    packaged = load_images()
    version = packaged.default_version
    moved = images.patched_ref("cuda", version)
    assert moved == f"registry.example.com/glmops/{packaged.patched_ref('cuda', version).rsplit('/', 1)[-1]}"
    # The mirror is judged as carrying the packaged image's patches.
    assert images.describe(moved).patches == packaged.describe(packaged.patched_ref("cuda", version)).patches
    assert Runtime.from_env({}).catalogs.get().images.patched_ref("cuda", version) == packaged.patched_ref(
        "cuda", version
    )


def test_vllm_image_registry_other_than_the_build_registry_stops_the_start_up() -> None:
    build = {"GLMOPS_IMAGE_BUILD_ENABLED": "true", "GLMOPS_IMAGE_BUILD_REGISTRY": "registry.example.com/glmops"}
    same = Runtime.from_env({**build, "GLMOPS_VLLM_IMAGE_REGISTRY": "registry.example.com/glmops"})
    assert same.catalogs.get().images.patched_ref("cuda", "0.32.0").startswith("registry.example.com/glmops/")
    with pytest.raises(ImageBuildError, match="differs from GLMOPS_IMAGE_BUILD_REGISTRY"):
        Runtime.from_env({**build, "GLMOPS_VLLM_IMAGE_REGISTRY": "registry.example.com/other"})
