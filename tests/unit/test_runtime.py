"""The operator's runtime context: built once from the environment, handed to handlers through kopf's memo."""

from __future__ import annotations

import types

import pytest

from glm_operator.handlers.runtime import Runtime, runtime
from glm_operator.handlers.settings import log_level


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


@pytest.mark.parametrize(
    "env, level", [({}, "INFO"), ({"GLMOPS_LOG_LEVEL": "DEBUG"}, "DEBUG"), ({"GLMOPS_LOG_LEVEL": "warning"}, "WARNING")]
)
def test_the_log_level_comes_from_glmops_log_level(env: dict[str, str], level: str) -> None:
    assert log_level(env) == level


def test_an_unknown_log_level_names_the_variable_and_the_levels() -> None:
    with pytest.raises(ValueError, match=r"GLMOPS_LOG_LEVEL: 'LOUD' is not a log level; use one of DEBUG, INFO"):
        log_level({"GLMOPS_LOG_LEVEL": "LOUD"})
