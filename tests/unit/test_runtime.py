"""The operator's runtime context: built once from the environment, handed to handlers through kopf's memo."""

from __future__ import annotations

import types

from glm_operator.handlers.runtime import Runtime, runtime


def test_runtime_is_built_from_the_environment_with_the_build_registry_for_patched_images() -> None:
    context = Runtime.from_env(
        {
            "GLMOPS_IMAGE_BUILD_ENABLED": "true",
            "GLMOPS_IMAGE_BUILD_REGISTRY": "reg.local/x",
            "GLMOPS_CATALOG_TTL_SECONDS": "5",
        }
    )
    assert context.image_build.enabled
    assert context.catalogs.get().images.patched_ref("cuda", "0.33.0").startswith("reg.local/x/")


def test_handlers_get_the_runtime_the_start_up_handler_stored_and_the_same_one_each_time() -> None:
    stored = Runtime.from_env({})
    memo = types.SimpleNamespace(runtime=stored)
    assert runtime(memo) is stored
    empty = types.SimpleNamespace()
    assert runtime(empty) is runtime(empty)
