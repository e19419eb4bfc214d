"""The operator's runtime context: built once from the environment, handed to handlers through kopf's memo."""

from __future__ import annotations

import types

import kopf
import pytest

from glm_operator.control.runtime import Runtime, Settings, runtime
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


def test_a_start_up_handler_that_ran_before_the_settings_sees_the_same_copies_as_every_handler_after() -> None:
    """kopf runs start-up handlers in no set order: the canary gates' may build a runtime before the settings
    handler stores its own, and both must read one store of observed objects."""
    from glm_operator.handlers import settings

    memo = types.SimpleNamespace()
    early = runtime(memo)  # a start-up handler that ran first
    early.observed.record({"kind": "GLMDeployment", "metadata": {"name": "glm", "namespace": "ns"}})
    settings.configure(settings=kopf.OperatorSettings(), memo=memo)
    assert runtime(memo) is not early, "the settings handler's own runtime, from its settings"
    assert runtime(memo).observed is early.observed and runtime(memo).refreshes is early.refreshes
    assert runtime(memo).observed.get("ns", "GLMDeployment", "glm") is not None


def test_the_operator_s_own_settings_are_read_once_into_the_runtime() -> None:
    env = {"GLMOPS_RESYNC_SECONDS": "0", "GLMOPS_DISCOVERY_TTL_SECONDS": "1", "GLMOPS_GSM8K_PATH": "/data/test.jsonl"}
    assert Runtime.from_env(env).settings == Settings(
        resync_seconds=0, discovery_ttl_s=1, gsm8k_path="/data/test.jsonl"
    )
    assert Runtime.from_env({}).settings == Settings(resync_seconds=600, discovery_ttl_s=30, gsm8k_path=None)


@pytest.mark.parametrize(
    "name, raw",
    [("GLMOPS_DISCOVERY_TTL_SECONDS", "soon"), ("GLMOPS_DISCOVERY_TTL_SECONDS", "-1"), ("GLMOPS_RESYNC_SECONDS", "x")],
)
def test_a_malformed_setting_names_itself_and_stops_the_start_up(name: str, raw: str) -> None:
    with pytest.raises(ValueError, match=name):
        Runtime.from_env({name: raw})
