"""Admission policy: Auto repairs only what was left unset, Reject changes nothing, one message for all."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm_operator.api import AcceleratorType
from glm_operator.catalog.images import load_images
from glm_operator.catalog.models import load_models
from glm_operator.rules.context import Catalogs
from glm_operator.rules.engine import REMEDIATIONS_ANNOTATION, admit
from tests.support.builders import GLMDeploymentBuilder as B

CATALOGS = Catalogs.packaged()


def broken_pp2() -> B:
    return B().model("zai-org/GLM-5.3").accelerator("H200").tensor(4).pipeline(2).image("vllm/vllm-openai:v0.30.0")


def test_auto_repairs_and_records_the_change_in_an_annotation() -> None:
    result = admit(broken_pp2().build(), CATALOGS)
    assert result.allowed
    record = json.loads(result.patched["metadata"]["annotations"][REMEDIATIONS_ANNOTATION])
    assert record == [{"env": "VLLM_PP_LAYER_PARTITION", "rule": "vllm-63170", "value": "38,40"}]
    remediated = [f for f in result.findings if f.severity == "remediated"]
    assert remediated and remediated[0].rule == "vllm-63170"


def test_reject_policy_changes_nothing_and_refuses() -> None:
    obj = broken_pp2().remediation("Reject").build()
    result = admit(obj, CATALOGS)
    assert not result.allowed and result.patched == obj and result.changes == []


def test_readmitting_a_repaired_object_changes_nothing_more() -> None:
    first = admit(broken_pp2().build(), CATALOGS)
    second = admit(first.patched, CATALOGS)
    assert second.allowed and second.changes == [] and second.patched == first.patched


def test_glmops_may_redo_its_own_repair_when_the_spec_changes() -> None:
    repaired = admit(broken_pp2().build(), CATALOGS).patched
    changed = copy.deepcopy(repaired)
    changed["spec"]["parallelism"].update({"pipeline": 4, "tensor": 2})
    result = admit(changed, CATALOGS)
    assert result.allowed
    assert {"name": "VLLM_PP_LAYER_PARTITION", "value": "18,20,20,20"} in result.patched["spec"]["engine"]["env"]


def test_version_left_unset_is_pinned_to_the_default_under_auto() -> None:
    result = admit(B().accelerator("H200").tensor(8).build(), CATALOGS)
    assert result.patched["spec"]["engine"]["vllmVersion"] == CATALOGS.images.default_version
    assert result.findings[0].rule == "defaults"


def test_one_rejection_lists_every_problem() -> None:
    obj = (
        B()
        .model("RedHatAI/GLM-5.3-MXFP4")
        .accelerator("GB200")
        .data(8)
        .expert()
        .image("vllm/vllm-openai:v0.30.0")
        .set("spec.engine.moeBackend", "aiter")
        .build()
    )
    result = admit(obj, CATALOGS)
    text = result.rejection()
    assert "2 problem(s)" in text
    assert "spec.engine.moeBackend: aiter: runs only on ROCM" in text and "rule vllm-58729" in text


def test_schema_errors_name_the_field_and_stop_there() -> None:
    result = admit(B().tensor(0).build(), CATALOGS)
    assert not result.allowed
    assert result.errors[0].message.startswith("spec.parallelism.tensor: 0: must be greater than or equal to 1")


MODELS = sorted(load_models().models)


@st.composite
def specs(draw: st.DrawFn) -> dict:
    b = B().model(draw(st.sampled_from(MODELS))).accelerator(draw(st.sampled_from([t.value for t in AcceleratorType])))
    b.tensor(draw(st.sampled_from([1, 2, 4, 8]))).pipeline(draw(st.sampled_from([1, 2, 3, 4, 8])))
    b.data(draw(st.sampled_from([1, 2, 8]))).expert(draw(st.booleans()))
    version = draw(st.sampled_from(load_images().versions))
    if draw(st.booleans()):
        b.image(f"vllm/vllm-openai{'-rocm' if draw(st.booleans()) else ''}:v{version}")
    else:
        b.vllm(version)
    if draw(st.booleans()):
        b.mtp(draw(st.integers(1, 4)))
    for name in draw(
        st.lists(st.sampled_from(["VLLM_PP_LAYER_PARTITION", "VLLM_ROCM_USE_AITER_FP4BMM"]), unique=True, max_size=2)
    ):
        b.env(name, draw(st.sampled_from(["0", "1", "38,40", "39,39"])))
    b.remediation(draw(st.sampled_from(["Auto", "Reject"])))
    return b.build()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_engine_never_crashes_and_repairs_are_clean_and_idempotent(obj: dict) -> None:
    result = admit(obj, CATALOGS)
    if obj["spec"]["validation"]["remediation"] == "Reject":
        assert result.patched == obj
    if result.allowed:
        again = admit(result.patched, CATALOGS)
        assert again.allowed and again.changes == [] and again.patched == result.patched
    for finding in result.findings:
        assert finding.message.startswith(f"{finding.field}: ")
